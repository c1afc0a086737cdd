"""The specialist manifest: versions, hashes, splits, features, classes, calibration, τ and metrics."""

from __future__ import annotations

import hashlib
from typing import Any

import msgspec

from .features import FeatureSpec

# 3: cross-fitted τ with a named guarantee (`Threshold.guarantee`, `.statement`, `.n`), `ArgumentModel`,
# and `sha256` over the whole manifest (any edit is refused). Only version 3 is read.
MANIFEST_VERSION = 3
READS = (3,)


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


class Model(msgspec.Struct, frozen=True):
    kind: str  # logistic | mlp | transformer
    classes: tuple[str, ...]  # the model's output columns, a subset of the policy's actions
    file: str
    sha256: str
    params: dict[str, Any] = {}
    files: dict[str, str] = {}  # other files the model needs (tokenizer.json): name -> sha256, verified on load
    text: TextInput | None = None  # set for models that read text (transformer); None: feature vectors


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
    statement: str = ""  # the guarantee in words, with its n
    n: int = 0  # decisions the threshold was chosen on
    source: str = "cross-fitted"  # cross-fitted (K folds over train + calibration) | calibration split
    # pairwise specialists: the figures above count decisions where an action fits; where none
    # does, abstaining is bounded separately (0 and no decisions for classifiers)
    target_abstention: float = 0.0
    calibration_none_fits: int = 0
    calibration_abstained: int = 0
    calibration_abstention_lower_bound: float = 0.0


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
    arguments: Any = None  # the argument model (`arguments.ArgumentModelSpec` as data); None: no arguments learned


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


def seal_manifest(m: Manifest) -> Manifest:
    """`m` with its sha256 set."""
    m = msgspec.structs.replace(m, sha256="")
    return msgspec.structs.replace(m, sha256=hashlib.sha256(msgspec.json.encode(m)).hexdigest())


def identity(m: Manifest) -> str:
    """The sha256 of what decides (the manifest without its gate, metrics and seal): unchanged when
    `zc promote` re-gates the specialist, so its shadow records stay evidence for it."""
    m = msgspec.structs.replace(m, gate=Gate(False, (), ()), metrics={}, sha256="")
    return hashlib.sha256(msgspec.json.encode(m)).hexdigest()


def encode(m: Manifest) -> bytes:
    """The manifest file's bytes, sealed (sha256 set)."""
    return msgspec.json.format(msgspec.json.encode(seal_manifest(m)), indent=2) + b"\n"


def decode(data: bytes, path: str) -> Manifest:
    from ..errors import ZcError

    try:
        head = msgspec.json.decode(data, type=dict)
    except msgspec.DecodeError as exc:
        raise ZcError(f"{path}: not a specialist manifest: {exc}") from None
    version = head.get("version") if isinstance(head, dict) else None
    if not isinstance(version, int):
        raise ZcError(f"{path}: not a specialist manifest (no `version`)")
    if version not in READS:
        newer = isinstance(version, int) and version > MANIFEST_VERSION
        raise ZcError(f"{path}: manifest version {version} is not read by this zc (it reads "
                      f"{', '.join(map(str, READS))}); " + ("upgrade zcompile" if newer else "distil the specialist again"))
    try:
        m = msgspec.json.decode(data, type=Manifest)
    except msgspec.ValidationError as exc:
        raise ZcError(f"{path}: corrupt specialist manifest: {exc}") from None
    if not m.sha256 or seal_manifest(m).sha256 != m.sha256:
        raise ZcError(f"{path}: manifest does not match its sha256 (edited, tampered or corrupt); distil the "
                      "specialist again")
    return m
