"""Pairwise specialists, decision side: score (request, action description) pairs, so a specialist can
choose among actions it never saw in training; masked to the legal set; abstains below τ.

onnxruntime, numpy and `tokenizers` only (never torch or transformers).

Descriptions, version 1 (`describe`): an offered tool schema `{name, description, parameters}`
reads `name: description parameters: p1, p2, …` (the name with `.` and `_` as spaces, its
parameters' names in schema order, `(required)` after the required ones); a policy action with no
schema reads as its name with `_` as spaces. The request side is the state rendered as text
(`render.Renderer` with the policy's schema, or without a policy every key of the state in sorted
order as `key: value`). A pair is tokenized as BERT's two segments, the request first, both
truncated together to `max_length` tokens (longest first).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import ZcError
from ..tools import tool_schemas
from .render import TEXT_CHARS, Renderer
from .specialist import Answer, encode_batch, load_tokenizer, open_verified

if TYPE_CHECKING:
    from ..runtime import Policy

DESCRIBE_VERSION = 1
FIT = "fit"  # the class whose probability scores a pair
DESCRIPTION_CHARS = 300


def _words(name: str) -> str:
    return name.replace(".", " ").replace("_", " ")


def describe(name: str, tool: Mapping[str, Any] | None = None) -> str:
    """The text of one candidate action (see the module docstring)."""
    if not tool:
        return _words(name)
    text = f"{_words(name)}: {' '.join(str(tool.get('description') or '').split())[:DESCRIPTION_CHARS]}"
    params = tool.get("parameters") or {}
    props = params.get("properties") if isinstance(params, Mapping) else None
    if isinstance(props, Mapping) and props:
        required = set(params.get("required") or ())
        names = [f"{_words(str(p))}{' (required)' if p in required else ''}" for p in props]
        text += " parameters: " + ", ".join(names)
    return text


def render_plain(state: Mapping[str, Any]) -> str:
    """A state without a policy schema: every key in sorted order as `key: value` (texts cut)."""
    parts = []
    for k in sorted(state):
        v = state[k]
        if isinstance(v, Mapping):
            v = render_plain(v)
        elif isinstance(v, str):
            v = " ".join(v.split())[: TEXT_CHARS * 4]
        parts.append(f"{_words(str(k))}: {v}")
    return " | ".join(parts)


def encode_pairs(tokenizer, request: str, descriptions: Sequence[str]) -> dict[str, np.ndarray]:
    """BERT inputs for (request, description) pairs, padded to the longest."""
    encs = tokenizer.encode_batch([(request, d) for d in descriptions])
    return encode_batch([e.ids for e in encs], [e.type_ids for e in encs])


def fit_margins(logits: np.ndarray, fit: int) -> np.ndarray:
    """The fit-vs-not logit margin of each pair, from the (n, 2) logits with `fit` the fit column."""
    logits = np.asarray(logits, dtype=np.float64)
    return logits[:, fit] - logits[:, 1 - fit]


def choice_score(z: np.ndarray) -> float:
    """How sure a choice among candidates with fit margins `z` is: min(best margin, best − runner-up).

    High only when the best candidate fits *and* beats every other one; with one candidate, its
    margin. (On BFCL, wrong choices among fitting tools have a tiny gap, and requests that no tool
    fits a low best margin.)
    """
    if len(z) == 0:
        return -math.inf
    if len(z) == 1:
        return float(z[0])
    top2 = np.partition(z, len(z) - 2)[-2:]
    return float(min(top2[1], top2[1] - top2[0]))


def calibrated(margin: np.ndarray | float, temperature: float, bias: float) -> np.ndarray | float:
    """Platt scaling of a choice score: sigmoid(score / T + b)."""
    z = np.asarray(margin, dtype=np.float64) / temperature + bias
    out = 1.0 / (1.0 + np.exp(-z))
    return float(out) if np.ndim(out) == 0 else out


class PairwiseSpecialist:
    """A loaded pairwise specialist: `decide(state, legal, tools)` -> Answer.

    Args:
        directory: the specialist directory (model.onnx, tokenizer.json, manifest.json).
        policy: when the specialist was distilled with a policy, that policy (verified by hash);
            its state schema renders the request.
        threads: onnxruntime intra-op threads (default: the manifest's, capped at the cores).
    """

    pairwise = True  # the router passes it the offered tools

    def __init__(self, directory: str | Path, policy: Policy | None = None, *,
                 threads: int | None = None) -> None:
        self.manifest, self._session, self.threads = open_verified(directory, policy, threads)
        m = self.manifest
        if m.model.kind != "pairwise" or m.model.text is None:
            raise ZcError(f"{directory}: a {m.model.kind} specialist, not a pairwise one: load it with "
                          "zcompile.qroute.specialist.Specialist")
        self.tokenizer = load_tokenizer(Path(directory) / m.model.text.tokenizer, m.model.text.max_length)
        self.renderer = (Renderer(m.features.fields, m.features.actions, m.model.text.render_version)
                         if m.features.fields else None)
        self._inputs = [i.name for i in self._session.get_inputs()]
        self._fit = m.model.classes.index(FIT)
        self.tau = m.threshold.tau
        self.temperature = m.calibration.temperature
        self.bias = m.calibration.bias
        self.name = m.name

    def request(self, state: Mapping[str, Any]) -> str:
        return self.renderer.one(state) if self.renderer is not None else render_plain(state)

    def margins(self, request: str, descriptions: Sequence[str]) -> np.ndarray:
        """The fit-vs-not logit margin of each (request, description) pair."""
        if not descriptions:
            return np.zeros(0)
        feed = encode_pairs(self.tokenizer, request, descriptions)
        return fit_margins(self._session.run(["logits"], {k: feed[k] for k in self._inputs})[0], self._fit)

    def decide(self, state: Mapping[str, Any], legal: Sequence[str],
               tools: Sequence[Mapping[str, Any]] | Mapping[str, Mapping[str, Any]] | None = None) -> Answer:
        """Score every legal action against the request; answer the best if the calibrated confidence
        of the choice (`choice_score`) reaches τ, else abstain (also when nothing is legal).

        Args:
            state: the decision's state.
            legal: the legal actions (only these are scored: the answer is always one of them).
            tools: tool schemas `{name, description, parameters}` (a list, or a dict by name) that
                describe the actions; an action without one is described by its name.
        """
        by_name = tool_schemas(tools)
        request = self.request(state)
        names = list(dict.fromkeys(legal))
        if not names:
            return Answer(None, 0.0, None)
        z = self.margins(request, [describe(a, by_name.get(a)) for a in names])
        j = int(np.argmax(z))
        c = calibrated(choice_score(z), self.temperature, self.bias)
        if not math.isfinite(c):
            c = 0.0
        return Answer(names[j] if c >= self.tau else None, c, names[j])
