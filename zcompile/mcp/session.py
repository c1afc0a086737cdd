"""The MCP gateway's sessions: each state key's calls, as chat messages, turned into the policy's state."""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import anyio
import msgspec

from ..errors import ZcError
from ..receipts.chat import ChatSummary, decision_state, default_extract

Extract = Callable[[list[dict], int, dict], dict]
SESSION_META = "io.zcompile/session"  # the default `_meta` key naming a session under 2026-07-28
USER_META = "io.zcompile/user"  # `_meta` key: the agent's latest user message, {"turn": N, "text": …}
MAX_SESSIONS = 10_000  # state keys kept at once; the least recently used is forgotten past it


class MissingStateKey(ZcError):
    """A request that names no state key where this gateway needs one (answered as invalid params)."""


@dataclass(frozen=True, slots=True)
class StateKeySpec:
    """How a 2026-07-28 request names its session: `auto` (the default), `meta:KEY`, `header:NAME`,
    `auth` or `instance` (docs/mcp.md, "State keys")."""

    kind: str
    name: str = ""

    @classmethod
    def parse(cls, text: str) -> StateKeySpec:
        """One of the forms above; ZcError naming them otherwise."""
        kind, sep, name = text.partition(":")
        if text in ("auth", "auto", "instance"):
            return cls(text, SESSION_META if text == "auto" else "")
        if kind in ("meta", "header") and sep and name.strip():
            return cls(kind, name.strip().lower() if kind == "header" else name.strip())
        raise ZcError(f"--state-key `{text}`: expected `auto`, `meta:KEY`, `header:NAME`, `auth` "
                      "or `instance`")

    def describe(self) -> str:
        return {"auth": "the bearer token's principal", "meta": f'`_meta["{self.name}"]`',
                "header": f"the `{self.name}` header", "instance": "this gateway's one agent",
                "auto": f'the token\'s principal, else `_meta["{self.name}"]`, '
                        "else this gateway's one agent"}[self.kind]


def key_of(*, modern: bool, spec: StateKeySpec, session_id: str | None, headers: Mapping[str, str] | None,
           meta: Mapping[str, Any] | None, principal: tuple | None, stdio_key: str) -> str:
    """The state key of one request (docs/mcp.md, "State keys").

    2025-11-25: the `Mcp-Session-Id` over HTTP, the connection (this process) over stdio.
    2026-07-28: the declared key (`spec`); over stdio a request without it is this process's agent;
    over HTTP it is refused (MissingStateKey), never pooled with other agents' state. `auto` takes the
    verified token's principal, else the request's `_meta` session key, else this gateway's one
    agent (`instance`, announced at start-up).
    """
    if not modern:
        if headers is None:
            return stdio_key
        if session_id is None:
            raise MissingStateKey("the request carries no `Mcp-Session-Id` (initialize first)")
        return "session:" + session_id
    value: Any = None
    if principal is not None and spec.kind in ("auth", "auto"):
        digest = hashlib.sha256(msgspec.json.encode([str(p) if p is not None else None for p in principal]))
        return "auth:" + digest.hexdigest()[:16]  # the token itself is never a key nor in a receipt
    if spec.kind in ("meta", "auto"):
        value = (meta or {}).get(spec.name)
    elif spec.kind == "header" and headers is not None:
        value = headers.get(spec.name)
    if spec.kind == "instance" or (spec.kind == "auto" and not (isinstance(value, str) and value)):
        return stdio_key if headers is None else "instance:" + stdio_key
    if value is None and headers is None:
        return stdio_key
    if not isinstance(value, str) or not value:
        raise MissingStateKey(f"this gateway keys session state by {spec.describe()} under protocol "
                              "2026-07-28; the request carries none (or not a non-empty string)")
    return f"meta:{value}" if spec.kind == "auto" else f"{spec.kind}:{value}"


def merge(derived: dict[str, Any], context: Mapping[str, Any], path: str = "$") -> dict[str, Any]:
    """The derived state with the static context added; a context value where the derivation
    already put one is refused (ZcError naming its `$.path`): what passed through is not overridden."""
    out = dict(derived)
    for k, v in context.items():
        here = f"{path}.{k}"
        if k not in out:
            out[k] = v
        elif isinstance(out[k], dict) and isinstance(v, Mapping):
            out[k] = merge(out[k], v, here)
        else:
            raise ZcError(f"static context {here}: the state derivation sets this field itself "
                          "(the context may only add fields)")
    return out


def result_text(content: list[Any], structured: Any) -> str:
    """A tool result as the text of a chat `tool` message: its text blocks, else its structured
    content as JSON, else nothing."""
    texts = [c.text for c in content if getattr(c, "type", None) == "text"]
    if texts:
        return "\n".join(texts)
    if structured is not None:
        return msgspec.json.encode(structured).decode()
    return ""


class Session:
    """One state key: the calls that succeeded through the gateway, as an OpenAI chat transcript
    (an assistant message with the tool call, then the tool's message), and the state the chat
    importer's extractor derives from it (`receipts.chat.decision_state`), plus the static context."""

    def __init__(self, key: str, extract: Extract, context: Mapping[str, Any]) -> None:
        self.key, self.extract, self.context = key, extract, context
        self.task = "mcp-" + (key if key.startswith("stdio-")
                              else hashlib.sha256(key.encode()).hexdigest()[:16])
        self.messages: list[dict[str, Any]] = []  # for a custom extractor, which reads the transcript
        self.user_turns = 0  # user messages taken from `_meta[USER_META]`
        self.summary = ChatSummary() if extract is default_extract else None  # O(1) per call, same state
        self.lock = anyio.Lock()  # one call at a time per key: the state advances in order
        self.listeners: Any = None  # 2026-07-28: this key's subscriptions/listen fan-out (gateway.py)

    def state(self) -> dict[str, Any]:
        """The state of the next decision (ZcError when the extractor or the context fails)."""
        if self.summary is not None:
            derived = self.summary.state()
        else:
            conversation = {"id": self.task, "task": self.task, "messages": self.messages}
            derived = decision_state(self.messages, len(self.messages), conversation, self.extract,
                                     "$.messages")
        return merge(derived, self.context)

    def user(self, turn: int, text: str) -> None:
        """The agent's user message number `turn` (1, 2, …): taken into the state when it is newer
        than the last one taken (a request of the same turn repeats it), as a chat `user` message."""
        if turn > self.user_turns:
            self.user_turns = turn
            self._add({"role": "user", "content": text})

    def _add(self, m: dict[str, Any]) -> None:
        if self.summary is not None:
            self.summary.add(m)  # the summary is the whole state: no transcript kept
        else:
            self.messages.append(m)

    def record(self, action: str, arguments: Mapping[str, Any], text: str) -> None:
        """A call the server answered with success: the state advances by it."""
        call_id = f"call_{len(self.messages) // 2}"
        call = {"role": "assistant", "content": None, "tool_calls": [{
            "id": call_id, "type": "function",
            "function": {"name": action, "arguments": msgspec.json.encode(dict(arguments)).decode()}}]}
        reply = {"role": "tool", "tool_call_id": call_id, "content": text}
        self._add(call)
        self._add(reply)


def user_message(meta: Mapping[str, Any] | None) -> tuple[int, str] | None:
    """(turn, text) of a request's `_meta[USER_META]` (None when it has none); MissingStateKey naming the
    key when it is not `{"turn": N >= 1, "text": "…"}`."""
    value = (meta or {}).get(USER_META)
    if value is None:
        return None
    turn = value.get("turn") if isinstance(value, Mapping) else None
    text = value.get("text") if isinstance(value, Mapping) else None
    if not (isinstance(turn, int) and not isinstance(turn, bool) and turn >= 1 and isinstance(text, str)):
        raise MissingStateKey(f'`_meta["{USER_META}"]`: expected {{"turn": N (1 or more), '
                        '"text": "the user\'s message"}')
    return turn, text


class Sessions:
    """The sessions by state key, the least recently used forgotten past `limit`."""

    def __init__(self, extract: Extract, context: Mapping[str, Any], limit: int = MAX_SESSIONS) -> None:
        self.extract, self.context, self.limit = extract, context, limit
        self.stdio_key = "stdio-" + uuid.uuid4().hex[:12]
        self._by_key: dict[str, Session] = {}

    def get(self, key: str) -> Session:
        s = self._by_key.pop(key, None)
        if s is None:
            s = Session(key, self.extract, self.context)
            while len(self._by_key) >= self.limit:
                self._by_key.pop(next(iter(self._by_key)))
        self._by_key[key] = s
        return s
