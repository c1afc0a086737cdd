#!/usr/bin/env python3
"""Benchmark: `zc distill --model logistic` and `zc eval` time and peak RSS at 1.5k to 1M receipts.

The receipts are generated from the bundled ones (`receipts/tau-airline-gpt4o.jsonl.gz`, 120
conversations of 30 tau tasks): copy k of the data is the bundled conversations in a seeded random
order, each conversation's task relabelled `TASK~k` and its receipt ids `ID~k`, so every copy adds
30 new tasks and the split by task stays meaningful. They are written as Parquet shards
(`zc receipts convert`'s format) of `--shard-rows` receipts, once per size, under `--work`.

Each run is a subprocess of its own (its peak RSS from `wait4`), so the figures are those of the
command a user runs.

Usage:
    python bench/distill_scale_bench.py [--sizes 1518,15000,150000,1000000] [--work DIR] [--no-eval]
        [--engine local] [--write-benchmarks]
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run from a checkout without an editable install
    sys.path.insert(0, str(ROOT))

from zcompile.receipts import Receipt, read, write_file  # noqa: E402

BUNDLED = ROOT / "receipts" / "tau-airline-gpt4o.jsonl.gz"
POLICY = ROOT / "policies" / "airline_chat.zc"
SIZES = (1518, 15_000, 150_000, 1_000_000)


def generate(n: int, seed: int = 0, source: Path = BUNDLED) -> Iterator[Receipt]:
    """`n` receipts resampled from `source`: copies of its conversations in a seeded order, tasks
    and ids relabelled per copy (`~k`), conversations kept whole and in order (the last may be cut)."""
    import msgspec

    convs: dict[str, list[Receipt]] = {}
    for r in read(source):
        convs.setdefault(str(r.meta.get("conversation", r.task)), []).append(r)
    names = list(convs)
    rng = random.Random(seed)
    made, k = 0, 0
    while made < n:
        order = names[:]
        rng.shuffle(order)
        for c in order:
            for r in convs[c]:
                if made == n:
                    return
                yield msgspec.structs.replace(r, id=f"{r.id}~{k}", task=f"{r.task}~{k}",
                                              meta={**r.meta, "conversation": f"{c}~{k}"})
                made += 1
        k += 1


def shards(n: int, work: Path, shard_rows: int, seed: int = 0) -> Path:
    """The directory of Parquet shards holding `generate(n)` (made once, reused when complete)."""
    d = work / f"receipts-{n}"
    done = d / ".complete"
    if done.exists():
        return d
    d.mkdir(parents=True, exist_ok=True)
    it = generate(n, seed)
    i = 0
    while True:
        chunk = [r for _, r in zip(range(shard_rows), it)]
        if not chunk:
            break
        write_file(d / f"part-{i:05d}.parquet", chunk)
        i += 1
    done.write_text(str(n))
    return d


def run(cmd: list[str]) -> dict:
    """Run `cmd`; its wall time, its own peak RSS (MiB, from wait4's rusage) and exit code."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=out, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read().decode(errors="replace"), err.read().decode(errors="replace")
    if proc.returncode != 0:
        sys.stderr.write(stderr[-4000:])
    return {"seconds": wall, "rss_mib": usage.ru_maxrss / 1024, "rc": proc.returncode, "stderr": stderr,
            "stdout": stdout}


def stages(stderr: str) -> str:
    """Seconds of the long stages, from the progress lines (`label: i/n (S s)`, the last of each label)."""
    import re

    last: dict[str, str] = {}
    for label, secs in re.findall(r"^  (.+?): \d+(?:/\d+)? \((\d+) s\)$", stderr, re.M):
        if not label.startswith(("reading receipts", "folds", "featurising", "argument model fits")):
            continue
        last[label] = secs
    return "; ".join(f"{k} {v} s" for k, v in last.items())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default=",".join(map(str, SIZES)))
    ap.add_argument("--work", type=Path, default=Path("/tmp/zc-distill-scale"))
    ap.add_argument("--shard-rows", type=int, default=100_000)
    ap.add_argument("--engine", default="local", choices=["local", "ray"])
    ap.add_argument("--max-decisions", type=int, default=None,
                    help="zc distill --max-decisions (default: zc's own)")
    ap.add_argument("--seed", type=int, default=0, help="zc distill --seed (the sample and the folds)")
    ap.add_argument("--no-eval", action="store_true")
    ap.add_argument("--write-benchmarks", action="store_true")
    a = ap.parse_args()
    zc = [sys.executable, "-m", "zcompile"]
    a.work.mkdir(parents=True, exist_ok=True)
    policy = a.work / "airline_chat.zcp"
    subprocess.run(zc + ["compile", str(POLICY), "-o", str(a.work)], check=True, capture_output=True)
    rows = []
    a.load = [os.getloadavg()[0]]
    for n in (int(s) for s in a.sizes.split(",")):
        t = time.perf_counter()
        src = shards(n, a.work, a.shard_rows)
        gen = time.perf_counter() - t
        out = a.work / f"spec-{n}"
        d = run(zc + ["distill", "--from", str(src), "--policy", str(policy), "-o", str(out), "--model",
                      "logistic", "--engine", a.engine]
                + ([] if a.max_decisions is None else ["--max-decisions", str(a.max_decisions)])
                + ["--seed", str(a.seed)])
        e = None if a.no_eval or d["rc"] else run(zc + ["eval", "--policy", str(policy), "--specialists",
                                                        str(out),
                                                         "--receipts", str(src)])
        used = next((ln.strip() for ln in d["stderr"].splitlines() if "training data:" in ln), "")
        d["stages"] = stages(d["stderr"])
        row = {"n": n, "generate_s": gen, "distill": d, "eval": e, "training_data": used}
        rows.append(row)
        print(f"{n:>9,} receipts: distill {d['seconds']:7.1f} s, peak RSS {d['rss_mib']:7.0f} MiB (rc "
              f"{d['rc']})"
              + (f"; eval {e['seconds']:7.1f} s, peak RSS {e['rss_mib']:7.0f} MiB (rc {e['rc']})" if e
                 else "")
              + (f"; {used}" if used else "") + (f"; {d['stages']}" if d["stages"] else ""), flush=True)
    a.load.append(os.getloadavg()[0])
    if a.write_benchmarks:
        write_section(rows, a)


def write_section(rows: list[dict], a: argparse.Namespace) -> None:
    from benchdoc import machine_table, publish

    lines = ["Generated receipts (the bundled ones resampled, tasks relabelled per copy), Parquet shards of "
             f"{a.shard_rows:,} rows; `zc distill --model logistic --engine {a.engine}` and `zc eval` (the "
             "sealed test split), each a process of its own; peak RSS of that process.", "",
             "| receipts | distill | distill peak RSS | long stages | eval | eval peak RSS | training data |",
             "|---|---|---|---|---|---|---|"]
    for r in sorted(rows, key=lambda r: r["n"]):
        d, e = r["distill"], r["eval"]
        failed = "" if d["rc"] == 0 else " (FAILED: " + next(
            (ln for ln in reversed(d["stderr"].splitlines()) if ln.startswith("error:")),
            f"exit {d['rc']}") + ")"
        lines.append(f"| {r['n']:,} | {d['seconds']:.1f} s{failed} | {d['rss_mib']:.0f} MiB | "
                     f"{d['stages'] or '-'} | "
                     + (f"{e['seconds']:.1f} s | {e['rss_mib']:.0f} MiB" if e else "not run | -")
                     + f" | {r['training_data'].removeprefix('training data:').strip() or '-'} |")
    lines += ["", *machine_table([("scikit-learn", ("scikit-learn",)), ("pyarrow", ("pyarrow",)),
                                  ("ray", ("ray",))]),
              f"| load average (1 min): start / end | {a.load[0]:.2f} / {a.load[1]:.2f} (2 cores) |"]
    cmd = " ".join(["python bench/distill_scale_bench.py", *sys.argv[1:]])
    publish("distill-scale", "\n".join([f"## Distillation at scale (`{cmd}`)", "", *lines]),
            ROOT / "BENCHMARKS.md")


if __name__ == "__main__":
    main()
