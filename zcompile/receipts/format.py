"""The receipt format: the Receipt struct, its version, and the error every receipt reader raises."""

from __future__ import annotations

import re
from typing import Annotated, Any

import msgspec

from ..errors import ZcError
from .candidates import Candidate

__all__ = ["FORMAT_MAJOR", "FORMAT_VERSION", "Receipt", "ReceiptError", "newer_major"]

# MAJOR.MINOR. A minor version only adds optional fields: a reader ignores the fields of a newer
# minor version (msgspec schema evolution). A new major version changes meaning: it is refused.
# 1.0: the first format (no `version` field: a receipt without one is 1.0).
# 1.1: `version` and `arguments` (the call's arguments).
# 1.2: `candidates` (values seen before the decision that a call's arguments may copy).
FORMAT_MAJOR = 1
FORMAT_VERSION = "1.2"

NonNegative = Annotated[float, msgspec.Meta(ge=0)]
Probability = Annotated[float, msgspec.Meta(ge=0, le=1)]
Version = Annotated[str, msgspec.Meta(pattern=r"^[0-9]{1,6}\.[0-9]{1,6}$")]


class Receipt(msgspec.Struct, frozen=True, omit_defaults=True):
    """One logged decision: what was seen, what was legal, who answered, and whether it was right.

    Attributes:
        id: unique id of the decision (for chat imports: `"{conversation}:{message index}"`).
        task: the task the decision belongs to; distillation splits by task, never by row.
        state: the runtime state the decision was taken in (the policy's state schema).
        tier: the rung that answered (`compiler`, `specialist`, a tier name, `remote`).
        ts: unix seconds; None means "order in the file".
        policy: the identity (`Policy.sha256`) of the policy the legal set came from, or "".
        intent: the active intent, if any.
        legal: the legal actions offered, if known.
        model: the model that answered, if any.
        action: the action taken; None when the rung abstained.
        arguments: the call's arguments (a JSON object); None for a text reply, an abstention,
            or when they are not known.
        candidates: the values seen before the decision that a call's arguments may copy
            (`receipts.candidates`: `[value, source, key, age, count]` each); None: not recorded.
        confidence: the rung's confidence in `action`, in [0, 1].
        latency_ms: time taken by the rung.
        cost: the rung's cost for this decision.
        verified: whether the action was judged correct (None: not judged).
        gold: the correct action, when known.
        meta: anything else (free-form JSON).
        version: the format version, `MAJOR.MINOR`. Writers always write it, as FORMAT_VERSION:
            a receipt this build holds has only this build's fields. A line without it is 1.0,
            which is read as a subset of this version (1.1 only adds optional fields).
    """

    id: str
    task: str
    state: dict[str, Any]
    tier: str
    ts: float | None = None
    policy: str = ""
    intent: str | None = None
    legal: tuple[str, ...] | None = None
    model: str | None = None
    action: str | None = None
    arguments: dict[str, Any] | None = None
    candidates: tuple[Candidate, ...] | None = None
    confidence: Probability | None = None
    latency_ms: NonNegative = 0.0
    cost: NonNegative = 0.0
    verified: bool | None = None
    gold: str | None = None
    meta: dict[str, Any] = {}
    version: Version = FORMAT_VERSION


class ReceiptError(ZcError):
    """A receipt or log file that cannot be read; the message is `FILE:LINE: $.path: problem`."""


def newer_major(version: object) -> str | None:
    """The problem with a `version` this build cannot read (a newer major version), or None."""
    if not isinstance(version, str) or not re.fullmatch(r"[0-9]{1,6}\.[0-9]{1,6}", version):
        return None
    if int(version.split(".")[0]) > FORMAT_MAJOR:
        return (f"$.version: receipt format {version} is newer than this zc reads "
                f"({FORMAT_MAJOR}.x): upgrade zcompile to read it")
    return None
