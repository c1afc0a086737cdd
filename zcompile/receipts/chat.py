"""Chat-log import: OpenAI-format conversations to receipts, and the state extractor they share."""

from __future__ import annotations

import ast
import importlib
import itertools
import os
import re
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Annotated, Any, Literal, get_args

import msgspec

from ..errors import ZcError, did_you_mean, json_problem
from .candidates import WINDOW, extract_candidates
from .format import Receipt, ReceiptError
from .io import decoded_lines
from .request import request_features

__all__ = ["EXTRACT_VERSION", "RESPOND", "SHAPES", "TOOL_TEXT_LIMIT", "ChatMessage", "ChatSummary",
           "AssistantTurn", "call_arguments", "decision", "decision_state", "default_extract",
           "extractor_name", "import_chat", "load_extractor"]

EXTRACT_VERSION = 4  # 1: roles, last texts, counts, history;
# 2: + last.result, recent.*, mentioned.*, reused.*;
# 3: + unused.* (an identifier the user gave that no call used yet), calls_since_user;
# 4: + request.* (cues of what the last user message asks for: receipts.request, its REQUEST_VERSION 1)
RESPOND = "respond"  # the action of an assistant message without a tool call (a text reply)
TOOL_TEXT_LIMIT = 2000  # characters of the last tool message kept in `last.tool_text`
MAX_ARGUMENT_DEPTH = 64  # arguments nested deeper are refused (kept as unknown), so receipts stay readable

_W = "A-Za-z0-9_"
# The shape of each argument the bundled airline policy's signatures declare as an identifier-like
# `text`: a value of that shape in the last user message is `mentioned.<argument>`.
SHAPES: dict[str, str] = {
    "user_id": r"[a-z]+_[a-z]+_[0-9]+",
    "reservation_id": r"[A-Z0-9]{6}",
    "payment_id": r"(?:credit_card|gift_card|certificate)_[0-9]+",
    "origin": r"[A-Z]{3}",
    "destination": r"[A-Z]{3}",
    "date": r"[0-9]{4}-[0-9]{2}-[0-9]{2}",
}
_SHAPE_RE = {arg: re.compile(rf"(?<![{_W}]){rx}(?![{_W}])") for arg, rx in SHAPES.items()}


def _text(content: Any) -> str:
    """A message's text: a string, or the `text` parts of a list of content parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    return ""


def _result_kind(content: str) -> tuple[str, bool]:
    """(kind, is_error) of a tool message: error, empty, list, record or text.

    An error starts with "Error" or is a JSON object with an `error` key. JSON nested beyond the
    decoder's limit is classified by its first character, never fatal.
    """
    head = content.lstrip()
    if content.startswith("Error"):
        return "error", True
    if not head:
        return "empty", False
    if head[0] not in "[{\"n":
        return "text", False
    try:
        obj = msgspec.json.decode(content)
    except RecursionError:
        return ("record" if head[0] == "{" else "list"), False
    except msgspec.DecodeError:
        return "text", False
    if isinstance(obj, dict) and "error" in obj:
        return "error", True
    if obj in (None, "", [], {}):
        return "empty", False
    return {dict: "record", list: "list"}.get(type(obj), "text"), False


def _depth_ok(value: Any) -> bool:
    """Whether `value` nests at most MAX_ARGUMENT_DEPTH containers deep (iterative: never recurses)."""
    stack = [(value, 1)]
    while stack:
        v, d = stack.pop()
        if isinstance(v, (dict, list)):
            if d > MAX_ARGUMENT_DEPTH:
                return False
            stack.extend((c, d + 1) for c in (v.values() if isinstance(v, dict) else v))
    return True


def call_arguments(raw: Any) -> tuple[dict[str, Any] | None, str | None]:
    """(arguments, problem) of a tool call's `function.arguments`: a JSON string (as OpenAI sends
    it; "" is no arguments) or an object. Malformed arguments give (None, why), never an exception."""
    if raw is None:
        return None, None
    if isinstance(raw, str):
        if not raw.strip():
            return {}, None
        try:
            raw = msgspec.json.decode(raw)
        except (msgspec.DecodeError, RecursionError) as exc:
            return None, f"the arguments string is not valid JSON ({json_problem(exc).problem})"
    if not isinstance(raw, dict):
        return None, f"the arguments are a JSON {type(raw).__name__}, not an object"
    if not _depth_ok(raw):
        return None, f"the arguments nest deeper than {MAX_ARGUMENT_DEPTH} levels"
    return raw, None


def _strings_by_key(args: dict[str, Any], keys: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """(key, value) for every string value under a key of `keys`, at any depth of `args`."""
    stack: list[Any] = [args]
    while stack:
        v = stack.pop()
        if isinstance(v, dict):
            for k, c in v.items():
                if isinstance(c, str) and k in keys:
                    yield k, c
                elif isinstance(c, (dict, list)):
                    stack.append(c)
        elif isinstance(v, list):
            stack.extend(c for c in v if isinstance(c, (dict, list)))


class ChatSummary:
    """The summary `default_extract` computes, kept up to date one message at a time.

    `add(message)` then `state()` gives, for a conversation's messages `m[0..i-1]`, exactly
    `default_extract(m, i, …)`, so importing a conversation of n messages costs O(n), not O(n²).
    """

    def __init__(self) -> None:
        self.prev_role: str | None = None
        self.tool: str | None = None
        self.tool_error = False
        self.result: str | None = None
        self.user_text: str | None = None
        self.tool_text: str | None = None
        self.assistant_text: str | None = None
        self.turn = self.user_turns = self.tool_calls = 0
        self.history: dict[str, None] = {}  # an insertion-ordered set: tools in first-call order
        self.recent: list[str] = []  # the last two actions, most recent first
        self.mentions: dict[str, set[str]] = {}  # argument -> values of its shape in the last user message
        self.given: dict[str, set[str]] = {arg: set() for arg in SHAPES}  # ... in any user message so far
        self.used: dict[str, set[str]] = {arg: set() for arg in SHAPES}  # argument -> values passed
        self.since_user = 0  # tool calls since the last user message
        self.request = request_features(None)  # the last user message's cues (receipts.request)

    def add(self, m: dict) -> None:
        """Take one more message into the summary."""
        role = m.get("role")
        self.prev_role = "system" if role == "developer" else role  # newer clients' name for system
        if role == "assistant":
            self.turn += 1
            calls = m.get("tool_calls") or ()
            for call in calls:
                fn = call["function"]
                self.tool = fn["name"]
                self.tool_calls += 1
                self.since_user += 1
                self.history.setdefault(fn["name"], None)
                args, _ = call_arguments(fn.get("arguments"))
                for key, value in _strings_by_key(args or {}, self.used):
                    self.used[key].add(value)
            if not calls:
                self.assistant_text = _text(m.get("content"))
            action = calls[0]["function"]["name"] if calls else RESPOND
            self.recent = [action] + self.recent[:1]
        elif role == "user":
            self.user_turns += 1
            self.user_text = _text(m.get("content"))
            self.request = request_features(self.user_text)
            self.mentions = {arg: set(rx.findall(self.user_text)) for arg, rx in _SHAPE_RE.items()}
            for arg, values in self.mentions.items():
                self.given[arg] |= values
            self.since_user = 0
        elif role == "tool":
            content = _text(m.get("content"))
            self.tool_text = content[:TOOL_TEXT_LIMIT]
            self.result, self.tool_error = _result_kind(content)

    def state(self) -> dict[str, Any]:
        """The state of a decision taken after the messages added so far."""
        last: dict[str, Any] = {"tool": self.tool, "tool_error": self.tool_error, "user_text": self.user_text,
                                "tool_text": self.tool_text, "assistant_text": self.assistant_text,
                                "result": self.result}
        state: dict[str, Any] = {}
        if self.prev_role is not None:
            state["prev"] = {"role": self.prev_role}
        state["last"] = {k: v for k, v in last.items() if v is not None}
        state["recent"] = dict(zip(("action1", "action2"), self.recent))
        state["mentioned"] = {arg: bool(self.mentions.get(arg)) for arg in SHAPES}
        state["reused"] = {arg: not self.mentions.get(arg, set()).isdisjoint(self.used[arg])
                           for arg in SHAPES}
        state["unused"] = {arg: bool(self.given[arg] - self.used[arg]) for arg in SHAPES}
        state["request"] = dict(self.request)
        state.update(turn=self.turn, user_turns=self.user_turns, tool_calls=self.tool_calls,
                     calls_since_user=self.since_user, history=list(self.history))
        return state


def default_extract(messages: list[dict], index: int, conversation: dict) -> dict:
    """The state for the decision at `messages[index]`, from the messages before it only.

    Deterministic, and blind to `messages[index:]` (the decision itself and what follows). Version
    EXTRACT_VERSION; the fields (docs/receipts.md) match `policies/airline_chat.zc`:
    `prev.role`; `last.tool`, `last.tool_error`, `last.result` (error | empty | list | record |
    text), `last.user_text`, `last.tool_text`, `last.assistant_text`; `recent.action1` and
    `recent.action2` (the last two actions, a tool or `respond`); for each argument of SHAPES,
    `mentioned.<argument>` (a value of its shape is in the last user message) and
    `reused.<argument>` (such a value was already passed as that argument in an earlier call);
    `unused.<argument>` (a value of its shape is in some user message so far and was not passed as
    that argument by any earlier call: `unused.user_id` is "the user gave an id not looked up yet");
    `turn`, `user_turns`, `tool_calls`, `calls_since_user` (tool calls since the last user
    message: the lookups made for the current request), `history`; `request.<cue>` for each of
    `receipts.request.REQUEST_FIELDS` (what the last user message asks for: `request_features`).

    Args:
        messages: the conversation's messages as dicts (`role`, `content`, `tool_calls`, …).
        index: the index of the assistant message being decided.
        conversation: the whole conversation object (unused by this extractor).
    """
    summary = ChatSummary()
    for m in itertools.islice(messages, index):
        summary.add(m)
    return summary.state()


def load_extractor(spec: str) -> Callable[[list[dict], int, dict], dict]:
    """Import a state extractor named `module:function` (the current directory is importable too).

    Raises:
        ZcError: the spec is malformed, the module cannot be imported, or the name is not callable.
    """
    mod_name, sep, attr = spec.partition(":")
    if not sep or not mod_name or not attr:
        raise ZcError(f"extractor `{spec}` is not of the form `module:function` "
                      "(e.g. `myharness.states:extract`)")
    added = os.getcwd() not in sys.path
    if added:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(mod_name)
    except ModuleNotFoundError as exc:
        raise ZcError(f"extractor `{spec}`: cannot import module `{mod_name}` "
                      f"(no module named `{exc.name}`; is it on PYTHONPATH?)") from None
    except Exception as exc:  # noqa: BLE001 - any import-time failure is the user's module
        raise ZcError(f"extractor `{spec}`: importing `{mod_name}` failed: "
                      f"{type(exc).__name__}: {exc}") from None
    finally:
        if added:
            sys.path.remove(os.getcwd())
    fn = module
    for part in attr.split("."):
        fn = getattr(fn, part, None)
        if fn is None:
            raise ZcError(f"extractor `{spec}`: module `{mod_name}` has no attribute `{attr}`")
    if not callable(fn):
        raise ZcError(f"extractor `{spec}`: `{attr}` is not callable")
    return fn  # type: ignore[return-value]


NonEmpty = Annotated[str, msgspec.Meta(min_length=1)]  # a tool's name, a conversation's id


class _Function(msgspec.Struct):
    name: NonEmpty
    arguments: Any = None


class _ToolCall(msgspec.Struct):
    function: _Function


Role = Literal["system", "developer", "user", "assistant", "tool"]


class ChatMessage(msgspec.Struct):
    """One message of an OpenAI-format conversation, as the chat importer and the gateway validate it."""

    role: Role
    content: str | list[Any] | None = None
    tool_calls: list[_ToolCall] | None = None
    name: str | None = None


class _Conversation(msgspec.Struct):
    id: NonEmpty
    messages: list[ChatMessage]
    task: str | None = None
    trial: int | None = None
    reward: float | None = None
    model: str | None = None


_CHAT_DECODER = msgspec.json.Decoder(_Conversation)


def _verified(reward: float | None) -> bool | None:
    """A successful run vouches for each of its decisions; a failed one does not say which failed."""
    return True if reward == 1.0 else None


class _ReceiptHead(msgspec.Struct):
    messages: msgspec.Raw = msgspec.Raw(b"")
    tier: msgspec.Raw = msgspec.Raw(b"")
    state: msgspec.Raw = msgspec.Raw(b"")


def _role_error(exc: msgspec.ValidationError) -> msgspec.ValidationError | None:
    """The error of a message whose role is not one of Role's, naming them (None: another error)."""
    msg, _, where = str(exc).rpartition(" - at `")
    if not re.fullmatch(r"\$\.messages\[\d+\]\.role`", where):
        return None
    roles = get_args(Role)
    known = "|".join(roles)
    if m := re.fullmatch(r"Invalid enum value (.*)", msg, re.S):
        try:
            value = ast.literal_eval(m.group(1))  # msgspec shows the value as Python's repr
        except (ValueError, SyntaxError):
            value = m.group(1)
        hint = did_you_mean(str(value), roles)
        problem = (f"unknown role {msgspec.json.encode(str(value)).decode()}: expected one of {known}"
                   + (f" ({hint})" if hint else ""))
    else:
        got = re.search(r"got (`[a-z]+`)", msg)
        problem = f"expected a role (one of {known}), got {got.group(1) if got else 'another value'}"
    return msgspec.ValidationError(f"{problem} - at `{where}")


def _decode(body: bytes) -> tuple[_Conversation, dict]:
    try:
        conv = _CHAT_DECODER.decode(body)
    except msgspec.ValidationError as exc:
        if (role := _role_error(exc)) is not None:
            raise role from None
        head = msgspec.json.decode(body, type=_ReceiptHead)  # a receipt given as a chat log?
        if not head.messages and head.tier and head.state:
            raise msgspec.ValidationError("this line is a receipt already, not a chat log: check the "
                                          "file with `zc receipts check`") from None
        raise
    return conv, msgspec.json.decode(body)


def import_chat(src_path: str | os.PathLike, *,
                extract: Callable[[list[dict], int, dict], dict] = default_extract,
                policy: Any = None) -> Iterator[Receipt]:
    """Turn an OpenAI-format chat log (one conversation a line) into one receipt per assistant message.

    The action is `tool_calls[0].function.name`, or `respond` for a text reply; `arguments` are
    that call's arguments (None for a text reply; a malformed arguments string gives None and
    `meta.arguments_error` says why); `candidates` the values of the messages before it that a
    call's arguments may copy (`receipts.candidates.extract_candidates`). The task is the conversation's
    `task` (so every trial of one
    scenario lands in the same split), else its id. `verified` is True for reward 1.0, None
    otherwise. With `policy`, each receipt carries the policy's identity and the legal set of its
    state, and a state or action the policy does not know is an error. `meta.extractor` names the
    extractor (`default_extract` with its EXTRACT_VERSION).

    Raises:
        ReceiptError: `FILE:LINE: $.path: problem` for a malformed conversation, a state the policy
            refuses, an unknown action, or an extractor that fails.
    """
    path = Path(src_path)
    sha = policy.sha256 if policy is not None else ""
    linear = extract is default_extract
    extractor = extractor_name(extract)
    for lineno, (conv, raw) in decoded_lines(path, _decode):
        messages = raw["messages"]
        summary = ChatSummary()
        memo: dict = {}  # each message's candidate values, read once
        for i, m in enumerate(conv.messages):
            if m.role != "assistant":
                if linear:
                    summary.add(messages[i])
                continue
            where = f"{path}:{lineno}: $.messages[{i}]"
            state = summary.state() if linear else None
            if linear:
                summary.add(messages[i])
            d = decision(messages, i, raw, extract, policy, where, state, memo)
            meta: dict[str, Any] = {"conversation": conv.id, "trial": conv.trial, "reward": conv.reward,
                                    "turn": i, "extractor": extractor}
            if d.arguments_error is not None:
                meta["arguments_error"] = d.arguments_error
            yield Receipt(
                id=f"{conv.id}:{i}", task=conv.task if conv.task is not None else conv.id,
                state=d.state, tier="remote", ts=None, policy=sha, legal=d.legal, model=conv.model,
                action=d.action, arguments=d.arguments, candidates=d.candidates,
                verified=_verified(conv.reward), gold=None, meta=meta)


def extractor_name(extract: Callable[[list[dict], int, dict], dict]) -> str:
    """How receipts name a state extractor (`meta.extractor`): the default one with its version."""
    if extract is default_extract:
        return f"zcompile.receipts:default_extract@{EXTRACT_VERSION}"
    return f"{getattr(extract, '__module__', '?')}:{getattr(extract, '__qualname__', '?')}"


class AssistantTurn(msgspec.Struct, frozen=True):
    """What a chat log says about the decision at one assistant message (see `decision`)."""

    state: dict[str, Any]
    legal: tuple[str, ...] | None
    action: str
    arguments: dict[str, Any] | None
    arguments_error: str | None
    candidates: tuple[Any, ...]


def decision_state(messages: list[dict], index: int, conversation: dict,
                   extract: Callable[[list[dict], int, dict], dict] = default_extract,
                   where: str = "$") -> dict:
    """The state of the decision at `messages[index]` (`index == len(messages)`: the next one), from
    `extract`. Raises ReceiptError (`where: problem`) when the extractor fails or returns a non-dict."""
    try:
        state = extract(messages, index, conversation)
    except Exception as exc:  # noqa: BLE001 - a harness's extractor is user code
        raise ReceiptError(f"{where}: the state extractor failed: {type(exc).__name__}: {exc}") from None
    if not isinstance(state, dict):
        raise ReceiptError(f"{where}: the state extractor returned {type(state).__name__}, expected a dict")
    return state


def decision(messages: list[dict], index: int, conversation: dict,
             extract: Callable[[list[dict], int, dict], dict] = default_extract, policy: Any = None,
             where: str = "$", state: dict | None = None, memo: dict | None = None) -> AssistantTurn:
    """The receipt fields of the decision taken by `messages[index]` (an assistant message), from
    the messages before it: the one code path of `import_chat` and the gateway (`zc serve`).

    The action is the first tool call's name, or RESPOND for a text reply; `state` (when the
    caller computed it already) skips the extractor; `memo` is `extract_candidates`' (one per
    conversation). With `policy`, the state must validate and the action must be declared; `legal`
    is then the state's legal set.

    Raises:
        ReceiptError: `where: problem` for an extractor that fails or returns a non-dict, a state
            the policy refuses, or an unknown action.
    """
    from ..state import StateError

    m = messages[index]
    calls = m.get("tool_calls") or ()
    call = calls[0]["function"] if calls else None
    action = call["name"] if call is not None else RESPOND
    if state is None:
        state = decision_state(messages, index, conversation, extract, where)
    arguments, bad_arguments = call_arguments(call.get("arguments")) if call is not None else (None, None)
    legal = None
    if policy is not None:
        if action not in policy.actions:
            field_ = ".tool_calls[0].function.name" if calls else ""
            raise ReceiptError(f"{where}{field_}: unknown action "
                               f"{msgspec.json.encode(action).decode()} (not in policy `{policy.name}`)")
        try:
            legal = policy.legal(state).actions
        except StateError as exc:
            raise ReceiptError(f"{where}: extracted state does not match policy "
                               f"`{policy.name}`: {exc}") from None
    window = messages[max(0, index - WINDOW):index]
    return AssistantTurn(state, legal, action, arguments, bad_arguments,
                         tuple(extract_candidates(window, memo=memo)))
