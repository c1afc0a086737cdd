"""The abstention threshold τ with a named guarantee: Learn-then-Test (default) or conformal selection.

The unit of evidence is a decision, or a task (`tasks=`): decisions of one task are not exchangeable
with another's (a specialist's errors come in whole tasks), while tasks are, so a statement about the
tasks a deployment meets next counts tasks. A task is *answered* at τ when some decision of it is,
and *clean* when every decision answered at τ is right; its precision is at least 1 when clean, so a
bound on the share of clean tasks bounds a new task's expected precision from below."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.stats import binom

from .manifest import NEVER  # a τ above every confidence: the specialist always abstains

DELTA = 0.05  # 1 - the confidence of the guarantee
GUARANTEES = ("ltt", "conformal")
GRID = 200  # at most this many thresholds are tested (evenly spaced in the number answered)


UNITS = ("task", "decision")


@dataclass(frozen=True)
class Choice:
    """τ and the evidence behind it: decisions scored, answered and correct at τ; with tasks as the
    unit also tasks scored, answered and clean at τ, and how many more clean tasks would certify."""

    tau: float
    n: int
    answered: int
    correct: int
    guarantee: str
    statement: str
    unit: str = "decision"
    tasks: int = 0
    tasks_answered: int = 0
    tasks_clean: int = 0
    needs_tasks: int = 0  # clean answered tasks missing for any τ to qualify (0: enough, or one qualified)


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


def _task_levels(conf: np.ndarray, correct: np.ndarray, tasks: np.ndarray, floor: float):
    """Distinct thresholds (descending) with, at each, the tasks answered and the tasks clean (and the
    decisions answered and correct). Task t is answered at τ when τ ≤ its highest confidence, clean
    when τ is above every confidence of its wrong decisions."""
    taus, answered, hits = _levels(conf, correct, floor)
    keep = (conf > 0) & (conf >= floor)
    names, idx = np.unique(tasks[keep], return_inverse=True)
    top = np.full(len(names), -np.inf)
    np.maximum.at(top, idx, conf[keep])
    worst = np.full(len(names), -np.inf)  # the highest confidence of a wrong decision
    wrong = ~correct[keep].astype(bool)
    np.maximum.at(worst, idx[wrong], conf[keep][wrong])
    asc_top, asc_worst = np.sort(top), np.sort(worst)
    t_answered = len(names) - np.searchsorted(asc_top, taus, side="left")
    t_unclean = len(names) - np.searchsorted(asc_worst, taus, side="left")
    return taus, answered, hits, t_answered, t_answered - t_unclean


def _phrase(unit: str, n_all: int, n_tasks: int) -> str:
    return f"{n_tasks} tasks, {n_all} decisions" if unit == "task" else f"n = {n_all}"


def _task_choice(conf: np.ndarray, correct: np.ndarray, tasks: np.ndarray, target: float, delta: float,
                 floor: float, guarantee: str) -> Choice:
    """τ certified with tasks as the unit: Learn-then-Test over the share of clean tasks (fixed-sequence,
    exact binomial p-values) or conformal selection over tasks (the expected share of answered new tasks
    that are not clean ≤ 1 - target)."""
    n_all = len(conf)
    n_tasks = len(np.unique(tasks))
    taus, answered, hits, t_ans, t_clean = _task_levels(conf, correct, tasks, floor)
    if guarantee == "ltt":
        statement = (f"a new task's answers at τ are all right with probability ≥ {target:g}, so its "
                     f"precision is ≥ {target:g} in expectation, with {1 - delta:.4g} confidence "
                     "(Learn-then-Test over tasks, fixed-sequence, exact binomial p-values; "
                     f"{_phrase('task', n_all, n_tasks)})")
        need = min_answers(target, delta)
        start = int(np.searchsorted(t_ans, need))
        j = None
        if start < len(taus):
            from mapie.risk_control import control_fwer

            rejected = control_fwer(p_values(t_clean[start:], t_ans[start:], target), delta,
                                    fwer_method="fixed_sequence")
            j = start + int(np.max(rejected)) if len(rejected) else None
    else:
        q = 1.0 - target
        statement = (f"expected share of answered new tasks with a wrong answer ≤ {q:.3g} (conformal "
                     "selection over tasks, Benjamini–Hochberg over conformal p-values; "
                     f"{_phrase('task', n_all, n_tasks)})")
        # with no task unclean, (1 + 0) · n / ((n + 1) · answered) ≤ q needs this many answered tasks (of at
        # least 1/q - 1 tasks in all: fewer cannot qualify however many are answered)
        m = max(n_tasks, math.ceil(1 / q - 1)) if q > 0 else n_tasks
        need = math.ceil(m / ((m + 1) * q)) if q > 0 else 0
        ok = np.flatnonzero((1 + (t_ans - t_clean)) * n_tasks <= q * (n_tasks + 1) * np.maximum(t_ans, 1))
        ok = ok[t_ans[ok] > 0]
        j = int(ok.max()) if len(ok) else None
    if j is not None:
        return Choice(float(taus[j]), n_all, int(answered[j]), int(hits[j]), guarantee, statement, "task",
                      n_tasks, int(t_ans[j]), int(t_clean[j]))
    most = int(t_clean.max()) if len(t_clean) else 0
    more = max(need - most, 1)
    return Choice(NEVER, n_all, 0, 0, guarantee, statement + "; no τ qualifies, so the specialist abstains "
                                                             f"on everything: it needs {need} clean answered "
                                                             f"tasks, {more} more than the {most} at best "
                                                             "here",
                  "task", n_tasks, 0, 0, more)


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
           floor: float = 0.0, tasks: np.ndarray | None = None) -> Choice:
    """τ for precision ≥ `target` under `guarantee`; with `tasks` (each decision's task), tasks are the
    unit of evidence (`_task_choice`), else decisions."""
    if guarantee not in GUARANTEES:
        raise ValueError(f"unknown guarantee `{guarantee}` (choose {' or '.join(GUARANTEES)})")
    if tasks is not None:
        return _task_choice(conf, correct, np.asarray(tasks), target, delta, floor, guarantee)
    if guarantee == "ltt":
        return learn_then_test(conf, correct, target, delta, floor)
    return conformal_selection(conf, correct, target, delta, floor)


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
