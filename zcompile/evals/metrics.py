"""Figures of a replay: per rung and overall coverage and precision with Wilson 95% intervals and n,
complete calls, agreement, dangerous actions, latency, cost, risk–coverage, live shadow agreement."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from .. import stats
from ..router.shadow import committed, label_of, record_right, same_call
from .replay import Recorded, Replay


def rate(k: int, m: int) -> dict[str, Any]:
    """k of m with its Wilson 95% interval (`rate` None when m is 0)."""
    lo, hi = stats.wilson(k, m)
    return {"k": k, "n": m, "rate": k / m if m else None, "ci": [lo, hi]}


def percentiles(times: Sequence[float]) -> tuple[float | None, float | None]:
    if not times:
        return None, None
    return float(np.percentile(times, 50)), float(np.percentile(times, 99))


def call_correct(r: Replay) -> bool:
    """A complete output equal to the label: the same name, and for a call the same arguments as
    JSON (unknown label arguments never match)."""
    if not r.complete or r.action != r.label:
        return False
    return r.kind == "reply" or (r.label_arguments is not None and same_call(r.action, r.arguments, r.label,
                                                                             r.label_arguments))


def agreement(answered: Sequence[Replay], declined: Sequence[Replay], who: str) -> dict[str, Any]:
    """Agreement with the teacher's action or with gold (`who`) on the answered decisions that have
    one or where no offered action fits, plus the `declined` ones (not answered, none fits), which
    agree. No figure (rate None, n 0) for a rung that answered nothing."""
    if not answered:
        return rate(0, 0)
    judged = [r for r in answered if getattr(r, who) is not None or r.label is None]
    return rate(sum(r.action == getattr(r, who) for r in judged) + len(declined), len(judged) + len(declined))


def figures(handed: Sequence[Replay], answered: Sequence[Replay], n: int, times: Sequence[float],
            risky: frozenset[str], hands_on: bool = False) -> dict[str, Any]:
    """For the decisions `handed` to a rung and those it `answered`: coverage of all n, precision
    (name level) with its Wilson 95% interval, complete outputs (checked calls and text replies) and
    how many are right, replies handed on to a text tier, agreement with the teacher and with gold,
    the share not answered where no offered action fits, dangerous actions exposed and selected,
    latency p50/p99 (µs). `hands_on`: this row counts the replies the specialist handed on to a text
    tier (the specialist's and the overall row; a tier reached afterwards does not count them again)."""
    m = len(answered)
    precision = rate(sum(r.action == r.label for r in answered), m)
    fit = [r for r in answered if r.label is not None]
    took = {id(r) for r in answered}
    none_fits = [r for r in handed if r.label is None]
    declined = [r for r in none_fits if id(r) not in took]
    complete = [r for r in answered if r.complete]
    complete_precision = rate(sum(call_correct(r) for r in complete), len(complete))
    p50, p99 = percentiles(times)
    return {
        "reached": len(handed),
        "answered": m,
        "coverage": m / n if n else 0.0,
        "coverage_of_reached": m / len(handed) if handed else 0.0,
        "correct": precision["k"],
        "precision": precision["rate"],
        "precision_ci": precision["ci"],
        "complete": len(complete),
        "complete_correct": complete_precision["k"],
        "complete_coverage": len(complete) / n if n else 0.0,
        "complete_precision": complete_precision["rate"],
        "complete_precision_ci": complete_precision["ci"],
        "handed_to_text_tier": sum(r.handed_on for r in handed) if hands_on else 0,
        "agreement_teacher": agreement(answered, declined, "teacher"),
        "agreement_gold": agreement(answered, declined, "gold"),
        "precision_where_fits": rate(sum(r.action == r.label for r in fit), len(fit)),
        "abstained_where_none_fits": rate(len(declined), len(none_fits)),
        "dangerous_exposed": sum(r.exposed for r in handed),
        "dangerous_selected": sum(1 for r in answered if r.action != r.label and r.action in risky),
        "p50_us": p50,
        "p99_us": p99,
        "timed": len(times),
    }


def calls(rows: Sequence[Replay]) -> dict[str, Any]:
    """Complete tool calls (name and arguments) answered before the teacher: n is the decisions whose
    label is a tool call, coverage answered / n, precision correct / answered (a call answered
    where the teacher replied is answered and wrong)."""
    n = sum(r.label_is_call for r in rows)
    answered = [r for r in rows if r.rung != "remote" and r.kind == "call"]
    p = rate(sum(call_correct(r) for r in answered), len(answered))
    return {"n": n, "answered": len(answered), "correct": p["k"], "coverage": len(answered) / n if n else 0.0,
            "precision": p["rate"], "precision_ci": p["ci"]}


def power(answered: int, n: int, target: float, alpha: float = 0.05, power: float = 0.8) -> dict[str, Any]:
    """Whether `answered` answers of `n` decisions can support a precision claim at `target`: the answers
    (all right) a Wilson 95% lower bound ≥ target needs, the decisions that takes at this coverage, and
    the smallest precision difference (near the target, over these answers) and coverage difference
    (over these n) between two specialists a two-sided level-`alpha` test detects with `power`."""
    need = stats.answers_needed(target)
    coverage = answered / n if n else 0.0
    return {"answered": answered, "n": n, "target": target, "answers_needed": need,
            "enough": answered >= need,
            "decisions_needed": -(-need * n // answered) if answered else None,  # ceil, exactly
            "detectable_precision_difference": stats.detectable_difference(target, answered, alpha, power),
            "detectable_coverage_difference": stats.detectable_difference(coverage, n, alpha, power),
            "alpha": alpha, "power": power}


def curve(rows: Sequence[Replay], tau: float, points: int = 50) -> dict[str, Any]:
    """The specialist's risk–coverage curve on the decisions it was asked about, and the point at τ."""
    asked = [r for r in rows if r.consulted]
    conf = np.array([r.confidence for r in asked], dtype=float)
    correct = np.array([r.best is not None and r.best == r.label for r in asked], dtype=float)
    answered = (conf >= tau) & (conf > 0)
    m = int(answered.sum())
    return {
        "n": len(asked),
        "tau": tau,
        "points": stats.risk_coverage(conf, correct, points=min(points, max(1, len(asked)))),
        "at_tau": {"coverage": m / len(asked) if asked else 0.0,
                   "precision": float(correct[answered].mean()) if m else None, "answered": m},
        "aurc": stats.aurc(conf, correct) if asked else None,
        "ece": stats.ece(conf, correct) if asked else None,
    }


def cost(rows: Sequence[Replay], policy: Any) -> dict[str, Any]:
    """What sending everything to the teacher costs against the ladder: a teacher call is removed
    only by a complete, checked output (a bare name still needs the teacher for its arguments)."""
    n = len(rows)
    remote = next((t for t in policy.ir.tiers if t.name == "remote"), None) if policy is not None else None
    unit = remote.cost if remote is not None and remote.cost is not None else None
    per_call = float(unit) if unit is not None else 1.0
    removed = sum(1 for r in rows if r.rung != "remote" and r.complete)
    return {
        "unit": "remote tier cost" if unit is not None else "teacher calls",
        "per_teacher_call": per_call,
        "all_to_teacher": n * per_call,
        "with_ladder": (n - removed) * per_call,
        "saved": removed * per_call,
        "teacher_calls_removed": removed,
        "names_answered_not_removed": sum(1 for r in rows if r.rung != "remote" and r.kind == "name"),
        "cost_saved_share": removed / n if n else 0.0,
    }


def shadow(rec: Recorded) -> dict[str, Any]:
    """Live agreement of each shadow specialist with the decision recorded in its receipts (`shadow.label_of`:
    gold when present, else the action taken; receipts judged wrong are left out): asked, answered,
    coverage (answers include replies handed on to a text tier), agreement by name with its Wilson 95% interval and its one-sided Clopper–Pearson 95% lower
    bound, and answers right as whole outputs (`shadow.record_right`: a call with its arguments)."""
    out: dict[str, dict[str, Any]] = {}
    tally: dict[str, list[int]] = {}
    for r, records in rec.shadow:
        judged = label_of(r)
        if judged is None:
            continue
        label, label_args = judged
        for s in records:
            t = tally.setdefault(str(s.get("specialist")), [0, 0, 0, 0])  # asked, answered, agree, right
            t[0] += 1
            if not committed(s):
                continue
            t[1] += 1
            t[2] += s.get("action") == label
            t[3] += record_right(s, label, label_args)
    for name, (asked, answered, agree, right) in sorted(tally.items()):
        a = rate(agree, answered)
        out[name] = {"asked": asked, "answered": answered, "coverage": answered / asked if asked else 0.0,
                     "agree": agree, "agreement": a["rate"], "agreement_ci": a["ci"],
                     "lower_bound": stats.lower_bound(agree, answered), "right": right}
    return out


def row_dicts(rows: Sequence[Replay]) -> list[Mapping[str, Any]]:
    """The per-decision outcome of the replay (what the router decided), for the JSON report."""
    return [{"id": r.id, "task": r.task, "rung": r.rung, "action": r.action, "arguments": r.arguments,
             "kind": r.kind, "label": r.label, "handed_on": r.handed_on} for r in rows]
