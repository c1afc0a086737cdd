"""How many tool calls could any classifier of the structural state answer at a target precision?

Groups the non-test decisions (train + calibration splits; the test split stays sealed) by every
structural field of the policy's state (text fields left out, integers capped). A classifier of these
fields gives every decision of a group the same answer, so the best it can do is answer the top label
of some groups. Over groups of at least `--min-group` decisions whose top label is a tool call, two
figures: the tool calls in groups that alone reach `--purity`, and the most tool calls a classifier
answering whole groups (the purest first) can get right while its pooled precision stays ≥ `--purity`.
Both are in-sample (the labels that judge a group also define it), so optimistic for unseen tasks;
`--min-group` keeps tiny, trivially pure groups out and is a judgement, not a bound.

    python bench/calls_ceiling.py [--policy policies/airline_chat.zc] [--receipts receipts/]
"""

from __future__ import annotations

import argparse
from collections import Counter, defaultdict
from pathlib import Path

import zcompile
from zcompile.qroute import Progress, load_decisions, split_by_task
from zcompile.tools import REPLY_TAG

ROOT = Path(__file__).resolve().parent.parent


def structural_paths(policy) -> list[str]:
    return [f.path for f in policy.ir.fields if f.kind != "text"]


def value_at(state: dict, path: str, cap: int):
    v = state
    for part in path.split("."):
        v = v.get(part) if isinstance(v, dict) else None
    if isinstance(v, bool) or v is None or isinstance(v, str):
        return v
    if isinstance(v, (int, float)):
        return min(v, cap)
    return tuple(sorted(map(str, v))) if isinstance(v, list) else str(v)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--policy", default=str(ROOT / "policies" / "airline_chat.zc"))
    ap.add_argument("--receipts", default=str(ROOT / "receipts"))
    ap.add_argument("--purity", type=float, default=0.95)
    ap.add_argument("--min-group", type=int, default=5)
    ap.add_argument("--cap", type=int, default=3, help="integers above this are one value")
    a = ap.parse_args()
    policy = zcompile.compile_file(a.policy)
    replies = {x.name for x in policy.ir.actions if REPLY_TAG in x.tags}
    parts = split_by_task(load_decisions([a.receipts], policy, report=Progress()).decisions)
    pool = parts["train"] + parts["calibration"]
    paths = structural_paths(policy)
    groups: dict[tuple, list[str | None]] = defaultdict(list)
    for d in pool:
        groups[tuple(value_at(d.state, p, a.cap) for p in paths)].append(d.label)
    calls = sum(1 for d in pool if d.label is not None and d.label not in replies)
    tops = []  # (purity, size, top-label count) of each group answered with a tool call
    for labels in groups.values():
        top, k = Counter(labels).most_common(1)[0]
        if len(labels) >= a.min_group and top is not None and top not in replies:
            tops.append((k / len(labels), len(labels), k))
    sure = sum(k for purity, _, k in tops if purity >= a.purity)
    pooled = answered = right = 0
    for _, n, k in sorted(tops, reverse=True):
        answered, right = answered + n, right + k
        if right >= a.purity * answered:
            pooled = right
    print(f"{len(groups)} structural states ({len(paths)} fields) over {len(pool)} non-test decisions, "
          f"{calls} tool calls; groups of ≥ {a.min_group} with a tool call on top:\n"
          f"  in groups pure to ≥ {a.purity:g} on their own: {sure} ({sure / calls:.1%})\n"
          f"  right when answering the purest groups at pooled precision ≥ {a.purity:g}: {pooled} "
          f"({pooled / calls:.1%})")


if __name__ == "__main__":
    main()
