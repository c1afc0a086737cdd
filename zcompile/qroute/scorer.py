"""`zc local calibrate`: the scorer rung's τ certified on receipts of tasks outside the specialist's test
split, with the specialist's machinery and guarantee statement (`threshold.choose`)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import ZcError
from ..inputs import sha256_file
from ..receipts.candidates import same_call
from ..router import Router
from ..tiers.scorer import FORMAT, Calibration, ScorerTier
from . import threshold
from .dataset import QUIET, Progress, stream


def decisions(paths: Sequence[str | Path], policy: Any, manifest: Any,
              per_task: int) -> list[tuple[Any, Any]]:
    """The first `per_task` decisions (in receipt order, never chosen by label) of each task the
    specialist was trained or calibrated on, with the arguments each receipt recorded: none of its
    test split, which `zc arms` and `zc eval` report on."""
    from ..router.shadow import receipt_arguments

    trained = set(manifest.splits.train.tasks) | set(manifest.splits.calibration.tasks)
    taken: Counter[str] = Counter()
    out = []
    for r, d in stream([str(p) for p in paths], policy, Counter()):
        if d is not None and d.task in trained and taken[d.task] < per_task:
            taken[d.task] += 1
            out.append((d, receipt_arguments(r)))
    if not out:
        raise ZcError("no decision of a task outside the specialist's test split in these receipts")
    return out


def right(ans: Any, d: Any, recorded: Any, replies: frozenset[str]) -> bool:
    """Whether the scorer's pick is the label's (gold, else the teacher's): the same reply action (handed on
    to a rung that writes it), or the teacher's call with the same arguments (`same_call`)."""
    if ans.action is None or ans.action != d.label:
        return False
    if ans.action in replies:
        return True
    if d.label != d.teacher:  # a gold label: its arguments are not known
        return False
    label_args = d.arguments if d.arguments is not None else recorded
    return ans.kind == "call" and label_args is not None and same_call(ans.action, ans.arguments, d.label,
                                                                        label_args)


def calibrate(policy: Any, rows: Sequence[tuple[Any, Any]], scorer: ScorerTier, *, target: float,
              guarantee: str = "ltt", unit: str = "task", receipts: Sequence[str] = (),
              progress: Progress = QUIET) -> Calibration:
    """Score every decision at τ = 0 (the scorer answers all), then certify τ for precision ≥ `target`.
    A decision the compiler answers alone is not the scorer's and is left out; a pick `Policy.check`
    refuses is never answered (confidence 0)."""
    if unit not in threshold.UNITS:
        raise ZcError(f"unknown unit `{unit}` (choose {' or '.join(threshold.UNITS)})")
    scorer.tau = 0.0
    router = Router(policy, tiers={scorer.name: scorer}, ladder=(scorer.name,), budgets=False)
    replies = router.catalog.replies
    conf, ok, tasks = [], [], []
    for d, recorded in progress.bar(rows, "scoring decisions", len(rows)):
        dec = router.decide(d.state, d.intent, task=d.task, candidates=d.candidates, offer=d.offer)
        ans = next((a for a in dec.rungs if a.rung == scorer.name), None)
        if ans is None:
            continue
        usable = ans.answered or ans.cause == "handed_on"
        conf.append(float(ans.confidence or 0.0) if usable else 0.0)
        ok.append(usable and right(ans, d, recorded, replies))
        tasks.append(d.task)
    if not conf:
        raise ZcError("the compiler answered every decision alone: nothing for the scorer to calibrate on")
    c = threshold.choose(np.asarray(conf), np.asarray(ok), target, guarantee,
                         tasks=np.asarray(tasks) if unit == "task" else None)
    statement = c.statement.replace("the specialist", "the scorer")
    return Calibration(FORMAT, scorer.path.name, sha256_file(scorer.path), policy.sha256, c.tau, target,
                       guarantee, c.unit, statement, c.n, c.answered, c.correct, int(sum(ok)), c.tasks,
                       c.tasks_answered, c.tasks_clean, list(receipts), sorted(set(tasks)))
