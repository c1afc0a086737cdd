#!/usr/bin/env python3
"""Benchmark: how `zc check`, `zc compile` and `zc legal` grow with the rules, as a CLI user runs them.

Generates policies of 1,000 / 10,000 / 100,000 rules with bench/shapes.py (about 2 rules an action:
intents, `after` chains, large enums, argument rules) and, up to 10,000 rules, with
bench/legal_bench.py's generator (1.2 rules an action; its 100,000-rule policy is 16 MB, past zc's
8 MB limit). Each command runs in a fresh process (`python -m zcompile …`, bytecode cached as
after `pip install`; one uncounted run fills the cache); the figure is the
child's CPU time (user + system, from `getrusage`), the median of n runs, and its wall time beside
it. `zc legal` loads the artifact `zc compile` wrote and answers one state.

The growth exponent is the least-squares slope of log(CPU seconds) against log(rules) over the
sizes, and beside it the slope between the two largest sizes alone (interpreter start-up, a fixed
cost, flattens the first). Target (issue 27): exponent ≤ 1.2, and 100,000 rules checked in ≤ 10 s.

Usage:
    python bench/growth_bench.py [--rules 1000,10000,100000] [--runs 3] [--write BENCHMARKS.md]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
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
from compile_bench import child_env  # noqa: E402

COMMANDS = ("check", "compile", "legal")
LEGAL_BENCH_MAX_RULES = 12_000  # beyond, its policies pass zc's 8 MB limit before 100,000 rules


def _policy(gen: str, rules: int) -> tuple[str, str, dict]:
    """(name, zc source, one valid state) with about `rules` rules."""
    if gen == "shapes":
        pol = shapes.generate(max(2, rules // 2))
        state = {"region": shapes.REGIONS[3], "plan": shapes.PLANS[5], "step": 4, "spent": 2,
                 "budget": 7, "confirmed": [], "history": [pol["actions"][0][0]]}
        return pol["name"], shapes.to_zc(pol), state
    pol = legal_bench.generate(max(2, round(rules / legal_bench.RULES_PER_ACTION)))
    return pol.name, legal_bench.to_zc(pol), legal_bench.nest(legal_bench.gen_states(1, len(pol.actions))[0])


def _run(args: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(CPU seconds, wall seconds) of one `python -m zcompile ARGS` child; anything but exit 0 (warnings
    are fine) stops the benchmark."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "zcompile", *args], capture_output=True, text=True,
                         check=False, env=env)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if out.returncode:
        raise SystemExit(f"zc {' '.join(args)} failed "
                         f"({out.returncode}):\n{out.stdout[-1500:]}{out.stderr[-1500:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, wall


def measure(gen: str, rules: int, runs: int, work: Path) -> dict:
    name, src, state = _policy(gen, rules)
    path, out, state_path = work / f"{name}.zc", work / f"out-{name}", work / f"{name}.state.json"
    path.write_text(src)
    state_path.write_text(json.dumps(state))
    artifact = out / f"{name}.zcp"
    argv = {"check": ["check", str(path)], "compile": ["compile", "-q", str(path), "-o", str(out)],
            "legal": ["legal", str(artifact), "--state", str(state_path)]}
    cpu: dict[str, list[float]] = {c: [] for c in COMMANDS}
    wall: dict[str, list[float]] = {c: [] for c in COMMANDS}
    env = child_env(work / "pycache")
    _run(argv["check"], env)  # uncounted: fills the bytecode cache
    for _ in range(runs):
        for c in COMMANDS:  # compile before legal: legal reads what compile wrote
            a, b = _run(argv[c], env)
            cpu[c].append(a)
            wall[c].append(b)
    from zcompile.driver import read_source
    from zcompile.parse import parse
    real_rules = len(parse(read_source(path)).rules)
    return {"gen": gen, "rules": real_rules, "mb": len(src.encode()) / 1e6, "runs": runs,
            **{f"{c}_cpu": statistics.median(cpu[c]) for c in COMMANDS},
            **{f"{c}_wall": statistics.median(wall[c]) for c in COMMANDS}}


def slope(xs: list[float], ys: list[float]) -> float:
    """Least-squares slope of log(ys) on log(xs)."""
    lx, ly = [math.log(x) for x in xs], [math.log(y) for y in ys]
    mx, my = statistics.fmean(lx), statistics.fmean(ly)
    return sum((a - mx) * (b - my) for a, b in zip(lx, ly)) / sum((a - mx) ** 2 for a in lx)


def render(rows: list[dict], command: str, load: tuple[str, str]) -> str:
    lines = ["## Growth in rules: `zc check`, `zc compile`, `zc legal` (`bench/growth_bench.py`)", "",
             f"Command: `{command}`, run on {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}.", "",
             *benchdoc.machine_table([("lark", ("lark",)), ("msgspec", ("msgspec",))]),
             f"| load average (1 min): start / end | {load[0]} / {load[1]} (2 cores: above ~1, other "
             "work shared them; CPU time is less affected than wall time, not immune) |", "",
             __doc__.split("\n\n", 1)[1].split("\nUsage:")[0].strip(), "",
             "| generator | rules | MB | n | check CPU s | check wall s | compile CPU s | compile wall s | "
             "legal CPU s | legal wall s |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['gen']} | {r['rules']:,} | {r['mb']:.2f} | {r['runs']} | "
                     + " | ".join(f"{r[f'{c}_cpu']:.2f} | {r[f'{c}_wall']:.2f}" for c in COMMANDS) + " |")
    lines += ["", "| generator | command | exponent over all sizes | exponent between the two largest |",
              "|---|---|---:|---:|"]
    worst, verdicts = 0.0, []
    for gen in dict.fromkeys(r["gen"] for r in rows):
        mine = [r for r in rows if r["gen"] == gen]
        if len(mine) < 2:
            continue
        for c in COMMANDS:
            xs, ys = [r["rules"] for r in mine], [r[f"{c}_cpu"] for r in mine]
            whole, last = slope(xs, ys), slope(xs[-2:], ys[-2:])
            worst = max(worst, whole, last)
            lines.append(f"| {gen} | `zc {c}` | {whole:.2f} | {last:.2f} |")
    big = [r for r in rows if r["rules"] >= 100_000]
    if big:
        verdicts.append(f"100,000 rules checked in {max(r['check_cpu'] for r in big):.1f} s of CPU "
                        f"({max(r['check_wall'] for r in big):.1f} s wall): "
                        + ("**met**" if max(r["check_cpu"] for r in big) <= 10 else "**not met**"))
    verdicts.append(f"growth exponent ≤ 1.2: worst {worst:.2f} — "
                    + ("**met**" if worst <= 1.2 else "**not met**"))
    lines += ["", "Issue 27 targets: " + "; ".join(verdicts) + "."]
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rules", default="1000,10000,100000")
    ap.add_argument("--generators", default="shapes,legal_bench")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--write", metavar="FILE", help="replace this script's section of FILE")
    args = ap.parse_args()
    load0 = f"{os.getloadavg()[0]:.2f}"
    rows = []
    with tempfile.TemporaryDirectory(prefix="zc-growth-bench-") as tmp:
        for gen in args.generators.split(","):
            for rules in (int(s) for s in args.rules.split(",")):
                if gen == "legal_bench" and rules > LEGAL_BENCH_MAX_RULES:
                    continue
                rows.append(measure(gen, rules, args.runs, Path(tmp)))
                r = rows[-1]
                print(f"{gen} {r['rules']}: " + " ".join(f"{c} {r[f'{c}_cpu']:.2f}s" for c in COMMANDS),
                      file=sys.stderr, flush=True)
    command = ("python bench/growth_bench.py " + " ".join(sys.argv[1:])).strip()
    benchdoc.publish("growth_bench", render(rows, command, (load0, f"{os.getloadavg()[0]:.2f}")), args.write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
