"""The LLM tier rung: asks a chat model behind an OpenAI-compatible endpoint, answers or abstains with a
cause."""

from __future__ import annotations

import os
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import msgspec

from ..errors import ZcError
from ..router.prompt import system_prompt as default_system_prompt
from ..router.rung import Answer, Step, abstain, settle
from .client import ChatClient
from .offer import (
    MODES,
    Malformed,
    Offer,
    Reply,
    judge,
    messages,
)

OUTCOMES = ("answered", "abstained", "timeout", "illegal", "error")


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


class OpenAITier:
    """An LLM tier behind an OpenAI-compatible `/chat/completions` endpoint (llama.cpp, Ollama, vLLM, …).

    The request offers only the legal actions, as tools with `tool_choice: "required"` (mode
    "tools") or as the enum of a JSON schema (mode "json_schema"), with the state rendered
    deterministically. Every failure (timeout, refused or dropped connection, HTTP error,
    malformed reply, empty answer, an action outside the legal set) becomes a non-answer with its
    cause in `detail`; `propose` never raises for them and never returns an illegal action.
    One kept-alive `ChatClient` (httpx) per tier, whose calls end by their deadline whatever the
    server does; `propose` and `answer` are thread-safe.

    Args:
        base_url: the server's OpenAI base URL, e.g. "http://127.0.0.1:8080/v1".
        model: the model name sent in every request.
        timeout_ms: this tier's budget per call; a call gets min(timeout_ms, timeout_s).
        api_key_env: the environment variable holding the API key (sent as a Bearer token).
        mode: "tools", "json_schema" (OpenAI's `response_format`) or "json_object" (the JSON schema in
            `response_format: {"type": "json_object", "schema": …}`, as llama-cpp-python's server takes it).
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
                                                      default_system_prompt(mode))}
        self._http = ChatClient(self.url, headers)
        self._offers: OrderedDict[tuple, Offer] = OrderedDict()
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
        self._http.close()

    def _offer(self, legal: tuple[str, ...], descriptions: dict[str, str] | None,
               catalog: Any = None, schemas: dict[str, Any] | None = None) -> Offer:
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
        offer = Offer(legal, descriptions, self.mode, calls, replies, schemas)
        with self._offers_lock:
            self._offers[key] = offer
            while len(self._offers) > 256:
                self._offers.popitem(last=False)
        return offer

    def request_body(self, state: dict, legal: tuple[str, ...], intent: str | None = None,
                     descriptions: dict[str, str] | None = None, catalog: Any = None) -> dict[str, Any]:
        """The JSON body `propose` (or, with the policy's `catalog`, `answer`) sends for this decision."""
        return self._request_body(state, self._offer(tuple(dict.fromkeys(legal)), descriptions, catalog),
                                  intent)

    def _request_body(self, state: dict, offer: Offer, intent: str | None) -> dict[str, Any]:
        body = {"model": self.model, "messages": messages(self._system, state, intent, offer.listing),
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

    def answer(self, step: Step, timeout_s: float | None) -> Answer:
        """The rung protocol (`zcompile.router.rung.Rung`): a complete call (the legal tools carry the
        parameter schemas of the `tools` given to `decide`, else the policy's signatures; the
        arguments are checked with `Policy.check`), a text reply for a reply action, or an
        abstention with its cause."""
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

    def _ask(self, state: Any, offer: Offer | None, intent: str | None, timeout_s: float,
             start: float) -> Reply:
        """One request for the offer, every failure a non-answer with its cause: the whole call (connect,
        send, headers, body) ends by the budget, whatever the server does."""
        budget = min(self.timeout_ms / 1000.0, timeout_s)
        if offer is None:
            return Reply("abstained", detail="no legal action offered")
        if budget <= 0:
            return Reply("timeout", detail="no time left for this tier")
        outcome, reply, detail = self.exchange(self._request_body(state, offer, intent), start + budget,
                                               since=start)
        if outcome != "ok":
            return Reply(outcome, detail=detail)
        try:
            return judge(reply, offer)
        except Malformed as exc:
            return Reply("error", detail=f"malformed reply: {exc}")

    def exchange(self, body: dict[str, Any], deadline: float, on_event: Callable[[Any], None] | None = None,
                 since: float | None = None) -> tuple[str, Any, str]:
        """POST one chat-completions `body` to this tier's endpoint, ending by `deadline` (a
        `time.perf_counter()` second): `ChatClient.exchange`. The gateway (`zc serve`) forwards with it."""
        return self._http.exchange(body, deadline, on_event, since)
