"""The specialist manifest: versions, hashes, splits, features, classes, calibration, τ and metrics."""

from __future__ import annotations

from typing import Any

import msgspec

from .features import FeatureSpec

MANIFEST_VERSION = 2  # 2: `Model.files` and `Model.text` (transformer specialists); 1 still loads


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
    tau: float  # answer when calibrated confidence >= tau; inf: never
    target_precision: float
    alpha: float
    calibration_answered: int
    calibration_correct: int
    calibration_lower_bound: float
    # pairwise specialists: the figures above count decisions where an action fits; where none
    # does, abstaining is bounded separately (0 and no decisions for classifiers)
    target_abstention: float = 0.0
    calibration_none_fits: int = 0
    calibration_abstained: int = 0
    calibration_abstention_lower_bound: float = 0.0


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


def encode(m: Manifest) -> bytes:
    return msgspec.json.format(msgspec.json.encode(m), indent=2) + b"\n"


def decode(data: bytes, path: str) -> Manifest:
    from ..errors import ZcError

    try:
        head = msgspec.json.decode(data, type=dict)
    except msgspec.DecodeError as exc:
        raise ZcError(f"{path}: not a specialist manifest: {exc}") from None
    version = head.get("version") if isinstance(head, dict) else None
    if not isinstance(version, int):
        raise ZcError(f"{path}: not a specialist manifest (no `version`)")
    if version > MANIFEST_VERSION:
        raise ZcError(f"{path}: manifest version {version} is newer than this zc supports "
                      f"({MANIFEST_VERSION}); upgrade zcompile")
    try:
        return msgspec.json.decode(data, type=Manifest)
    except msgspec.ValidationError as exc:
        raise ZcError(f"{path}: corrupt specialist manifest: {exc}") from None
