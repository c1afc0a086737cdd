#!/usr/bin/env python3
"""Benchmark: zc alone at scale (compile, load, legal set) on legal_bench.py's generated policies.

The same seeded generator as bench/legal_bench.py (about 1.2 rules per action), without the Cedar
and Casbin comparison, so that 10,000 actions are measured in seconds. For each size it reports
the CPU time of `compile_source` (parse, check, lints, lower, verify), of loading the artifact
bytes (`ir.loads` + `Policy`: decode, verify, code generation), and the p50 / p90 wall time of
`Policy.legal(state)` (state validation included) over generated states, after one warm-up pass,
with the garbage collector off while timing (as in legal_bench.py).
The zc answers are checked against legal_bench's reference interpreter before anything is timed.

Usage:
    python bench/scale_bench.py [--sizes 10,100,1000,10000] [--states 100]
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import legal_bench as lb  # noqa: E402

from zcompile import ir  # noqa: E402
from zcompile.driver import artifact_bytes, compile_source  # noqa: E402
from zcompile.runtime import Policy  # noqa: E402
from zcompile.source import Source  # noqa: E402


def measure(n: int, n_states: int) -> dict:
    pol = lb.generate(n)
    start = time.process_time()
    policy, _ = compile_source(Source(f"gen{n}.zc", lb.to_zc(pol)))
    compile_s = time.process_time() - start
    data = artifact_bytes(policy)
    start = time.process_time()
    runtime = Policy(ir.loads(data)[0])
    load_s = time.process_time() - start
    flats = lb.gen_states(n_states, n)
    states = [lb.nest(f) for f in flats]
    for flat, state in zip(flats, states):  # agreement first: timing wrong answers is meaningless
        if set(runtime.legal(state).actions) != set(lb.ref_legal(pol, flat) or (lb.FALLBACK,)):
            raise SystemExit(f"zc disagrees with the reference at {n} actions")
    times = []
    gc.collect()
    gc.disable()  # as legal_bench.py times: collector pauses are the process's, not the call's
    try:
        for state in states:
            start = time.perf_counter()
            runtime.legal(state)
            times.append(time.perf_counter() - start)
    finally:
        gc.enable()
    times.sort()
    return {"actions": n, "rules": len(policy.rules), "artifact_mb": len(data) / 1e6,
            "compile_s": compile_s, "load_s": load_s,
            "legal_p50_ms": statistics.median(times) * 1e3,
            "legal_p90_ms": times[int(len(times) * 0.9)] * 1e3}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="10,100,1000,10000")
    ap.add_argument("--states", type=int, default=100)
    args = ap.parse_args()
    print("| actions | rules | artifact MB | compile s (CPU) | load s (CPU) | legal p50 ms | legal p90 ms |")
    print("|---|---|---|---|---|---|---|")
    for n in (int(s) for s in args.sizes.split(",")):
        r = measure(n, args.states)
        print(f"| {r['actions']:,} | {r['rules']:,} | {r['artifact_mb']:.1f} | {r['compile_s']:.2f} "
              f"| {r['load_s']:.2f} | {r['legal_p50_ms']:.3f} | {r['legal_p90_ms']:.3f} |", flush=True)


if __name__ == "__main__":
    main()
