"""Calibration outside ONNX: temperature over the legal classes (classifiers), Platt scaling (pairwise)."""

from __future__ import annotations

import math

import numpy as np
from scipy.optimize import minimize, minimize_scalar

from .specialist import masked_confidence


def fit_temperature(probs: np.ndarray, class_index: np.ndarray, masks: np.ndarray,
                    labels: np.ndarray) -> float:
    """The temperature minimising the masked negative log-likelihood of the teacher's actions."""
    usable = labels >= 0
    if not usable.any():
        return 1.0

    def nll(log_t: float) -> float:
        conf = masked_confidence(probs[usable], class_index, masks[usable], math.exp(log_t))
        p = conf[np.arange(usable.sum()), labels[usable]]
        return float(-np.mean(np.log(np.clip(p, 1e-12, 1.0))))

    res = minimize_scalar(nll, bounds=(math.log(0.05), math.log(20.0)), method="bounded")
    return float(math.exp(res.x))


def fit_platt(z: np.ndarray, correct: np.ndarray) -> tuple[float, float]:
    """(temperature, bias) minimising the NLL of `correct` under sigmoid(z / T + b) (slight L2 on 1/T, b)."""
    ok = np.isfinite(z)
    z, c = z[ok], correct[ok].astype(float)
    if len(z) == 0:
        return 1.0, 0.0

    def nll(w):
        a, b = w
        p = np.clip(1 / (1 + np.exp(-(a * z + b))), 1e-9, 1 - 1e-9)
        return -np.mean(c * np.log(p) + (1 - c) * np.log(1 - p)) + 1e-3 * (a * a + b * b)

    res = minimize(nll, x0=np.array([1.0, 0.0]), method="L-BFGS-B", bounds=[(1e-3, 50.0), (-50.0, 50.0)])
    a, b = res.x
    return float(1.0 / a), float(b)
