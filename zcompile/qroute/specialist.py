"""The specialist runtime: (state, legal set) -> (action, confidence) or abstain. onnxruntime and numpy only."""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import ZcError
from .features import Featurizer
from .manifest import Manifest, decode


@dataclass(frozen=True, slots=True)
class Answer:
    """A specialist's answer: `action` is None when it abstains."""

    action: str | None
    confidence: float
    best: str | None  # the top legal action, answered or not


def session_options():
    """Single-row latency settings (see TOOLCHAIN.md)."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return so


def masked_confidence(probs: np.ndarray, class_index: np.ndarray, legal_mask: np.ndarray,
                      temperature: float) -> np.ndarray:
    """Calibrated probabilities over the policy's actions, zero outside the legal set, rows summing to 1.

    `probs` (n, K) are the model's outputs over its classes; `class_index` maps each class to
    its column among the policy's actions; `legal_mask` (n, A) is 1 for legal actions. Actions
    the model never saw get no mass; a row with no legal class stays all zero.
    """
    n = probs.shape[0]
    logp = np.full((n, legal_mask.shape[1]), -np.inf)
    logp[:, class_index] = np.log(np.clip(probs, 1e-12, 1.0)) / temperature
    logp[legal_mask == 0] = -np.inf
    top = logp.max(axis=1, keepdims=True)
    ok = np.isfinite(top[:, 0])
    out = np.zeros_like(logp)
    e = np.exp(logp[ok] - top[ok])
    out[ok] = e / e.sum(axis=1, keepdims=True)
    return out


class Specialist:
    """A loaded specialist directory (`model.onnx` + `manifest.json`), verified against its policy."""

    def __init__(self, directory: str | Path, policy: Any = None) -> None:
        d = Path(directory)
        mpath = d / "manifest.json"
        try:
            self.manifest: Manifest = decode(mpath.read_bytes(), str(mpath))
        except OSError as exc:
            raise ZcError(f"{d}: not a specialist directory ({mpath.name}: {exc.strerror})") from None
        m = self.manifest
        if policy is not None and policy.sha256 != m.policy_sha256:
            raise ZcError(f"{d}: specialist was trained for policy `{m.policy_name}` "
                          f"(sha256 {m.policy_sha256[:12]}…) but the policy given is `{policy.name}` "
                          f"(sha256 {policy.sha256[:12]}…); distil it again for this policy")
        model_path = d / m.model.file
        try:
            blob = model_path.read_bytes()
        except OSError as exc:
            raise ZcError(f"{model_path}: cannot read model: {exc.strerror}") from None
        if hashlib.sha256(blob).hexdigest() != m.model.sha256:
            raise ZcError(f"{model_path}: model does not match the sha256 in its manifest "
                          "(tampered or corrupt)")
        import onnxruntime as ort

        try:
            self._session = ort.InferenceSession(blob, sess_options=session_options(),
                                                 providers=["CPUExecutionProvider"])
        except Exception as exc:  # onnxruntime raises its own exception types for bad models
            raise ZcError(f"{model_path}: onnxruntime cannot load the model: {exc}") from None
        self._input = self._session.get_inputs()[0].name
        self._output = "probabilities"
        self.featurizer = Featurizer(m.features)
        self.actions = m.features.actions
        self._index = {a: i for i, a in enumerate(self.actions)}
        self._class_index = np.array([self._index[c] for c in m.model.classes], dtype=np.int64)
        self.model_classes = m.model.classes
        self._class_pos = {c: i for i, c in enumerate(m.model.classes)}
        self.tau = m.threshold.tau
        self.temperature = m.calibration.temperature
        self.name = m.name

    def probabilities(self, x: np.ndarray) -> np.ndarray:
        """The raw model outputs (n, K) for feature rows x (n, D)."""
        return self._session.run([self._output], {self._input: x.astype(np.float32, copy=False)})[0]

    def confidences(self, x: np.ndarray, legal_mask: np.ndarray) -> np.ndarray:
        return masked_confidence(self.probabilities(x), self._class_index, legal_mask, self.temperature)

    def decide(self, state: Any, legal: Sequence[str]) -> Answer:
        """Answer with the most likely legal action, or abstain below the threshold τ.

        The single-row form of `masked_confidence`: the softmax runs over the legal classes only.
        """
        x = self.featurizer.one(state, legal)[None, :]
        cols = [self._class_pos[a] for a in legal if a in self._class_pos]
        if not cols:
            return Answer(None, 0.0, None)
        row = self.probabilities(x)[0].tolist()  # a handful of numbers: plain Python beats numpy calls
        t = self.temperature
        z = [math.log(min(max(row[c], 1e-12), 1.0)) / t for c in cols]
        top = max(z)
        j = z.index(top)  # the first best, as numpy's argmax
        c = 1.0 / sum(math.exp(v - top) for v in z)
        best = self.model_classes[cols[j]]
        return Answer(best if c >= self.tau else None, c, best)


def load(directory: str | Path, policy: Any = None) -> Specialist:
    """Load and verify a specialist directory (against `policy`'s sha256 when given)."""
    return Specialist(directory, policy)
