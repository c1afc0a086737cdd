"""Calibration outside ONNX: temperature over the legal classes (classifiers), Platt scaling (pairwise)."""

from __future__ import annotations

import math

import numpy as np
from scipy.optimize import minimize, minimize_scalar
from scipy.special import expit

from .specialist import masked_confidence

# Both fits run to the optimum itself, not to the first point an optimiser's default tolerance accepts:
# the last bits of numpy's and BLAS's sums differ between CPUs, and a loose stop turns those into
# differences in the 7th digit (a Platt scaling stopped by L-BFGS-B's default ftol, with numerical
# gradients, moved by 8e-7 under another OpenBLAS kernel). Converged this tightly, what remains is
# at the scale of the sums' own rounding, far inside `reproduce.REL_TOL`.
XATOL = 1e-10  # on log T (bounded Brent)
GTOL = 1e-10  # projected gradient of the Platt NLL (exact gradient)
L2 = 1e-3  # the Platt fit's slight L2 on (1/T, b)


def fit_temperature(probs: np.ndarray, class_index: np.ndarray, masks: np.ndarray, labels: np.ndarray) -> float:
    """The temperature minimising the masked negative log-likelihood of the teacher's actions."""
    usable = labels >= 0
    if not usable.any():
        return 1.0

    def nll(log_t: float) -> float:
        conf = masked_confidence(probs[usable], class_index, masks[usable], math.exp(log_t))
        p = conf[np.arange(usable.sum()), labels[usable]]
        return float(-np.mean(np.log(np.clip(p, 1e-12, 1.0))))

    res = minimize_scalar(nll, bounds=(math.log(0.05), math.log(20.0)), method="bounded",
                          options={"xatol": XATOL})
    return float(math.exp(res.x))


def fit_platt(z: np.ndarray, correct: np.ndarray) -> tuple[float, float]:
    """(temperature, bias) minimising the NLL of `correct` under sigmoid(z / T + b) (slight L2 on 1/T, b)."""
    ok = np.isfinite(z)
    z, c = z[ok], correct[ok].astype(float)
    if len(z) == 0:
        return 1.0, 0.0

    def nll(w: np.ndarray) -> tuple[float, np.ndarray]:
        a, b = w
        s = a * z + b
        loss = np.mean(c * np.logaddexp(0.0, -s) + (1 - c) * np.logaddexp(0.0, s)) + L2 * (a * a + b * b)
        g = expit(s) - c  # d loss / d s, per row
        return float(loss), np.array([np.mean(g * z) + 2 * L2 * a, np.mean(g) + 2 * L2 * b])

    res = minimize(nll, x0=np.array([1.0, 0.0]), jac=True, method="L-BFGS-B",
                   bounds=[(1e-3, 50.0), (-50.0, 50.0)], options={"ftol": 0.0, "gtol": GTOL, "maxiter": 1000})
    a, b = res.x
    return float(1.0 / a), float(b)
