"""The offer and the reply: the legal actions as a chat request's tools or schema, the answer read back."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from ..router.prompt import OFFERED
from ..tools import signature_schema
from .client import jsonable, loads, snippet

MODES = ("tools", "json_schema", "json_object")
TOOL_NAME_MAX = 64  # OpenAI: tool names match ^[a-zA-Z0-9_-]{1,64}$
_TOOL_NAME_OK = re.compile(r"[A-Za-z0-9_-]{1,64}")
_TOOL_NAME_BAD_CHAR = re.compile(r"[^A-Za-z0-9_-]")
_FENCE = re.compile(r"^```(?:json)?\s*(.*?)\s*```$", re.S)


def render_state(state: Any) -> str:
    """The deterministic rendering of a state offered to a model: JSON with sorted keys.

    Sets and tuples become (sorted) lists; anything else JSON cannot encode becomes its `str`.
    """
    return json.dumps(state, sort_keys=True, ensure_ascii=False, default=jsonable)


def messages(system: dict[str, str], state: Any, intent: str | None, listing: str) -> list[dict[str, str]]:
    """The chat messages a model is asked one decision with: the system prompt, then the state, the
    intent and the offered actions (an LLM tier sends them; the scorer renders them in its template)."""
    user = f"State:\n{render_state(state)}\n"
    if intent is not None:
        user += f"Intent: {intent}\n"
    user += f"{OFFERED}\n{listing}"
    return [system, {"role": "user", "content": user}]


def tool_names(legal: tuple[str, ...]) -> dict[str, str]:
    """Map each action to a tool name that OpenAI-compatible servers accept (`[A-Za-z0-9_-]{1,64}`).

    Valid names are kept as they are; others have each character outside the alphabet replaced by
    `_` (`fs.read` -> `fs_read`) and are cut to 64 characters; a clash with another action's tool
    name gets a numeric suffix (`fs_read_2`). The result is injective, so it is inverted exactly.
    """
    out: dict[str, str] = {}
    used = {a for a in legal if _TOOL_NAME_OK.fullmatch(a)}
    for action in legal:
        if _TOOL_NAME_OK.fullmatch(action):
            out[action] = action
            continue
        base = _TOOL_NAME_BAD_CHAR.sub("_", action)[:TOOL_NAME_MAX] or "_"
        name, n = base, 1
        while name in used:
            n += 1
            suffix = f"_{n}"
            name = base[:TOOL_NAME_MAX - len(suffix)] + suffix
        used.add(name)
        out[action] = name
    return out


class Offer:
    """What is offered to the model for one legal set: tools or a schema, and the way back.

    `calls`: action -> its signature (ParamDef tuple, or None when undeclared) when the tools
    carry the policy's signatures (a rung's `answer`); None for names only (`propose`).
    `replies`: the reply actions among them: a tool with one `text` argument, the reply.
    `schemas`: action -> the JSON schema of its parameters from the tools the decision offered
    (they win over the policy's signatures).
    """

    __slots__ = ("actions", "back", "body", "listing", "replies")

    def __init__(self, legal: tuple[str, ...], descriptions: dict[str, str] | None, mode: str,
                 calls: dict[str, Any] | None = None, replies: frozenset[str] = frozenset(),
                 schemas: dict[str, Any] | None = None) -> None:
        descriptions = descriptions or {}
        schemas = schemas or {}
        self.actions = frozenset(legal)
        self.replies = replies & self.actions
        lines = []
        if mode == "tools":
            names = tool_names(legal)
            self.back = {name: action for action, name in names.items()}
            tools = []
            for action in legal:
                name, desc = names[action], descriptions.get(action, "")
                label = f"action `{action}`" if name != action else ""
                text = ": ".join(x for x in (label, desc) if x) or f"action `{action}`"
                tools.append({"type": "function", "function": {
                    "name": name, "description": text,
                    "parameters": (schemas[action] if action in schemas and action not in self.replies else
                                   parameters(action in self.replies, (calls or {}).get(action)))}})
                lines.append(f"- {name}" + (f" (action `{action}`)" if name != action else "")
                             + (f": {desc}" if desc else ""))
            self.body = {"tools": tools, "tool_choice": "required"}
        else:
            self.back = {}
            lines = [f"- {a}" + (f": {descriptions[a]}" if descriptions.get(a) else "") for a in legal]
            self.body = {"response_format": response_format(mode, choice_schema(legal, self.replies, calls,
                                                                                 schemas))}
        self.listing = "\n".join(lines)


REPLY_TEXT = "the reply to the user, in full"


def choice_schema(legal: tuple[str, ...], replies: frozenset[str], calls: dict[str, Any] | None,
                  schemas: dict[str, Any]) -> dict[str, Any]:
    """The JSON schema of an answer in the JSON modes: `{"action": <a legal action>}`, with `text` when a
    reply action is legal. With `calls` (a rung's answer), also `anyOf` one branch per action that ties
    the action to its `arguments`' schema (a reply to its `text`), so a server that turns the schema into
    a grammar (llama.cpp) can only write a legal action with arguments of the right shape."""
    props: dict[str, Any] = {"action": {"type": "string", "enum": list(legal)}}
    if replies:
        props["text"] = {"type": ["string", "null"], "description": REPLY_TEXT}
    if calls is None:
        return {"type": "object", "properties": props, "required": list(props), "additionalProperties": False}
    props["arguments"] = {"type": "object"}
    branches = []
    for action in legal:
        if action in replies:
            extra = {"text": {"type": "string", "description": REPLY_TEXT}}
        else:
            extra = {"arguments": schemas.get(action) or parameters(False, calls.get(action))}
        branches.append({"type": "object", "properties": {"action": {"const": action}, **extra},
                         "required": ["action", *extra], "additionalProperties": False})
    return {"type": "object", "properties": props, "required": ["action"], "anyOf": branches}


def response_format(mode: str, schema: dict[str, Any]) -> dict[str, Any]:
    """`response_format` for a JSON mode: OpenAI's `json_schema` form (strict when the schema is a flat
    object; `anyOf` is outside OpenAI's strict subset), or `json_object` with the schema beside it, the
    form llama-cpp-python's server reads."""
    if mode == "json_object":
        return {"type": "json_object", "schema": schema}
    return {"type": "json_schema", "json_schema": {"name": "choice", "strict": "anyOf" not in schema,
                                                   "schema": schema}}


def parameters(reply: bool, params: Any) -> dict[str, Any]:
    """The JSON schema of a tool's arguments: `text` for a reply, else the action's signature
    (an undeclared signature is an open object)."""
    if reply:
        return {"type": "object", "properties": {"text": {"type": "string", "description": REPLY_TEXT}},
                "required": ["text"], "additionalProperties": False}
    if params is None:
        return {"type": "object", "properties": {}}
    return signature_schema(params)


class Malformed(Exception):
    """The reply is not a chat completion (missing or mistyped fields)."""


def judge(reply: Any, offer: Offer) -> Reply:
    """The outcome of a decoded chat completion for `offer`: the offered action the model chose (with its
    arguments or reply text), an abstention, or an action outside the offer (`illegal`).

    Raises:
        Malformed: the reply is not a chat completion.
    """
    if not isinstance(reply, dict):
        raise Malformed(f"expected a JSON object, got {type(reply).__name__}")
    model = reply.get("model") if isinstance(reply.get("model"), str) else None
    choices = reply.get("choices")
    if not isinstance(choices, list):
        raise Malformed('no "choices" list')
    if not choices:
        raise Malformed('empty "choices"')
    message = choices[0].get("message") if isinstance(choices[0], dict) else None
    if not isinstance(message, dict):
        raise Malformed('no "choices[0].message" object')
    note = ""
    tool_calls = message.get("tool_calls")
    if offer.back and tool_calls:  # tools mode
        if not isinstance(tool_calls, list):
            raise Malformed('"tool_calls" is not a list')
        fn = tool_calls[0].get("function") if isinstance(tool_calls[0], dict) else None
        name = fn.get("name") if isinstance(fn, dict) else None
        if not isinstance(name, str):
            raise Malformed('no "tool_calls[0].function.name" string')
        if len(tool_calls) > 1:
            note = f"{len(tool_calls)} tool calls; took the first"
        action = offer.back.get(name, name)
        arguments = _arguments(fn.get("arguments"))
        text = None
        if action in offer.replies:
            text = arguments.pop("text", None) if isinstance(arguments.get("text"), str) else None
            arguments = None
        return _verdict(action, offer, model, note, arguments, text)
    content = message.get("content")
    if content is not None and not isinstance(content, str):
        raise Malformed('"content" is not a string')
    text = (content or "").strip()
    if not text:
        return Reply("abstained", detail="empty answer", model=model)
    # tools mode: prose is the reply when one reply action is legal
    if offer.back and len(offer.replies) == 1:
        return Reply("answered", next(iter(offer.replies)), None, text, "replied in prose", model)
    fenced = _FENCE.match(text)
    if fenced:
        text = fenced.group(1)
    try:
        obj = loads(text)
    except (ValueError, RecursionError):
        obj = None
    if not isinstance(obj, dict) or "action" not in obj:
        if offer.back:  # tools mode, the model wrote prose instead of calling a tool
            return Reply("abstained", detail=f"no tool call; replied {snippet(text)}", model=model)
        cut = choices[0].get("finish_reason") == "length"
        cut = ' (cut at max_tokens: finish_reason "length")' if cut else ""
        raise Malformed(f'content is not a JSON object with "action"{cut}: {snippet(text)}')
    action = obj["action"]
    if action is None or action == "":
        return Reply("abstained", detail="declined (action: null)", model=model)
    if not isinstance(action, str):
        raise Malformed(f'"action" is not a string: {snippet(json.dumps(action))}')
    said = obj.get("text") if isinstance(obj.get("text"), str) else None
    if action in offer.replies:
        return _verdict(action, offer, model, note, None, said)
    arguments = obj.get("arguments")
    if arguments is not None and not isinstance(arguments, dict):
        raise Malformed('"arguments" is not a JSON object')
    return _verdict(action, offer, model, note, arguments, None)


def _verdict(action: str, offer: Offer, model: str | None, note: str, arguments: dict | None,
             text: str | None) -> Reply:
    if action in offer.actions:
        return Reply("answered", action, arguments, text, note, model)
    return Reply("illegal", detail=f"proposed `{action}` outside the legal set", model=model)


@dataclass(frozen=True, slots=True)
class Reply:
    """What the server said, judged: outcome, and the action with its arguments or text."""

    outcome: str
    action: str | None = None
    arguments: dict | None = None
    text: str | None = None
    detail: str = ""
    model: str | None = None


def _arguments(raw: Any) -> dict:
    """A tool call's arguments: a JSON object, or its JSON text (empty: none)."""
    if raw is None or raw == "":
        return {}
    if isinstance(raw, str):
        try:
            raw = loads(raw)
        except (ValueError, RecursionError):
            raise Malformed(f'"tool_calls[0].function.arguments" is not JSON: {snippet(raw)}') from None
    if not isinstance(raw, dict):
        raise Malformed('"tool_calls[0].function.arguments" is not a JSON object')
    return raw
