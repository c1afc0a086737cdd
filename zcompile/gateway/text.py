"""The text-tier rung of `zc serve`: a reply the specialist hands on is written by the policy's text
tier (`tier NAME … text`, bound in tiers.toml) from the harness's own conversation, not by the upstream."""

from __future__ import annotations

import time

from ..receipts.chat import RESPOND
from ..router.rung import Answer, Step, abstain, settle
from ..tiers import OpenAITier
from .upstream import CURRENT, message_text, reply_message

_NOT_FORWARDED = ("tools", "tool_choice", "parallel_tool_calls", "functions", "function_call",
                  "response_format", "stream_options")


class TextRung:
    """The policy's text tier as a rung of the gateway's ladder.

    Asked (by the router, only for a reply handed on), it sends the current request's conversation
    (`Exchange.body`: the harness's messages and sampling settings) to the tier's endpoint with the
    tier's model, without tools (only the reply is legal to it), never streamed; the reply's text
    is the `respond` answer. A tool call, an empty reply, a timeout, an HTTP error or a malformed
    reply is an abstention with its cause, and the router asks the next rung that writes text (the
    upstream). The upstream's bookkeeping (`Exchange.sent`, `failure`) is left as it is.
    """

    writes_text = True

    def __init__(self, name: str, tier: OpenAITier) -> None:
        self.name = name
        self.tier = tier
        self.model = tier.model

    def close(self) -> None:
        self.tier.close()

    def answer(self, step: Step, timeout_s: float | None) -> Answer:
        ex = CURRENT.get()
        if ex is None:
            return abstain("skipped", "no chat request to write a reply for (zc serve asks this rung)")
        if not step.allows(RESPOND):
            return abstain("declined", f"`{RESPOND}` is not legal and offered at this step", model=self.model)
        budget = (self.tier.timeout_ms / 1000 if timeout_s is None
                  else min(timeout_s, self.tier.timeout_ms / 1000))
        body = {k: v for k, v in ex.body.items() if k not in _NOT_FORWARDED}
        body.update(self.tier.extra_body, model=self.model, stream=False)
        start = time.perf_counter()
        outcome, reply, detail = self.tier.exchange(body, start + budget, since=start)
        if outcome != "ok":
            return abstain(outcome, detail, model=self.model)
        message, problem = reply_message(reply)
        if message is None:
            return abstain("error", f"malformed reply: {problem}", model=self.model)
        model = reply.get("model") if isinstance(reply.get("model"), str) else self.model
        if message.get("tool_calls"):
            return abstain("declined", "called a tool instead of writing the reply", model=model)
        text = message_text(message)
        if not text.strip():
            return abstain("declined", "an empty reply", model=model)
        return settle(step, RESPOND, text=text, model=model)
