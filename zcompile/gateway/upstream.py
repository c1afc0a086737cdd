"""The upstream rung: forwards the harness's own conversation, with only the legal tools, and judges
every tool call the upstream model returns with `Policy.check` (one re-ask with the reasons)."""

from __future__ import annotations

import contextvars
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..receipts import Receipt
from ..receipts.chat import RESPOND, call_arguments
from ..router.rung import Answer, Step, abstain, settle
from ..tiers import OpenAITier

REASK = ("Error: zc refused this call: {reasons}. It was not executed. Choose one of the offered tools "
         "with valid arguments, or reply to the user.")


@dataclass
class Exchange:
    """One chat-completions request as the upstream rung sees it, and what the rung did with it.

    `body` is the harness's request with the legal tools only; the rung fills in the
    rest: the upstream's reply it accepted (`reply`, `message`), the calls it refused (`blocked`,
    each `{action, arguments, reasons}`), how many requests it sent, and why it failed (`failure`:
    `timeout` or `error`, with `detail`) when the upstream gave no usable reply. With `sink` (the
    harness asked for a stream), the first request streams upstream too, and its text deltas pass
    on to the harness as they arrive until a tool call starts (`passed`); tool calls are held
    until they are complete and judged.
    """

    body: dict[str, Any]
    stream_options: Any = None  # the harness's, sent with a streamed upstream request (usage always asked)
    sink: Callable[[str], None] | None = None  # streaming: passes text deltas on to the harness
    passed: str = ""  # the text already passed on
    reply: dict[str, Any] | None = None
    message: dict[str, Any] | None = None
    blocked: list[dict[str, Any]] = field(default_factory=list)
    sent: int = 0
    usage: dict[str, Any] = field(default_factory=dict)  # the upstream's token usage, summed over its replies
    timings: list[tuple[float, str | None]] = field(default_factory=list)  # each request: seconds, failure
    failure: str | None = None
    detail: str = ""
    meta: dict[str, Any] = field(default_factory=dict)  # merged into the request's receipt (`meta.gateway`)
    receipt: Receipt | None = None  # the receipt written for the request


CURRENT: contextvars.ContextVar[Exchange | None] = contextvars.ContextVar("zc_gateway_exchange", default=None)


class UpstreamRung:
    """A rung of the ladder bound to the upstream model (`zc serve --upstream URL --model NAME`).

    Asked with a Step, it sends the current request's `Exchange.body` (set in `CURRENT` by the
    gateway for the decision, which runs in a copy of the request's context) through the OpenAI-compatible
    HTTP client of `zcompile.OpenAITier`, and settles the reply: a text reply is the `respond`
    action, every tool call is judged by `settle` (legal set, arguments, `Policy.check`). A refused
    call is answered back to the model once, as the tool's error with the reasons; a second refusal
    is an `illegal` abstention (the router then answers with the policy's fallback). Timeouts and
    bad replies are abstentions with their cause.
    """

    writes_text = True

    def __init__(self, name: str, tier: OpenAITier) -> None:
        self.name = name
        self.tier = tier
        self.model = tier.model

    def answer(self, step: Step, timeout_s: float | None) -> Answer:
        ex = CURRENT.get()
        if ex is None:
            return abstain("skipped", "no chat request to forward (the upstream answers only through zc "
                                      "serve)")
        deadline = time.perf_counter() + (self.tier.timeout_ms / 1000 if timeout_s is None
                                          else min(timeout_s, self.tier.timeout_ms / 1000))
        body = dict(ex.body, model=self.model, stream=False)
        for attempt in range(2):
            relay = _relay(ex, step.allows(RESPOND)) if ex.sink is not None and attempt == 0 else None
            options = {**(ex.stream_options or {}), "include_usage": True}  # usage always counted
            streamed = dict(body, stream=True, stream_options=options)
            t0 = time.perf_counter()
            outcome, reply, detail = self.tier.exchange(streamed if relay else body, deadline, relay)
            ex.timings.append((time.perf_counter() - t0, None if outcome == "ok" else outcome))
            ex.sent += 1
            if isinstance(reply, list):
                reply = assemble(reply)
            if isinstance(reply, dict) and isinstance(reply.get("usage"), dict):
                ex.usage = add_usage(ex.usage, reply["usage"])
            if outcome != "ok":
                ex.failure, ex.detail = outcome, detail
                return abstain(outcome, detail, model=self.model)
            message, problem = reply_message(reply)
            if message is None:
                ex.failure, ex.detail = "error", f"malformed reply: {problem}"
                return abstain("error", ex.detail, model=self.model)
            model = reply.get("model") if isinstance(reply.get("model"), str) else self.model
            ans, refused = judge(step, message, model)
            if not refused:
                ex.reply, ex.message = reply, message
                return ans
            ex.blocked.extend(refused)
            if attempt == 0:  # re-ask once, with the reasons, as the refused calls' tool results
                body = dict(body, messages=[*body["messages"], *reask(message, refused)])
        return abstain("illegal", "the upstream proposed refused calls twice: "
                       + "; ".join(f"`{b['action']}`: {'; '.join(b['reasons'])}" for b in ex.blocked),
                       model=self.model)


def _relay(ex: Exchange, text_ok: bool) -> Callable[[Any], None]:
    """The `on_event` of a streamed upstream request: text deltas go on to the harness (when a text
    reply is legal) until the first tool-call delta; everything else waits for the judgement."""
    held = not text_ok

    def on_event(event: Any) -> None:
        nonlocal held
        delta = _delta(event)
        if delta.get("tool_calls"):
            held = True
        text = delta.get("content")
        if not held and isinstance(text, str) and text:
            ex.passed += text
            ex.sink(text)

    return on_event


def _delta(event: Any) -> dict:
    choices = event.get("choices") if isinstance(event, dict) else None
    first = choices[0] if isinstance(choices, list) and choices and isinstance(choices[0], dict) else {}
    return first.get("delta") if isinstance(first.get("delta"), dict) else {}


def assemble(events: list[Any]) -> dict[str, Any]:
    """The chat completion a stream of `chat.completion.chunk` events adds up to: the text deltas
    joined, each tool call (by `index`) with its name and its argument fragments joined."""
    content: list[str] = []
    calls: dict[int, dict[str, Any]] = {}
    head: dict[str, Any] = {}
    for event in events:
        if not isinstance(event, dict):
            continue
        for key in ("id", "model", "usage"):
            if event.get(key) is not None:
                head[key] = event[key]
        delta = _delta(event)
        if isinstance(delta.get("content"), str):
            content.append(delta["content"])
        for part in delta.get("tool_calls") or ():
            if not isinstance(part, dict):
                continue
            call = calls.setdefault(part.get("index", len(calls)) if isinstance(part.get("index"), int)
                                    else len(calls), {"id": None, "type": "function",
                                                      "function": {"name": "", "arguments": ""}})
            call["id"] = part.get("id") or call["id"]
            fn = part.get("function") if isinstance(part.get("function"), dict) else {}
            for key in ("name", "arguments"):
                if isinstance(fn.get(key), str):
                    call["function"][key] += fn[key]
    message: dict[str, Any] = {"role": "assistant", "content": "".join(content) or None}
    if calls:
        message["tool_calls"] = [calls[i] for i in sorted(calls)]
    return {**head, "choices": [{"index": 0, "message": message}]}


def add_usage(total: dict[str, Any], more: dict[str, Any]) -> dict[str, Any]:
    """Two `usage` objects summed, key by key (integers, and the `*_details` objects inside)."""
    out = dict(total)
    for key, value in more.items():
        if isinstance(value, bool):
            continue
        have = out.get(key)
        if isinstance(value, int):
            out[key] = (have if isinstance(have, int) else 0) + value
        elif isinstance(value, dict):
            out[key] = add_usage(have if isinstance(have, dict) else {}, value)
    return out


def reply_message(reply: Any) -> tuple[dict | None, str]:
    """(choices[0].message, "") of a chat completion, or (None, what is wrong with it)."""
    if not isinstance(reply, dict):
        return None, f"expected a JSON object, got {type(reply).__name__}"
    choices = reply.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return None, 'no "choices[0]" object'
    message = choices[0].get("message")
    if not isinstance(message, dict):
        return None, 'no "choices[0].message" object'
    calls = message.get("tool_calls")
    if calls is not None and not isinstance(calls, list):
        return None, '"tool_calls" is not a list'
    content = message.get("content")
    if content is not None and not isinstance(content, (str, list)):
        return None, '"content" is not a string'
    return message, ""


def message_text(message: dict) -> str:
    """The text of a chat message: its `content` string, or the `text` of its content parts joined."""
    text = message.get("content")
    return text if isinstance(text, str) else "".join(
        p.get("text", "") for p in text or () if isinstance(p, dict) and isinstance(p.get("text"), str))


def judge(step: Step, message: dict, model: str | None) -> tuple[Answer, list[dict[str, Any]]]:
    """(the answer of the message's first tool call or its text, every refused call) for one
    upstream message: each tool call goes through `settle`, so through `Policy.check`."""
    calls = message.get("tool_calls") or []
    if not calls:
        ans = settle(step, RESPOND, text=message_text(message), model=model)
        return ans, ([] if ans.answered else [_refusal(RESPOND, None, ans.detail)])
    first: Answer | None = None
    refused = []
    for call in calls:
        fn = call.get("function") if isinstance(call, dict) else None
        name = fn.get("name") if isinstance(fn, dict) else None
        if not isinstance(name, str):
            refused.append(_refusal(str(name), None, "a tool call without a function name"))
            continue
        arguments, problem = call_arguments(fn.get("arguments"))
        if problem is not None:
            refused.append(_refusal(name, None, f"malformed arguments: {problem}"))
            continue
        if name not in step.catalog.params:
            refused.append(_refusal(name, arguments, f"`{name}` is not an action of policy "
                                                     f"`{step.policy.name}`"))
            continue
        ans = settle(step, name, arguments, model=model)
        if ans.kind != "call":  # refused, or a bare name (no signature, or no arguments): the policy decides
            verdict = step.policy.check(step.legal.root, name, arguments, step.intent)
            if ans.kind == "name" and verdict.allowed:
                ans = Answer("call", action=name, arguments=arguments or {}, model=model)
            else:  # every reason the policy gives
                refused.append({"action": name, "arguments": arguments,
                                "reasons": [r.message for r in verdict.reasons] or [ans.detail or "refused"],
                                "rules": [r.rule for r in verdict.reasons]})
        first = first or ans
    return (first if first is not None else abstain("illegal", "no acceptable tool call",
                                                    model=model)), refused


def _refusal(action: str, arguments: Any, why: str) -> dict[str, Any]:
    return {"action": action, "arguments": arguments, "reasons": [why.removeprefix(
        "call refused by the policy: ")]}


def reask(message: dict, refused: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The messages that answer a refused upstream message: itself, then one tool result per call
    (the reasons), so any OpenAI-compatible server accepts the continued conversation."""
    calls = [dict(c, id=c.get("id") or f"call_{os.urandom(6).hex()}") for c in message.get("tool_calls") or []
             if isinstance(c, dict)]
    why = "; ".join(r for b in refused for r in b["reasons"])
    if not calls:  # a refused text reply: say so as the user's turn
        return [{"role": "assistant", "content": message.get("content") or ""},
                {"role": "user", "content": REASK.format(reasons=why)}]
    out: list[dict[str, Any]] = [{"role": "assistant", "content": message.get("content"),
                                  "tool_calls": calls}]
    out += [{"role": "tool", "tool_call_id": c["id"], "content": REASK.format(reasons=why)} for c in calls]
    return out

