"""The specialist runtime: (state, legal set) -> (action, confidence) or abstain.

onnxruntime and numpy only; a transformer specialist adds `tokenizers` (never torch or transformers).
"""

from __future__ import annotations

import hashlib
import itertools
import math
import operator
import os
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec
import numpy as np

from ..errors import ZcError
from ..inputs import path_kind, read_file
from ..receipts.candidates import as_candidates, grounding
from .features import Featurizer
from .manifest import NEVER, Manifest, check_against, check_session, check_text_probes, decode
from .novelty import Scorer

if TYPE_CHECKING:
    from ..runtime import Policy


@dataclass(frozen=True, slots=True)
class Answer:
    """A specialist's answer: `action` is None when it abstains.

    `kind` is `call` (a complete call: `arguments` holds every argument of the action's signature,
    {} for an action without any), `reply` (a text reply: the router hands it to a tier that
    writes text), or `name` (the best action needs arguments the specialist could not complete: it
    abstains). `confidence` is the output's calibrated confidence (for a call: name and arguments
    as a whole; for a call that could not reach τ even with certain arguments, which are then not
    proposed, that ceiling). `novelty` is the state's distance from the training rows (`novelty`;
    None without a novelty model); `novel`: it is past the manifest's cut, and the specialist
    abstains (`action` None) whatever its confidence."""

    action: str | None
    confidence: float
    best: str | None  # the top legal action, answered or not
    arguments: dict | None = None
    kind: str = "call"
    grounding: str | None = None  # a proposed call's: typed | picked | bare (`receipts.candidates.grounding`)
    novelty: float | None = None
    novel: bool = False


TOKENIZER_FILE = "tokenizer.json"
MAX_MANIFEST_BYTES = 16 << 20  # a manifest is a few hundred KB (the argument model's weights)
MAX_MODEL_BYTES = 2 << 30  # a float32 MiniLM-L6 is 87 MB, an ensemble of N is N times that
TEXT_BATCH = 32  # rendered states per onnxruntime call in batch scoring
LEGAL_MEMO = 4096  # legal set -> its classes, per specialist; cleared when full


def session_options(threads: int = 1):
    """Single-row latency settings (see TOOLCHAIN.md): `threads` intra-op threads, which spin between
    operators only when there are several (waking a sleeping thread for each of a transformer's
    hundreds of operators cost 1–3 ms a decision at 64 tokens on 2 threads here)."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.add_session_config_entry("session.intra_op.allow_spinning", "1" if threads > 1 else "0")
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


def load_tokenizer(path: str | Path, max_length: int):
    """A `tokenizers` tokenizer truncating to `max_length` tokens, without padding."""
    try:
        from tokenizers import Tokenizer
    except ImportError:
        raise ZcError("a transformer specialist needs the `tokenizers` package: "
                      "pip install -c constraints.txt 'zcompile[transformer]'") from None
    try:
        tok = Tokenizer.from_file(str(path))
    except Exception as exc:  # tokenizers raises its own exception type for bad files
        raise ZcError(f"{path}: cannot load the tokenizer: {exc}") from None
    tok.no_padding()
    tok.enable_truncation(max_length)
    return tok


def encode_batch(ids: Sequence[Sequence[int]], type_ids: Sequence[Sequence[int]]
                 | None = None) -> dict[str, np.ndarray]:
    """Token ids (and segment ids, for pairs) of several texts -> BERT inputs padded (id 0) to the
    longest, int64."""
    n, width = len(ids), max((len(x) for x in ids), default=0)
    input_ids = np.zeros((n, width), np.int64)
    mask = np.zeros((n, width), np.int64)
    types = np.zeros((n, width), np.int64)
    for i, x in enumerate(ids):
        input_ids[i, : len(x)] = x
        mask[i, : len(x)] = 1
        if type_ids is not None:
            types[i, : len(x)] = type_ids[i]
    return {"input_ids": input_ids, "attention_mask": mask, "token_type_ids": types}


def text_logits(session: Any, tokenizer: Any, texts: Sequence[str]) -> np.ndarray:
    """A text model's logits (n, K) on texts, TEXT_BATCH at a time: the one scoring of rendered
    states, at decision time and for the text probes distillation records."""
    names = [i.name for i in session.get_inputs()]
    out = []
    for i in range(0, len(texts), TEXT_BATCH):
        enc = encode_batch([e.ids for e in tokenizer.encode_batch(list(texts[i:i + TEXT_BATCH]))])
        out.append(session.run(["logits"], {k: enc[k] for k in names})[0])
    return np.concatenate(out) if out else np.zeros((0, 0), np.float32)


def call_confidence(c: float, temperature: float, bias: float) -> float:
    """A call's calibrated confidence: Platt scaling of the log of its raw confidence (monotone)."""
    if c <= 0:
        return 0.0
    return 1.0 / (1.0 + math.exp(-(math.log(c) / temperature + bias)))


def softmax(logits: np.ndarray) -> np.ndarray:
    z = logits.astype(np.float64) - logits.max(axis=-1, keepdims=True)
    e = np.exp(z)
    return (e / e.sum(axis=-1, keepdims=True)).astype(np.float32)


def read_manifest(directory: str | Path) -> Manifest:
    """A specialist directory's manifest (a clear error when there is none, or it is malformed)."""
    mpath = Path(directory) / "manifest.json"
    if path_kind(mpath) == "missing":
        raise ZcError(f"{directory}: not a specialist directory (no {mpath.name})")
    return decode(read_file(mpath, "specialist manifest", MAX_MANIFEST_BYTES), str(mpath))


def open_verified(directory: str | Path, policy: Policy | None = None, threads: int | None = None):
    """Read a specialist directory's manifest, verify the policy and every file's sha256, and open
    its model in onnxruntime. Returns (manifest, session, threads)."""
    d = Path(directory)
    mpath = d / "manifest.json"
    m = read_manifest(d)
    if policy is not None and policy.sha256 != m.policy_sha256:
        raise ZcError(f"{d}: specialist was trained for policy `{m.policy_name or '(none)'}` "
                      f"(sha256 {m.policy_sha256[:12]}…) but the policy given is `{policy.name}` "
                      f"(sha256 {policy.sha256[:12]}…); distil it again for this policy")
    if policy is not None:
        check_against(m, policy, str(mpath))
    model_path = d / m.model.file
    blob = read_file(model_path, "model", MAX_MODEL_BYTES)
    if hashlib.sha256(blob).hexdigest() != m.model.sha256:
        raise ZcError(f"{model_path}: model does not match the sha256 in its manifest "
                      "(tampered or corrupt)")
    for fname, digest in m.model.files.items():
        fpath = d / fname
        try:
            data = fpath.read_bytes()
        except OSError as exc:
            raise ZcError(f"{fpath}: cannot read: {exc.strerror}") from None
        if hashlib.sha256(data).hexdigest() != digest:
            raise ZcError(f"{fpath}: does not match the sha256 in its manifest (tampered or corrupt)")
    text = m.model.text
    if text is not None and text.tokenizer not in m.model.files:
        raise ZcError(f"{mpath}: $.model.files: no sha256 for the tokenizer `{text.tokenizer}`")
    if threads is None:
        threads = 1 if text is None else max(1, min(text.threads, os.cpu_count() or 1))
    import onnxruntime as ort

    try:
        session = ort.InferenceSession(blob, sess_options=session_options(threads),
                                       providers=["CPUExecutionProvider"])
    except Exception as exc:  # onnxruntime raises its own exception types for bad models
        raise ZcError(f"{model_path}: onnxruntime cannot load the model: {exc}") from None
    check_session(m, session, str(model_path))
    return m, session, threads


class Specialist:
    """A loaded specialist directory (`model.onnx` + `manifest.json`, and `tokenizer.json` for a
    transformer), verified against its policy: tabular models read feature vectors, transformers
    read the state rendered as text (the manifest says which)."""

    takes_legal_set = True  # `decide` accepts a LegalSet and reuses its validated state

    def __init__(self, directory: str | Path, policy: Policy | None = None, *,
                 threads: int | None = None) -> None:
        self.manifest, self._session, threads = open_verified(directory, policy, threads)
        m = self.manifest
        self.kind = m.model.kind
        if self.kind == "pairwise":
            raise ZcError(f"{directory}: a pairwise specialist scores (request, action description) pairs: "
                          "load it with zcompile.qroute.pairwise.PairwiseSpecialist")
        text = m.model.text
        self.threads = threads
        self._inputs = [i.name for i in self._session.get_inputs()]
        self._input = self._inputs[0]
        if text is None:
            self._output = "probabilities"
            self.featurizer = Featurizer(m.features)
            self.renderer = None
        else:
            from .render import Renderer

            self._output = "logits"
            self.featurizer = None
            self.renderer = Renderer(m.features.fields, m.features.actions, text.render_version)
            self.tokenizer = load_tokenizer(Path(directory) / text.tokenizer, text.max_length)
            probes = [p.text for p in m.model.text_probes]
            check_text_probes(m, text_logits(self._session, self.tokenizer, probes),
                              str(Path(directory) / m.model.file))
        self._outputs = [self._output]
        self.actions = m.features.actions
        self._index = {a: i for i, a in enumerate(self.actions)}
        self._class_index = np.array([self._index[c] for c in m.model.classes], dtype=np.int64)
        self.model_classes = m.model.classes
        self._class_pos = {c: i for i, c in enumerate(m.model.classes)}
        self._policy_seen: Any = None  # the last policy whose LegalSet's state was taken as is
        self._legal_memo: dict[tuple[str, ...], tuple[list[int], Any]] = {}
        self.tau = m.threshold.tau
        self.temperature = m.calibration.temperature
        self.name = m.name
        self._replies = frozenset(m.calls.replies) if m.calls is not None else frozenset()
        self._risky = frozenset(m.calls.risky) if m.calls is not None else frozenset()
        novelty = m.novelty if self.renderer is None else None
        self.novelty = Scorer.of(novelty) if novelty is not None else None
        self.novelty_cut = novelty.cut if novelty is not None else None
        self._arguments = None
        # the call calibrations: one per grounding of the arguments, and the pooled one for the others
        self._scalings = (m.calls.calibration, *m.calls.grounded.values()) if m.calls is not None else ()
        if m.calls is not None and m.calls.arguments is not None:
            from .arguments import ArgumentModelSpec, ArgumentScorer

            try:
                self._arguments = ArgumentScorer(msgspec.convert(m.calls.arguments, ArgumentModelSpec))
            except (msgspec.ValidationError, ValueError) as exc:
                raise ZcError(f"{directory}: manifest.json: $.calls.arguments: {exc}") from None

    def probabilities(self, x: np.ndarray) -> np.ndarray:
        """The raw model outputs (n, K) for feature rows x (n, D) (tabular models)."""
        if self.featurizer is None:
            raise ZcError(f"specialist `{self.name}` is a {self.kind} model: it reads states, not feature "
                          "rows (use `state_probabilities`)")
        return self._session.run([self._output], {self._input: x.astype(np.float32, copy=False)})[0]

    def text_probabilities(self, texts: Sequence[str]) -> np.ndarray:
        """Class probabilities (n, K) of rendered states (transformer models), in batches."""
        if not texts:
            return np.zeros((0, len(self.model_classes)), np.float32)
        return softmax(text_logits(self._session, self.tokenizer, texts))

    def state_probabilities(self, states: Sequence[Any], legals: Sequence[Sequence[str]]) -> np.ndarray:
        """Class probabilities (n, K) of states with their legal sets, whatever the model kind."""
        if self.renderer is not None:
            return self.text_probabilities([self.renderer.one(s) for s in states])
        return self.probabilities(self.featurizer.matrix(states, legals))

    def confidences(self, x: np.ndarray, legal_mask: np.ndarray) -> np.ndarray:
        return masked_confidence(self.probabilities(x), self._class_index, legal_mask, self.temperature)

    def _root(self, state: Any, legal: Any) -> Any:
        """The validated state: a LegalSet's own (`legal.root`, validated by a policy with this
        specialist's fields: no second validation), else `state` validated here."""
        policy = getattr(legal, "policy", None)
        if policy is not None:
            if policy is self._policy_seen or policy.ir.fields == self.featurizer.spec.fields:
                self._policy_seen = policy
                return legal.root
        return self.featurizer.schema.convert(state)

    def _legal_classes(self, names: Sequence[str]) -> tuple[list[int], Any]:
        """(the model's classes that are legal, a function taking a row of class outputs to theirs),
        memoised per legal set (a policy has few)."""
        key = names if isinstance(names, tuple) else tuple(names)
        found = self._legal_memo.get(key)
        if found is None:
            cols = [self._class_pos[a] for a in key if a in self._class_pos]
            take = operator.itemgetter(*cols) if len(cols) > 1 else lambda row, c=cols[:1]: [
                row[i] for i in c]
            if len(self._legal_memo) >= LEGAL_MEMO:
                self._legal_memo.clear()
            found = self._legal_memo[key] = (cols, take)
        return found

    def decide(self, state: Any, legal: Sequence[str], candidates: Sequence[Any] | None = None) -> Answer:
        """Answer with the most likely legal action, or abstain below its threshold.

        `legal` is the legal set: a `LegalSet` (whose validated state a tabular model reads as is)
        or the legal action names. The single-row form of `masked_confidence`: the softmax runs
        over the legal classes only. With a `calls` section in the manifest, a text reply is gated
        by the reply threshold and a call needs its arguments proposed from `candidates` (values
        seen before the decision: `receipts` candidates); without them a call that takes arguments
        abstains (kind `name`).
        """
        names = getattr(legal, "actions", legal)
        if self.renderer is None:
            x = self.featurizer.row(self._root(state, legal), names)  # validates a plain state
        else:
            text = self.renderer.one(state)  # validates the state
        if not self._legal_classes(names)[0]:
            return Answer(None, 0.0, None, None, "name")
        if self.renderer is None:
            row = self._session.run(self._outputs, {self._input: x[None, :]})[0][0].tolist()
            if self.novelty is not None:
                return self.unfamiliar(self.choose(row, names, candidates), self.novelty.one(x))
        else:
            ids = self.tokenizer.encode(text).ids
            feed = {"input_ids": np.array([ids], np.int64), "attention_mask": np.ones((1, len(
                ids)), np.int64),
                    "token_type_ids": np.zeros((1, len(ids)), np.int64)}
            row = softmax(self._session.run(self._outputs, {k: feed[k] for k in self._inputs})[0])[0].tolist()
        return self.choose(row, names, candidates)

    def unfamiliar(self, answer: Answer, novelty: float) -> Answer:
        """`answer` with the state's novelty; past the cut, an abstention (`novel`) keeping its best."""
        cut = self.novelty_cut
        if cut is not None and novelty > cut:
            return replace(answer, action=None, arguments=None, novelty=novelty, novel=True)
        return replace(answer, novelty=novelty)

    def choose(self, row: Sequence[float], names: Sequence[str], candidates: Sequence[Any]
               | None = None) -> Answer:
        """`decide` from the model's outputs `row` (one probability per class, a list of floats) over
        the legal set `names`: the legal mask, the softmax over the legal classes, τ, the call logic."""
        cols, take = self._legal_classes(names)
        if not cols:
            return Answer(None, 0.0, None, None, "name")
        # a handful of numbers: plain Python floats beat numpy calls (42 against 12 µs measured)
        ps = take(row)
        if min(ps) < 1e-12 or max(ps) > 1.0:  # clamped into [1e-12, 1] (a no-op for the rest)
            ps = [min(max(p, 1e-12), 1.0) for p in ps]
        z = list(map(operator.truediv, map(math.log, ps), itertools.repeat(self.temperature)))
        top = max(z)
        j = z.index(top)  # the first best, as numpy's argmax
        c = 1.0 / sum(map(math.exp, map(operator.sub, z, itertools.repeat(top))))
        best = self.model_classes[cols[j]]
        if self.manifest.calls is None:
            return Answer(best if c >= self.tau else None, c, best, None, "call")
        return self.complete(best, c, candidates)

    def complete(self, best: str, c: float, candidates: Sequence[Any] | None) -> Answer:
        """The output for name `best` at name confidence `c`: a gated reply, a complete call, or a name.

        A call's confidence is the name's times its arguments', calibrated (`call_confidence`,
        increasing): when even certain arguments would leave it below τ, they are not proposed and
        the call abstains with that ceiling as its confidence (kind `call`, no arguments)."""
        calls = self.manifest.calls
        if best in self._replies:
            return Answer(best if c >= calls.reply_threshold.tau else None, c, best, None, "reply")
        params = calls.params.get(best)
        if params is None:  # no signature: its arguments are unknown
            return Answer(None, c, best, None, "name")
        tau = self.tau
        if best in self._risky:
            tau = calls.risky_threshold.tau if calls.risky_threshold is not None else NEVER
        arguments: dict | None = {}
        ground = "bare"
        if params.get("properties"):
            if self._arguments is None or not candidates:
                return Answer(None, c, best, None, "name")
            # the most any grounding could make of certain arguments: below τ, none are proposed
            if (ceiling := max(call_confidence(c, k.temperature, k.bias) for k in self._scalings)) < tau:
                return Answer(None, ceiling, best, None, "call")
            given = as_candidates(candidates)
            prop = self._arguments.propose(best, params, given)
            if prop.arguments is None:
                return Answer(None, c, best, None, "name")
            arguments, c = prop.arguments, c * prop.confidence
            ground = grounding(arguments, given)
        k = calls.grounded.get(ground, calls.calibration)
        conf = call_confidence(c, k.temperature, k.bias)
        return Answer(best if conf >= tau else None, conf, best, arguments, "call", ground)
