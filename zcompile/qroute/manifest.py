"""The specialist manifest: versions, hashes, splits, features, classes, probes, calibration, τ and
metrics."""

from __future__ import annotations

import hashlib
import math
import re
from typing import TYPE_CHECKING, Any

import msgspec

from .features import FeatureSpec
from .novelty import Novelty
from .novelty import problem as novelty_problem

if TYPE_CHECKING:
    from ..runtime import Policy

# 3: cross-fitted τ with a named guarantee (`Threshold.guarantee`, `.statement`, `.n`), `ArgumentModel`,
# and `sha256` over the whole manifest (any edit is refused). 4: `Model.probes` (a tabular model's class
# order is checked for every class). 5: `Model.text_probes` (a transformer's, by the rank order of its
# classes). 6: thresholds certified with tasks as the unit (`Threshold.unit`, `.tasks`, `.tasks_answered`,
# `.tasks_clean`, `.needs_tasks`) and calls calibrated by the grounding of their arguments
# (`Calls.grounded`), and the novelty model with its cut (`novelty`). Versions 4 to 6 are read,
# except a version-4 transformer (it has no probes to check with); a version 3 has none at all.
MANIFEST_VERSION = 6
READS = (4, 5, 6)
NEVER = 2.0  # a τ above every confidence: the specialist abstains on everything
PLAIN_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9_.-]*")  # a file in the specialist directory itself
PROBE_POOL = 20_000  # training rows (evenly spaced) searched for each class's probe at distillation
PROBE_TOLERANCE = 1e-4  # |Δp| allowed between a probe's recorded and re-scored probabilities
TEXT_PROBE_POOL = 512  # training texts (evenly spaced) searched for each class's text probe
# logits: two classes recorded further apart than this on a text probe must keep their order on load
# (int8 kernels of another CPU move logits by far less; probabilities within 1e-4 they do not keep)
RANK_MARGIN = 0.5


class Split(msgspec.Struct, frozen=True):
    tasks: tuple[str, ...]  # sorted task ids
    sha256: str  # of "\n".join(tasks)
    decisions: int


class Splits(msgspec.Struct, frozen=True):
    train: Split
    calibration: Split
    test: Split


class DataFile(msgspec.Struct, frozen=True):
    path: str
    sha256: str


class TextInput(msgspec.Struct, frozen=True):
    """How a transformer specialist reads a state: rendered as text, then tokenized."""

    render_version: int  # of zcompile.qroute.render
    max_length: int  # tokens kept (truncation)
    tokenizer: str  # file name in the specialist directory (its sha256 is in `Model.files`)
    threads: int = 2  # onnxruntime intra-op threads at decision time (capped at the machine's cores)


class Probe(msgspec.Struct, frozen=True):
    """A feature row scored at distillation, with the exported model's probabilities on it by class:
    loading scores the row again (`check_session`), so a class order or a model that differs is refused."""

    row: dict[int, float]  # feature index -> value; the other features are 0
    probabilities: dict[str, float]  # class -> the exported model's probability on the row


class TextProbe(msgspec.Struct, frozen=True):
    """A rendered training state with the exported model's logits on it by class (transformers):
    loading scores the text again and checks the rank order of the classes (`check_text_probes`)."""

    text: str
    logits: dict[str, float]  # class -> the exported model's logit on the text


class Model(msgspec.Struct, frozen=True):
    kind: str  # logistic | mlp | gbt | transformer | pairwise
    classes: tuple[str, ...]  # the model's output columns, a subset of the policy's actions
    file: str
    sha256: str
    params: dict[str, Any] = {}
    # other files the model needs (tokenizer.json): name -> sha256, verified on load
    files: dict[str, str] = {}
    text: TextInput | None = None  # set for models that read text (transformer); None: feature vectors
    # tabular models: one per class, the training row where that class is likeliest (`probes_for`)
    probes: tuple[Probe, ...] = ()
    # text models (version 5): one per class, the training text where it leads the others most
    # (`text_probes_for`)
    text_probes: tuple[TextProbe, ...] = ()


class Calibration(msgspec.Struct, frozen=True):
    method: str  # temperature (classifiers) | platt (pairwise: sigmoid(margin / temperature + bias))
    temperature: float
    bias: float = 0.0


class Threshold(msgspec.Struct, frozen=True):
    tau: float  # answer when calibrated confidence >= tau; 2.0: never
    target_precision: float
    alpha: float  # 1 - the guarantee's confidence (Learn-then-Test)
    calibration_answered: int  # at τ, among the `n` out-of-fold (or calibration-split) decisions
    calibration_correct: int
    calibration_lower_bound: float  # one-sided Clopper–Pearson bound at τ (for reading; LTT certifies)
    guarantee: str = "ltt"  # ltt | conformal
    statement: str = ""  # the guarantee in words, with its n (and its tasks)
    n: int = 0  # decisions the threshold was chosen on
    source: str = "cross-fitted"  # cross-fitted (K folds over train + calibration) | calibration split
    # pairwise specialists: the figures above count decisions where an action fits; where none
    # does, abstaining is bounded separately (0 and no decisions for classifiers)
    target_abstention: float = 0.0
    calibration_none_fits: int = 0
    calibration_abstained: int = 0
    calibration_abstention_lower_bound: float = 0.0
    # the unit of evidence (version 6): `task` (tasks are exchangeable; a task is clean at τ when every
    # decision of it answered at τ is right; `calibration_lower_bound` is then over tasks) or `decision`
    unit: str = "decision"
    tasks: int = 0  # tasks among the `n` decisions
    tasks_answered: int = 0  # at τ
    tasks_clean: int = 0  # at τ
    needs_tasks: int = 0  # no τ qualified: clean answered tasks missing (0: one qualified)


class Calls(msgspec.Struct, frozen=True):
    """How a classifier specialist answers complete calls and text replies (None: names only).

    `threshold` (the manifest's) gates calls, whose confidence is the name's × the arguments',
    Platt-calibrated as a whole (`calibration`, over its log); `risky_threshold` gates the calls of
    risky actions, certified on those alone (a pooled τ lets wrong writes hide behind right
    look-ups); `reply_threshold` gates text replies (actions tagged `reply`), which the router
    hands to a tier that writes text. Each is certified at δ / 3."""

    replies: tuple[str, ...]  # actions tagged `reply`
    params: dict[str, Any]  # action -> its JSON-schema parameters (absent: no signature)
    calibration: Calibration  # platt over log(name confidence × argument confidence)
    reply_threshold: Threshold
    risky: tuple[str, ...] = ()  # actions with a risky tag (destructive, publish, money, credential)
    risky_threshold: Threshold | None = None  # gates calls of risky actions, certified on those alone
    # the argument model (`arguments.ArgumentModelSpec` as data); None: no arguments learned
    arguments: Any = None
    # version 6: a call's Platt scaling by the grounding of its arguments (`candidates.grounding`:
    # typed, picked); a grounding absent here uses `calibration`
    grounded: dict[str, Calibration] = {}


class Gate(msgspec.Struct, frozen=True):
    promoted: bool
    key: tuple[float, ...]
    reasons: tuple[str, ...]


class Manifest(msgspec.Struct, frozen=True):
    version: int
    zcompile: str
    name: str
    policy_name: str
    policy_sha256: str
    data: tuple[DataFile, ...]
    counts: dict[str, int]
    splits: Splits
    features: FeatureSpec
    model: Model
    calibration: Calibration
    threshold: Threshold
    metrics: dict[str, Any]
    gate: Gate
    seed: int
    calls: Calls | None = None  # complete calls and replies (classifiers with a policy)
    sha256: str = ""  # of this manifest encoded with sha256 = "": any edit is refused on load
    # version 6: the novelty model and its cut (tabular specialists; None: none)
    novelty: Novelty | None = None


# the fields each version added (JSON paths; `*` every threshold): an older manifest is written without them
THRESHOLDS = (("threshold",), ("calls", "reply_threshold"), ("calls", "risky_threshold"))
TASK_FIELDS = ("unit", "tasks", "tasks_answered", "tasks_clean", "needs_tasks")
ADDED: dict[int, tuple[tuple[str, ...], ...]] = {
    5: (("model", "text_probes"),),
    6: (*((*t, f) for t in THRESHOLDS for f in TASK_FIELDS), ("calls", "grounded"), ("novelty",)),
}


def _json(m: Manifest) -> bytes:
    """`m` as JSON, as its version writes it: without the fields later versions added (`ADDED`), so an
    older manifest's seal and identity are what they were when it was written."""
    body = msgspec.json.encode(m)
    gone = [path for v, paths in ADDED.items() if v > m.version for path in paths]
    if not gone:
        return body
    raw = msgspec.json.decode(body)
    for *parents, leaf in gone:
        node = raw
        for key in parents:
            node = node.get(key) if isinstance(node, dict) else None
        if isinstance(node, dict):
            node.pop(leaf, None)
    return msgspec.json.encode(raw)


def seal_manifest(m: Manifest) -> Manifest:
    """`m` with its sha256 set."""
    m = msgspec.structs.replace(m, sha256="")
    return msgspec.structs.replace(m, sha256=hashlib.sha256(_json(m)).hexdigest())


def identity(m: Manifest) -> str:
    """The sha256 of what decides (the manifest without its gate, metrics and seal): unchanged when
    `zc promote` re-gates the specialist, so its shadow records stay evidence for it."""
    m = msgspec.structs.replace(m, gate=Gate(False, (), ()), metrics={}, sha256="")
    return hashlib.sha256(_json(m)).hexdigest()


def encode(m: Manifest) -> bytes:
    """The manifest file's bytes, sealed (sha256 set)."""
    return msgspec.json.format(_json(seal_manifest(m)), indent=2) + b"\n"


def decode(data: bytes, path: str) -> Manifest:
    """A manifest file's bytes, read (nesting bounded), unsealed only when its sha256 holds, and
    refused when a value cannot be decided with (`validate`)."""
    from ..errors import ZcError
    from ..inputs import decode_json

    try:
        head = decode_json(data, dict, what=path)
    except msgspec.DecodeError as exc:
        raise ZcError(f"{path}: not a specialist manifest: {exc}") from None
    except msgspec.ValidationError:
        raise ZcError(f"{path}: not a specialist manifest (not a JSON object)") from None
    version = head.get("version") if isinstance(head, dict) else None
    if not isinstance(version, int):
        raise ZcError(f"{path}: not a specialist manifest (no `version`)")
    if version not in READS:
        newer = isinstance(version, int) and version > MANIFEST_VERSION
        raise ZcError(f"{path}: manifest version {version} is not read by this zc (it reads "
                      f"{', '.join(map(str, READS))}); " + ("upgrade zcompile" if newer
                                                            else "distil the specialist again"))
    try:
        m = msgspec.json.decode(data, type=Manifest)
    except msgspec.ValidationError as exc:
        raise ZcError(f"{path}: corrupt specialist manifest: {exc}") from None
    if version < 5 and m.model.kind == "transformer":
        raise ZcError(f"{path}: a version {version} transformer specialist has no class-order probes "
                      "(version 5 adds them); distil the specialist again")
    if not m.sha256 or seal_manifest(m).sha256 != m.sha256:
        raise ZcError(f"{path}: manifest does not match its sha256 (edited, tampered or corrupt); distil the "
                      "specialist again")
    problem = validate(m)
    if problem:
        raise ZcError(f"{path}: {problem}; distil the specialist again")
    return m


# --- values: a sealed manifest is also one that a distillation could have written ------------------------

def _positive(v: float) -> bool:
    return math.isfinite(v) and v > 0


def _threshold(t: Threshold | None, where: str) -> str | None:
    if t is not None and not (math.isfinite(t.tau) and 0.0 <= t.tau <= NEVER):
        return f"{where}.tau: {t.tau!r} is not a threshold (a number from 0 to 1, or {NEVER} for never)"
    return None


def _calibration(c: Calibration, where: str) -> str | None:
    if not _positive(c.temperature):
        return f"{where}.temperature: {c.temperature!r} is not a temperature (a finite number > 0)"
    if not math.isfinite(c.bias):
        return f"{where}.bias: {c.bias!r} is not finite"
    return None


def _repeated(names: tuple[str, ...]) -> str | None:
    seen: set[str] = set()
    return next((n for n in names if n in seen or seen.add(n)), None)


def validate(m: Manifest) -> str | None:
    """The first value of `m` that loading or deciding cannot use, as `$.path: problem` (None: none).

    A re-sealed manifest passes the seal: these are the values it must still hold (a temperature,
    standard deviation or threshold that is finite and in range, classes the model was given, the
    policy's fields as a schema)."""
    f = m.features
    for key, sd in f.std.items():
        if not _positive(sd):
            return f"$.features.std.{key}: {sd!r} is not a standard deviation (a finite number > 0)"
    for key, mu in f.mean.items():
        if not math.isfinite(mu):
            return f"$.features.mean.{key}: {mu!r} is not finite"
    if f.text_dim < 1:
        return f"$.features.text_dim: {f.text_dim} is not a width (at least 1)"
    if (n := _repeated(f.actions)) is not None:
        return f"$.features.actions: `{n}` is listed twice"
    if f.actions:
        problem = _fields_problem(f)
        if problem:
            return problem
    problem = _calibration(m.calibration, "$.calibration") or _threshold(m.threshold, "$.threshold")
    if problem:
        return problem
    for where, name in (("$.model.file", m.model.file), *(("$.model.files", n) for n in m.model.files)):
        if not PLAIN_NAME.fullmatch(name):
            return f"{where}: `{name}` is not a plain file name (a file in the specialist directory)"
    classes = m.model.classes
    if m.model.kind != "pairwise":
        if not classes:
            return "$.model.classes: a classifier has no classes"
        if (n := _repeated(classes)) is not None:
            return f"$.model.classes: `{n}` is listed twice"
        known = set(f.actions)
        if (n := next((c for c in classes if c not in known), None)) is not None:
            return f"$.model.classes: `{n}` is not an action of the features (`$.features.actions`)"
    text = m.model.text
    if text is not None and (text.max_length < 1 or text.threads < 1):
        return "$.model.text: max_length and threads must be at least 1"
    if m.model.kind != "pairwise":
        problem = _probes_problem(m.model) if text is None else _text_probes_problem(m.model)
        if problem:
            return problem
    if m.novelty is not None and (problem := novelty_problem(m.novelty, f.dim)):
        return problem
    c = m.calls
    if c is not None:
        problem = (_calibration(c.calibration, "$.calls.calibration")
                   or _threshold(c.reply_threshold, "$.calls.reply_threshold")
                   or _threshold(c.risky_threshold, "$.calls.risky_threshold"))
        if problem:
            return problem
        for action, schema in c.params.items():
            if not (isinstance(schema, dict) and isinstance(schema.get("properties", {}), dict)):
                return f"$.calls.params.{action}: not a JSON schema of arguments"
    return None


def _probes_problem(model: Model) -> str | None:
    """A tabular model's probes: one per class, finite rows, probabilities of exactly its classes (that
    the rows are as wide as the features is checked with the model, `check_session`)."""
    if model.text_probes:
        return ("$.model.text_probes: a model that reads feature rows has no text probes (its are "
                "$.model.probes)")
    if len(model.probes) != len(model.classes):
        return (f"$.model.probes: {len(model.probes)} probes for {len(model.classes)} classes "
                "(distillation records one per class)")
    classes = set(model.classes)
    for i, probe in enumerate(model.probes):
        where = f"$.model.probes[{i}]"
        if (k := next((k for k, v in probe.row.items() if not (k >= 0 and math.isfinite(v))),
                      None)) is not None:
            return f"{where}.row.{k}: not a feature index with a finite value"
        if set(probe.probabilities) != classes:
            return f"{where}.probabilities: the classes differ from $.model.classes"
        if (c := next((c for c, p in probe.probabilities.items() if not 0.0 <= p <= 1.0), None)) is not None:
            return f"{where}.probabilities.{c}: {probe.probabilities[c]!r} is not a probability"
    return None


def _text_probes_problem(model: Model) -> str | None:
    """A text model's probes: one per class, each with a finite logit for exactly its classes, and
    no feature-row probes (it reads no feature rows)."""
    if model.probes:
        return ("$.model.probes: a model that reads text has no feature-row probes (its are "
                "$.model.text_probes)")
    if len(model.text_probes) != len(model.classes):
        return (f"$.model.text_probes: {len(model.text_probes)} probes for {len(model.classes)} classes "
                "(distillation records one per class)")
    classes = set(model.classes)
    for i, probe in enumerate(model.text_probes):
        where = f"$.model.text_probes[{i}]"
        if set(probe.logits) != classes:
            return f"{where}.logits: the classes differ from $.model.classes"
        if (c := next((c for c, v in probe.logits.items() if not math.isfinite(v)), None)) is not None:
            return f"{where}.logits.{c}: {probe.logits[c]!r} is not finite"
    return None


def _fields_problem(f: FeatureSpec) -> str | None:
    """The features' fields and actions checked as an artifact's are (names, kinds, members, clashes)."""
    from .. import ir
    from ..errors import ZcError
    from ..verify import verify

    try:
        verify(ir.PolicyIR(name="features", source_path="", source_sha256="", fields=f.fields,
                           actions=tuple(ir.ActionDef(name=a) for a in f.actions), fallback=f.actions[0]))
    except ZcError as exc:
        return f"$.features: {str(exc).removeprefix('corrupt artifact: ')}"
    return None


def check_against(m: Manifest, policy: Policy, path: str) -> None:
    """ZcError when a manifest trained for `policy` (same sha256) does not state its fields and actions."""
    from ..errors import ZcError

    if not m.features.actions and m.model.kind == "pairwise":
        return  # a pairwise scorer trained without a policy reads no state schema
    if m.features.fields != policy.ir.fields or m.features.actions != tuple(
        a.name for a in policy.ir.actions):
        raise ZcError(f"{path}: $.features: the fields and actions differ from those of policy "
                      f"`{policy.name}` it was trained for; distil the specialist again")


def check_session(m: Manifest, session: Any, path: str) -> None:
    """ZcError when the ONNX model does not take the manifest's feature width or give its classes
    (another specialist's model.onnx, with a manifest re-sealed around it)."""
    from ..errors import ZcError

    if m.model.kind == "pairwise":
        return
    outputs = {o.name: o.shape for o in session.get_outputs()}
    want = "logits" if m.model.text is not None else "probabilities"
    if want not in outputs:
        raise ZcError(f"{path}: the model has no `{want}` output (it has {', '.join(outputs) or 'none'}): "
                      "not this specialist's model")
    width = outputs[want][-1] if outputs[want] else None
    if isinstance(width, int) and width != len(m.model.classes):
        raise ZcError(f"{path}: the model gives {width} classes but $.model.classes lists "
                      f"{len(m.model.classes)}: not this specialist's model")
    if m.model.text is not None:
        return
    inputs = session.get_inputs()
    shape = inputs[0].shape if len(inputs) == 1 else None
    dim = m.features.dim
    if shape is None or len(shape) != 2 or (isinstance(shape[1], int) and shape[1] != dim):
        got = "inputs " + ", ".join(f"{i.name}{i.shape}" for i in inputs)
        raise ZcError(f"{path}: the model takes {got} but the features are {dim} wide: "
                      "not this specialist's model")
    import numpy as np

    probes = m.model.probes
    rows = np.zeros((len(probes), dim), np.float32)
    for i, probe in enumerate(probes):
        if (k := max(probe.row, default=0)) >= dim:
            raise ZcError(f"{path}: $.model.probes[{i}].row.{k}: outside the {dim} features; distil the "
                          "specialist again")
        rows[i, list(probe.row)] = list(probe.row.values())
    got = _scored(session, rows, path, dim)
    probs = got[want]
    if probs.shape != (len(rows), len(m.model.classes)):
        raise ZcError(f"{path}: the model gives {probs.shape[-1]} classes but $.model.classes lists "
                      f"{len(m.model.classes)}: not this specialist's model")
    labels = got.get("label")
    # the model names its classes: they must be the manifest's
    if labels is not None and labels.dtype == object:
        top = np.sort(probs, axis=1)
        clear = top[:, -1] - top[:, -2] > 1e-6 if probs.shape[1] > 1 else np.ones(len(rows), bool)
        for i in np.flatnonzero(clear):
            named, placed = str(labels[i]), m.model.classes[int(np.argmax(probs[i]))]
            if named != placed:
                raise ZcError(f"{path}: the model names its class `{named}` where $.model.classes says "
                              f"`{placed}`: the class order does not match the model's outputs")
    for i, probe in enumerate(probes):  # every class's probability on every probe, by name
        recorded = np.array([probe.probabilities[c] for c in m.model.classes])
        off = np.abs(probs[i] - recorded)
        j = int(np.argmax(off))
        if off[j] > PROBE_TOLERANCE:
            moved = np.allclose(np.sort(probs[i]), np.sort(recorded), rtol=0.0, atol=PROBE_TOLERANCE)
            raise ZcError(f"{path}: on $.model.probes[{i}] the model gives `{m.model.classes[j]}` "
                          f"{float(probs[i, j]):.6f} where distillation recorded {recorded[j]:.6f}: "
                          + ("the class order does not match the model's outputs" if moved
                             else "not this specialist's model"))


def _scored(session: Any, rows: Any, path: str, dim: int) -> dict[str, Any]:
    """The model's outputs by name on feature rows; ZcError when it cannot score them."""
    from ..errors import ZcError

    names = [o.name for o in session.get_outputs()]
    try:
        return dict(zip(names, session.run(names, {session.get_inputs()[0].name: rows})))
    except Exception as exc:  # onnxruntime raises its own exception types
        raise ZcError(f"{path}: the model cannot score rows of the {dim} features: {exc}") from None


def probes_for(session: Any, pool: Any, classes: tuple[str, ...]) -> tuple[Probe, ...]:
    """Distillation's probes (`Model.probes`): for each class, the row of `pool` (training feature
    rows) where the model gives it the highest probability, with the model's probabilities there.
    Scored again on load, they make any two classes whose probabilities differ on one of these rows
    impossible to swap in `$.model.classes` unnoticed (the earliest row wins a tie)."""
    import numpy as np

    probs = _scored(session, pool.astype(np.float32), "the exported model", pool.shape[1])["probabilities"]
    out = []
    for j in range(len(classes)):
        i = int(np.argmax(probs[:, j]))
        row = {int(k): float(pool[i, k]) for k in np.flatnonzero(pool[i])}
        out.append(Probe(row, {c: float(p) for c, p in zip(classes, probs[i])}))
    return tuple(out)


def text_probes_for(logits: Any, texts: list[str], classes: tuple[str, ...]) -> tuple[TextProbe, ...]:
    """Distillation's text probes (`Model.text_probes`): for each class, the text of `texts` on which the
    exported model's logit for it leads the best other class's by the most (the earliest on a tie), with
    the model's logits there (`logits`: (len(texts), K), columns in `classes` order)."""
    import numpy as np

    out = []
    for j in range(len(classes)):
        others = np.delete(logits, j, axis=1)
        lead = logits[:, j] - (others.max(axis=1) if others.shape[1] else 0.0)
        i = int(np.argmax(lead))
        out.append(TextProbe(texts[i], {c: float(v) for c, v in zip(classes, logits[i])}))
    return tuple(out)


def check_text_probes(m: Manifest, logits: Any, path: str) -> None:
    """ZcError unless the model ranks the classes on each text probe as distillation recorded, for every
    pair recorded more than RANK_MARGIN apart (`logits`: the model's on the probes' texts, in
    `$.model.classes` order). A swapped `$.model.classes` reverses every pair it moves apart: a swap
    of two classes is refused whenever one of them led the other by more than RANK_MARGIN on a probe."""
    import numpy as np

    from ..errors import ZcError

    classes = m.model.classes
    for i, probe in enumerate(m.model.text_probes):
        recorded = np.array([probe.logits[c] for c in classes])
        got = logits[i]
        ahead, behind = np.nonzero((recorded[:, None] - recorded[None, :] > RANK_MARGIN) & (
            got[:, None] <= got[None, :]))
        if len(ahead):
            a, b = int(ahead[0]), int(behind[0])
            moved = np.allclose(np.sort(got), np.sort(recorded), rtol=0.0, atol=RANK_MARGIN)
            raise ZcError(f"{path}: on $.model.text_probes[{i}] the model ranks `{classes[b]}` "
                          f"({float(got[b]):.3f}) at or above `{classes[a]}` ({float(got[a]):.3f}) where "
                          f"distillation recorded `{classes[a]}` {recorded[a]:.3f} above `{classes[b]}` "
                          f"{recorded[b]:.3f} (logits): "
                          + ("the class order does not match the model's outputs" if moved
                             else "not this specialist's model"))
