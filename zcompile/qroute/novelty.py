"""Novelty: how far a state's feature row lies from the rows a tabular specialist was trained on, and its cut.

The score (version 1) of a feature row x: centre it on the training mean (d = x − mean), project it
on the first `COMPONENTS` principal directions of the training rows (p = C d), and take

    novelty(x) = sqrt(min over training rows r of |p − C(r − mean)|² + |d|² − |p|²)

the distance to the nearest training row within those directions plus the part of x outside them
(a row of the training data's own kind lies near the subspace, and near one of its rows). The cut
is chosen on out-of-fold scores: each train + calibration decision is scored by a model fit on
the other folds' tasks only (the folds of the cross-fitting, grouped by task), so every score is
that of a decision of a task never seen, as a deployed specialist meets them; the cut is the
smallest score that keeps `KEEP` of them (the ⌈KEEP·(n + 1)⌉-th smallest). The test split is never
read. Past the cut, the specialist abstains with cause `novel`, whatever its confidence.

Training (`fit`) and decision time (`Scorer`) use numpy only. The stored arrays are float32
(base64 in the manifest): one line each, where a million-byte list of numbers would not be.
"""

from __future__ import annotations

import base64
import math
from collections.abc import Sequence

import msgspec
import numpy as np

VERSION = 1
COMPONENTS = 16  # principal directions kept
KEEP = 0.99  # share of held-out decisions the cut keeps


class Novelty(msgspec.Struct, frozen=True):
    """The novelty model and its cut, as the manifest stores it (`Manifest.novelty`)."""

    version: int
    dim: int  # features
    k: int  # principal directions
    rows: int  # reference rows
    # base64 of little-endian float32 arrays: the training rows' mean (dim), the k principal
    # directions (k × dim) and every training row projected on them (rows × k)
    mean: str
    components: str
    reference: str
    cut: float | None  # abstain past it; None: too few held-out decisions to choose one (never abstains)
    keep: float  # the share of held-out decisions the cut was chosen to keep
    n: int  # held-out (out-of-fold) decisions it was chosen on
    tasks: int  # their tasks
    kept: int  # held-out decisions at or below the cut
    worst_task_kept: float  # the smallest share of one task's held-out decisions kept
    statement: str = ""


def packed(a: np.ndarray) -> str:
    """An array as base64 of its little-endian float32 values."""
    return base64.b64encode(np.ascontiguousarray(a, "<f4").tobytes()).decode()


def unpacked(text: str, shape: tuple[int, ...]) -> np.ndarray | None:
    """`packed` read back as float64 of `shape` (None when it is not base64 of that many float32)."""
    try:
        raw = base64.b64decode(text, validate=True)
    except ValueError:
        return None
    if len(raw) != 4 * math.prod(shape):
        return None
    return np.frombuffer(raw, "<f4").astype(np.float64).reshape(shape)


def _basis(rows: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """(mean, k orthonormal principal directions) of rows, each direction's sign fixed by its
    largest entry (positive), so the same rows give the same stored numbers."""
    mean = rows.mean(axis=0)
    k = max(0, min(k, rows.shape[0] - 1, rows.shape[1]))
    if k == 0:
        return mean, np.zeros((0, rows.shape[1]))
    _, _, vt = np.linalg.svd(rows - mean, full_matrices=False)
    c = vt[:k]
    sign = np.sign(c[np.arange(k), np.argmax(np.abs(c), axis=1)])
    return mean, c * np.where(sign == 0, 1.0, sign)[:, None]


class Scorer:
    """Decision time: the novelty of feature rows under a stored model (float32 arithmetic, as
    stored: half the memory a decision reads beside the model's)."""

    def __init__(self, mean: np.ndarray, components: np.ndarray, reference: np.ndarray) -> None:
        self.mean = np.asarray(mean, np.float32)
        self.c = np.ascontiguousarray(np.asarray(components, np.float32).reshape(-1, self.mean.shape[0]))
        self.r = np.ascontiguousarray(np.asarray(reference, np.float32).reshape(-1, self.c.shape[0]))
        self.r2 = (self.r.astype(np.float64) ** 2).sum(axis=1).astype(np.float32)

    @classmethod
    def of(cls, model: Novelty) -> Scorer:
        """The scorer of a stored model (checked by `problem` when its manifest was read)."""
        arrays = [unpacked(text, shape) for text, shape in stored_arrays(model).values()]
        if any(a is None for a in arrays):
            raise ValueError("novelty: an array is not what its shape says (unchecked model)")
        return cls(*(a for a in arrays if a is not None))

    def one(self, x: np.ndarray) -> float:
        """The novelty of one feature row (module docstring)."""
        d = x - self.mean
        p = self.c @ d
        near = float((self.r2 - 2.0 * (self.r @ p)).min()) if len(self.r) else float(p @ p)
        return math.sqrt(max(0.0, near + float(d @ d)))

    def many(self, x: np.ndarray) -> np.ndarray:
        """The novelty of each row of x (n, D)."""
        d = x.astype(np.float32) - self.mean
        p = d @ self.c.T
        near = (self.r2[None, :] - 2.0 * (p @ self.r.T)).min(axis=1) if len(self.r) else (p ** 2).sum(axis=1)
        return np.sqrt(np.maximum(0.0, near + (d ** 2).sum(axis=1)))


def fitted(rows: np.ndarray, k: int = COMPONENTS) -> Scorer:
    """A scorer whose reference is `rows` (training feature rows, n × D)."""
    rows = rows.astype(np.float64)
    mean, c = _basis(rows, k)
    return Scorer(mean, c, (rows - mean) @ c.T)


def fit(rows: np.ndarray, folds: np.ndarray, tasks: Sequence[str], keep: float = KEEP,
        k: int = COMPONENTS) -> tuple[Novelty, np.ndarray]:
    """The shipped novelty model (fit on every row of `rows`, the train + calibration feature rows)
    and its cut, chosen on out-of-fold scores: rows of fold j scored by a model fit on the other
    folds. Returns (the model, the out-of-fold scores)."""
    rows = rows.astype(np.float64)
    scores = np.zeros(len(rows))
    for j in sorted(set(folds.tolist())):
        held = folds == j
        scores[held] = fitted(rows[~held], k).many(rows[held])
    n = len(rows)
    rank = math.ceil(keep * (n + 1))
    cut = float(np.sort(scores)[rank - 1]) if 0 < rank <= n else None
    inside = scores <= cut if cut is not None else np.ones(n, bool)
    by_task: dict[str, list[bool]] = {}
    for t, ok in zip(tasks, inside.tolist(), strict=True):
        by_task.setdefault(t, []).append(ok)
    worst = min((sum(v) / len(v) for v in by_task.values()), default=1.0)
    kept = int(inside.sum())
    if cut is None:
        statement = (f"no novelty cut: {n} held-out decisions cannot keep {keep:g} of them "
                     f"(⌈{keep:g}·(n + 1)⌉ > n); the specialist never abstains as novel")
    else:
        statement = (f"novelty cut {cut:.4g}: keeps {kept} of {n} held-out decisions ({kept / n:.3f}, "
                     f"target {keep:g}) of {len(by_task)} tasks, each scored by a model fit without its "
                     f"task's fold; the worst task keeps {worst:.3f} of its decisions")
    mean, c = _basis(rows, k)
    model = Novelty(VERSION, rows.shape[1], len(c), n, packed(mean), packed(c), packed((rows - mean) @ c.T),
                    cut, keep, n, len(by_task), kept, round(worst, 6), statement)
    return model, scores


def problem(model: Novelty, dim: int) -> str | None:
    """The first value of a stored novelty model that scoring cannot use, as `$.novelty.path: problem`."""
    if model.version != VERSION:
        return f"$.novelty.version: {model.version} is not read by this zc (it reads {VERSION})"
    if model.dim != dim:
        return f"$.novelty.dim: {model.dim} features where $.features has {dim}"
    if model.k < 0 or model.rows < 0:
        return "$.novelty: k and rows must be at least 0"
    for name, (text, shape) in stored_arrays(model).items():
        a = unpacked(text, shape)
        if a is None:
            size = " × ".join(map(str, shape))
            return f"$.novelty.{name}: not base64 of {math.prod(shape)} float32 numbers ({size})"
        if not np.isfinite(a).all():
            return f"$.novelty.{name}: a number is not finite"
    if model.cut is not None and not (math.isfinite(model.cut) and model.cut >= 0):
        return f"$.novelty.cut: {model.cut!r} is not a distance (a finite number >= 0)"
    return None


def stored_arrays(model: Novelty) -> dict[str, tuple[str, tuple[int, ...]]]:
    """Each stored array of `model` by field name: its base64 text and its shape."""
    return {"mean": (model.mean, (model.dim,)), "components": (model.components, (model.k, model.dim)),
            "reference": (model.reference, (model.rows, model.k))}
