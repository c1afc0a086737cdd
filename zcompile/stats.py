"""Statistics for selective prediction: intervals, calibration errors, risk–coverage."""

from __future__ import annotations

import numpy as np
from scipy import stats as _st


def wilson(k: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Two-sided Wilson score interval for k successes of n (0, 1 when n == 0)."""
    if n == 0:
        return 0.0, 1.0
    ci = _st.binomtest(k, n).proportion_ci(confidence_level=confidence, method="wilson")
    return float(ci.low), float(ci.high)


def lower_bound(k: int, n: int, alpha: float = 0.05) -> float:
    """One-sided (1 - alpha) Clopper–Pearson lower bound on a proportion (0 when n == 0)."""
    if n == 0 or k == 0:
        return 0.0
    return float(_st.beta.ppf(alpha, k, n - k + 1))


def upper_bound(k: int, n: int, alpha: float = 0.05) -> float:
    """One-sided (1 - alpha) Clopper–Pearson upper bound on a proportion (1 when n == 0)."""
    if n == 0 or k == n:
        return 1.0
    return float(_st.beta.ppf(1 - alpha, k + 1, n - k))


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
