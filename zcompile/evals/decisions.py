"""`zc eval --decisions`: one row per replayed decision, a versioned JSON Lines format a user can read."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import msgspec

from ..receipts.candidates import Provenance

VERSION = 1  # of the row format: a reader refuses another major version


class DecisionRow(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=False):
    """What the ladder did with one held-out decision, and how the judges took it.

    `strict` / `acceptable` judge what left the teacher's hands: a complete call (name and
    arguments; acceptable also when the teacher made it later, `receipts.judge`), a bare name (by
    name), or a reply the specialist handed on (right when the teacher replied); None when the
    decision fell through to the teacher. `provenance` names where each argument value of an
    answered call was seen before (`receipts.candidates.Provenance`), `source` the call's weakest.
    `novelty` is the state's distance to the specialist's training data (None without a novelty
    model or when the specialist was not asked). `text` is the reply a live tier wrote and `graded`
    why the grader failed one it wrote before the teacher took the decision (`zc eval --tiers --grader`)."""

    version: int = VERSION
    id: str
    task: str
    rung: str  # compiler | specialist | a tier | remote (fell through to the teacher)
    action: str | None
    kind: str  # call | name | reply | none
    arguments: Any = None
    provenance: dict[str, Provenance] | None = None
    source: Provenance | None = None
    confidence: float | None = None  # the specialist's (None when it was not asked)
    novelty: float | None = None
    handed_on: bool = False  # the specialist picked a reply and handed it to a text tier
    label: str | None = None  # gold, else the teacher's action; None: no offered action fits
    strict: bool | None = None
    acceptable: bool | None = None
    text: str | None = None  # the reply a live tier wrote (`zc eval --tiers`)
    graded: str | None = None  # the grader's reasons when it failed a reply a tier wrote


_ENCODER = msgspec.json.Encoder()
_KEYS = frozenset(DecisionRow.__struct_fields__)
_ADDED = frozenset({"text", "graded"})  # fields rows written before them lack


def encode(rows: Iterable[DecisionRow]) -> bytes:
    """The rows as JSON Lines."""
    buf = bytearray()
    for r in rows:
        _ENCODER.encode_into(r, buf, len(buf))
        buf += b"\n"
    return bytes(buf)


def is_decisions_file(path: Path) -> bool:
    """Whether `path` holds rows `encode` wrote (what `zc eval --decisions` may replace): its first
    line is a row object."""
    with open(path, "rb") as f:
        first = f.readline(1 << 16)
    try:
        row = msgspec.json.decode(first)
    except (msgspec.DecodeError, RecursionError):
        return False
    return isinstance(row, dict) and _KEYS - _ADDED <= row.keys() <= _KEYS

