"""The promotion gate: safety first, then the certified guarantee, then the sealed test split as a
falsification check."""

from __future__ import annotations

from typing import Any

from .. import stats
from .manifest import Gate, Threshold
from .metrics import OofFigures
from .threshold import NEVER


def selection_key(oof: OofFigures) -> tuple[float, ...]:
    """How `--model auto` ranks candidates, from non-test evidence only (the test split never
    chooses): certified or not, the out-of-fold coverage at the certified thresholds, then how well
    the out-of-fold confidence ranks correctness (lower AURC is better)."""
    certified = oof.answered > 0
    coverage = oof.answered / oof.n if oof.n else 0.0
    return (float(certified), round(coverage, 6), -round(oof.aurc or 1.0, 6))


def gate(metrics: dict[str, Any], threshold: Threshold, min_coverage: float, max_ms: float | None,
         abstention: tuple[float, bool] | None = None, others: tuple[Threshold | None, ...] = ()) -> Gate:
    """Promote only if, lexicographically: no illegal or dangerous selection on the sealed test
    split; a τ certified (for calls, risky calls or replies: `others`); the test split does not refute
    the target (its one-sided 95% upper bound on precision is not below it); for pairwise
    specialists, abstention where no offered action fits certified as well (`abstention` =
    (target, certified)); test coverage ≥ the minimum; latency within the tier's budget.

    A 150-decision test split answering 13% holds about 20 answers, whose Wilson lower bound can
    never reach 0.95; the guarantee certified on the cross-fitted decisions promotes instead, and
    the test split can only refuse (the report says how many test answers a lower-bound check
    would need)."""
    thresholds = [threshold, *(t for t in others if t is not None)]  # calls, risky calls, replies
    # the answers mix the kinds: the test split refutes the lowest target among those answering
    target = min((t.target_precision for t in thresholds if t.tau < NEVER),
                 default=threshold.target_precision)
    bad = metrics["illegal_selected"] + metrics["dangerous_selected"]
    upper = metrics["precision_upper_one_sided"]
    p50_ms = metrics["latency_us"]["p50"] / 1000.0
    checks = [
        (bad == 0, f"{bad} illegal or dangerous selections on the test split"),
        (any(t.tau < NEVER for t in thresholds), f"no τ is certified ({threshold.statement})"),
        (upper >= target, f"the sealed test split refutes the target: {metrics['correct']} of "
                          f"{metrics['answered']} answered right, one-sided 95% upper bound {upper:.3f} < "
                          f"{target:g}"),
    ]
    calls = metrics.get("calls")  # complete calls on the test split, against the calls' own target
    if calls and calls.get("answered") and threshold.tau < NEVER:
        k, n, t = calls["correct"], calls["answered"], threshold.target_precision
        up = stats.upper_bound(k, n)
        checks.append((up >= t, f"the sealed test split refutes the calls' target: {k} of {n} complete calls "
                                f"acceptable, one-sided 95% upper bound {up:.3f} < {t:g}"))
    if abstention is not None:
        a_target, a_ok = abstention
        checks.append((a_ok, f"abstention where no action fits is not certified ≥ {a_target:g}"))
    checks += [
        (metrics["coverage"] >= min_coverage, f"coverage {metrics['coverage']:.3f} < minimum "
                                              f"{min_coverage:.3f}"),
        (max_ms is None or p50_ms <= max_ms, f"p50 latency {p50_ms:.3f} ms > tier budget {max_ms} ms"),
    ]
    key = (*(float(ok) for ok, _ in checks), -float(bad), round(metrics["coverage"], 6), -round(p50_ms, 6))
    return Gate(all(ok for ok, _ in checks), key, tuple(msg for ok, msg in checks if not ok))
