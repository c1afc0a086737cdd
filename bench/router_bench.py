"""Router latency: p50/p99 of `Router.decide` for compiler-only, compiler + tabular specialist, and a
local HTTP tier, interleaved in one process after warm-up; writes its section of BENCHMARKS.md.

    python bench/router_bench.py [--rounds N] [--write BENCHMARKS.md]

The HTTP tier is the test suite's local OpenAI-compatible stub (tests/openai_stub.py): no model
runs, so the figure is the protocol and transport cost a real local server adds on top of its
own inference time.
"""

from __future__ import annotations

import argparse
import gc
import os
import platform
import shlex
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

import zcompile  # noqa: E402
from benchlib import cpu_model, publish  # noqa: E402
from openai_stub import OpenAIStub  # noqa: E402
from zcompile.qroute.distill import load_decisions  # noqa: E402
from zcompile.router import Router  # noqa: E402

BEGIN, END = "<!-- router_bench:begin -->", "<!-- router_bench:end -->"



def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=2000, help="timed decisions per configuration")
    ap.add_argument("--write", type=Path, help="replace the router section of this markdown file")
    args = ap.parse_args(argv)

    core = zcompile.compile_file(ROOT / "policies" / "agent_core.zc")
    chat = zcompile.compile_file(ROOT / "policies" / "airline_chat.zc")
    spec_dir = ROOT / "specialists" / "airline_chat"
    if not (spec_dir / "manifest.json").exists():
        print(f"{spec_dir} is missing: run `make demo` first", file=sys.stderr)
        return 1
    decisions, _, _ = load_decisions([ROOT / "receipts"], chat)
    chat_states = [d.state for d in decisions[:300]]
    core_state = {"user": {"role": "developer"}, "budget": {"units": 40}, "target": {"kind": "file"},
                  "confidence": 0.9, "history": ["fs.read"]}
    tmp = Path(tempfile.mkdtemp(prefix="router-bench-"))
    with OpenAIStub("correct") as stub:
        http = zcompile.OpenAITier(stub.base_url, "stub", timeout_ms=2000)
        configs = {
            "compiler only (agent_core, no rung bound: compiler or fallback)":
                (Router(core, receipts=tmp / "a.jsonl"), [core_state]),
            "compiler + tabular specialist (airline_chat, GPT-4o receipt states)":
                (Router(chat, specialists=spec_dir, receipts=tmp / "b.jsonl"), chat_states),
            "compiler + local HTTP tier (agent_core, stub server, tools mode)":
                (Router(core, tiers={"small": http, "large": http}, receipts=tmp / "c.jsonl"),
                 [core_state]),
        }
        times: dict[str, list[float]] = {k: [] for k in configs}
        for name, (router, states) in configs.items():  # warm-up
            for s in states[:50]:
                router.decide(s)
        gc.disable()
        try:
            for i in range(args.rounds):  # interleaved
                for name, (router, states) in configs.items():
                    s = states[i % len(states)]
                    t = time.perf_counter_ns()
                    router.decide(s)
                    times[name].append((time.perf_counter_ns() - t) / 1000)
        finally:
            gc.enable()
        for router, _ in configs.values():
            router.close()
        http.close()
        connections = stub.connections

    base = float(np.median(times[next(iter(times))]))
    rows = []
    for name, ts in times.items():
        p50, p99 = float(np.percentile(ts, 50)), float(np.percentile(ts, 99))
        rows.append((name, len(ts), p50, p99, p50 / base))
    spec_p50 = rows[1][2]
    cmd = "python bench/router_bench.py" + (f" --rounds {args.rounds}" if args.rounds != 2000 else "") + \
        (f" --write {shlex.quote(str(args.write))}" if args.write else "")
    lines = [
        BEGIN,
        "## Router decisions (`bench/router_bench.py`)", "",
        f"Command: `{cmd}`, run on {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}. "
        f"Machine: {cpu_model()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
        f"zcompile {metadata.version('zcompile')}, onnxruntime {metadata.version('onnxruntime')}, "
        f"httpx {metadata.version('httpx')}.", "",
        "Each `Router.decide` includes state validation, the legal set, the route, every rung asked, "
        "and appending the receipt to a file. Interleaved over the three configurations after 50 "
        "warm-up decisions each; GC off while timing. The HTTP tier is the local stub server "
        f"(no model; {connections} TCP connection(s) for all its calls: kept alive).", "",
        "| configuration | n | p50 µs | p99 µs | p50 / compiler-only |",
        "|---|---:|---:|---:|---:|",
        *(f"| {n} | {k:,} | {p50:,.1f} | {p99:,.1f} | {r:.2f} |" for n, k, p50, p99, r in rows),
        "",
        f"DESIGN.md §8 target, router decision with compiler + tabular specialist: p50 ≤ 150 µs — "
        f"measured {spec_p50:,.0f} µs: **{'met' if spec_p50 <= 150 else 'missed'}**"
        + ("" if spec_p50 <= 150 else
           " (the specialist's features hash four conversation text fields in Python; see README, "
           "Distillation)") + ".",
        END,
    ]
    publish(lines, args.write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
