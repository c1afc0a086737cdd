"""Figures of a specialist on scored decisions: coverage, precision with intervals, calibration,
selections."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import msgspec
import numpy as np

from .. import stats
from ..receipts.candidates import GROUNDINGS
from ..receipts.judge import accepts, strict
from .dataset import LoggedDecision

if TYPE_CHECKING:
    from ..runtime import Policy

RISKY_TAGS = frozenset({"destructive", "publish", "money", "credential"})


# The out-of-fold figures (`pipeline`): built as Structs, stored in the manifest's metrics as builtins
# (`dataset.plain`), their fields in the order the manifest's JSON holds them.
class GroundingFigures(msgspec.Struct, frozen=True):
    """Out-of-fold complete calls of one grounding: how many and right, and at τ answered and right."""

    calls: int
    correct: int
    precision_ci: list[float]
    answered: int
    answered_correct: int


class WorstTask(msgspec.Struct, frozen=True):
    """The task answered worst at τ (lowest precision, then most answers)."""

    task: str
    answered: int
    correct: int
    precision_ci: list[float]


class TaskFigures(msgspec.Struct, frozen=True):
    """Out-of-fold answers of one kind (calls, replies) at τ by task."""

    tasks_answered: int
    tasks_clean: int
    worst: WorstTask | None


class NameFigures(msgspec.Struct, frozen=True):
    """Step 7's out-of-fold figures of a specialist that answers names only."""

    n: int
    source: str
    answered: int
    correct: int
    lower_bound: float
    ece: float
    aurc: float
    none_fits: int
    abstained_where_none_fits: int
    abstention_certified: bool


class CallFigures(msgspec.Struct, frozen=True):
    """Step 7's out-of-fold figures of a specialist that answers complete calls and replies."""

    n: int
    source: str
    answered: int
    correct: int
    strict_correct: int
    lower_bound: float
    calls_complete: int
    risky_calls_complete: int
    names_incomplete: int
    replies: int
    ece: float
    aurc: float
    grounding: dict[str, GroundingFigures]
    tasks: dict[str, TaskFigures]


OofFigures = NameFigures | CallFigures


def risky_actions(policy: Policy | None) -> frozenset[str]:
    if policy is None:
        return frozenset()
    return frozenset(a.name for a in policy.ir.actions if RISKY_TAGS & set(a.tags))


def evaluate(best: Sequence[str | None], conf: np.ndarray, correct: np.ndarray,
             decisions: Sequence[LoggedDecision], answered: np.ndarray, risky: frozenset[str],
             probs: np.ndarray | None = None, labels: np.ndarray | None = None) -> dict[str, Any]:
    """Figures of decisions with their best output, its confidence, whether it was answered (its
    threshold reached) and whether it is right. Decisions where no action fits (label None) are
    counted apart: answering one is wrong. `probs`/`labels` (classifiers) add the Brier score."""
    n = len(decisions)
    conf = np.asarray(conf, dtype=np.float64)
    correct = np.asarray(correct, dtype=bool)
    has = np.array([b is not None for b in best], dtype=bool)
    answered = np.asarray(answered, dtype=bool) & has
    k, m = int(correct[answered].sum()), int(answered.sum())
    fits = np.array([d.label is not None for d in decisions], dtype=bool)
    none = ~fits
    kf, mf = int((correct & answered & fits).sum()), int((answered & fits).sum())
    abst = int((~answered & none).sum())
    top = np.where(np.isfinite(conf), conf, 0.0)
    per_action: dict[str, dict] = {}
    for i in np.flatnonzero(answered):
        row = per_action.setdefault(str(best[i]), {"answered": 0, "correct": 0})
        row["answered"] += 1
        row["correct"] += int(correct[i])
    per_intent: dict[str, dict] = {}
    for i, d in enumerate(decisions):
        row = per_intent.setdefault(d.intent or "(none)", {"n": 0, "answered": 0, "correct": 0})
        row["n"] += 1
        row["answered"] += int(answered[i])
        row["correct"] += int(answered[i] and correct[i])
    out = {
        "n": n, "answered": m, "correct": k,
        "coverage": m / n if n else 0.0,
        "precision": k / m if m else None,
        "precision_ci": list(stats.wilson(k, m)),
        "precision_upper_one_sided": stats.upper_bound(k, m),
        "label_not_legal": sum(1 for d in decisions if d.label is not None and d.label not in d.legal),
        "illegal_selected": sum(1 for i in np.flatnonzero(answered) if best[i] not in decisions[i].legal),
        "dangerous_selected": sum(1 for i in np.flatnonzero(answered) if best[i] in risky and not correct[i]),
        "dangerous_exposed": sum(1 for d in decisions if any(a in risky for a in d.legal)),
        "accuracy_top1": float(correct[fits].mean()) if fits.any() else None,
        "ece": stats.ece(top, correct.astype(float)),
        "aurc": stats.aurc(top, correct.astype(float)),
        "risk_coverage": stats.risk_coverage(top, correct.astype(float)),
        "per_action": dict(sorted(per_action.items())),
        "per_intent": per_intent,
        "n_fits": int(fits.sum()),
        "answered_where_fits": mf,
        "coverage_where_fits": float(answered[fits].mean()) if fits.any() else None,
        "precision_where_fits": kf / mf if mf else None,
        "precision_where_fits_ci": list(stats.wilson(kf, mf)),
        "n_none_fits": int(none.sum()),
        "abstained_where_none_fits": abst / int(none.sum()) if none.any() else None,
        "abstained_where_none_fits_ci": list(stats.wilson(abst, int(none.sum()))),
    }
    if probs is not None and labels is not None:
        valid = labels >= 0
        out["brier"] = stats.brier(probs[valid], labels[valid])
    return out


def _share(k: int, m: int, n: int) -> dict[str, Any]:
    return {"n": n, "answered": m, "correct": k, "coverage": m / n if n else 0.0,
            "precision": k / m if m else None, "precision_ci": list(stats.wilson(k, m))}


def answer_right(answer: Any, decision: LoggedDecision, *, judge: Any = None) -> bool:
    """Whether an answered output is acceptable (`receipts.judge.accepts`; `judge=strict`: equal to the
    teacher's own step): a complete call by its action and JSON-normalised arguments; a reply or a
    name by its action."""
    if answer.action is None:
        return False
    return (judge or accepts)(decision.acceptable, answer.action, answer.arguments, frozenset(),
                              names=answer.kind != "call")


def call_figures(answers: Sequence[Any], decisions: Sequence[LoggedDecision], sig: Any) -> dict[str, Any]:
    """Complete calls and text replies counted apart (`Answer.kind`): `calls` over the decisions where
    the teacher called a tool (right: same action and JSON-normalised arguments), `replies` over
    those where it replied (answered: handed to a text tier, which writes the text), and
    `teacher_calls_removed`: complete, checked calls answered locally."""
    tool = [i for i, d in enumerate(decisions) if d.label is not None and not sig.is_reply(d.label)]
    reply = [i for i, d in enumerate(decisions) if sig.is_reply(d.label)]
    call_ans = [i for i, a in enumerate(answers) if a.action is not None and a.kind == "call"]
    reply_ans = [i for i, a in enumerate(answers) if a.action is not None and a.kind == "reply"]
    call_ok = sum(1 for i in call_ans if answer_right(answers[i], decisions[i]))
    call_strict = sum(1 for i in call_ans if answer_right(answers[i], decisions[i], judge=strict))
    reply_ok = sum(1 for i in reply_ans if answers[i].action == decisions[i].label)
    off = len(call_ans) + len(reply_ans)
    return {"calls": _share(call_ok, len(call_ans), len(tool)) | {"decisions": len(tool),
                                                                  "strict": _share(call_strict, len(
                                                                      call_ans), len(tool))},
            "replies": _share(reply_ok, len(reply_ans), len(reply)) | {"handed_to_text_tier": len(reply_ans)},
            "off_teacher": _share(call_ok + reply_ok, off, len(decisions))
            | {"strict": _share(call_strict + reply_ok, off, len(decisions))},
            "names_incomplete": sum(1 for a in answers if a.kind == "name" and a.best is not None),
            "teacher_calls_removed": len(call_ans)}


def grounding_figures(grounded: np.ndarray, is_call: np.ndarray, correct: np.ndarray,
                       answered: np.ndarray) -> dict[str, GroundingFigures]:
    """Out-of-fold complete calls by the grounding of their arguments: how many, how many right, and
    at τ how many answered and right."""
    out: dict[str, GroundingFigures] = {}
    for g in GROUNDINGS:
        m = is_call & (grounded == g)
        if m.any():
            k, n, ka, na = (int((m & correct).sum()), int(m.sum()), int((m & answered & correct).sum()),
                            int((m & answered).sum()))
            out[g] = GroundingFigures(calls=n, correct=k, precision_ci=list(stats.wilson(k, n)), answered=na,
                                      answered_correct=ka)
    return out


def task_figures(tasks: np.ndarray, is_call: np.ndarray, is_reply: np.ndarray, correct: np.ndarray,
                  answered: np.ndarray) -> dict[str, TaskFigures]:
    """Out-of-fold answers at τ by task, for calls and for replies: tasks answered, tasks clean (every
    answer right), and the worst task (lowest precision, then most answers) with its Wilson interval."""
    out = {}
    for what, mask in (("calls", is_call & answered), ("replies", is_reply & answered)):
        per: dict[str, list[int]] = {}
        for t, ok in zip(tasks[mask], correct[mask]):
            per.setdefault(str(t), [0, 0])[0] += bool(ok)
            per[str(t)][1] += 1
        worst = min(per.items(), key=lambda kv: (kv[1][0] / kv[1][1], -kv[1][1], kv[0]), default=None)
        out[what] = TaskFigures(
            tasks_answered=len(per), tasks_clean=sum(k == n for k, n in per.values()),
            worst=None if worst is None else WorstTask(
                task=worst[0], answered=worst[1][1], correct=worst[1][0],
                precision_ci=list(stats.wilson(worst[1][0], worst[1][1]))))
    return out
