#!/usr/bin/env python3
"""Benchmark: compile time beside Cedar, cold (a fresh process) and warm, on two independent generators.

For each generator (legal_bench.py's role and attribute policies; shapes.py's intents, `after`
chains, large enums and argument rules) and size, the same policy is written as zc source and as
a Cedar policy set, and timed three ways, zc and Cedar alternating run by run:

* cold, in process: a fresh interpreter times, from before its first import of the engine to the
  end of the compile, `import zcompile; zcompile.compile_file(path)` (parse, check, lints, lower,
  load: what a program that embeds zc does first) against `import cedarpy;
  cedarpy.PolicySet.from_str(open(path).read())`;
* cold, whole process: the wall time of that same child process, interpreter start-up included
  (what a CLI user waits for);
* warm: in this process, after one compile of each, `zcompile.compile_text(src)` against
  `PolicySet.from_str(src)`, interleaved, with the cyclic GC as each leaves it.

Medians of n runs; the ratio zc/Cedar is of the medians. Both children run the same interpreter
(this one), so start-up costs are the same for both.

Usage:
    python bench/compile_bench.py [--sizes 100,1000,10000] [--cold 5] [--warm 5] [--write BENCHMARKS.md]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

import benchdoc  # noqa: E402
import legal_bench  # noqa: E402
import shapes  # noqa: E402

ZC_CHILD = """import sys, time
t = time.perf_counter()
import zcompile
zcompile.compile_file(sys.argv[1])
print(time.perf_counter() - t)
"""
CEDAR_CHILD = """import sys, time
t = time.perf_counter()
import cedarpy
with open(sys.argv[1]) as f:
    cedarpy.PolicySet.from_str(f.read())
print(time.perf_counter() - t)
"""
GENERATORS = {
    "legal_bench": lambda n: (lambda p: (legal_bench.to_zc(p), legal_bench.to_cedar(p)))(legal_bench.generate(n)),
    "shapes": lambda n: (lambda p: (shapes.to_zc(p), shapes.to_cedar(p)))(shapes.generate(n)),
}


def _child(code: str, path: Path) -> tuple[float, float]:
    """(seconds the child measured itself, wall seconds of the whole child process)."""
    start = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True,
                         check=False, env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
    wall = time.perf_counter() - start
    if out.returncode:
        raise SystemExit(f"child failed on {path}:\n{out.stderr[-2000:]}")
    return float(out.stdout.strip().splitlines()[-1]), wall


def measure(gen: str, n: int, cold: int, warm: int, work: Path) -> dict:
    import cedarpy
    import zcompile

    zc_src, cedar_src = GENERATORS[gen](n)
    zc_path, cedar_path = work / f"{gen}{n}.zc", work / f"{gen}{n}.cedar"
    zc_path.write_text(zc_src)
    cedar_path.write_text(cedar_src)
    policy = zcompile.compile_text(zc_src)  # also checks that it compiles at all, and warms up
    policies = cedarpy.PolicySet.from_str(cedar_src)
    rules = len(policy.ir.rules)
    cedar_policies = len(policies.policies) if hasattr(policies, "policies") else cedar_src.count(";")
    runs = {k: [] for k in ("zc_in", "zc_wall", "cedar_in", "cedar_wall", "zc_warm", "cedar_warm")}
    for _ in range(cold):
        a, b = _child(ZC_CHILD, zc_path)
        runs["zc_in"].append(a)
        runs["zc_wall"].append(b)
        a, b = _child(CEDAR_CHILD, cedar_path)
        runs["cedar_in"].append(a)
        runs["cedar_wall"].append(b)
    clock = time.perf_counter
    for _ in range(warm):
        t0 = clock()
        zcompile.compile_text(zc_src)
        t1 = clock()
        cedarpy.PolicySet.from_str(cedar_src)
        t2 = clock()
        runs["zc_warm"].append(t1 - t0)
        runs["cedar_warm"].append(t2 - t1)
    med = {k: statistics.median(v) for k, v in runs.items()}
    return {"gen": gen, "actions": n, "rules": rules, "cedar_policies": cedar_policies,
            "kb": len(zc_src.encode()) / 1024, "cold": cold, "warm": warm, **med}


def _s(x: float) -> str:
    return f"{x:.3f}" if x >= 0.01 else f"{x:.4f}"


def render(rows: list[dict], command: str, load: tuple[str, str]) -> str:
    lines = ["## Compile time beside Cedar, cold and warm (`bench/compile_bench.py`)", "",
             f"Command: `{command}`, run on {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}.", "",
             *benchdoc.machine_table([("cedarpy", ("cedarpy",)), ("lark", ("lark",))]),
             f"| load average (1 min): start / end | {load[0]} / {load[1]} (2 cores: above ~1, other "
             "work shared them, and both engines' figures read high) |", "",
             __doc__.split("\n\n", 1)[1].split("\nUsage:")[0].strip(), "",
             "| generator | actions | rules | zc source KB | n cold / warm | zc cold in-process s | "
             "Cedar cold in-process s | ratio | zc cold process s | Cedar cold process s | ratio | "
             "zc warm s | Cedar warm s | ratio |",
             "|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    worst = 0.0
    for r in rows:
        ratios = (r["zc_in"] / r["cedar_in"], r["zc_wall"] / r["cedar_wall"], r["zc_warm"] / r["cedar_warm"])
        worst = max(worst, *ratios)
        lines.append(
            f"| {r['gen']} | {r['actions']:,} | {r['rules']:,} | {r['kb']:,.0f} | {r['cold']} / {r['warm']} | "
            f"{_s(r['zc_in'])} | {_s(r['cedar_in'])} | {ratios[0]:.1f} | {_s(r['zc_wall'])} | "
            f"{_s(r['cedar_wall'])} | {ratios[1]:.1f} | {_s(r['zc_warm'])} | {_s(r['cedar_warm'])} | "
            f"{ratios[2]:.1f} |")
    verdict = "**met**" if worst <= 10 else "**not met**"
    lines += ["", f"Issue 27 target, compile ≤ 10× Cedar cold and warm at every size on both generators: "
              f"worst ratio {worst:.1f} — {verdict}."]
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="100,1000,10000")
    ap.add_argument("--generators", default="legal_bench,shapes")
    ap.add_argument("--cold", type=int, default=5, help="fresh processes per engine and size")
    ap.add_argument("--warm", type=int, default=5, help="in-process repeats per engine and size")
    ap.add_argument("--write", metavar="FILE", help="replace this script's section of FILE")
    args = ap.parse_args()
    load0 = f"{os.getloadavg()[0]:.2f}"
    rows = []
    with tempfile.TemporaryDirectory(prefix="zc-compile-bench-") as tmp:
        for gen in args.generators.split(","):
            for n in (int(s) for s in args.sizes.split(",")):
                rows.append(measure(gen, n, args.cold, args.warm, Path(tmp)))
                r = rows[-1]
                print(f"{gen} {n}: cold {r['zc_in']:.3f}/{r['cedar_in']:.3f} process "
                      f"{r['zc_wall']:.3f}/{r['cedar_wall']:.3f} warm {r['zc_warm']:.3f}/{r['cedar_warm']:.3f}",
                      file=sys.stderr, flush=True)
    command = "python bench/compile_bench.py " + " ".join(sys.argv[1:])
    benchdoc.publish("compile_bench", render(rows, command.strip(), (load0, f"{os.getloadavg()[0]:.2f}")),
                     args.write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
