"""Argument candidates: the typed values seen before a decision that a call's arguments may copy.

`extract_candidates(messages)` turns the conversation before a decision (OpenAI chat format, system
prompt excluded) into a bounded list of `Candidate` values: spans of user messages, scalar leaves of
tool outputs (with their JSON key) and arguments of earlier calls (with their name). The chat
importer stores them in each receipt (`Receipt.candidates`), the gateway computes them from the
request's messages, and the argument model (`qroute.arguments`) chooses among them.
"""

from __future__ import annotations

import enum
import json
import math
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from functools import lru_cache
from typing import Any, Literal

import msgspec

from ..errors import ZcError, json_problem

Scalar = str | int | float | bool
Source = Literal["user", "tool", "call", "constant"]

WINDOW = 64  # messages read before a decision (older values are rarely copied)
LIMIT = 256  # candidates kept per decision (the most recent)
MAX_CHARS = 200_000  # characters of one message read (a longer one is cut)
MAX_DEPTH = 32  # JSON nesting followed in a tool output or call
MAX_LEAVES = 2_000  # scalar leaves read from one tool output or call
MAX_VALUE_CHARS = 100  # longer strings are not candidates (free text, not a value to copy)

# user spans: emails, then identifier-like runs of letters/digits joined by `_`, `-` or `.` (this
# covers words, numbers, decimals, ISO dates, ids such as `mia_li_3668`, `8JX2WO`, `HAT069`)
_SPAN = re.compile(r"[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)+|[A-Za-z0-9]+(?:[_.\-][A-Za-z0-9]+)*")
_INT = re.compile(r"0|[1-9][0-9]{0,17}")
_FLOAT = re.compile(r"(?:0|[1-9][0-9]{0,17})\.[0-9]{1,12}")


class Candidate(msgspec.Struct, frozen=True, array_like=True):
    """A value available at decision time. Encoded as a JSON array `[value, source, key, age, count]`."""

    value: Scalar
    source: Source  # user: a span of a user message; tool: a leaf of a tool output; call: an
    # argument of an earlier call; constant: a value often seen for this argument in training
    key: str = ""  # the JSON key of a tool output leaf; `action.argument` of a call argument (the
    # leaf's own key inside a nested argument); "" for user spans and non-JSON text
    age: int = 0  # messages ago it was last seen (1: the last message; 0: not from the conversation)
    count: int = 1  # times seen


def normalize(value: Any) -> str:
    """A value's canonical JSON: keys sorted, integral floats as integers (1 == 1.0), bool kept apart."""
    if isinstance(value, (str, int, float)):
        return _normalize_scalar(value)
    return json.dumps(_canonical(value), sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def same_call(action: str | None, arguments: Any, label: str | None, label_arguments: Any) -> bool:
    """Whether a call equals another (a teacher's): the same action, and arguments equal as canonical
    JSON (`normalize`: key order ignored, 1 == 1.0); no arguments (None) is the empty object."""
    if action is None or action != label:
        return False
    try:
        return normalize(dict(arguments or {})) == normalize(dict(label_arguments or {}))
    except (TypeError, ValueError):  # not an object of JSON values: equal to no call
        return False


@lru_cache(maxsize=8192, typed=True)  # typed: True, 1 and 1.0 are cached apart
def _normalize_scalar(value: Scalar) -> str:
    return json.dumps(_canonical(value), ensure_ascii=False)


def _canonical(value: Any) -> Any:
    if isinstance(value, bool) or value is None or isinstance(value, (int, str)):
        return value
    if isinstance(value, float):
        return int(value) if value.is_integer() and abs(value) < 2**63 else value
    if isinstance(value, Mapping):
        return {str(k): _canonical(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_canonical(v) for v in value]
    raise TypeError(f"not a JSON value: {type(value).__name__}")


# ---------------------------------------------------------------------------------------------
# candidates


def extract_candidates(messages: Sequence[Mapping[str, Any]], limit: int = LIMIT,
                       window: int = WINDOW, memo: dict[int, list] | None = None) -> list[Candidate]:
    """The typed values a call's arguments may copy, from the conversation before the decision.

    Reads the last `window` messages newest first; a value is one candidate per (value, source,
    key) with the age of its latest sighting and its count in the window. Deterministic, bounded
    per decision (each message read up to `MAX_CHARS`, `MAX_LEAVES` leaves, `MAX_DEPTH` levels;
    so importing a conversation is linear in its length), and at most `limit` candidates, the most
    recent kept, ordered by age then first sighting. System (and developer) messages and
    assistant text are skipped.

    Args:
        messages: OpenAI chat messages (`role`, `content`, `tool_calls`), oldest first.
        limit: the most candidates returned.
        window: the most recent messages read.
        memo: the values read from each message, by the message's `id()`, kept across calls: a
            caller asking for every decision of one conversation (and keeping its messages alive,
            unchanged) reads each message once instead of once per decision after it.
    """
    seen: dict[tuple[str, str, str], list[Any]] = {}  # (normalized, source, key) -> [value, age, count]
    total = len(messages)
    for i in range(total - 1, max(total - window, 0) - 1, -1):
        m = messages[i]
        found = memo.get(id(m)) if memo is not None else None
        if found is None:
            found = _found(m)
            if memo is not None:
                memo[id(m)] = found
        age = total - i
        for ident, value in found:
            hit = seen.get(ident)
            if hit is not None:
                hit[2] += 1
            elif len(seen) < limit:
                seen[ident] = [value, age, 1]
    # insertion order is newest first already; the sort only makes ties explicit
    out = [Candidate(v, s, k, a, c) for (_, s, k), (v, a, c) in seen.items()]
    return sorted(out, key=lambda c: c.age)


def _found(m: Any) -> list[tuple[tuple[Any, str, str], Scalar]]:
    """The values one message offers, each with its identity (normalized value, source, key)."""
    if not isinstance(m, Mapping):
        return []
    role = m.get("role")
    if role == "user":
        found = [(v, "user", "") for v in _spans(_text(m.get("content")))]
    elif role == "tool":
        found = [(v, "tool", k) for k, v in _tool_leaves(_text(m.get("content")))]
    elif role == "assistant":
        found = [(v, "call", k) for k, v in _call_leaves(m.get("tool_calls"))]
    else:
        return []
    return [((normalize(value), source, key), value) for value, source, key in found]


def _text(content: Any) -> str:
    """A message's text: a string, or the text parts of a content list; cut at `MAX_CHARS`."""
    if isinstance(content, str):
        return content[:MAX_CHARS]
    if isinstance(content, list):
        parts = [p.get("text") for p in content if isinstance(p, Mapping)]
        return "\n".join(p for p in parts if isinstance(p, str))[:MAX_CHARS]
    return ""


def _spans(text: str) -> list[Scalar]:
    """Emails and identifier-like spans of a text, digits typed as numbers."""
    out: list[Scalar] = []
    for span in _SPAN.findall(text):
        if len(span) > MAX_VALUE_CHARS:
            continue
        if _INT.fullmatch(span):
            out.append(int(span))
        elif _FLOAT.fullmatch(span):
            out.append(float(span))
        else:
            out.append(span)
    return out


def _tool_leaves(text: str) -> list[tuple[str, Scalar]]:
    """Scalar leaves of a JSON tool output with their keys; a non-JSON output gives its spans."""
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        return [("", v) for v in _spans(text)]
    return _leaves(data, "")


def _call_leaves(calls: Any) -> list[tuple[str, Scalar]]:
    """Scalar leaves of the arguments of an assistant message's tool calls, keyed `action.argument`."""
    out: list[tuple[str, Scalar]] = []
    if not isinstance(calls, list):
        return out
    for call in calls:
        fn = call.get("function") if isinstance(call, Mapping) else None
        args = fn.get("arguments") if isinstance(fn, Mapping) else None
        if isinstance(args, str):
            try:
                args = json.loads(args[:MAX_CHARS])
            except (ValueError, RecursionError):
                continue
        if isinstance(args, Mapping):
            action = fn.get("name") if isinstance(fn.get("name"), str) else ""
            out += [(f"{action}.{k}", v) for k, v in _leaves(args, "")]
    return out


def _leaves(data: Any, key: str) -> list[tuple[str, Scalar]]:
    """Scalar leaves in document order with the nearest object key (list items keep their list's key)."""
    out: list[tuple[str, Scalar]] = []
    stack: list[tuple[Any, str, int]] = [(data, key, 0)]
    while stack and len(out) < MAX_LEAVES:
        node, k, depth = stack.pop()
        if isinstance(node, Mapping):
            if depth < MAX_DEPTH:
                stack += [(v, str(kk), depth + 1) for kk, v in reversed(list(node.items()))]
        elif isinstance(node, list):
            if depth < MAX_DEPTH:
                stack += [(v, k, depth + 1) for v in reversed(node)]
        elif isinstance(node, str):
            if node and len(node) <= MAX_VALUE_CHARS:
                out.append((k, node))
        elif isinstance(node, bool) or isinstance(node, int):
            out.append((k, node))
        elif isinstance(node, float) and math.isfinite(node):
            out.append((k, int(node) if node.is_integer() and abs(node) < 2**63 else node))
    return out


def as_candidates(candidates: Sequence[Any] | None) -> tuple[Candidate, ...]:
    """Candidates as `Candidate` structs, from structs or `[value, source, key, age, count]` arrays
    (as receipts hold them); anything else is refused with its `$.candidates` path."""
    if not candidates:
        return ()
    if all(isinstance(c, Candidate) for c in candidates):
        return tuple(candidates)
    try:
        return msgspec.convert(list(candidates), tuple[Candidate, ...])
    except msgspec.ValidationError as exc:
        p = json_problem(exc)
        raise ZcError(f"{p.path.replace('$', '$.candidates', 1)}: {p.problem}") from None


# ---------------------------------------------------------------------------------------------
# provenance


class Provenance(enum.Enum):
    """Where an argument value came from, strongest first: typed by the user, used in an earlier call,
    picked from a tool output, a constant of training; `none`: no candidate holds it."""

    USER = "user"
    CALL = "call"
    TOOL = "tool"
    CONSTANT = "constant"
    NONE = "none"


RANK = {p: i for i, p in enumerate(Provenance)}  # lower is stronger


def provenance_of(candidates: Sequence[Any] | None) -> dict[str, Provenance]:
    """Each candidate value's strongest source, by normalized value (`normalize`): look a value up
    with `value_provenance`. One pass over the candidates (structs or receipt arrays)."""
    best: dict[str, Provenance] = {}
    for c in as_candidates(candidates):
        key, p = normalize(c.value), Provenance(c.source)
        if key not in best or RANK[p] < RANK[best[key]]:
            best[key] = p
    return best


def value_provenance(value: Any, sources: Mapping[str, Provenance]) -> Provenance:
    """A value's provenance in `sources` (`provenance_of`); for an object or array, the weakest of its
    scalar leaves (an empty one is a constant); `none` for a value no candidate holds."""
    if isinstance(value, Mapping):
        value = list(value.values())
    if isinstance(value, (list, tuple)):
        parts = [value_provenance(v, sources) for v in value]
        return max(parts, key=RANK.__getitem__, default=Provenance.CONSTANT)
    try:
        return sources.get(normalize(value), Provenance.NONE)
    except (TypeError, ValueError):
        return Provenance.NONE


def call_provenance(arguments: Mapping[str, Any] | None, sources: Mapping[str, Provenance]
                    ) -> tuple[dict[str, Provenance], Provenance]:
    """Each argument's provenance (`value_provenance`) and the call's: the weakest of them (a call
    without arguments is a constant)."""
    each = {str(k): value_provenance(v, sources) for k, v in (arguments or {}).items()}
    return each, max(each.values(), key=RANK.__getitem__, default=Provenance.CONSTANT)


Grounding = Literal["bare", "typed", "picked"]
GROUNDINGS: tuple[Grounding, ...] = ("bare", "typed", "picked")


def grounding(arguments: Mapping[str, Any] | None, candidates: Sequence[Any] | None) -> Grounding:
    """What kind of evidence a call's arguments are: `bare` (no argument values), `typed` (every scalar
    value of them is in the user's own words: its `call_provenance` is `user`), `picked` (some value
    came only from a tool output, an earlier call, a training constant or nowhere)."""
    if not list(_scalars(arguments or {})):  # 0, False and "" are values too
        return "bare"
    _, weakest = call_provenance(arguments, provenance_of(candidates))
    return "typed" if weakest is Provenance.USER else "picked"


def _scalars(value: Any, depth: int = 0) -> Iterator[Any]:
    """The scalar leaves of a JSON value (None left out), at most `MAX_DEPTH` deep."""
    if isinstance(value, Mapping):
        items: Iterable[Any] = value.values()
    elif isinstance(value, list | tuple):
        items = value
    else:
        if value is not None:
            yield value
        return
    if depth < MAX_DEPTH:
        for v in items:
            yield from _scalars(v, depth + 1)
