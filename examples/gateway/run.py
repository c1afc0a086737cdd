"""A scripted agent on the official `openai` client, pointed at `zc serve` in front of a stub upstream.

    python -m examples.gateway.run                      # from the repository root (~30 s; extras serve,
distill)
    python -m examples.gateway.run --conversations 0    # the first conversation only (~6 s)

No chat model can be downloaded here, so a local stub (tests/openai_stub.py) stands in for the
upstream model and plays a script. The agent changes nothing but its `base_url`.

1. One conversation shows a lookup answered locally (the compiler: at the start of a conversation
   `list_all_airports()` is the only legal call of examples/gateway/desk.zc, so the upstream is not
   asked), a tool the policy does not declare and a tool not legal yet stripped from the offer, an
   illegal upstream call blocked and re-asked, a legal write passed through.
2. `--conversations N` more scripted conversations go through the same gateway (the stub plays a
   fixed, synthetic pattern: cancel a reservation, or look a profile up).
3. `zc distill` runs on the receipts all of them left, and says what it could learn.
4. When it promotes a specialist, `zc serve` restarts with it, and a new conversation shows its
   lookups and calls answered locally: the upstream is asked only for the text replies.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from openai import OpenAI

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))

from openai_stub import OpenAIStub, free_port  # noqa: E402

POLICY = ROOT / "examples" / "gateway" / "desk.zc"


def tool(name: str, description: str, **params: str) -> dict:
    return {"type": "function", "function": {"name": name, "description": description, "parameters": {
        "type": "object", "properties": {p: {"type": t} for p, t in params.items()},
        "required": list(params)}}}


# what the agent offers its model: four tools of the desk, and one the policy never declared
TOOLS = [tool("list_all_airports", "List the airports the desk serves."),
         tool("get_reservation_details", "Look a reservation up.", reservation_id="string"),
         tool("cancel_reservation", "Cancel a reservation (refunds it).", reservation_id="string"),
         tool("get_user_details", "Look a user up.", user_id="string"),
         tool("delete_account", "Delete the user's account.", user_id="string")]

# the agent's tools (a real harness would call its back end here)
BACKEND = {
    "list_all_airports": lambda: ["JFK", "LAX", "SFO"],
    "get_reservation_details": lambda reservation_id: {"reservation_id": reservation_id, "origin": "JFK",
                                                       "destination": "LAX", "status": "booked"},
    "cancel_reservation": lambda reservation_id: {"reservation_id": reservation_id, "status": "cancelled"},
    "get_user_details": lambda user_id: {"user_id": user_id, "name": "Mia Li"},
}

# what the stub upstream says, one entry per request it receives (the model's side of the story)
UPSTREAM = [
    {"calls": [("cancel_reservation", {"reservation_id": "ABC123"})]},  # too early: blocked, re-asked
    {"calls": [("get_reservation_details", {"reservation_id": "ABC123"})]},  # the re-ask's answer
    {"content": "Reservation ABC123 is JFK to LAX. Shall I cancel it? (yes/no)"},
    {"calls": [("cancel_reservation", {"reservation_id": "ABC123"})]},  # confirmed: passes
    {"content": "Done: ABC123 is cancelled and will be refunded."},
]
USER = ["Hi, I'm mia_li_3668. Please cancel my reservation ABC123.", "yes"]


def _say(text: str) -> None:
    print(text, flush=True)


def start_serve(receipts: Path, upstream: str, specialist: Path | None = None, *, policy: Path = POLICY,
                quiet: bool = False) -> tuple[subprocess.Popen, str]:
    """`zc serve` in its own process, on a free port; returns it and its base URL once healthy."""
    port = free_port()
    extra = ["--specialists", str(specialist)] if specialist is not None else []
    cmd = [sys.executable, "-m", "zcompile", "serve", "--policy", str(policy), "--upstream", upstream,
           "--model", "stub-model", "--receipts", str(receipts), "--port", str(port), "--timeout-ms", "5000",
           *extra]
    if not quiet:
        _say(f"$ zc serve --policy {policy.relative_to(ROOT)} --upstream {upstream} --model stub-model "
             f"--receipts {receipts} --port {port}" + (f" --specialists {specialist}" if extra else ""))
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"zc serve exited: {proc.stderr.read()}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                return proc, f"http://127.0.0.1:{port}/v1"
        except httpx.HTTPError:
            time.sleep(0.1)
    proc.terminate()
    raise SystemExit("zc serve did not become healthy within 30 s")


def agent(client: OpenAI, users: list[str], *, quiet: bool = False) -> None:
    """The harness's loop: ask, run the tool calls it gets, answer as the user when it gets text."""
    say = (lambda text: None) if quiet else _say
    messages: list[dict] = [{"role": "system", "content": "You are the airline desk's agent."},
                            {"role": "user", "content": users[0]}]
    rest = iter(users[1:])
    say(f"user: {users[0]}")
    for _ in range(12):
        raw = client.chat.completions.with_raw_response.create(model="stub-model", messages=messages,
                                                               tools=TOOLS)
        r = raw.parse()
        msg, x = r.choices[0].message, r.model_extra["x_zc"]
        stripped = [*x["stripped"]["undeclared"], *x["stripped"]["illegal"]]
        where = "locally" if x["upstream_requests"] == 0 else (f"after {x['upstream_requests']} upstream "
                                                               "request(s)")
        say(f"  [zc] answered by `{x['rung']}` {where}; legal tools: {', '.join(x['offered']) or 'none'}"
            + (f"; stripped: {', '.join(stripped)}" if stripped else ""))
        for b in x["blocked"]:
            say(f"  [zc] blocked {b['action']}({json.dumps(b['arguments'])}): {b['reasons'][0]}")
        messages.append(msg.model_dump(exclude_none=True, exclude={"annotations", "refusal"}))
        if msg.tool_calls:
            for call in msg.tool_calls:
                args = json.loads(call.function.arguments)
                result = BACKEND[call.function.name](**args)
                say(f"agent -> {call.function.name}({json.dumps(args)}) = {json.dumps(result)}")
                messages.append({"role": "tool", "tool_call_id": call.id, "content": json.dumps(result)})
            continue
        say(f"assistant: {msg.content}")
        nxt = next(rest, None)
        if nxt is None:
            return
        say(f"user: {nxt}")
        messages.append({"role": "user", "content": nxt})


def traffic(rng: random.Random) -> tuple[list[str], list[dict]]:
    """One synthetic conversation: (the user's lines, what the stub upstream says, request by request)."""
    first, last = rng.choice(["mia", "noah", "ava", "liam"]), rng.choice(["li", "kim", "ng"])
    user = f"{first}_{last}_{rng.randint(1000, 9999)}"
    rid = "".join(rng.choice("ABCDEFGHJKLMNPQRSTUVWXYZ23456789") for _ in range(6))
    if rng.random() < 0.5:
        return ([f"Hi, I'm {user}. Please cancel my reservation {rid}.", "yes"],
                [{"calls": [("get_reservation_details", {"reservation_id": rid})]},
                 {"content": f"Reservation {rid} is JFK to LAX. Shall I cancel it? (yes/no)"},
                 {"calls": [("cancel_reservation", {"reservation_id": rid})]},
                 {"content": f"Done: {rid} is cancelled and will be refunded."}])
    return ([f"Hello, my user id is {user}. What is on my profile?"],
            [{"calls": [("get_user_details", {"user_id": user})]},
             {"content": "Here is your profile: Mia Li."}])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None, help="directory for the receipts and the distillation (default: a "
                                                "temp dir)")
    ap.add_argument("--conversations", type=int, default=120,
                    help="scripted conversations after the first (default 120)")
    args = ap.parse_args(argv)
    out = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="zc-gateway-"))
    out.mkdir(parents=True, exist_ok=True)
    receipts = out / "receipts.jsonl"
    rng = random.Random(0)
    zc = [sys.executable, "-m", "zcompile"]
    with OpenAIStub() as stub:
        stub.script = [dict(e) for e in UPSTREAM]
        proc, base_url = start_serve(receipts, stub.base_url)
        try:
            client = OpenAI(base_url=base_url, api_key="unused-by-zc", max_retries=0)
            _say("\n== 1. one conversation")
            agent(client, USER)
            _say(f"\nthe upstream received {len(stub.requests)} requests; the tools it was offered: "
                 + "; ".join(",".join(t["function"]["name"] for t in r.get("tools", ())) or "none"
                             for r in stub.requests))
            if args.conversations:
                _say(f"\n== 2. {args.conversations} more scripted conversations through the same gateway")
                for _ in range(args.conversations):
                    users, script = traffic(rng)
                    stub.reset()
                    stub.script = script
                    agent(client, users, quiet=True)
        finally:
            proc.terminate()
            proc.wait(timeout=10)
        rows = [json.loads(line) for line in receipts.read_text().splitlines()]
        _say(f"\n{len(rows)} receipts in {receipts} (one per request); the first conversation's:")
        for r in rows[:5]:
            g = r["meta"]["gateway"]
            _say(f"  {r['tier']:<9} {r['action']:<24} {json.dumps(r.get('arguments'))}"
                 + (f"  (blocked {len(g['blocked'])} first)" if g["blocked"] else ""))
        artifact = out / "desk.zcp"
        subprocess.run([*zc, "compile", str(POLICY), "-o", str(out)], cwd=ROOT, check=True,
                       capture_output=True)
        specialist = out / "specialist"
        _say(f"\n== 3. zc distill --from {receipts} --policy {artifact} -o {specialist} --model logistic "
             "--guarantee conformal")
        run = subprocess.run([*zc, "distill", "--from", str(receipts), "--policy", str(artifact), "-o",
                              str(specialist), "--model", "logistic", "--guarantee", "conformal"],
                             cwd=ROOT, capture_output=True, text=True,
                             env={**os.environ, "PYTHONWARNINGS": "ignore"})
        report = specialist / "report.md"
        if run.returncode or not report.exists():
            _say((run.stdout + run.stderr).strip().splitlines()[-1])
            _say("(too few receipts certify nothing: distillation needs many conversations)")
            return 0
        lines = report.read_text().splitlines()
        _say("\n".join(line for line in lines
                       if line.startswith(("**Verdict", "- Calls:", "Complete calls"))))
        if "**Verdict: promoted.**" not in lines:
            return 0
        _say("\n== 4. zc serve again, with the distilled specialist: a new conversation")
        stub.reset()
        stub.script = [{"content": "Reservation Q7X2KD is JFK to LAX. Shall I cancel it? (yes/no)"},
                       {"content": "Done: Q7X2KD is cancelled and will be refunded."}]
        proc, base_url = start_serve(out / "receipts-2.jsonl", stub.base_url, specialist)
        try:
            agent(OpenAI(base_url=base_url, api_key="unused-by-zc", max_retries=0),
                  ["Hi, I'm noah_kim_1234. Please cancel my reservation Q7X2KD.", "yes"])
        finally:
            proc.terminate()
            proc.wait(timeout=10)
        later = [json.loads(line) for line in (out / "receipts-2.jsonl").read_text().splitlines()]
        calls = [r for r in later if r["action"] != "respond"]
        local = [r for r in calls if r["tier"] in ("compiler", "specialist")]
        _say(f"\n{len(local)} of its {len(calls)} calls were answered locally (each passed Policy.check); "
             f"the upstream received {len(stub.requests)} requests. The traffic was synthetic and fixed, so "
             "this specialist learned a script: real traffic certifies less (docs/gateway.md).")
    return 0


if __name__ == "__main__":
    sys.exit(main())
