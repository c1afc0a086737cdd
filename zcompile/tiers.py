"""Tiers: LLM rungs that speak the OpenAI-compatible chat-completions protocol and answer (a checked call
or a text reply, through the rung protocol of `zcompile.router.rung`) or abstain."""

from __future__ import annotations

import json
import os
import re
import socket
import threading
import time
import tomllib
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, Literal, Protocol, runtime_checkable

import httpcore
import httpx
import msgspec

from .errors import ZcError, did_you_mean, json_problem
from .inputs import MAX_JSON_DEPTH, decode_json, read_file
from .router.router import undeclared_tier
from .tools import signature_schema

__all__ = ["MODES", "OpenAITier", "Tier", "TierAnswer", "TierConfig", "load_tiers", "render_state",
           "tool_names"]

MODES = ("tools", "json_schema")
OUTCOMES = ("answered", "abstained", "timeout", "illegal", "error")
TOOL_NAME_MAX = 64  # OpenAI: tool names match ^[a-zA-Z0-9_-]{1,64}$
_TOOL_NAME_OK = re.compile(r"[A-Za-z0-9_-]{1,64}")
_TOOL_NAME_BAD_CHAR = re.compile(r"[^A-Za-z0-9_-]")
_FENCE = re.compile(r"^```(?:json)?\s*(.*?)\s*```$", re.S)
_SNIPPET = 120  # characters of a server's text quoted in a detail

DEFAULT_SYSTEM_PROMPT = (
    "You choose the next action of an agent. Choose exactly one of the offered actions; "
    "never invent an action that is not offered. Do not explain.")
_MODE_INSTRUCTION = {
    "tools": "Answer by calling the tool of the action you choose.",
    "json_schema": 'Answer with a JSON object {"action": "<one of the offered actions>"}.',
}


@dataclass(frozen=True, slots=True)
class TierAnswer:
    """What one tier did with one decision.

    Attributes:
        outcome: "answered" | "abstained" | "timeout" | "illegal" | "error".
        action: the chosen action, only when `outcome == "answered"`; always a member of the legal
            set that was offered.
        confidence: the tier's confidence in `action`, when it reports one.
        detail: the cause of a non-answer ("HTTP 500", "connection refused", "proposed `deploy`
            outside the legal set", "malformed reply: …"), or a note on an answer.
        latency_ms: wall-clock time of the call.
        model: the model that answered (as the server names it), else the configured one.
    """

    outcome: str
    action: str | None
    confidence: float | None = None
    detail: str = ""
    latency_ms: float = 0.0
    model: str | None = None


@runtime_checkable
class Tier(Protocol):
    """The older tier protocol (names only): given a state and the legal actions, answer one of them
    or abstain. The router wraps such objects in `zcompile.router.rung.ProposeRung`."""

    name: str

    def propose(self, state: dict, legal: tuple[str, ...], *, timeout_s: float, intent: str | None = None,
                descriptions: dict[str, str] | None = None) -> TierAnswer: ...


def render_state(state: Any) -> str:
    """The deterministic rendering of a state offered to a model: JSON with sorted keys.

    Sets and tuples become (sorted) lists; anything else JSON cannot encode becomes its `str`.
    """
    return json.dumps(state, sort_keys=True, ensure_ascii=False, default=_jsonable)


def _jsonable(obj: Any) -> Any:
    if isinstance(obj, (set, frozenset)):
        return sorted(obj, key=lambda x: (type(x).__name__, str(x)))
    if isinstance(obj, tuple):
        return list(obj)
    return str(obj)


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


class _Offer:
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
                                   _parameters(action in self.replies, (calls or {}).get(action)))}})
                lines.append(f"- {name}" + (f" (action `{action}`)" if name != action else "")
                             + (f": {desc}" if desc else ""))
            self.body = {"tools": tools, "tool_choice": "required"}
        else:
            self.back = {}
            lines = [f"- {a}" + (f": {descriptions[a]}" if descriptions.get(a) else "") for a in legal]
            props: dict[str, Any] = {"action": {"type": "string", "enum": list(legal)}}
            if self.replies:
                props["text"] = {"type": ["string", "null"], "description": REPLY_TEXT}
            self.body = {"response_format": {"type": "json_schema", "json_schema": {
                "name": "choice", "strict": True, "schema": {
                    "type": "object", "properties": props,
                    "required": list(props), "additionalProperties": False}}}}
        self.listing = "\n".join(lines)


REPLY_TEXT = "the reply to the user, in full"


def _parameters(reply: bool, params: Any) -> dict[str, Any]:
    """The JSON schema of a tool's arguments: `text` for a reply, else the action's signature
    (an undeclared signature is an open object)."""
    if reply:
        return {"type": "object", "properties": {"text": {"type": "string", "description": REPLY_TEXT}},
                "required": ["text"], "additionalProperties": False}
    if params is None:
        return {"type": "object", "properties": {}}
    return signature_schema(params)


class _Malformed(Exception):
    """The reply is not a chat completion (missing or mistyped fields)."""


class OpenAITier:
    """An LLM tier behind an OpenAI-compatible `/chat/completions` endpoint (llama.cpp, Ollama, vLLM, …).

    The request offers only the legal actions, as tools with `tool_choice: "required"` (mode
    "tools") or as the enum of a JSON schema (mode "json_schema"), with the state rendered
    deterministically. Every failure (timeout, refused or dropped connection, HTTP error,
    malformed reply, empty answer, an action outside the legal set) becomes a non-answer with its
    cause in `detail`; `propose` never raises for them and never returns an illegal action.
    One `httpx.Client` per tier keeps connections alive; `propose` is thread-safe.

    Args:
        base_url: the server's OpenAI base URL, e.g. "http://127.0.0.1:8080/v1".
        model: the model name sent in every request.
        timeout_ms: this tier's budget per call; a call gets min(timeout_ms, timeout_s).
        api_key_env: the environment variable holding the API key (sent as a Bearer token).
        mode: "tools" or "json_schema".
        temperature: sampling temperature (default 0).
        max_tokens: the cap on generated tokens.
        name: the tier's name (default: the model name).
        system_prompt: replaces the default system prompt.
        extra_body: extra request fields merged into every request body (they win on a clash).
    """

    def __init__(self, base_url: str, model: str, *, timeout_ms: float = 4000, api_key_env: str | None = None,
                 mode: str = "tools", temperature: float = 0.0, max_tokens: int = 64, name: str | None = None,
                 system_prompt: str | None = None, extra_body: dict | None = None) -> None:
        if mode not in MODES:
            raise ZcError(f"tier {name or model}: unknown mode {mode!r} (expected one of {', '.join(MODES)})")
        if not timeout_ms > 0:
            raise ZcError(f"tier {name or model}: timeout_ms must be > 0, got {timeout_ms}")
        if not re.match(r"https?://", base_url):
            raise ZcError(f"tier {name or model}: base_url must start with http:// or https://, "
                          f"got {base_url!r}")
        self.name = name or model
        self.base_url = base_url.rstrip("/")
        self.url = self.base_url + "/chat/completions"
        self.model = model
        self.timeout_ms = float(timeout_ms)
        self.mode = mode
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.system_prompt = system_prompt
        self.extra_body = dict(extra_body or {})
        self.api_key_env = api_key_env
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if api_key_env is not None:
            key = os.environ.get(api_key_env)
            if not key:
                raise ZcError(f"tier {self.name}: environment variable {api_key_env} is not set "
                              f"(api_key_env = \"{api_key_env}\")")
            headers["Authorization"] = f"Bearer {key}"
        self._system = {"role": "system", "content": (system_prompt if system_prompt is not None else
                                                      f"{DEFAULT_SYSTEM_PROMPT} {_MODE_INSTRUCTION[mode]}")}
        # trust_env=False: proxy variables must not divert calls to a local model server.
        # TCP_NODELAY: a small request must never wait on Nagle's algorithm for the server's delayed
        # ACK (~40 ms on Linux), which a reused connection can otherwise hit on every call.
        transport = _transport([(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)])
        self._client = httpx.Client(headers=headers, transport=transport, trust_env=False,
                                    follow_redirects=False)
        self._offers: OrderedDict[tuple, _Offer] = OrderedDict()
        self._offers_lock = threading.Lock()

    def __repr__(self) -> str:
        return (f"OpenAITier(name={self.name!r}, base_url={self.base_url!r}, model={self.model!r}, "
                f"mode={self.mode!r})")

    def __enter__(self) -> OpenAITier:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the tier's connections. Later calls answer "error"."""
        self._client.close()

    def _offer(self, legal: tuple[str, ...], descriptions: dict[str, str] | None,
               catalog: Any = None, schemas: dict[str, Any] | None = None) -> _Offer:
        calls = {a: catalog.params.get(a) for a in legal} if catalog is not None else None
        replies = catalog.replies if catalog is not None else frozenset()
        key = (legal, tuple(sorted(descriptions.items())) if descriptions else (),
               tuple(calls.items()) if calls is not None else None, replies & frozenset(legal),
               msgspec.json.encode(schemas, order="sorted") if schemas else b"")
        with self._offers_lock:
            offer = self._offers.get(key)
            if offer is not None:
                self._offers.move_to_end(key)
                return offer
        offer = _Offer(legal, descriptions, self.mode, calls, replies, schemas)
        with self._offers_lock:
            self._offers[key] = offer
            while len(self._offers) > 256:
                self._offers.popitem(last=False)
        return offer

    def request_body(self, state: dict, legal: tuple[str, ...], intent: str | None = None,
                     descriptions: dict[str, str] | None = None, catalog: Any = None) -> dict[str, Any]:
        """The JSON body `propose` (or, with the policy's `catalog`, `answer`) sends for this decision."""
        return self._request_body(state, self._offer(tuple(dict.fromkeys(legal)), descriptions, catalog), intent)

    def _request_body(self, state: dict, offer: _Offer, intent: str | None) -> dict[str, Any]:
        user = f"State:\n{render_state(state)}\n"
        if intent is not None:
            user += f"Intent: {intent}\n"
        user += f"Offered actions (choose exactly one):\n{offer.listing}"
        body = {"model": self.model, "messages": [self._system, {"role": "user", "content": user}],
                "temperature": self.temperature, "max_tokens": self.max_tokens, "stream": False, **offer.body}
        body.update(self.extra_body)
        return body

    def propose(self, state: dict, legal: tuple[str, ...], *, timeout_s: float, intent: str | None = None,
                descriptions: dict[str, str] | None = None) -> TierAnswer:
        """Ask the model to choose one of `legal` for `state` (names only; `answer` asks for calls).

        Args:
            state: the runtime state (JSON-like); rendered with sorted keys.
            legal: the legal actions; only these are offered, and only these can be answered.
            timeout_s: the caller's remaining budget; the call gets min(timeout_ms, timeout_s).
            intent: the task's intent, when known.
            descriptions: action -> a short description offered with the action.

        Returns:
            A TierAnswer; `action` is set only when `outcome == "answered"`, and is then in `legal`.
        """
        start = time.perf_counter()
        legal = tuple(dict.fromkeys(legal))
        r = self._ask(state, self._offer(legal, descriptions) if legal else None, intent, timeout_s, start)
        return TierAnswer(r.outcome, r.action if r.outcome == "answered" else None, None, r.detail,
                          (time.perf_counter() - start) * 1000.0, r.model or self.model)

    writes_text = True  # a rung: reply actions are offered as a tool with the reply's `text`

    def answer(self, step: Any, timeout_s: float | None) -> Any:
        """The rung protocol (`zcompile.router.rung.Rung`): a complete call (the legal tools carry the
        parameter schemas of the `tools` given to `decide`, else the policy's signatures; the
        arguments are checked with `Policy.check`), a text reply for a reply action, or an
        abstention with its cause."""
        from .router.rung import abstain, settle

        start = time.perf_counter()
        legal = tuple(dict.fromkeys(step.choices))
        given = step.tools or {}  # the tools the decision offered win over the policy's descriptions
        descriptions = {**step.catalog.descriptions, **{a: t["description"] for a, t in given.items()
                                                       if isinstance(t.get("description"), str)}}
        schemas = {a: given[a]["parameters"] for a in legal
                   if a in given and isinstance(given[a].get("parameters"), dict)}
        offer = self._offer(legal, descriptions or None, step.catalog, schemas) if legal else None
        r = self._ask(step.state, offer, step.intent, 30.0 if timeout_s is None else timeout_s, start)
        model = r.model or self.model
        if r.outcome == "answered":
            if r.action in step.catalog.replies and r.text is None:
                return abstain("declined", "a reply without its text", model=model)
            return settle(step, r.action, r.arguments, r.text, model=model, detail=r.detail)
        return abstain("declined" if r.outcome == "abstained" else r.outcome, r.detail, model=model)

    def _ask(self, state: Any, offer: _Offer | None, intent: str | None, timeout_s: float, start: float) -> _Reply:
        """One request for the offer, every failure a non-answer with its cause: the whole call (connect,
        send, headers, body) ends by the budget, whatever the server does."""
        budget = min(self.timeout_ms / 1000.0, timeout_s)
        if offer is None:
            return _Reply("abstained", detail="no legal action offered")
        if budget <= 0:
            return _Reply("timeout", detail="no time left for this tier")
        outcome, reply, detail = self.exchange(self._request_body(state, offer, intent), start + budget)
        if outcome != "ok":
            return _Reply(outcome, detail=detail)
        try:
            return self._judge(reply, offer)
        except _Malformed as exc:
            return _Reply("error", detail=f"malformed reply: {exc}")

    def exchange(self, body: dict[str, Any], deadline: float,
                 on_event: Callable[[Any], None] | None = None) -> tuple[str, Any, str]:
        """POST one chat-completions `body`, ending by `deadline` (a `time.perf_counter()` second)
        whatever the server does: ("ok", the decoded JSON reply, "") or ("timeout" | "error", None,
        the cause). Never raises for what the server does; the gateway (`zc serve`) forwards with it.

        With `on_event` (for a body with `"stream": true`), a server-sent-events reply is read as it
        arrives: each event's decoded JSON goes to `on_event`, and the reply is the list of events
        (a plain JSON reply is returned as it is)."""
        budget = deadline - time.perf_counter()
        if budget <= 0:
            return "timeout", None, "no time left for this tier"
        try:
            content = json.dumps(body, ensure_ascii=False, default=_jsonable).encode()
        except (TypeError, ValueError) as exc:  # e.g. a non-JSON value in extra_body
            return "error", None, f"request not encodable: {exc}"
        try:
            status, raw = self._post(content, deadline, on_event)
        except _BadStream as exc:
            return "error", None, f"malformed reply: {exc}"
        except httpx.TimeoutException as exc:
            return "timeout", None, f"timed out after {budget * 1000:.0f} ms ({_phase(exc)})"
        except httpx.ConnectError as exc:
            return "error", None, _connect_detail(exc)
        except httpx.RemoteProtocolError as exc:
            return "error", None, f"connection dropped: {_first_line(exc)}"
        except httpx.ReadError as exc:
            return "error", None, f"connection reset: {_first_line(exc)}"
        except httpx.HTTPError as exc:
            return "error", None, f"{type(exc).__name__}: {_first_line(exc)}"
        except RuntimeError as exc:  # the client was closed
            return "error", None, f"tier unavailable: {exc}"
        if status != 200:
            return "error", None, f"HTTP {status}{_error_message(raw)}"
        if isinstance(raw, list):  # the events of a stream
            return "ok", raw, ""
        try:
            return "ok", _loads(raw), ""
        except (ValueError, UnicodeDecodeError, RecursionError):
            return "error", None, f"malformed reply: body is not JSON: {_snippet(raw)}"

    def _post(self, content: bytes, deadline: float,
              on_event: Callable[[Any], None] | None = None) -> tuple[int, bytes | list]:
        """POST; every socket operation of the call is bounded by the time left until `deadline`
        (perf_counter seconds), so a server that trickles bytes cannot stretch it."""
        _DEADLINE.at = deadline
        try:
            timeout = httpx.Timeout(max(deadline - time.perf_counter(), 0.001))
            with self._client.stream("POST", self.url, content=content, timeout=timeout) as resp:
                sse = resp.headers.get("content-type", "").startswith("text/event-stream")
                if on_event is None or resp.status_code != 200 or not sse:
                    return resp.status_code, resp.read()
                return resp.status_code, _events(resp, on_event)
        finally:
            _DEADLINE.at = None

    def _judge(self, reply: Any, offer: _Offer) -> _Reply:
        if not isinstance(reply, dict):
            raise _Malformed(f"expected a JSON object, got {type(reply).__name__}")
        model = reply.get("model") if isinstance(reply.get("model"), str) else None
        choices = reply.get("choices")
        if not isinstance(choices, list):
            raise _Malformed('no "choices" list')
        if not choices:
            raise _Malformed('empty "choices"')
        message = choices[0].get("message") if isinstance(choices[0], dict) else None
        if not isinstance(message, dict):
            raise _Malformed('no "choices[0].message" object')
        note = ""
        tool_calls = message.get("tool_calls")
        if offer.back and tool_calls:  # tools mode
            if not isinstance(tool_calls, list):
                raise _Malformed('"tool_calls" is not a list')
            fn = tool_calls[0].get("function") if isinstance(tool_calls[0], dict) else None
            name = fn.get("name") if isinstance(fn, dict) else None
            if not isinstance(name, str):
                raise _Malformed('no "tool_calls[0].function.name" string')
            if len(tool_calls) > 1:
                note = f"{len(tool_calls)} tool calls; took the first"
            action = offer.back.get(name, name)
            arguments = _arguments(fn.get("arguments"))
            text = None
            if action in offer.replies:
                text = arguments.pop("text", None) if isinstance(arguments.get("text"), str) else None
                arguments = None
            return self._verdict(action, offer, model, note, arguments, text)
        content = message.get("content")
        if content is not None and not isinstance(content, str):
            raise _Malformed('"content" is not a string')
        text = (content or "").strip()
        if not text:
            return _Reply("abstained", detail="empty answer", model=model)
        if offer.back and len(offer.replies) == 1:  # tools mode: prose is the reply when one reply action is legal
            return _Reply("answered", next(iter(offer.replies)), None, text, "replied in prose", model)
        fenced = _FENCE.match(text)
        if fenced:
            text = fenced.group(1)
        try:
            obj = _loads(text)
        except (ValueError, RecursionError):
            obj = None
        if not isinstance(obj, dict) or "action" not in obj:
            if offer.back:  # tools mode, the model wrote prose instead of calling a tool
                return _Reply("abstained", detail=f"no tool call; replied {_snippet(text)}", model=model)
            raise _Malformed(f'content is not a JSON object with "action": {_snippet(text)}')
        action = obj["action"]
        if action is None or action == "":
            return _Reply("abstained", detail="declined (action: null)", model=model)
        if not isinstance(action, str):
            raise _Malformed(f'"action" is not a string: {_snippet(json.dumps(action))}')
        said = obj.get("text") if isinstance(obj.get("text"), str) else None
        return self._verdict(action, offer, model, note, None, said if action in offer.replies else None)

    @staticmethod
    def _verdict(action: str, offer: _Offer, model: str | None, note: str, arguments: dict | None,
                 text: str | None) -> _Reply:
        if action in offer.actions:
            return _Reply("answered", action, arguments, text, note, model)
        return _Reply("illegal", detail=f"proposed `{action}` outside the legal set", model=model)


@dataclass(frozen=True, slots=True)
class _Reply:
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
            raw = _loads(raw)
        except (ValueError, RecursionError):
            raise _Malformed(f'"tool_calls[0].function.arguments" is not JSON: {_snippet(raw)}') from None
    if not isinstance(raw, dict):
        raise _Malformed('"tool_calls[0].function.arguments" is not a JSON object')
    return raw


class _BadStream(Exception):
    """A server-sent-events reply with an event that is not JSON, or that ends before `[DONE]`."""


def _events(resp: httpx.Response, on_event: Callable[[Any], None]) -> list:
    """The decoded `data:` events of an SSE reply up to `[DONE]`, each handed to `on_event` on arrival."""
    out = []
    for line in resp.iter_lines():
        if not line.startswith("data:"):
            continue  # comments, `event:` and `id:` lines, the blank lines between events
        data = line[5:].strip()
        if data == "[DONE]":
            return out
        try:
            event = _loads(data)
        except (ValueError, RecursionError):
            raise _BadStream(f"an event is not JSON: {_snippet(data)}") from None
        out.append(event)
        on_event(event)
    raise _BadStream(f"the stream ended before [DONE] after {len(out)} events (cut short?)")


# ---- the whole-call deadline ---------------------------------------------------------------------
_DEADLINE = threading.local()  # `.at`: the perf_counter second by which this thread's call must end


def _left(timeout: float | None, exc: type[Exception]) -> float | None:
    at = getattr(_DEADLINE, "at", None)
    if at is None:
        return timeout
    left = at - time.perf_counter()
    if left <= 0:
        raise exc("the call's deadline passed")
    return left if timeout is None else min(timeout, left)


class _DeadlineStream(httpcore.NetworkStream):
    """A socket stream whose every read and write waits at most until the calling thread's deadline."""

    def __init__(self, inner: httpcore.NetworkStream) -> None:
        self._inner = inner

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._inner.read(max_bytes, _left(timeout, httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._inner.write(buffer, _left(timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        self._inner.close()

    def start_tls(self, ssl_context: Any, server_hostname: str | None = None,
                  timeout: float | None = None) -> httpcore.NetworkStream:
        return _DeadlineStream(self._inner.start_tls(ssl_context, server_hostname,
                                                     _left(timeout, httpcore.ConnectTimeout)))

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class _DeadlineBackend(httpcore.NetworkBackend):
    """httpcore's sync backend, with connects and streams bounded by the calling thread's deadline."""

    def __init__(self) -> None:
        self._inner = httpcore.SyncBackend()

    def connect_tcp(self, host: str, port: int, timeout: float | None = None, local_address: str | None = None,
                    socket_options: Any = None) -> httpcore.NetworkStream:
        return _DeadlineStream(self._inner.connect_tcp(host, port, _left(timeout, httpcore.ConnectTimeout),
                                                       local_address, socket_options))

    def connect_unix_socket(self, path: str, timeout: float | None = None,
                            socket_options: Any = None) -> httpcore.NetworkStream:
        return _DeadlineStream(self._inner.connect_unix_socket(path, _left(timeout, httpcore.ConnectTimeout),
                                                               socket_options))

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


def _transport(socket_options: list) -> httpx.HTTPTransport:
    """httpx's transport over a connection pool whose sockets honour the whole-call deadline."""
    transport = httpx.HTTPTransport()
    # httpx takes no network backend, so its pool is replaced (the slow-server test guards this)
    transport._pool = httpcore.ConnectionPool(max_connections=64, max_keepalive_connections=16,
                                              keepalive_expiry=5.0, socket_options=socket_options,
                                              network_backend=_DeadlineBackend())
    return transport


def _phase(exc: httpx.TimeoutException) -> str:
    return {httpx.ConnectTimeout: "connect", httpx.ReadTimeout: "read", httpx.WriteTimeout: "write",
            httpx.PoolTimeout: "pool"}.get(type(exc), "timeout")


def _first_line(exc: Exception) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def _connect_detail(exc: httpx.ConnectError) -> str:
    text = _first_line(exc)
    cause = exc.__cause__ or exc.__context__
    while cause is not None and not isinstance(cause, OSError):
        cause = cause.__cause__ or cause.__context__
    if isinstance(cause, ConnectionRefusedError) or "refused" in text.lower():
        return "connection refused"
    return f"connection failed: {text}"


def _snippet(raw: bytes | str) -> str:
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
    text = " ".join(text.split())
    return repr(text if len(text) <= _SNIPPET else text[:_SNIPPET] + "…")


def _loads(text: str | bytes) -> Any:
    """A model server's JSON, nesting bounded (`inputs.MAX_JSON_DEPTH`): ValueError when it is not JSON,
    or nested deeper."""
    try:
        return decode_json(text, what="the reply")
    except ZcError as exc:
        raise ValueError(str(exc)) from None


def _error_message(raw: bytes) -> str:
    """`: message` from an OpenAI-style error body, if there is one."""
    try:
        err = _loads(raw).get("error")
        msg = err.get("message") if isinstance(err, dict) else err
    except (ValueError, AttributeError, UnicodeDecodeError):
        return ""
    if not isinstance(msg, str) or not msg.strip():
        return ""
    msg = " ".join(msg.split())
    return ": " + (msg if len(msg) <= _SNIPPET else msg[:_SNIPPET] + "…")


# --- tiers.toml ---------------------------------------------------------------------------------

Positive = Annotated[float, msgspec.Meta(gt=0)]


class TierConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One `[tiers.NAME]` table of a tiers.toml file (the keyword arguments of OpenAITier)."""

    base_url: str
    model: str
    timeout_ms: Positive = 4000.0
    mode: Literal["tools", "json_schema"] = "tools"
    api_key_env: str | None = None
    temperature: Annotated[float, msgspec.Meta(ge=0)] = 0.0
    max_tokens: Annotated[int, msgspec.Meta(ge=1)] = 64
    system_prompt: str | None = None
    extra_body: dict[str, Any] | None = None


def _config_error(file: str, where: str, table: dict, exc: msgspec.ValidationError) -> ZcError:
    p = json_problem(exc)
    if p.kind == "unknown":
        fields = msgspec.structs.fields(TierConfig)
        unset = [f.name for f in fields if f.name not in table]
        required = [f.name for f in fields if f.required and f.name not in table]  # those first
        hint = did_you_mean(p.field, required) or did_you_mean(p.field, unset)
        return ZcError(f'{file}: {where} unknown key "{p.field}"' + (f" ({hint})" if hint else ""))
    if p.kind == "missing":
        return ZcError(f'{file}: {where} missing key "{p.field}"')
    key = p.path.removeprefix("$").lstrip(".").split(".")[0].split("[")[0]
    return ZcError(f'{file}: {where} key "{key}": {p.problem}' if key else f"{file}: {where} {p.problem}")


def _nesting(value: Any) -> int:
    """How deeply tables and arrays nest in a parsed TOML value (iteratively: no recursion limit)."""
    deepest, todo = 0, [(value, 0)]
    while todo:
        v, depth = todo.pop()
        if isinstance(v, (dict, list)):
            deepest = max(deepest, depth + 1)
            todo.extend((x, depth + 1) for x in (v.values() if isinstance(v, dict) else v))
    return deepest


def load_tiers(path: str | os.PathLike, policy: Any = None) -> dict[str, OpenAITier]:
    """Read a tiers.toml file: one `[tiers.NAME]` table per tier (each a tier `policy` declares,
    when given).

    Raises:
        ZcError: the file is missing, not a regular file or not TOML, nests more than
            `MAX_JSON_DEPTH` levels, a key is unknown or missing, a value has the wrong type, a tier
            is not one the policy declares (with did-you-mean), or a tier's `api_key_env` variable is
            not set; the message names the file, the tier and the key.
    """
    file = str(path)
    try:
        data = tomllib.loads(read_file(path, "tiers file").decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ZcError(f"{file}: not valid TOML: {exc}") from None
    except RecursionError:
        raise ZcError(f"{file}: not valid TOML: nested too deeply") from None
    if _nesting(data) > MAX_JSON_DEPTH:
        raise ZcError(f"{file}: nested more than {MAX_JSON_DEPTH} levels deep")
    for key in data:
        if key != "tiers":
            raise ZcError(f'{file}: unknown key "{key}" (expected only [tiers.NAME] tables)')
    tables = data.get("tiers", {})
    if not isinstance(tables, dict):
        raise ZcError(f'{file}: "tiers" must be a table of [tiers.NAME] tables')
    configs: dict[str, TierConfig] = {}
    for name, table in tables.items():
        where = f"[tiers.{name}]"
        if policy is not None and (problem := undeclared_tier(policy, name)):  # as Router(tiers=…) says it
            raise ZcError(f"{file}: {where}: {problem}")
        if not isinstance(table, dict):
            raise ZcError(f"{file}: {where} must be a table, got {type(table).__name__}")
        try:
            configs[name] = msgspec.convert(table, TierConfig, strict=True)
        except msgspec.ValidationError as exc:
            raise _config_error(file, where, table, exc) from None
    tiers: dict[str, OpenAITier] = {}
    try:
        for name, cfg in configs.items():
            try:
                tiers[name] = OpenAITier(name=name, **msgspec.structs.asdict(cfg))
            except ZcError as exc:
                raise ZcError(f"{file}: [tiers.{name}] {str(exc).removeprefix(f'tier {name}: ')}") from None
    except ZcError:
        for tier in tiers.values():
            tier.close()
        raise
    return tiers
