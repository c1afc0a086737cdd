"""The abstention threshold τ with a named guarantee: Learn-then-Test (default) or conformal selection."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.stats import binom

from .manifest import NEVER  # a τ above every confidence: the specialist always abstains

DELTA = 0.05  # 1 - the confidence of the guarantee
GUARANTEES = ("ltt", "conformal")
GRID = 200  # at most this many thresholds are tested (evenly spaced in the number answered)


@dataclass(frozen=True)
class Choice:
    """τ and the evidence behind it: decisions scored, answered and correct at τ."""

    tau: float
    n: int
    answered: int
    correct: int
    guarantee: str
    statement: str


def min_answers(target: float, delta: float = DELTA) -> int:
    """The fewest answers (all correct) that can certify precision ≥ target at confidence 1 - delta."""
    return math.ceil(math.log(delta) / math.log(target))


def p_values(k: np.ndarray, n: np.ndarray, target: float) -> np.ndarray:
    """Exact binomial p-values of H0 "precision < target" given k correct of n answered:
    P(Binom(n, target) ≥ k), the largest such probability over the null."""
    return binom.sf(k - 1, n, target)


def _levels(conf: np.ndarray, correct: np.ndarray, floor: float):
    """Distinct thresholds (descending) with the answered and correct counts at each."""
    keep = (conf > 0) & (conf >= floor)
    order = np.argsort(-conf[keep], kind="stable")
    c, ok = conf[keep][order], correct[keep][order].astype(np.int64)
    if not len(c):
        return c, np.zeros(0, np.int64), np.zeros(0, np.int64)
    last = np.r_[c[1:] != c[:-1], True]  # the last row of each run of equal confidences
    return c[last], (np.flatnonzero(last) + 1), np.cumsum(ok)[last]


def learn_then_test(conf: np.ndarray, correct: np.ndarray, target: float, delta: float = DELTA,
                    floor: float = 0.0) -> Choice:
    """Learn-then-Test (Angelopoulos et al. 2021) with fixed-sequence testing.

    Thresholds are tested from the highest down, starting at the first that answers enough
    decisions to be certifiable at all (`min_answers`), on a grid chosen from the confidences alone
    (never the labels). Each H0 "precision at τ < target" gets an exact binomial p-value; MAPIE's
    fixed-sequence procedure rejects them in order while p ≤ delta. The lowest rejected τ is
    returned: with probability ≥ 1 - delta (over the calibration draw) its precision is ≥ target.
    """
    from mapie.risk_control import control_fwer

    n_all = len(conf)
    taus, answered, hits = _levels(conf, correct, floor)
    start = int(np.searchsorted(answered, min_answers(target, delta)))
    taus, answered, hits = taus[start:], answered[start:], hits[start:]
    if len(taus) > GRID:  # evenly spaced in the number answered, chosen without labels
        pick = np.unique(np.linspace(0, len(taus) - 1, GRID).round().astype(int))
        taus, answered, hits = taus[pick], answered[pick], hits[pick]
    statement = (f"precision ≥ {target:g} with {1 - delta:.4g} confidence (Learn-then-Test, fixed-sequence, "
                 f"exact binomial p-values; n = {n_all})")
    if len(taus):
        rejected = control_fwer(p_values(hits, answered, target), delta, fwer_method="fixed_sequence")
        if len(rejected):
            j = int(np.max(rejected))
            return Choice(float(taus[j]), n_all, int(answered[j]), int(hits[j]), "ltt", statement)
    return Choice(NEVER, n_all, 0, 0, "ltt", statement + "; no τ qualifies, so the specialist abstains on "
                                                         "everything")


def conformal_selection(conf: np.ndarray, correct: np.ndarray, target: float, delta: float = DELTA,
                        floor: float = 0.0) -> Choice:
    """Conformal selection (Jin & Candès 2023): the smallest τ whose conformal estimate of the
    false-discovery rate among answered decisions, (1 + wrong answered at τ) · n / ((n + 1) ·
    answered at τ), is ≤ 1 - target. This is the Benjamini–Hochberg threshold of the conformal
    p-values, so the *expected* share of wrong answers is ≤ 1 - target (a guarantee in expectation,
    weaker than Learn-then-Test's high-probability bound, and it needs far fewer decisions)."""
    n_all = len(conf)
    taus, answered, hits = _levels(conf, correct, floor)
    q = 1.0 - target
    statement = (f"expected false-discovery rate ≤ {q:.3g} (conformal selection, Benjamini–Hochberg over "
                 f"conformal p-values; n = {n_all})")
    if len(taus):
        fdr = (1 + (answered - hits)) * n_all / ((n_all + 1) * answered)
        ok = np.flatnonzero(fdr <= q)
        if len(ok):
            j = int(ok.max())
            return Choice(float(taus[j]), n_all, int(answered[j]), int(hits[j]), "conformal", statement)
    return Choice(NEVER, n_all, 0, 0, "conformal", statement + "; no τ qualifies, so the specialist abstains "
                                                               "on everything")


def choose(conf: np.ndarray, correct: np.ndarray, target: float, guarantee: str = "ltt", delta: float = DELTA,
           floor: float = 0.0) -> Choice:
    if guarantee == "ltt":
        return learn_then_test(conf, correct, target, delta, floor)
    if guarantee == "conformal":
        return conformal_selection(conf, correct, target, delta, floor)
    raise ValueError(f"unknown guarantee `{guarantee}` (choose {' or '.join(GUARANTEES)})")


def abstention_floor(conf_none: np.ndarray, target: float, delta: float = DELTA) -> float | None:
    """Pairwise specialists: the lowest τ at which abstaining where no offered action fits keeps a
    one-sided (1 - delta) Clopper–Pearson lower bound ≥ target; None when no τ does."""
    from .. import stats

    n = len(conf_none)
    if n == 0 or target <= 0:
        return 0.0
    c = np.sort(conf_none)[::-1]
    m = next((m for m in range(n, -1, -1) if stats.lower_bound(n - m, n, delta) >= target), None)
    if m is None:
        return None
    return float(np.nextafter(c[m], np.inf)) if m < n else 0.0
