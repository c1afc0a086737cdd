"""Statistics for selective prediction: intervals, calibration errors, risk–coverage.

Plain Python and numpy, no SciPy: the router's live demotion rule (`router.shadow.Monitor`) and
`zc eval` use these bounds in the core install, which has no SciPy.
"""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np


def wilson(k: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Two-sided Wilson score interval for k successes of n (0, 1 when n == 0)."""
    if n == 0:
        return 0.0, 1.0
    z = NormalDist().inv_cdf(0.5 + confidence / 2)
    p = k / n
    center = (2 * n * p + z * z) / (2 * (n + z * z))
    half = z * math.sqrt(z * z + 4 * n * p * (1 - p)) / (2 * (n + z * z))
    return max(0.0, center - half), min(1.0, center + half)


def lower_bound(k: int, n: int, alpha: float = 0.05) -> float:
    """One-sided (1 - alpha) Clopper–Pearson lower bound on a proportion (0 when n == 0)."""
    if n == 0 or k == 0:
        return 0.0
    return _beta_ppf(alpha, k, n - k + 1)


def upper_bound(k: int, n: int, alpha: float = 0.05) -> float:
    """One-sided (1 - alpha) Clopper–Pearson upper bound on a proportion (1 when n == 0)."""
    if n == 0 or k == n:
        return 1.0
    return _beta_ppf(1 - alpha, k + 1, n - k)


def betainc(a: float, b: float, x: float) -> float:
    """The regularised incomplete beta function I_x(a, b) (a continued fraction, Lentz's method)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x)
                     + b * math.log1p(-x))
    if x < (a + 1) / (a + b + 2):
        return front * _beta_fraction(a, b, x) / a
    return 1.0 - front * _beta_fraction(b, a, 1.0 - x) / b


def _beta_fraction(a: float, b: float, x: float) -> float:
    tiny, eps = 1e-300, 1e-16
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    out = d
    for m in range(1, 100_000):
        for num in (m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
                    -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))):
            d = 1.0 + num * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + num / c
            c = c if abs(c) > tiny else tiny
            out *= c * d
        if abs(c * d - 1.0) < eps:
            break
    return out


def _beta_ppf(q: float, a: float, b: float) -> float:
    """x with I_x(a, b) = q, by bisection (I_x is increasing in x) to the last bit."""
    lo, hi = 0.0, 1.0
    for _ in range(200):
        mid = (lo + hi) / 2
        if mid in (lo, hi):
            break
        if betainc(a, b, mid) < q:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def answers_needed(target: float, confidence: float = 0.95, method: str = "wilson",
                   limit: int = 100_000) -> int:
    """The fewest answers, all right, whose lower bound reaches `target`: the two-sided Wilson interval's
    at `confidence` (`wilson`), or the one-sided Clopper–Pearson bound at `confidence` (`clopper-pearson`)."""
    def low(n: int) -> float:
        return wilson(n, n, confidence)[0] if method == "wilson" else lower_bound(n, n, 1 - confidence)

    lo, hi = 1, 1
    while low(hi) < target and hi < limit:
        lo, hi = hi, hi * 2
    while lo < hi:  # the bound grows with n (all right): the first n that reaches the target
        mid = (lo + hi) // 2
        lo, hi = (mid + 1, hi) if low(mid) < target else (lo, mid)
    return hi


def tasks_needed(clean: int, tasks: int, target: float, alpha: float = 0.05, limit: int = 1_000_000) -> int:
    """How many more clean tasks (every answer of the kind acceptable) the one-sided (1 - alpha)
    Clopper–Pearson lower bound over tasks needs to reach `target`, from `clean` of `tasks`: 0 when
    it already does. With every task clean the bound is alpha^(1/n), so from none a target p needs
    ceil(ln alpha / ln p) of them (59 at 0.95)."""
    def reaches(m: int) -> bool:
        return lower_bound(clean + m, tasks + m, alpha) >= target

    if reaches(0):
        return 0
    lo, hi = 0, 1
    while not reaches(hi):
        if hi >= limit:
            return limit
        lo, hi = hi, hi * 2
    while hi - lo > 1:  # reaches(hi), not reaches(lo): the bound grows with every clean task
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if reaches(mid) else (mid, hi)
    return hi


def reliability(confidence: np.ndarray, correct: np.ndarray, bins: int = 10) -> list[dict]:
    """The reliability diagram's bins: equal-width confidence bins (as `ece`), each with its n, mean
    confidence, observed precision and that precision's Wilson 95% interval; empty bins left out."""
    edges = np.linspace(0.0, 1.0, bins + 1)
    which = np.clip(np.digitize(confidence, edges[1:-1], right=True), 0, bins - 1)
    out = []
    for b in range(bins):
        m = which == b
        n = int(m.sum())
        if n:
            k = int(round(float(correct[m].sum())))
            out.append({"lo": float(edges[b]), "hi": float(edges[b + 1]), "n": n, "k": k,
                        "confidence": float(confidence[m].mean()), "precision": k / n,
                        "ci": list(wilson(k, n))})
    return out


def detectable_difference(p: float, n: int, alpha: float = 0.05, power: float = 0.8) -> float | None:
    """The smallest difference between two proportions near `p`, each measured on `n` independent
    decisions, that a two-sided level-`alpha` z-test detects with probability `power` (normal
    approximation: (z_{1-alpha/2} + z_power) * sqrt(2 p (1 - p) / n)); None when n is 0."""
    from statistics import NormalDist

    if n <= 0:
        return None
    z = NormalDist().inv_cdf(1 - alpha / 2) + NormalDist().inv_cdf(power)
    return float(z * np.sqrt(2 * p * (1 - p) / n))


def brier(probs: np.ndarray, labels: np.ndarray) -> float:
    """Multi-class Brier score: mean over rows of the squared distance to the one-hot label."""
    if len(labels) == 0:
        return float("nan")
    onehot = np.zeros_like(probs)
    onehot[np.arange(len(labels)), labels] = 1.0
    return float(np.mean(np.sum((probs - onehot) ** 2, axis=1)))


def ece(confidence: np.ndarray, correct: np.ndarray, bins: int = 10) -> float:
    """Top-label expected calibration error over equal-width confidence bins."""
    if len(confidence) == 0:
        return float("nan")
    edges = np.linspace(0.0, 1.0, bins + 1)
    which = np.clip(np.digitize(confidence, edges[1:-1], right=True), 0, bins - 1)
    total = 0.0
    for b in range(bins):
        m = which == b
        if m.any():
            total += m.sum() / len(confidence) * abs(correct[m].mean() - confidence[m].mean())
    return float(total)


def risk_coverage(confidence: np.ndarray, correct: np.ndarray, points: int = 20) -> list[dict]:
    """Coverage and precision when answering the top q of decisions by confidence, q = 1/points … 1."""
    n = len(confidence)
    if n == 0:
        return []
    order = np.argsort(-confidence, kind="stable")
    hits = np.cumsum(correct[order])
    out = []
    for i in range(1, points + 1):
        m = max(1, round(n * i / points))
        out.append({"coverage": m / n, "threshold": float(confidence[order][m - 1]),
                    "precision": float(hits[m - 1] / m), "answered": int(m)})
    return out


def aurc(confidence: np.ndarray, correct: np.ndarray) -> float:
    """Area under the risk–coverage curve (lower is better)."""
    n = len(confidence)
    if n == 0:
        return float("nan")
    order = np.argsort(-confidence, kind="stable")
    risk = np.cumsum(1 - correct[order]) / np.arange(1, n + 1)
    return float(risk.mean())
