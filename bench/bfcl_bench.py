"""BFCL: a pairwise specialist choosing among offered functions it never saw in training, or abstaining;
writes its section of BENCHMARKS.md.

    python bench/bfcl_bench.py [--data ../shared/data/bfcl] [--epochs 3] [--ensemble 3] [--write
BENCHMARKS.md]

Trained on `simple_python` and part of `irrelevance`; reported on `multiple` and on the rest of
`irrelevance` (never trained on). Which `irrelevance` question goes where, and which
`simple_python` questions are held back for calibration, is decided by a hash of the question id
(crc32 mod 100), the same rule for any data. Calibration decisions from `simple_python` are offered
their own function plus 1–3 of the functions of other calibration questions that share the most
description words with it (so that they choose among related tools, as `multiple` does), leaving out
a function whose name differs from the right one's only in case and punctuation (another copy of
the same tool, which would make a right choice count as wrong); nothing reads particular ids,
function names or wording. The scorer is an ensemble of `--ensemble` fine-tunes (about 9 minutes
each on one core). τ is chosen on the calibration split: the lowest at which abstaining where no
function fits keeps its one-sided 95% bound ≥ the abstention target is a floor, and above it
Learn-then-Test certifies precision where a function fits (`zc distill --model pairwise`).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
import shlex
import sys
import time
import zlib
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT)]

from benchdoc import machine_table, publish  # noqa: E402

from zcompile.qroute import (  # noqa: E402
    TARGET_ABSTENTION,
    LoggedDecision,
    PairwiseSpecialist,
    Progress,
    Settings,
    describe,
    distill,
    load_decisions,
    nearest,
    threshold_line,
    words_of,
)
from zcompile.receipts import bfcl_answers_path, import_bfcl, write_file  # noqa: E402

PACKAGES = [("torch / onnxruntime / tokenizers", ("torch", "onnxruntime", "tokenizers"))]
FILES = {"simple_python": "BFCL_v4_simple_python.json", "multiple": "BFCL_v4_multiple.json",
         "irrelevance": "BFCL_v4_irrelevance.json"}
CAL_SHARE = 35  # % of simple_python held back for calibration (a 0.95 bound needs ~60+ answered)
IRRELEVANCE = (20, 40)  # % of irrelevance for training, for calibration (~100, so that the 0.85 bound
# on abstention tolerates ~8% answered rather than 2 of 48); the rest (buckets 60-99) is test
DISTRACTOR_SEED = 0  # the calibration questions' extra functions: fixed, so that --seed changes only training


def bucket(qid: str) -> int:
    return zlib.crc32(qid.encode()) % 100


def load(data: Path, out: Path) -> dict[str, list[LoggedDecision]]:
    out.mkdir(parents=True, exist_ok=True)
    decisions = {}
    for cat, name in FILES.items():
        src = data / name
        answers = bfcl_answers_path(src)
        path = out / f"{cat}.jsonl"
        write_file(path, import_bfcl(src, answers if answers.exists() else None))
        decisions[cat] = load_decisions([path], None, none_fits=True).decisions
    return decisions


def same_tool(a: str, b: str) -> bool:
    """Names that differ only in case and punctuation (`calculate_bmi`, `calculate_BMI`)."""
    return re.sub(r"[^a-z0-9]", "", a.lower()) == re.sub(r"[^a-z0-9]", "", b.lower())


def with_distractors(decisions: list[LoggedDecision], seed: int) -> list[LoggedDecision]:
    """Each decision offered its own functions plus 1–3 of the 8 functions of other decisions whose
    descriptions share the most words with its own (a `multiple`-like choice among related tools),
    never another copy of one of its own (`same_tool`)."""
    rng = np.random.default_rng(seed)
    tools_of = [(a, x.tools.get(a)) for x in decisions for a in x.legal]
    pool = [describe(a, t) for a, t in tools_of]
    pool_words = [words_of(p) for p in pool]
    out = []
    for d in decisions:
        tools, legal = dict(d.tools), list(d.legal)
        own = describe(d.legal[0], d.tools.get(d.legal[0]))
        near = [i for i in nearest(own, pool, pool_words, 8)
                if not any(same_tool(tools_of[i][0], t) for t in tools)]
        for i in rng.choice(near, size=min(len(near), int(rng.integers(1, 4))), replace=False):
            name, schema = tools_of[i]
            tools[name] = schema
            legal.append(name)
        order = rng.permutation(len(legal))
        out.append(dataclasses.replace(d, legal=tuple(legal[k] for k in order), tools=tools))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data" / "bfcl")
    ap.add_argument("--epochs", type=float, default=3.0)
    ap.add_argument("--max-steps", type=int, default=None)
    ap.add_argument("--max-length", type=int, default=128)
    ap.add_argument("--seed", type=int, default=0,
                    help="training seed (members use seed, seed+1, …); the questions and splits do not "
                         "change")
    ap.add_argument("--target-precision", type=float, default=0.95,
                    help="precision where a function fits that τ must certify on the calibration split "
                    "(Learn-then-Test, 95%% confidence)")
    ap.add_argument("--target-abstention", type=float, default=TARGET_ABSTENTION,
                    help="one-sided 95%% lower bound on calibration abstention where none fits that τ must "
                         "keep")
    ap.add_argument("--ensemble", type=int, default=3,
                    help="models fine-tuned (seeds seed, seed+1, …), deciding by the mean of their logits")
    ap.add_argument("--out", type=Path, default=ROOT / "build" / "bfcl_pairwise")
    ap.add_argument("--write", type=Path, help="replace the BFCL section of this markdown file")
    args = ap.parse_args(argv)
    load0 = os.getloadavg()[0]
    if not (args.data / FILES["multiple"]).exists():
        print(f"{args.data}: no BFCL data here", file=sys.stderr)
        return 1

    d = load(args.data, ROOT / "build" / "bfcl_receipts")
    simple, multiple, irr = d["simple_python"], d["multiple"], d["irrelevance"]
    tr_i, ca_i = IRRELEVANCE
    parts = {
        "train": [x for x in simple if bucket(x.id) >= CAL_SHARE] + [x for x in irr if bucket(x.id) < tr_i],
        "calibration": with_distractors([x for x in simple if bucket(x.id) < CAL_SHARE], DISTRACTOR_SEED)
        + [x for x in irr if tr_i <= bucket(x.id) < tr_i + ca_i],
        "test": multiple + [x for x in irr if bucket(x.id) >= tr_i + ca_i],
    }

    def step(text):
        print(text, file=sys.stderr, flush=True)

    def bar(it, label, n):
        step(f"  {label}")
        t0 = time.time()
        for i, x in enumerate(it):
            if n and i and i % 25 == 0:
                step(f"    {i}/{n} ({time.time() - t0:.0f} s)")
            yield x

    options = {"epochs": args.epochs, "max_length": args.max_length, "ensemble": args.ensemble}
    if args.max_steps:
        options["max_steps"] = args.max_steps
    started = time.time()
    settings = Settings(model="pairwise", target_precision=args.target_precision,
                        target_abstention=args.target_abstention, seed=args.seed, options=options)
    res = distill([ROOT / "build" / "bfcl_receipts" / f"{c}.jsonl" for c in FILES], None, args.out, settings,
                  report=Progress(step, bar), parts=parts)
    wall = time.time() - started
    m = res.manifest
    t = m.metrics
    sp_ids = {x.id for x in multiple}
    from zcompile import stats

    sp = PairwiseSpecialist(res.directory)

    def ask(decisions):
        answers = [sp.decide(x.state, x.legal, x.tools) for x in decisions]
        return np.array([a.confidence for a in answers]), [a.best for a in answers]

    test = parts["test"]
    conf, best = ask(test)
    answered = conf >= sp.tau
    mult = np.array([x.id in sp_ids for x in test])
    correct = np.array([x.label is not None and b == x.label for x, b in zip(test, best)])
    k, n_ans = int((correct & answered & mult).sum()), int((answered & mult).sum())
    lo, hi = stats.wilson(k, n_ans)
    cov = n_ans / int(mult.sum())
    irr_test = ~mult
    abst = int((~answered & irr_test).sum())
    a_lo, a_hi = stats.wilson(abst, int(irr_test.sum()))
    prec = k / n_ans if n_ans else None
    ok_p, ok_c, ok_a = prec is not None and prec >= 0.95, cov >= 0.70, abst / irr_test.sum() >= 0.85
    # risk–coverage on `multiple`, by confidence
    order = np.argsort(-conf[mult], kind="stable")
    cm = correct[mult][order]
    curve = []
    for q in (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0):
        j = max(1, int(round(q * len(cm))))
        curve.append((q, j, float(cm[:j].mean()), float(conf[mult][order][j - 1])))

    cmd = "python bench/bfcl_bench.py" + (f" --epochs {args.epochs:g}" if args.epochs != 3.0 else "") + \
        (f" --target-precision {args.target_precision:g}" if args.target_precision != 0.95 else "") + \
        (f" --target-abstention {args.target_abstention:g}" if args.target_abstention != TARGET_ABSTENTION
         else "") + \
        (f" --ensemble {args.ensemble}" if args.ensemble != 3 else "") + \
        (f" --seed {args.seed}" if args.seed else "") + \
        (f" --max-steps {args.max_steps}" if args.max_steps else "") + \
        (f" --max-length {args.max_length}" if args.max_length != 128 else "") + \
        (f" --write {shlex.quote(str(args.write))}" if args.write else "")
    lines = [
        "## BFCL: choosing among offered functions, or abstaining (`bench/bfcl_bench.py`)", "",
        f"Command: `{cmd}`, run on {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} in {wall / 60:.1f} "
        "min.",
        "", *machine_table(PACKAGES),
        f"| load average (1 min): start / end | {load0:.2f} / {os.getloadavg()[0]:.2f} |", "",
        f"Pairwise MiniLM-L6 specialist ({m.model.params['quantization']}, first {m.model.text.max_length} "
        f"tokens of each pair"
        + (f"; an ensemble of {args.ensemble} fine-tuned with seeds "
           f"{args.seed}–{args.seed + args.ensemble - 1}, deciding by the mean of their logits"
           if args.ensemble > 1 else "")
        + f"), fine-tuned {m.model.params['steps']} steps in all on "
        f"{m.model.params['pairs']} (question, function description) pairs from {len(parts['train'])} "
        f"questions: `simple_python` ({sum(1 for x in parts['train'] if x.label is not None)}) and "
        f"{sum(1 for x in parts['train'] if x.label is None)} `irrelevance` questions. Calibration "
        f"({len(parts['calibration'])}): held-back `simple_python` questions offered 2–4 functions, and "
        "other `irrelevance` questions. Confidence: the calibrated choice score, min(best fit margin, lead "
        f"over the runner-up). {threshold_line(m).removesuffix('.')}. Reported on questions never trained "
        "on:", "",
        "| test set | n | answered | precision (answered) | Wilson 95% | coverage | abstained | target | met "
        "|",
        "|---|---:|---:|---:|---|---:|---:|---|---|",
        f"| `multiple` (2–4 functions offered) | {int(mult.sum())} | {n_ans} | "
        f"{'—' if prec is None else f'{prec:.3f}'} | [{lo:.3f}, {hi:.3f}] | {cov:.3f} | {1 - cov:.3f} | "
        f"precision ≥ 0.95 at coverage ≥ 0.70 | {'yes' if ok_p and ok_c else 'no'} |",
        f"| held-back `irrelevance` (no function fits) | {int(irr_test.sum())} | "
        f"{int((answered & irr_test).sum())} | — | — | — | {abst / irr_test.sum():.3f} [{a_lo:.3f}, "
        f"{a_hi:.3f}] | abstain ≥ 0.85 | {'yes' if ok_a else 'no'} |",
        "", f"Top-1 on `multiple` (answering everything): {float(correct[mult].mean()):.3f}. Parity "
        f"({t['parity']['quantization']} export vs the trained model): "
        f"same choice on {t['parity']['decision_agreement']:.2%} of the test split, max |Δp| "
        f"{t['parity']['max_abs_delta']:.3f}. One decision (render, tokenize 2–4 pairs, one onnxruntime "
        f"call): p50 {t['latency_us']['p50'] / 1000:.1f} ms, p99 {t['latency_us']['p99'] / 1000:.1f} ms.", "",
        "Risk–coverage on `multiple` (answering the most confident share):", "",
        "| share | answered | precision | confidence ≥ |", "|---:|---:|---:|---:|",
        *(f"| {q:.0%} | {j} | {p:.3f} | {c:.3f} |" for q, j, p, c in curve),
    ]
    publish("bfcl_bench", "\n".join(lines), args.write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
