"""What the gateway sends back: chat completions, their SSE chunks, and OpenAI-style JSON errors."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from typing import Any

FALLBACK_TEXT = ("I can't complete that request right now: the action it needs is not allowed here. "
                 "Could you tell me more, or ask for something else?")


def completion_id() -> str:
    return f"chatcmpl-zc{os.urandom(12).hex()}"


def tool_call(action: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """An OpenAI tool call of `action` with `arguments` (JSON text, as OpenAI sends them)."""
    return {"id": f"call_zc{os.urandom(8).hex()}", "type": "function",
            "function": {"name": action, "arguments": json.dumps(arguments, ensure_ascii=False,
                                                                 separators=(",", ":"))}}


NO_USAGE = {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}  # an answer zc gave locally


def completion(model: str, message: dict[str, Any], x_zc: dict[str, Any], *, cid: str | None = None,
               usage: Any = None, created: int | None = None) -> dict[str, Any]:
    """A well-formed `chat.completion` with one choice carrying `message`, its `usage` (the
    upstream's tokens, summed over zc's requests for it; zero when none), and the `x_zc` extension."""
    message = {"role": "assistant", "content": message.get("content"),
               **({"tool_calls": message["tool_calls"]} if message.get("tool_calls") else {})}
    out = {"id": cid or completion_id(), "object": "chat.completion",
           "created": int(time.time()) if created is None else created, "model": model,
           "choices": [{"index": 0, "message": message,
                        "finish_reason": "tool_calls" if message.get("tool_calls") else "stop"}]}
    out["usage"] = usage if isinstance(usage, dict) and usage else dict(NO_USAGE)
    out["x_zc"] = x_zc
    return out


def event(cid: str, created: int, model: str, delta: dict[str, Any], finish: str | None = None,
          **extra: Any) -> bytes:
    """One SSE event: a `chat.completion.chunk` with one choice's `delta`."""
    body = {"id": cid, "object": "chat.completion.chunk", "created": created, "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}], **extra}
    return b"data: " + json.dumps(body, ensure_ascii=False).encode() + b"\n\n"


DONE = b"data: [DONE]\n\n"


def chunks(done: dict[str, Any], passed: str = "", include_usage: bool = False) -> Iterator[bytes]:
    """The SSE events of a judged completion: the role, the text, each whole tool call, then the
    finish reason (with `x_zc`), then `[DONE]`. Tool calls are sent whole: a call is judged before
    any of it reaches the harness. `passed`: the text the harness already has (streamed through
    from the upstream, role included), left out. `include_usage`: a last chunk with no choice and
    the `usage`, before `[DONE]` (as OpenAI sends it for `stream_options.include_usage`)."""
    choice = done["choices"][0]
    message = choice["message"]
    head = (done["id"], done["created"], done["model"])
    text = message.get("content") or ""
    if not passed:
        yield event(*head, {"role": "assistant", "content": ""})
    rest = text[len(passed):] if text.startswith(passed) else text
    if rest:
        yield event(*head, {"content": rest})
    for i, call in enumerate(message.get("tool_calls") or ()):
        yield event(*head, {"tool_calls": [{"index": i, **call}]})
    yield event(*head, {}, choice["finish_reason"], x_zc=done["x_zc"])
    if include_usage:
        body = {"id": head[0], "object": "chat.completion.chunk", "created": head[1], "model": head[2],
                "choices": [], "usage": done.get("usage") or dict(NO_USAGE)}
        yield b"data: " + json.dumps(body, ensure_ascii=False).encode() + b"\n\n"
    yield DONE


def error_event(body: dict[str, Any]) -> Iterator[bytes]:
    """An error after the stream began (an OpenAI client raises on an event with `error`)."""
    yield b"data: " + json.dumps(body, ensure_ascii=False).encode() + b"\n\n"
    yield DONE


def error_body(status: int, message: str, *, code: str, param: str | None = None,
               x_zc: dict[str, Any] | None = None) -> dict[str, Any]:
    """An OpenAI-style error object (`{"error": {message, type, param, code}}`)."""
    kind = "invalid_request_error" if status < 500 else ("timeout" if status == 504 else "upstream_error")
    out: dict[str, Any] = {"error": {"message": message, "type": kind, "param": param, "code": code}}
    if x_zc is not None:
        out["x_zc"] = x_zc
    return out
