"""The ASGI app of `zc serve`: an OpenAI-compatible `/v1/chat/completions` that offers the upstream
only legal tools, answers locally when a rung is sure, and lets no illegal call reach the harness."""

from __future__ import annotations

import asyncio
import contextvars
import functools
import hmac
import json
import logging
import os
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from urllib.parse import quote

import msgspec
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from .. import tracing
from ..errors import ZcError
from ..metrics import DoorMetrics, Instrumented
from ..receipts import Receipt, ReceiptWriter
from ..receipts.chat import RESPOND, default_extract, extractor_name
from ..router import Router
from ..router.router import DEADLINE
from ..runtime import Policy, tool_name
from ..state import StateError
from ..tiers import OpenAITier
from ..tools import REPLY_TAG
from . import replies
from .body import read_body
from .request import BadRequest, ChatRequest, derive, forwarded, offer, parse
from .text import TextRung
from .upstream import CURRENT, Exchange, UpstreamRung

MAX_BODY_BYTES = 4 * 1024 * 1024
TIMEOUT_MS = 60_000.0
_log = logging.getLogger("zcompile.gateway")
GRACE_S = 1.0  # past the decision's deadline, the request answers 504 whatever the ladder is doing


class Gateway:
    """The policy, the ladder and the receipts behind one `zc serve`.

    Args:
        policy: the loaded policy; it must declare `respond` tagged `reply` (a text reply is
            recorded as `respond`, as `zc receipts import --format chat` records it).
        upstream: the upstream's OpenAI base URL (e.g. "http://127.0.0.1:8080/v1").
        model: the model name sent upstream (and listed by `GET /v1/models`).
        specialists: specialist directories or loaded specialists, asked in order.
        tiers: local tiers by name (`zcompile.tiers.load_tiers`), bound to the policy's tiers. The
            policy's text tier, bound here, writes the replies the specialist hands on, from the
            harness's conversation (`gateway.text.TextRung`); the upstream is asked only when it fails.
        upstream_tier: the policy tier the upstream is bound to (default: the last declared tier
            that is neither `specialist`, the text tier, nor bound in `tiers`).
        extract: the state extractor (`module:function` of `--extract`; default `default_extract`).
        receipts: the JSONL file each request's receipt is appended to (None: none written).
        timeout_ms: the deadline of one request; the upstream is given what is left of it.
        max_body_bytes: larger request bodies are refused (413).
        api_key_env: the environment variable holding the upstream's API key.
        workers: decisions run at once (each in a worker thread, upstream call included); more wait.
        client_keys: the bearer keys a harness must present, by name (`load_client_keys`); None or
            empty: no inbound authentication. The key's name goes in each receipt, never the key.
        grader: a `zcompile.router.grader.Grader` the text tier's replies must pass (`Router(grader=…)`);
            a failed one goes to the upstream, the grader's reasons in the receipt.
    """

    def __init__(self, policy: Policy, upstream: str, model: str, *, specialists: Any = None,
                 tiers: Mapping[str, Any] | None = None, upstream_tier: str | None = None,
                 extract: Callable[[list[dict], int, dict], dict] = default_extract,
                 receipts: str | Path | None = None, timeout_ms: float = TIMEOUT_MS,
                 max_body_bytes: int = MAX_BODY_BYTES, api_key_env: str | None = None, workers: int = 64,
                 client_keys: Mapping[str, str] | None = None, grader: Any = None) -> None:
        respond = next((a for a in policy.ir.actions if a.name == RESPOND), None)
        if respond is None or REPLY_TAG not in respond.tags:
            raise ZcError(f"policy `{policy.name}` must declare `action {RESPOND} tags(control, "
                          f"{REPLY_TAG})`: zc serve records a text reply as `{RESPOND}`, as `zc receipts "
                          "import --format chat` does")
        if not timeout_ms > 0:
            raise ZcError(f"the request timeout must be > 0 ms, got {timeout_ms}")
        self.policy, self.model, self.upstream_url = policy, model, upstream
        self.client_keys = dict(client_keys or {})
        self.extract, self.extractor = extract, extractor_name(extract)
        self.timeout_ms, self.max_body_bytes = float(timeout_ms), int(max_body_bytes)
        tiers = dict(tiers or {})
        text = next((t.name for t in policy.ir.tiers if t.text), None)
        if isinstance(tiers.get(text), OpenAITier):  # the text tier writes replies from the conversation
            tiers[text] = TextRung(text, tiers[text])
        free = [t.name for t in policy.ir.tiers if t.name not in ("specialist", text) and t.name not in tiers]
        name = upstream_tier or (free[-1] if free else None)
        if name is None:
            raise ZcError(f"policy `{policy.name}` declares no tier left for the upstream "
                          f"(declare e.g. `tier remote` and route to it)")
        if name == text:
            raise ZcError(f"tier `{name}` is the text tier of policy `{policy.name}`: it writes the replies "
                          "handed on, so the upstream cannot be bound to it (name another with "
                          "--upstream-tier)")
        self.upstream_tier = name
        self.upstream = OpenAITier(upstream, model, timeout_ms=timeout_ms, api_key_env=api_key_env, name=name)
        self._writer: ReceiptWriter | None = None
        try:
            self.router = Router(policy, specialists=specialists,
                                 tiers={**tiers, name: UpstreamRung(name, self.upstream)},
                                 receipts=self._write, deadline_ms=timeout_ms, complete=True, grader=grader)
        except BaseException:
            self.upstream.close()
            raise
        # last: nothing left on errors
        self._writer = ReceiptWriter(receipts) if receipts is not None else None
        self.receipts = Path(receipts) if receipts is not None else None
        self.workers = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="zc-serve")
        self.metrics = DoorMetrics("serve")

    def close(self) -> None:
        self.workers.shutdown(wait=True)
        self.upstream.close()
        self.router.close()
        for tier in self.router.tiers.values():
            if isinstance(tier, (OpenAITier, TextRung)):
                tier.close()
        if self._writer is not None:
            self._writer.close()

    def _write(self, r: Receipt) -> None:
        """The router's receipt sink: adds what the gateway saw (`meta.gateway`), then appends."""
        ex = CURRENT.get()
        if ex is not None:
            r = msgspec.structs.replace(r, meta={**r.meta, **ex.meta, "gateway": {
                **ex.meta.get("gateway", {}), "upstream_requests": ex.sent, "usage": ex.usage,
                "blocked": ex.blocked, **({"failure": ex.failure, "detail": ex.detail} if ex.failure
                                          else {})}})
            ex.receipt = r
        if self._writer is not None:
            self._writer.append(r)
            self.metrics.written()

    @property
    def give_up_s(self) -> float:
        """Seconds after its arrival at which a request answers 504, whatever the ladder is doing."""
        return self.timeout_ms / 1000 + GRACE_S

    # ---- one request -------------------------------------------------------------------------
    def client(self, authorization: str | None) -> str | None:
        """The name of the client key an `Authorization` header presents (None: none that matches)."""
        scheme, _, key = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or not key:
            return None
        found = None
        for name, expected in self.client_keys.items():  # every key compared: no early exit to time
            if hmac.compare_digest(key.strip().encode(), expected.encode()):
                found = name
        return found

    def decide(self, req: ChatRequest, sink: Callable[[bytes], None] | None = None,
               started: float | None = None, client: str | None = None) -> tuple[int, dict[str, Any], str]:
        """(HTTP status, JSON body, the text already streamed) for one validated request; runs in a
        worker thread. `sink` (a streamed request) takes the SSE events of the upstream's text as it
        arrives, before the decision is complete. `started`: the request's arrival
        (`time.perf_counter()`); the deadline counts from it, time queued for a worker included.
        Traced (when configured) as a `zc.decision` span, the upstream's requests inside it."""
        with tracing.span("zc.decision", {"zc.door": "serve", "zc.policy": self.policy.name}) as span:
            status, body, passed = self._decide(req, sink, started, client, span)
            tracing.annotate(span, {"zc.status": status})
            return status, body, passed

    def _decide(self, req: ChatRequest, sink: Callable[[bytes], None] | None, started: float | None,
                client: str | None, span: Any) -> tuple[int, dict[str, Any], str]:
        cid, created = replies.completion_id(), int(time.time())
        state, candidates = derive(req, self.extract)
        try:
            legal = self.policy.legal(state, req.intent)
        except StateError as exc:
            raise BadRequest(422, f"the state extracted from the messages does not match policy "
                                  f"`{self.policy.name}`: {exc}", "messages", "state_mismatch") from None
        except ZcError as exc:
            raise BadRequest(400, f"$.x_zc.intent: {exc}", "x_zc.intent") from None
        names = [tool_name(t) for t in req.tools]
        offered = self.policy.filter_tools(req.tools, state, req.intent)
        kept = [tool_name(t) for t in offered]
        undeclared = [n for n in names if n not in self.policy.actions]
        illegal = [n for n in names if n in self.policy.actions and n not in kept]
        ex = Exchange(forwarded(req, offered), stream_options=req.stream_options if req.stream else None)
        if sink is not None:
            def pass_on(text: str) -> None:
                if ex.passed == text:  # the first text: the role first
                    sink(replies.event(cid, created, self.model, {"role": "assistant", "content": ""}))
                sink(replies.event(cid, created, self.model, {"content": text}))
            ex.sink = pass_on
        ex.meta = {"conversation": req.task, "turn": len(req.messages), "extractor": self.extractor,
                   "gateway": {"offered": kept, "undeclared": undeclared, "illegal": illegal,
                               "stream": req.stream, **({"client": client} if client is not None else {})}}
        CURRENT.set(ex)  # this decision's context: the upstream rung and the receipt sink read it
        schemas = [t.get("function", t) for t in offered]
        can = offer(req, kept, self.router.catalog.replies)
        if started is not None and time.perf_counter() - started > self.give_up_s:
            can = frozenset()  # the harness was already answered 504: record a decision that answers nothing
        d = self.router.decide(state, req.intent, task=req.task, tools=schemas or None, candidates=candidates,
                               offer=can, started=started)
        m = self.metrics
        m.answered("fallback" if d.tier == "none" else d.tier)
        for b in ex.blocked:
            m.refused(b.get("rules") or [])
        for seconds, failure in ex.timings:
            m.upstream(seconds, failure)
        x_zc = {"receipt": ex.receipt.id, "rung": d.tier, "kind": d.kind, "action": d.action,
                "legal": list(legal.actions), "offered": kept, "offer": sorted(can),
                "stripped": {"undeclared": undeclared, "illegal": illegal},
                "blocked": ex.blocked, "upstream_requests": ex.sent,
                "fallback": d.tier in ("fallback", "none")}
        tracing.annotate(span, {"zc.legal": list(legal.actions), "zc.legal.count": len(legal.actions),
                                "zc.rung": d.tier, "zc.kind": d.kind, "zc.action": d.action,
                                "zc.upstream_requests": ex.sent,
                                "zc.blocked.actions": [b["action"] for b in ex.blocked],
                                "zc.blocked.rules": sorted({r for b in ex.blocked
                                                            for r in b.get("rules") or ()})})
        done = functools.partial(replies.completion, self.model, x_zc=x_zc, cid=cid, created=created,
                                 usage=ex.usage)  # the upstream's tokens for this request, if it was asked
        if d.tier == self.upstream_tier and ex.message is not None:  # the upstream's own judged reply
            return 200, done(ex.message), ex.passed
        if d.tier in ("fallback", "none") and not ex.blocked and any(
                a.cause == "skipped" and a.detail == DEADLINE for a in d.rungs):  # out of time, not refused
            return 504, replies.error_body(504, "no decision within the request's deadline (queued for a "
                                                "worker, or the rungs before used the time)",
                                           code="timeout", x_zc=x_zc), ex.passed
        if d.kind == "call":
            call = replies.tool_call(d.action, d.arguments or {})
            return 200, done({"content": None, "tool_calls": [call]}), ex.passed
        if d.kind == "reply":
            return 200, done({"content": d.text}), ex.passed
        if ex.failure is not None and not ex.blocked:  # the upstream failed: say so, never guess
            status = 504 if ex.failure == "timeout" else 502
            return status, replies.error_body(status, f"upstream {ex.failure}: {ex.detail}",
                                              code=f"upstream_{ex.failure}", x_zc=x_zc), ex.passed
        x_zc["fallback"], x_zc["rung"] = True, "fallback"  # nothing acceptable: the policy's fallback
        if not can & self.router.catalog.replies:  # tool_choice required a call: never text
            fb = self.policy.ir.fallback
            return 422, replies.error_body(
                422, f"tool_choice requires a tool call, and no call the policy allows was proposed; the "
                     f"policy's fallback `{fb}` is not a tool this request offered, legal now, without "
                     "arguments", code="no_tool_call", param="tool_choice", x_zc=x_zc), ex.passed
        return 200, done({"content": replies.FALLBACK_TEXT}), ex.passed


def load_client_keys(path: str | None, env_vars: Sequence[str] = ()) -> dict[str, str]:
    """Client keys by name: from a file (one `NAME KEY` a line; `#` comments and blank lines
    skipped) and from environment variables (each named by its variable). ZcError naming the file
    and line, or the variable, for anything else."""
    keys: dict[str, str] = {}

    def add(name: str, key: str, where: str) -> None:
        if name in keys:
            raise ZcError(f"{where}: the client key name `{name}` is given twice")
        if len(key) < 16:
            raise ZcError(f"{where}: the key of `{name}` is shorter than 16 characters")
        if key in keys.values():
            raise ZcError(f"{where}: the key of `{name}` is another client's key too")
        keys[name] = key

    if path is not None:
        try:
            lines = Path(path).read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as exc:
            raise ZcError(f"{path}: cannot read the client keys: {exc}") from None
        for i, line in enumerate(lines, 1):
            text = line.strip()
            if not text or text.startswith("#"):
                continue
            parts = text.split()
            if len(parts) != 2:
                raise ZcError(f"{path}:{i}: expected `NAME KEY` (two words), got {len(parts)}")
            add(parts[0], parts[1], f"{path}:{i}")
    for var in env_vars:
        key = os.environ.get(var)
        if not key:
            raise ZcError(f"--client-key-env {var}: not set or empty")
        add(var, key, f"--client-key-env {var}")
    return keys


def _headers(body: dict[str, Any]) -> dict[str, str]:
    """The `x-zc-*` response headers: the rung, the receipt, and the reasons of refused calls (JSON)."""
    x = body.get("x_zc") or {}
    out = {}
    if "rung" in x:
        out["x-zc-rung"] = str(x["rung"])
    if "receipt" in x:
        out["x-zc-receipt"] = str(x["receipt"])
    stripped = x.get("stripped") or {}
    if stripped.get("undeclared") or stripped.get("illegal"):
        out["x-zc-stripped"] = ",".join(quote(n, safe="") for n in [*stripped.get("undeclared", ()),
                                                                    *stripped.get("illegal", ())])
    if x.get("blocked"):
        out["x-zc-blocked"] = json.dumps([{"action": b["action"], "reasons": b["reasons"]}
                                          for b in x["blocked"]],
                                         ensure_ascii=True)
    return out


async def _settled(task: asyncio.Future) -> tuple[int, dict[str, Any], str]:
    """The decision's (status, body, text streamed), every failure as an error body."""
    try:
        return await task
    except BadRequest as exc:
        return exc.status, replies.error_body(exc.status, exc.message, code=exc.code, param=exc.param), ""
    except TimeoutError:
        return 504, replies.error_body(504, "no decision within the request's deadline", code="timeout"), ""
    except ZcError as exc:  # e.g. the receipt could not be written: no answer without its receipt
        return 500, replies.error_body(500, str(exc), code="internal_error"), ""
    except Exception as exc:  # noqa: BLE001 - a bug must not take the server down or leak a traceback
        _log.exception("zc serve: the decision failed")
        return 500, replies.error_body(500, f"internal error: {type(exc).__name__}: {exc}",
                                       code="internal_error"), ""


def _respond(result: tuple[int, dict[str, Any], str], started: float, req: ChatRequest) -> Response:
    status, body, _ = result
    headers = _headers(body)
    headers["x-zc-latency-ms"] = f"{(time.perf_counter() - started) * 1000:.3f}"
    if status == 200 and req.stream:
        return StreamingResponse(iter(replies.chunks(body, include_usage=req.include_usage)),
                                 media_type="text/event-stream",
                                 headers={**headers, "cache-control": "no-cache"})
    return JSONResponse(body, status_code=status, headers=headers)


def _error(status: int, message: str, code: str, param: str | None = None) -> JSONResponse:
    return JSONResponse(replies.error_body(status, message, code=code, param=param), status_code=status)


def create_app(gateway: Gateway) -> Any:
    """The ASGI app serving `gateway`: `POST /v1/chat/completions`, `GET /v1/models`, `GET /healthz`,
    `GET /readyz`, `GET /metrics` (Prometheus)."""

    def refused(request: Request) -> Response | None:
        """401 (an OpenAI error) when client keys are set and the request presents none of them."""
        if not gateway.client_keys or gateway.client(request.headers.get("authorization")) is not None:
            return None
        why = ("missing or unknown API key: send one of this gateway's client keys as "
               "`Authorization: Bearer KEY`")
        return JSONResponse(replies.error_body(401, why, code="invalid_api_key"), status_code=401,
                            headers={"WWW-Authenticate": "Bearer"})

    async def chat(request: Request) -> Response:
        started = time.perf_counter()
        denied = refused(request)
        if denied is not None:
            return denied
        client = gateway.client(request.headers.get("authorization")) if gateway.client_keys else None
        try:
            body = await asyncio.wait_for(read_body(request, gateway.max_body_bytes),
                                          gateway.timeout_ms / 1000)
            req = parse(body)
        except BadRequest as exc:
            return _error(exc.status, exc.message, exc.code, exc.param)
        except TimeoutError:  # a body trickled in slower than the deadline: no decision, no receipt
            return _error(408, f"the request body did not arrive within the deadline ({gateway.timeout_ms:g} "
                               "ms)",
                          "body_timeout")
        if not req.stream:
            return _respond(await _settled(_decision(req, None, started, client)), started, req)
        loop = asyncio.get_running_loop()
        events: asyncio.Queue[bytes] = asyncio.Queue()
        task = _decision(req, lambda b: loop.call_soon_threadsafe(events.put_nowait, b), started, client)
        getter = asyncio.ensure_future(events.get())
        await asyncio.wait({task, getter}, return_when=asyncio.FIRST_COMPLETED)
        if not getter.done():  # decided before any text streamed: answer whole (errors keep their status)
            getter.cancel()
            return _respond(await _settled(task), started, req)
        return StreamingResponse(_through(getter.result(), events, task, req.include_usage),
                                 media_type="text/event-stream",
                                 headers={"x-zc-rung": gateway.upstream_tier, "cache-control": "no-cache"})

    def _decision(req: ChatRequest, sink: Callable[[bytes], None] | None, started: float,
                  client: str | None) -> asyncio.Future:
        context = contextvars.copy_context()  # each decision sets its own Exchange in its own copy
        work = asyncio.get_running_loop().run_in_executor(gateway.workers, context.run, gateway.decide, req,
                                                          sink, started, client)
        # shielded: a decision still queued when the request answers 504 runs later all the same, so
        # that it leaves its receipt (one that answers nothing: see Gateway.decide)
        return asyncio.ensure_future(asyncio.wait_for(asyncio.shield(work), gateway.give_up_s))

    async def _through(first: bytes, events: asyncio.Queue, task: asyncio.Future, include_usage: bool):
        """A stream that began with the upstream's text: the rest of it, then the judged end."""
        yield first
        while True:
            getter = asyncio.ensure_future(events.get())
            await asyncio.wait({task, getter}, return_when=asyncio.FIRST_COMPLETED)
            if not getter.done():
                getter.cancel()
                break
            yield getter.result()
        while not events.empty():
            yield events.get_nowait()
        status, body, passed = await _settled(task)
        ends = replies.chunks(body, passed, include_usage) if status == 200 else replies.error_event(body)
        for chunk in ends:
            yield chunk

    async def models(request: Request) -> Response:
        denied = refused(request)
        if denied is not None:
            return denied
        return JSONResponse({"object": "list", "data": [
            {"id": gateway.model, "object": "model", "created": 0, "owned_by": "zc"}]})

    async def health(request: Request) -> Response:
        return JSONResponse({"status": "ok", "policy": gateway.policy.name,
                             "policy_sha256": gateway.policy.sha256, "upstream": gateway.upstream_url,
                             "model": gateway.model, "upstream_tier": gateway.upstream_tier,
                             "text_tier": gateway.router.text_tier,
                             "specialists": [sp.name for sp in gateway.router.specialists],
                             "receipts": str(gateway.receipts) if gateway.receipts else None})

    async def http_error(request: Request, exc: Exception) -> Response:
        status = exc.status_code if isinstance(exc, HTTPException) else 500
        detail = exc.detail if isinstance(exc, HTTPException) else "internal error"
        return _error(status, f"{request.method} {request.url.path}: {detail}", "not_found" if status == 404
                      else
                      "method_not_allowed" if status == 405 else "error")

    async def ready(request: Request) -> Response:
        """Ready when the upstream answers `GET /models` (any status below 500) within 2 s; the
        specialists and tiers were loaded when the gateway was built."""
        import httpx

        try:
            async with httpx.AsyncClient(timeout=2.0) as http:
                r = await http.get(gateway.upstream_url.rstrip("/") + "/models")
            upstream = "ok" if r.status_code < 500 else f"HTTP {r.status_code}"
        except httpx.HTTPError as exc:
            upstream = f"{type(exc).__name__}: {exc}"
        ok = upstream == "ok"
        return JSONResponse({"ready": ok, "upstream": upstream,
                             "specialists": [sp.name for sp in gateway.router.specialists]},
                            status_code=200 if ok else 503)

    async def metrics(request: Request) -> Response:
        body, ctype = gateway.metrics.exposition()
        return Response(body, media_type=ctype)

    routes = [Route("/v1/chat/completions", chat, methods=["POST"]),
              Route("/chat/completions", chat, methods=["POST"]), Route("/v1/models", models, methods=[
                  "GET"]), Route("/healthz", health, methods=["GET"]),
              Route("/readyz", ready, methods=["GET"]), Route("/metrics", metrics, methods=["GET"])]
    app = Starlette(routes=routes, exception_handlers={HTTPException: http_error})
    return tracing.traced(Instrumented(app, gateway.metrics), "serve", frozenset(r.path for r in routes))

