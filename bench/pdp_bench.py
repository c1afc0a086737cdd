"""Decision-point latency: what one AuthZEN request to `zc pdp` costs over HTTP, beside the policy
calls it makes, in the same run; writes its section of BENCHMARKS.md.

    python bench/pdp_bench.py [--rounds N] [--write BENCHMARKS.md]

`zc pdp` runs in its own process (uvicorn, one worker) with the desk policy and mapping of
docs/authzen.md; one keep-alive httpx client sends each request, interleaved, after warm-up. The
in-process rows time `Policy.check` and `Policy.legal` on the same state in this process.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from benchdoc import publish, section_head  # noqa: E402
from openai_stub import free_port  # noqa: E402

from zcompile.authzen import PDP, load_mapping  # noqa: E402
from zcompile.cli.common import load_policy  # noqa: E402

PACKAGES = [("starlette / uvicorn / httpx", ("starlette", "uvicorn", "httpx"))]
POLICY, MAPPING = (ROOT / "examples" / "authzen" / f for f in ("desk.zc", "desk.mapping.yaml"))
SUB = {"type": "identity", "id": "alice@example.com"}
CTX = {"history": ["get_order"], "order": {"status": "pending"}}
STATE = {**CTX, "user": {"role": "agent"}}  # what the mapping makes of SUB and CTX


def call(tool: str, **ctx) -> dict:
    return {"subject": SUB, "action": {"name": "tools/call"}, "resource": {"type": "tool", "id": tool},
            "context": {**CTX, **ctx}}


TOOLS = ["get_order", "cancel_order", "refund", "escalate"]
REQUESTS = {  # label -> (path, body)
    "evaluation, permitted (`cancel_order`)": ("/access/v1/evaluation", call("cancel_order")),
    "evaluation, denied with its reasons (`cancel_order`, no lookup)": (
        "/access/v1/evaluation", call("cancel_order", history=[])),
    "evaluations, one per tool (4 entries)": ("/access/v1/evaluations", {
        **{k: v for k, v in call("x").items() if k != "resource"},
        "evaluations": [{"resource": {"type": "tool", "id": t}} for t in TOOLS]}),
    "action search (one legal set, every reason)": ("/access/v1/search/action", {
        "subject": SUB, "resource": {"type": "order", "id": "W42"}, "context": CTX}),
}


def serve() -> tuple[subprocess.Popen, str]:
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "zcompile", "pdp", "--policy", str(POLICY), "--mapping",
                             str(MAPPING), "--port", str(port)], cwd=ROOT, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    for _ in range(300):
        try:
            if httpx.get(url + "/healthz", timeout=1).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            time.sleep(0.1)
    proc.kill()
    raise SystemExit("zc pdp did not start")


def in_process(rounds: int) -> dict[str, list[float]]:
    policy = load_policy(str(POLICY))
    pdp = PDP(policy, load_mapping(MAPPING, policy))
    permit = REQUESTS["evaluation, permitted (`cancel_order`)"][1]
    fns = {"in process: `Policy.check` (the evaluation's engine call)": lambda: policy.check(
        STATE, "cancel_order"),
           "in process: `Policy.legal` + every reason (the search's)":
               lambda: policy.legal(STATE).removed,
           "in process: `PDP.evaluate` (the request checked and mapped, `Policy.check`)":
               lambda: pdp.evaluate(permit)}
    out: dict[str, list[float]] = {k: [] for k in fns}
    for fn in fns.values():
        for _ in range(200):
            fn()
    gc.disable()
    try:
        for _ in range(rounds):
            for name, fn in fns.items():
                t = time.perf_counter_ns()
                fn()
                out[name].append((time.perf_counter_ns() - t) / 1000)
    finally:
        gc.enable()
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=1000, help="timed requests per target")
    ap.add_argument("--write", type=Path, help="replace the pdp section of this markdown file")
    args = ap.parse_args(argv)
    load0 = os.getloadavg()[0]
    bodies = {k: (p, json.dumps(b).encode()) for k, (p, b) in REQUESTS.items()}
    proc, url = serve()
    times: dict[str, list[float]] = {k: [] for k in bodies}
    try:
        nodelay = httpx.HTTPTransport(socket_options=[(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)])
        with httpx.Client(base_url=url, headers={"content-type": "application/json"}, timeout=10,
                          trust_env=False, transport=nodelay) as client:
            for path, content in bodies.values():  # warm-up, and a check of each answer
                for _ in range(50):
                    r = client.post(path, content=content)
                    assert r.status_code == 200, r.text
            answers = {k: client.post(p, content=c).json() for k, (p, c) in bodies.items()}
            gc.disable()
            try:
                for _ in range(args.rounds):
                    for name, (path, content) in bodies.items():
                        t = time.perf_counter_ns()
                        r = client.post(path, content=content)
                        times[name].append((time.perf_counter_ns() - t) / 1000)
                        if r.status_code != 200:
                            raise SystemExit(f"{name}: HTTP {r.status_code}: {r.text[:200]}")
            finally:
                gc.enable()
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    times.update(in_process(args.rounds))
    load1 = os.getloadavg()[0]
    stats = {n: (float(np.percentile(ts, 50)), float(np.percentile(ts, 99))) for n, ts in times.items()}
    names = list(stats)
    permit, _, batch, search = (stats[n][0] for n in names[:4])
    check, legal, evaluate = (stats[n][0] for n in names[4:])
    decisions = [d["decision"] for d in answers[names[2]]["evaluations"]]
    found = [x["name"] for x in answers[names[3]]["results"]]
    lines = [
        *section_head("## The decision point: `zc pdp` (`bench/pdp_bench.py`)", "pdp_bench.py", args.rounds,
                      args.write, (load0, load1), PACKAGES),
        "Wall-clock time of one AuthZEN request to `zc pdp` (the desk policy and mapping of "
        "docs/authzen.md, the MCP profile's `tools/call` shape) from a keep-alive httpx client, "
        "interleaved after 50 warm-up requests each, GC off in the client while timing; `zc pdp` is its "
        "own process. The in-process rows time the policy calls those requests make, on the same state.", "",
        "| request | n | p50 µs | p99 µs |", "|---|---:|---:|---:|",
        *(f"| {n} | {len(times[n]):,} | {stats[n][0]:,.1f} | {stats[n][1]:,.1f} |" for n in names), "",
        f"An evaluation over HTTP is {permit / check:,.0f}× the `Policy.check` it makes; the PDP's own work "
        f"(the request checked and mapped, the check) is {evaluate:,.1f} µs of it, so "
        f"{permit - evaluate:,.0f} µs at p50 are HTTP in and out (uvicorn, Starlette, the client). The "
        f"action search answers the four tools' question in one legal set: {search:,.0f} µs against "
        f"{batch:,.0f} µs for the four-entry batch ({batch / search:.2f}×), and it also returns every "
        f"reason. Answers: the batch {decisions}, the search {found}.", "",
        *([f"The machine was busy (load average {max(load0, load1):.1f} on {os.cpu_count()} cores, shared "
           "with other work): every figure above is inflated by waiting for a core.", ""]
          if max(load0, load1) > (os.cpu_count() or 1) else []),
        f"`Policy.legal` with every reason in process: {legal:,.1f} µs p50.",
    ]
    publish("pdp_bench", "\n".join(lines), args.write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
