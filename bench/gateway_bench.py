"""Gateway latency: what `zc serve` adds to a forwarded chat completion, and what a locally answered
one costs, beside a direct call to the same upstream; writes its section of BENCHMARKS.md.

    python bench/gateway_bench.py [--rounds N] [--write BENCHMARKS.md]

The upstream is the test suite's OpenAI-compatible stub (tests/openai_stub.py), in this process: no
model runs, so the figures are zc's own cost (HTTP in and out, the state from the messages, the
legal set, the ladder, `Policy.check`, the receipt) on top of whatever a real model takes. Each
`zc serve` runs in its own process (uvicorn, one worker); one keep-alive httpx client sends the
same request body to each target, interleaved, after warm-up.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from benchdoc import publish, section_head  # noqa: E402
from openai_stub import OpenAIStub, free_port  # noqa: E402

PACKAGES = [("starlette / uvicorn / httpx", ("starlette", "uvicorn", "httpx")),
            ("onnxruntime / numpy", ("onnxruntime", "numpy"))]


def _stack() -> str:
    """The HTTP parser and event loop uvicorn picks (`auto`) in this environment."""
    import importlib.util

    parser = "httptools" if importlib.util.find_spec("httptools") else "its pure-Python h11 parser"
    return parser + (" and uvloop" if importlib.util.find_spec("uvloop") else " on asyncio's own loop")


def tool(name: str, **params: str) -> dict:
    return {"type": "function", "function": {"name": name, "description": f"the {name} tool", "parameters": {
        "type": "object", "properties": {p: {"type": t} for p, t in params.items()},
        "required": list(params)}}}


BODY = {"model": "stub-model", "messages": [
    {"role": "system", "content": "You are an airline agent."},
    {"role": "user", "content": "Hi, I am mia_li_3668; please cancel reservation ABC123."}],
    "tools": [tool("list_all_airports"), tool("get_user_details", user_id="string"),
              tool("get_reservation_details", reservation_id="string"),
              tool("cancel_reservation", reservation_id="string"), tool("delete_account", user_id="string")]}


def serve(policy: Path, upstream: str, out: Path, *extra: str) -> tuple[subprocess.Popen, str]:
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "zcompile", "serve", "--policy", str(policy), "--upstream",
                             upstream, "--model", "stub-model", "--receipts", str(out), "--port", str(port),
                             *extra],
                            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    return started(proc, url + "/healthz", url + "/v1/chat/completions", f"zc serve --policy {policy}")


def started(proc: subprocess.Popen, health: str, chat: str, what: str,
            tries: int = 300) -> tuple[subprocess.Popen, str]:
    """(proc, chat) once `health` answers 200; the process killed and the bench stopped if it never does."""
    for _ in range(tries):
        try:
            if httpx.get(health, timeout=1).status_code == 200:
                return proc, chat
        except httpx.HTTPError:
            time.sleep(0.1)
    proc.kill()
    raise SystemExit(f"{what} did not start")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=1000, help="timed requests per target")
    ap.add_argument("--write", type=Path, help="replace the gateway section of this markdown file")
    args = ap.parse_args(argv)
    load0 = os.getloadavg()[0]
    tmp = Path(tempfile.mkdtemp(prefix="gateway-bench-"))
    content = json.dumps(BODY).encode()
    with OpenAIStub("correct") as stub:
        stub.answer, stub.arguments = "get_user_details", {"user_id": "mia_li_3668"}
        procs = []
        try:
            forward, url_f = serve(ROOT / "policies" / "airline_chat.zc", stub.base_url, tmp / "f.jsonl",
                                   "--specialists", str(ROOT / "specialists" / "airline_chat"))
            procs.append(forward)
            local, url_l = serve(ROOT / "examples" / "gateway" / "desk.zc", stub.base_url, tmp / "l.jsonl")
            procs.append(local)
            targets = {
                "direct to the stub upstream (no zc)": stub.base_url + "/chat/completions",
                "through zc serve, forwarded (airline_chat + its specialist; the upstream answers)": url_f,
                "through zc serve, answered locally (desk.zc: the compiler's call; no upstream "
                "request)": url_l,
            }
            times: dict[str, list[float]] = {k: [] for k in targets}
            inside: dict[str, list[float]] = {k: [] for k in targets}  # zc's own time (x-zc-latency-ms)
            # TCP_NODELAY: httpx writes headers and body apart; Nagle would hold the body for an ACK
            nodelay = httpx.HTTPTransport(socket_options=[(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)])
            with httpx.Client(headers={"content-type": "application/json"}, timeout=10, trust_env=False,
                              transport=nodelay) as client:
                for url in targets.values():  # warm-up, and a check that each answers a tool call
                    for _ in range(50):
                        r = client.post(url, content=content)
                        assert (r.status_code == 200
                                and r.json()["choices"][0]["message"]["tool_calls"]), r.text
                gc.disable()
                try:
                    for _ in range(args.rounds):
                        for name, url in targets.items():
                            t = time.perf_counter_ns()
                            r = client.post(url, content=content)
                            times[name].append((time.perf_counter_ns() - t) / 1000)
                            if r.status_code != 200:
                                raise SystemExit(f"{name}: HTTP {r.status_code}: {r.text[:200]}")
                            if "x-zc-latency-ms" in r.headers:
                                inside[name].append(float(r.headers["x-zc-latency-ms"]) * 1000)
                finally:
                    gc.enable()
            requests_seen = len(stub.requests)
        finally:
            for p in procs:
                p.terminate()
                p.wait(timeout=10)
    load1 = os.getloadavg()[0]
    receipts = {n: sum(1 for _ in open(tmp / f)) for n, f in (("forwarded", "f.jsonl"), ("local", "l.jsonl"))}
    stats = {n: (float(np.percentile(ts, 50)), float(np.percentile(ts, 99))) for n, ts in times.items()}
    names = list(stats)
    direct, fwd, loc = (stats[n] for n in names)
    lines = [
        *section_head("## The gateway: `zc serve` (`bench/gateway_bench.py`)", "gateway_bench.py",
                      args.rounds, args.write, (load0, load1), PACKAGES),
        "Wall-clock time of one `POST /v1/chat/completions` (5 tools offered, the answer a tool call) from a "
        "keep-alive httpx client, interleaved over the three targets after 50 warm-up requests each; GC off "
        "in the client while timing. The upstream is the local stub (no model), so these are zc's own costs. "
        "Each `zc serve` is its own process and appends one receipt per request.", "",
        "| target | n | p50 µs | p99 µs | inside zc serve: p50 µs | p99 µs |",
        "|---|---:|---:|---:|---:|---:|", *(f"| {n} | {len(times[n]):,} | {stats[n][0]:,.1f} | "
                                            f"{stats[n][1]:,.1f} | " + (
            f"{np.percentile(inside[n], 50):,.1f} | {np.percentile(inside[n], 99):,.1f} |"
            if inside[n] else "– | – |")
          for n in names), "",
        "*Inside zc serve* is the gateway's own `x-zc-latency-ms` header: from the start of the request "
        "handler to the reply built (body read, state, legal set, ladder, upstream call when forwarding, "
        f"receipt); the rest is HTTP in and out (uvicorn with {_stack()}, Starlette).", "",
        f"Added by the proxy when forwarding: **{fwd[0] - direct[0]:,.0f} µs at p50, "
        f"{fwd[1] - direct[1]:,.0f} µs at p99** (the forwarded request also makes its own call to the same "
        f"stub). A locally answered request: {loc[0]:,.0f} µs p50 ({loc[0] / direct[0]:.2f}× a direct call "
        "to the stub, which answers instantly; a real model's call takes hundreds of milliseconds or more).",
        "", *([f"The machine was busy (load average {max(load0, load1):.1f} on {os.cpu_count()} cores, "
               "shared with other work): every figure above is inflated by waiting for a core; rerun on a "
               "quiet machine for zc's own cost.", ""] if max(load0, load1) > (os.cpu_count() or 1) else []),
        f"Receipts written: {receipts['forwarded']:,} forwarded, {receipts['local']:,} local (warm-up "
        f"included); requests the stub received: {requests_seen:,}.",
    ]
    publish("gateway_bench", "\n".join(lines), args.write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
