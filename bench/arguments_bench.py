"""Argument proposals on logged chats: complete calls proposed exactly, confidence, precision–coverage.

    python bench/arguments_bench.py [--chat FILE.jsonl] [--tools tools.json] [--folds 5] [--min-confidence
0.5]

Grouped K-fold by the conversation's `task` (no task is in a fold's training and its test): the
argument model is fitted on the training folds' tool calls and proposes the arguments of every
held-out tool call (`tool_calls[0]` of an assistant message) from the candidates extracted from the
conversation before it. A proposal is correct when its argument dict equals the teacher's,
JSON-normalised. Figures come with n and Wilson 95% intervals.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

import msgspec
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT)]

from zcompile.qroute.arguments import (  # noqa: E402
    ArgumentModel,
    ArgumentScorer,
    call_examples,
    fit_value,
    normalize,
)
from zcompile.receipts.candidates import extract_candidates  # noqa: E402
from zcompile.stats import lower_bound, wilson  # noqa: E402

DATA = ROOT.parent.parent / "shared" / "data"
if not DATA.exists():
    DATA = Path("/work/shared/data")


def load_calls(chat: Path, tools: Path) -> tuple[list[dict], dict]:
    """Every assistant tool call with its conversation's task and the candidates before it."""
    schemas = {f["function"]["name"]: f["function"].get("parameters") or {}
               for f in json.loads(tools.read_text())["openai_function_schemas"]}
    calls = []
    for line in chat.read_text().splitlines():
        conv = json.loads(line)
        msgs = conv["messages"]
        for j, m in enumerate(msgs):
            if m.get("role") != "assistant" or not m.get("tool_calls"):
                continue
            fn = m["tool_calls"][0]["function"]
            calls.append({"task": conv["task"], "id": conv["id"], "action": fn["name"],
                          "params": schemas[fn["name"]], "arguments": json.loads(fn["arguments"] or "{}"),
                          "candidates": extract_candidates(msgs[:j])})
    return calls, schemas


def reachable(call: dict) -> bool:
    """Every argument value of the call is among its candidates (after fitting the declared type)."""
    props = call["params"].get("properties") or {}
    for name, value in call["arguments"].items():
        target = normalize(value)
        if not any((f := fit_value(c.value, props.get(name) or {})) is not None and normalize(f[0]) == target
                   for c in call["candidates"]):
            return False
    return True


def fmt(k: int, n: int) -> str:
    lo, hi = wilson(k, n)
    return f"{k}/{n} = {k / n if n else 0:.3f} [{lo:.3f}, {hi:.3f}]"


def coverage_at(conf: np.ndarray, correct: np.ndarray, target: float) -> tuple[int, int, float]:
    """The most calls answered (top by confidence) with observed precision >= target: (answered, correct,
    τ)."""
    order = np.argsort(-conf, kind="stable")
    hits = np.cumsum(correct[order])
    best = (0, 0, float("inf"))
    for m in range(1, len(conf) + 1):
        if conf[order][m - 1] <= 0:
            break
        if hits[m - 1] / m >= target and (m == len(conf) or conf[order][m] < conf[order][m - 1]):
            best = (m, int(hits[m - 1]), float(conf[order][m - 1]))
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--chat", type=Path, default=DATA / "receipts" / "tau-airline-gpt4o.chat.jsonl")
    ap.add_argument("--tools", type=Path, default=DATA / "tau" / "airline" / "tools.json")
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--min-confidence", type=float, default=0.5)
    ap.add_argument("--kind", choices=("gbt", "logistic"), default="gbt")
    ap.add_argument("--trees", type=int, default=100)
    ap.add_argument("--depth", type=int, default=4)
    args = ap.parse_args()
    from sklearn.model_selection import GroupKFold

    t0 = time.perf_counter()
    calls, _ = load_calls(args.chat, args.tools)
    writes = {name for name, kind in json.loads(args.tools.read_text()).get("tool_type", {}).items()
              if kind == "WRITE"}
    extract_s = time.perf_counter() - t0
    n = len(calls)
    sizes = [len(msgspec.json.encode(c["candidates"])) for c in calls]
    counts = [len(c["candidates"]) for c in calls]
    print(f"{args.chat.name}: {n} tool calls in {len({c['id'] for c in calls})} conversations, "
          f"{len({c['task'] for c in calls})} tasks; extraction {1e3 * extract_s / n:.2f} ms per decision")
    print(f"candidates per decision: median {statistics.median(counts):.0f}, max {max(counts)}; "
          f"msgspec JSON bytes median {statistics.median(sizes):.0f}, mean {statistics.mean(sizes):.0f}, "
          f"max {max(sizes)}")
    print(f"ceiling (every argument value among the candidates): {fmt(sum(map(reachable, calls)), n)}")

    groups = [c["task"] for c in calls]
    conf = np.zeros(n)
    correct = np.zeros(n, dtype=int)
    answered = np.zeros(n, dtype=bool)
    fit_s = 0.0
    propose_ms: list[float] = []
    for train_idx, test_idx in GroupKFold(n_splits=args.folds).split(calls, groups=groups):
        assert not {groups[i] for i in train_idx} & {groups[i] for i in test_idx}
        examples = [e for i in train_idx for e in call_examples(calls[i]["action"], calls[i]["params"],
                                                                 calls[i]["candidates"],
                                                                calls[i]["arguments"],
                                                                 group=calls[i]["task"])]
        t = time.perf_counter()
        model = ArgumentModel(kind=args.kind, n_estimators=args.trees, max_depth=args.depth,
                              min_confidence=args.min_confidence).fit(examples)
        fit_s += time.perf_counter() - t
        scorer = ArgumentScorer(model.spec())
        for i in test_idx:
            c = calls[i]
            t = time.perf_counter()
            p = scorer.propose(c["action"], c["params"], c["candidates"])
            propose_ms.append(1e3 * (time.perf_counter() - t))
            if p.arguments is not None:
                answered[i] = True
                conf[i] = p.confidence
                correct[i] = normalize(p.arguments) == normalize(c["arguments"])
    spec_bytes = len(msgspec.json.encode(model.spec()))
    k_ans, k_ok = int(answered.sum()), int(correct.sum())
    size = f" ({args.trees} trees of depth {args.depth})" if args.kind == "gbt" else ""
    print(f"\ngrouped {args.folds}-fold by task, {args.kind}{size}, "
          f"min_confidence {args.min_confidence}; "
          f"fit {fit_s / args.folds:.1f} s per fold; spec {spec_bytes / 1e3:.0f} kB of JSON; "
          f"propose median {statistics.median(propose_ms):.2f} ms, p99 {np.percentile(propose_ms, 99):.2f} "
          "ms")
    print(f"proposed (no required argument abstained): {fmt(k_ans, n)} of tool calls")
    print(f"exact among proposed (precision):          {fmt(k_ok, k_ans)}")
    print(f"exact over all tool calls:                 {fmt(k_ok, n)}")
    if k_ans:
        wrong = answered & (correct == 0)
        print(f"joint confidence: median when exact {np.median(conf[correct == 1]):.3f}, "
              f"when wrong {np.median(conf[wrong]) if wrong.any() else float('nan'):.3f}")
    print("\nprecision–coverage of the joint confidence (coverage over all tool calls):")
    for target in (0.90, 0.95, 0.99, 1.00):
        m, h, tau = coverage_at(conf, correct, target)
        print(f"  precision >= {target:.2f}: answered {fmt(m, n)} at τ {tau:.3f}, "
              f"precision {fmt(h, m) if m else 'n/a'}, Clopper–Pearson 95% lower bound "
              f"{lower_bound(h, m):.3f}")
    tau95 = coverage_at(conf, correct, 0.95)[2]
    print(f"\nper action: proposed, exact; at τ {tau95:.3f} (precision >= 0.95): answered, exact; "
          f"ceiling (* a WRITE tool)")
    by = Counter(c["action"] for c in calls)
    for action, k in by.most_common():
        idx = np.array([i for i, c in enumerate(calls) if c["action"] == action])
        at = idx[conf[idx] >= tau95]
        print(f"  {action + ('*' if action in writes else ''):31s} n={k:4d}  proposed "
              f"{int(answered[idx].sum()):4d}  exact {int(correct[idx].sum()):4d}  at τ {len(at):4d}  exact "
              f"{int(correct[at].sum()):4d}  ceiling {sum(reachable(calls[i]) for i in idx):4d}")


if __name__ == "__main__":
    main()
