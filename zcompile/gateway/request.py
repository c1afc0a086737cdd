"""A chat-completions request, validated, with the decision's state, candidates and task derived
from its messages exactly as `zc receipts import --format chat` derives them."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import msgspec

from ..errors import ZcError, json_problem
from ..receipts.candidates import extract_candidates
from ..receipts.chat import ChatMessage, decision_state
from ..runtime import tool_name


class BadRequest(Exception):
    """A request the gateway refuses: HTTP `status`, the message, the `param` ($.path) at fault."""

    def __init__(self, status: int, message: str, param: str | None = None,
                 code: str = "invalid_request") -> None:
        super().__init__(message)
        self.status, self.message, self.param, self.code = status, message, param, code


@dataclass(frozen=True, slots=True)
class ChatRequest:
    """The parts of a request the gateway reads (the rest of `body` is forwarded as it is)."""

    body: dict[str, Any]
    messages: list[dict[str, Any]]
    tools: list[Any]
    stream: bool
    model: str
    intent: str | None
    task: str
    tool_choice: Any = None  # None, "none", "auto", "required" or {"type": "function", "function": {"name"}}
    stream_options: dict[str, Any] | None = None  # forwarded with a streamed upstream request

    @property
    def include_usage(self) -> bool:
        """Whether a streamed answer ends with a usage chunk (`stream_options.include_usage`)."""
        return self.stream and bool((self.stream_options or {}).get("include_usage"))


_FORWARD_DROP = ("x_zc", "stream", "stream_options", "tools", "tool_choice", "functions", "function_call")


def parse(raw: bytes) -> ChatRequest:
    """Validate a request body. Raises BadRequest naming the `$.path` of the first problem."""
    try:
        body = msgspec.json.decode(raw)
    except (msgspec.DecodeError, RecursionError) as exc:
        raise BadRequest(400, f"the request body is not JSON: {json_problem(exc)}") from None
    if not isinstance(body, dict):
        raise BadRequest(400, f"$: expected a JSON object, got {type(body).__name__}")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise BadRequest(400, "$.messages: expected a non-empty array of messages", "messages")
    try:
        msgspec.convert(messages, list[ChatMessage])
    except msgspec.ValidationError as exc:
        p = json_problem(exc)
        where = p.path.replace("$", "$.messages", 1)
        raise BadRequest(400, f"{where}: {p.problem}", where.removeprefix("$.")) from None
    tools = body.get("tools")
    if tools is None:
        tools = []
    if not isinstance(tools, list):
        raise BadRequest(400, "$.tools: expected an array of tools", "tools")
    for i, t in enumerate(tools):
        try:
            tool_name(t, f"$.tools[{i}]")
        except ZcError as exc:
            raise BadRequest(400, str(exc), f"tools[{i}]") from None
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise BadRequest(400, "$.stream: expected a boolean", "stream")
    if body.get("n", 1) != 1:
        raise BadRequest(400, "$.n: zc serve answers one choice per request (n = 1)", "n")
    choice = body.get("tool_choice")
    if not (choice is None or choice in ("none", "auto", "required") or (
            isinstance(choice, dict) and isinstance(choice.get("function"), dict)
            and isinstance(choice["function"].get("name"), str))):
        raise BadRequest(400, '$.tool_choice: expected "none", "auto", "required" or '
                              '{"type": "function", "function": {"name": …}}', "tool_choice")
    options = body.get("stream_options")
    if options is not None and not (isinstance(options, dict)
                                    and isinstance(options.get("include_usage", False), bool)):
        raise BadRequest(400, "$.stream_options: expected an object {include_usage?: boolean}",
                         "stream_options")
    model = body.get("model", "")
    if not isinstance(model, str):
        raise BadRequest(400, "$.model: expected a string", "model")
    ext = body.get("x_zc") or {}
    if not isinstance(ext, dict):
        raise BadRequest(400, "$.x_zc: expected an object {intent?, task?}", "x_zc")
    intent, task = ext.get("intent"), ext.get("task")
    for key, value in (("intent", intent), ("task", task)):
        if value is not None and not isinstance(value, str):
            raise BadRequest(400, f"$.x_zc.{key}: expected a string", f"x_zc.{key}")
    return ChatRequest(body, messages, tools, stream, model, intent, task or conversation_id(messages),
                       choice, options)


def conversation_id(messages: list[dict[str, Any]]) -> str:
    """A stable task id for a conversation that names none: a hash of its messages up to and
    including the first user message, so every request of one conversation shares it."""
    head = []
    for m in messages:
        head.append(m)
        if m.get("role") == "user":
            break
    return "chat-" + hashlib.sha256(msgspec.json.encode(head, order="sorted")).hexdigest()[:16]


def derive(req: ChatRequest, extract: Callable[[list[dict], int, dict], dict]) -> tuple[dict, tuple]:
    """(state, candidates) of the decision the request asks for: the next assistant message."""
    conversation = {"id": req.task, "task": req.task, "messages": req.messages}
    try:
        state = decision_state(req.messages, len(req.messages), conversation, extract, "$.messages")
    except ZcError as exc:
        raise BadRequest(500, str(exc), "messages", "extractor_failed") from None
    return state, tuple(extract_candidates(req.messages))


def tool_choice(req: ChatRequest, kept: list[str]) -> Any:
    """The request's `tool_choice` over the legal tools `kept`: one naming a tool that is no
    longer offered becomes "auto"."""
    choice = req.tool_choice
    if isinstance(choice, dict) and choice["function"]["name"] not in kept:
        return "auto"
    return choice


def offer(req: ChatRequest, kept: list[str], replies: frozenset[str]) -> frozenset[str]:
    """The actions the harness can take: the legal tools it offered, and the reply actions unless
    its `tool_choice` requires a tool call ("none": the replies only; one function: that one)."""
    choice = tool_choice(req, kept)
    if choice == "none":
        return replies
    if choice == "required":
        return frozenset(kept)
    if isinstance(choice, dict):
        return frozenset([choice["function"]["name"]])
    return frozenset(kept) | replies


def forwarded(req: ChatRequest, offered: list[Any]) -> dict[str, Any]:
    """The body sent upstream: the harness's request without zc's fields, with the legal tools only
    and their `tool_choice`."""
    body = {k: v for k, v in req.body.items() if k not in _FORWARD_DROP}
    if offered:
        body["tools"] = offered
        choice = tool_choice(req, [tool_name(t) for t in offered])
        if choice is not None:
            body["tool_choice"] = choice
    return body
