"""`zc mcp`: the MCP gateway, every `tools/list` answered from the legal set and every `tools/call` judged."""

from __future__ import annotations

import base64
import hashlib
import logging
import time
import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import msgspec
from mcp.server.lowlevel.server import NotificationOptions, Server
from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler, ToolsListChanged
from mcp.shared.exceptions import MCPError
from mcp_types import INTERNAL_ERROR, INVALID_PARAMS
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from .. import tracing
from ..errors import ZcError
from ..inputs import json_type
from ..metrics import DoorMetrics
from ..outdir import refuse_foreign_file
from ..receipts import Receipt, ReceiptWriter
from ..receipts.chat import default_extract, extractor_name
from ..receipts.io import is_receipts_file
from ..runtime import Policy
from .session import (
    SESSION_META,
    USER_META,
    Extract,
    MissingStateKey,
    Session,
    Sessions,
    StateKeySpec,
    key_of,
    result_text,
    user_message,
)
from .upstream import ServerSpec, Upstream, UpstreamError

_log = logging.getLogger("zcompile.mcp")
DENY_MODES = ("result", "error", "opaque")
POLICY_DENIED = -32010  # the JSON-RPC error code of a call refused by policy under `--deny error`
VERDICT_META = "io.zcompile/verdict"  # a blocked result's `_meta` key: the verdict with every reason
OPAQUE_TEXT = "this call is not allowed here"


class _Engine(Exception):
    """The policy could not judge (a state the schema refuses, an extractor failing): fail closed."""


class McpGateway:
    """The policy, the servers and the receipts behind one `zc mcp`.

    Args:
        policy: the loaded policy; an exposed tool name is the action it is judged as.
        servers: the servers behind the gateway; with more than one, each needs a name, which
            prefixes its tools (`name.tool`).
        extract: the chat importer's state extractor (default `default_extract`).
        context: static state added to what the extractor derives (it may not override it).
        receipts: the JSONL file one receipt per list and per call is appended to (None: none).
        deny: how a blocked call is answered: `result` (isError with the reasons), `error` (a
            JSON-RPC error, code POLICY_DENIED, reasons in `data`) or `opaque` (isError, no reason).
        log_only: judge and record, but list every tool and forward every call.
        state_key: how a 2026-07-28 request names its session (`auto`, `meta:KEY`, `header:NAME`,
            `auth`, `instance`).
        timeout_s: the bound on each server call (and on connecting).
        page_size: tools per `tools/list` page (0: one page).
        list_ttl_ms: the `ttlMs` of a list (its `cacheScope` is always `private`).
        intent: the policy intent every decision is taken under.
    """

    def __init__(self, policy: Policy, servers: Sequence[ServerSpec], *, extract: Extract = default_extract,
                 context: Mapping[str, Any] | None = None, receipts: str | Path | None = None,
                 deny: str = "result", log_only: bool = False, state_key: str = "auto",
                 timeout_s: float = 30.0, page_size: int = 0, list_ttl_ms: int = 0,
                 intent: str | None = None) -> None:
        if deny not in DENY_MODES:
            raise ZcError(f"--deny `{deny}`: expected one of {', '.join(DENY_MODES)}")
        if not servers:
            raise ZcError("zc mcp needs at least one --server")
        if len(servers) > 1 and any(s.name is None for s in servers):
            raise ZcError("with several --server, name each one (`NAME=COMMAND` or `NAME=URL`): "
                          "the name prefixes its tools")
        names = [s.name for s in servers if s.name]
        if len(set(names)) != len(names):
            raise ZcError(f"--server names must differ: {', '.join(sorted(names))}")
        if not timeout_s > 0 or page_size < 0 or list_ttl_ms < 0:
            raise ZcError("--timeout must be > 0, --page-size and --list-ttl-ms >= 0")
        if intent is not None and intent not in policy.intents:
            raise ZcError(f"--intent `{intent}`: not an intent of policy `{policy.name}`")
        self.policy, self.intent = policy, intent
        self.deny, self.log_only, self.page_size, self.list_ttl_ms = deny, log_only, page_size, list_ttl_ms
        self.key_spec = StateKeySpec.parse(state_key)
        self.extractor = extractor_name(extract)
        self.sessions = Sessions(extract, dict(context or {}))
        try:  # a context the derivation overrides, or one the schema refuses, fails now
            policy.legal(self.sessions.get(self.sessions.stdio_key).state(), intent)
        except ZcError as exc:
            raise ZcError(f"static context: {exc}") from None
        self.upstreams = [Upstream(s, s.name, timeout_s) for s in servers]
        if receipts is not None:  # appended to, never a stranger's file
            refuse_foreign_file(Path(receipts), "receipts file", is_receipts_file)
        self._writer = ReceiptWriter(receipts) if receipts is not None else None
        self.metrics = DoorMetrics("mcp")
        tracing.setup("mcp")  # stdio too: the spans of each `tools/call`
        self.version = _version()
        self.server = _Server("zc-mcp", version=self.version, on_list_tools=self._list_tools,
                              on_call_tool=self._call_tool, on_subscriptions_listen=self._listen,
                              get_tool_input_schema=self._input_schema,
                              instructions=f"tools judged by zc policy `{policy.name}`")
        self.server.middleware.append(_params_checked)
        self.server.middleware.append(self._counted)
        self._inflight = 0
        self._idle: anyio.Event | None = None  # set when the last request in flight ends (drained)

    async def _counted(self, ctx: Any, call_next: Any) -> Any:
        """Count the requests in flight, for a drain at shutdown."""
        self._inflight += 1
        try:
            return await call_next(ctx)
        finally:
            self._inflight -= 1
            if not self._inflight and self._idle is not None:
                self._idle.set()

    async def drained(self) -> None:
        """Return once no request is in flight."""
        while self._inflight:
            self._idle = anyio.Event()
            await self._idle.wait()

    def key_announcement(self, *, authenticated: bool) -> str:
        """What the HTTP door keys 2026-07-28 state by, said at start-up (docs/mcp.md, "State keys")."""
        kind = self.key_spec.kind
        if kind == "auto" and authenticated:
            return "2026-07-28 state keyed by the bearer token's principal (one state per agent credential)"
        if kind in ("auto", "instance"):
            named = (f'the requests that name no session (_meta["{SESSION_META}"])' if kind == "auto"
                     else "2026-07-28 requests")
            return (f"{named} share this gateway's one agent state; serve one agent per gateway, or add "
                    "--auth-* to key state by the token")
        return f"2026-07-28 state keyed by {self.key_spec.describe()}; a request without it is refused"

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()

    @asynccontextmanager
    async def connected(self) -> AsyncIterator[McpGateway]:
        """Connect every server (each supervised in its own task), then yield; disconnect after."""
        async with anyio.create_task_group() as tg:
            try:
                for up in self.upstreams:
                    await tg.start(up.run)
                clash = _clashes(self.upstreams)
                if clash:
                    raise ZcError(f"two servers expose the tool `{clash}`: name them (`NAME=…`) to prefix "
                                  "their tools")
                yield self
            finally:
                for up in self.upstreams:
                    up.stop()

    # -- tools ---------------------------------------------------------------------------------

    async def _tools(self) -> dict[str, tuple[Upstream, str, types.Tool]]:
        out: dict[str, tuple[Upstream, str, types.Tool]] = {}
        for up in self.upstreams:
            if up.stale and up.client is not None:
                try:
                    with anyio.fail_after(up.timeout_s):
                        await up.refresh()
                except Exception as exc:  # noqa: BLE001 - keep the last list; the call will say what fails
                    _log.warning("server `%s`: cannot read its tools again: %s", up.spec.label(), exc)
            for exposed, (name, tool) in up.tools.items():
                out[exposed] = (up, name, tool)
        return out

    def _input_schema(self, name: str) -> Mapping[str, Any] | None:
        """A tool's input schema for the SDK's `Mcp-Param` header check (not a list: no receipt, no key)."""
        for up in self.upstreams:
            if name in up.tools:
                return up.tools[name][1].input_schema
        return None

    def _session(self, ctx: Any) -> Session:
        request = ctx.request
        headers = getattr(request, "headers", None)
        modern = ctx.protocol_version in MODERN_PROTOCOL_VERSIONS
        principal = None
        user = request.scope.get("user") if request is not None and hasattr(request, "scope") else None
        token = getattr(user, "access_token", None)
        if token is not None:
            principal = (token.client_id, (token.claims or {}).get("iss"), token.subject)
        meta = _meta(ctx)
        try:
            key = key_of(modern=modern, spec=self.key_spec, session_id=headers.get("mcp-session-id")
                         if headers else None, headers=headers, meta=meta, principal=principal,
                         stdio_key=self.sessions.stdio_key)
        except MissingStateKey as exc:
            raise MCPError(INVALID_PARAMS, str(exc)) from None
        return self.sessions.get(key)

    @staticmethod
    async def _user(session: Session, ctx: Any) -> None:
        """Take the request's user message (`_meta[USER_META]`) into its session, in turn with its calls."""
        try:
            said = user_message(_meta(ctx))
        except MissingStateKey as exc:
            raise MCPError(INVALID_PARAMS, str(exc)) from None
        if said is not None:
            async with session.lock:
                session.user(*said)

    def _legal(self, session: Session) -> tuple[dict[str, Any], tuple[str, ...]]:
        try:
            state = session.state()
            return state, self.policy.legal(state, self.intent).actions
        except Exception as exc:  # noqa: BLE001 - any failure to judge fails closed
            raise _Engine(f"the policy cannot judge this session's state: {exc}") from None

    async def _list_tools(self, ctx: Any, params: types.PaginatedRequestParams
                          | None) -> types.ListToolsResult:
        started = time.perf_counter()
        session = self._session(ctx)
        await self._user(session, ctx)
        tools = await self._tools()
        try:
            state, legal = self._legal(session)
        except _Engine as exc:
            self._receipt(session, ctx, "tools/list", {}, None, started, error=str(exc))
            raise MCPError(INTERNAL_ERROR, f"zc: {exc}") from None
        allowed = set(legal)
        listed = sorted(n for n in tools if self.log_only or n in allowed)
        digest = hashlib.sha256("\n".join(listed).encode()).hexdigest()[:16]
        start = _cursor_offset(params.cursor if params else None, digest, len(listed))
        end = len(listed) if not self.page_size else min(len(listed), start + self.page_size)
        page = [_renamed(tools[n][2], n) for n in listed[start:end]]
        nxt = _cursor(end, digest) if end < len(listed) else None
        self._receipt(session, ctx, "tools/list", state, legal, started,
                      extra={"listed": listed[start:end], "cursor": params.cursor if params else None})
        return types.ListToolsResult(tools=page, next_cursor=nxt, ttl_ms=self.list_ttl_ms,
                                     cache_scope="private")

    async def _call_tool(self, ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        """A `tools/call`, traced (when configured) as a `zc.decision` span whose parent is the request's
        `_meta.traceparent` (else its HTTP header), with the server's call inside it."""
        if not tracing.enabled():
            return await self._judged_call(ctx, params, None)
        meta = _meta(ctx) or {}
        headers = getattr(ctx.request, "headers", None)
        carrier = meta if isinstance(meta.get("traceparent"), str) else dict(headers or {})
        with tracing.span("zc.decision", {"zc.door": "mcp", "mcp.method.name": "tools/call",
                                          "zc.action": params.name}, context=tracing.parent(carrier)) as span:
            return await self._judged_call(ctx, params, span)

    async def _judged_call(self, ctx: Any, params: types.CallToolRequestParams,
                           span: Any) -> types.CallToolResult:
        started = time.perf_counter()
        name, args = params.name, dict(params.arguments or {})
        session = self._session(ctx)
        await self._user(session, ctx)
        tools = await self._tools()
        if name not in tools:
            self._receipt(session, ctx, "tools/call", {}, None, started, name=name, args=args,
                          error=f"unknown tool `{name}`")
            raise MCPError(INVALID_PARAMS, f"Unknown tool: {name}")
        up, upstream_name, _ = tools[name]
        async with session.lock:
            try:
                state, before = self._legal(session)
                verdict = self._check(state, name, args)
            except _Engine as exc:
                self._receipt(session, ctx, "tools/call", {}, None, started, name=name, args=args,
                              error=str(exc))
                raise MCPError(INTERNAL_ERROR, f"zc: {exc}; the call was not forwarded") from None
            rules = sorted({r["rule"] for r in verdict["reasons"]})
            tracing.annotate(span, {"zc.legal": list(before), "zc.legal.count": len(before),
                                    "zc.verdict": "allowed" if verdict["allowed"] else "blocked",
                                    "zc.blocked.rules": rules, "zc.log_only": self.log_only})
            if not verdict["allowed"]:
                self.metrics.refused([r["rule"] for r in verdict["reasons"]])
            if not verdict["allowed"] and not self.log_only:
                self._receipt(session, ctx, "tools/call", state, before, started, name=name, args=args,
                              verdict=verdict, server=up.spec.label())
                return self._denied(name, verdict)
            meta = _meta(ctx)
            sent = time.perf_counter()
            try:
                with tracing.span(f"tools/call {upstream_name}", {
                        "mcp.method.name": "tools/call", "gen_ai.tool.name": upstream_name,
                        "zc.server": up.spec.name}, kind="client") as call_span:
                    try:  # the server's call carries this span's context in its `_meta.traceparent`
                        forwarded = tracing.inject(_forwarded_meta(meta) or {})
                        result = await up.call(upstream_name, args, forwarded)
                    except UpstreamError as exc:
                        tracing.failed(call_span, exc.outcome)
                        raise
                    tracing.annotate(call_span, {"zc.outcome": "tool_error" if result.is_error else "ok"})
                self.metrics.upstream(time.perf_counter() - sent)
            except UpstreamError as exc:
                self.metrics.upstream(time.perf_counter() - sent, exc.outcome)
                self._receipt(session, ctx, "tools/call", state, before, started, name=name, args=args,
                              verdict=verdict, server=up.spec.label(), outcome=exc.outcome, error=exc.message)
                raise MCPError(INTERNAL_ERROR, exc.message) from None
            outcome = "tool_error" if result.is_error else "ok"
            if not result.is_error:
                session.record(name, args, result_text(result.content, result.structured_content))
            self._receipt(session, ctx, "tools/call", state, before, started, name=name, args=args,
                          verdict=verdict, server=up.spec.label(), outcome=outcome)
            changed = not result.is_error and self._changed(session, tools, before)
        if changed:  # sent outside the lock: a client slow to read holds up no other call
            if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
                await _listener(session)[0].publish(ToolsListChanged())
            else:
                await ctx.session.send_tool_list_changed()
        return result

    def _check(self, state: dict[str, Any], name: str, args: dict[str, Any]) -> dict[str, Any]:
        if name not in self.policy.actions:
            return {"action": name, "allowed": False, "reasons": [{
                "rule": "undeclared", "kind": "undeclared", "span": None, "values": {},
                "message": f"`{name}` is not an action of policy `{self.policy.name}`"}]}
        try:
            return self.policy.check(state, name, args, self.intent).to_dict()
        except Exception as exc:  # noqa: BLE001 - fail closed
            raise _Engine(f"the policy cannot judge `{name}`: {exc}") from None

    def _denied(self, name: str, verdict: dict[str, Any]) -> types.CallToolResult:
        if self.deny == "opaque":
            return types.CallToolResult(content=[types.TextContent(type="text", text=OPAQUE_TEXT)],
                                        is_error=True)
        lines = [f"zc: `{name}` is not allowed now (policy `{self.policy.name}`):"]
        lines += [f"- {r['rule']} ({r['kind']}): {r['message']}" for r in verdict["reasons"]]
        text = "\n".join(lines)
        if self.deny == "error":
            raise MCPError(POLICY_DENIED, text, data=verdict)
        return types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=True,
                                    _meta={VERDICT_META: verdict})

    def _changed(self, session: Session, tools: Mapping[str, Any], before: tuple[str, ...]) -> bool:
        """Whether the call just recorded changed the legal tools (then the client is told)."""
        try:
            _, after = self._legal(session)
        except _Engine:
            return False  # the next list or call reports it, failing closed
        return {n for n in tools if n in set(before)} != {n for n in tools if n in set(after)}

    # -- subscriptions (2026-07-28) ------------------------------------------------------------

    async def _listen(self, ctx: Any,
                      params: types.SubscriptionsListenRequestParams) -> types.SubscriptionsListenResult:
        """One key's change events: a state change under key K is delivered to K's listeners only."""
        session = self._session(ctx)
        return await _listener(session)[1](ctx, params)

    # -- receipts ------------------------------------------------------------------------------

    def _receipt(self, session: Session, ctx: Any, method: str, state: dict[str, Any], legal: tuple[str, ...]
                 | None, started: float, *, name: str | None = None, args: dict[str, Any] | None = None,
                 verdict: dict[str, Any] | None = None, server: str | None = None, outcome: str | None = None,
                 error: str | None = None, extra: Mapping[str, Any] | None = None) -> None:
        if self._writer is None:
            return
        meta = _meta(ctx) or {}
        headers = getattr(ctx.request, "headers", None)
        traceparent = meta.get("traceparent") or (headers.get("traceparent") if headers else None)
        m: dict[str, Any] = {"method": method, "protocol": ctx.protocol_version, "zc": self.version,
                             "key": "stdio" if session.key == self.sessions.stdio_key
                             else session.key.split(":")[0], "extractor": self.extractor, "deny": self.deny,
                             "log_only": self.log_only, "traceparent": traceparent, **(extra or {})}
        if name is not None:
            m.update(tool=name, server=server, forwarded=outcome is not None,
                     verdict=None if verdict is None else ("allowed" if verdict["allowed"] else "blocked"),
                     reasons=verdict["reasons"] if verdict else [], outcome=outcome)
        if error is not None:
            m["error"] = error
        action = name if name is not None and name in self.policy.actions else None
        r = Receipt(id=uuid.uuid4().hex, task=session.task, state=state, tier="mcp", ts=time.time(),
                    policy=self.policy.sha256, intent=self.intent, legal=legal, action=action,
                    arguments=args if action is not None else None,
                    verified=False if verdict is not None and not verdict["allowed"] else None,
                    latency_ms=(time.perf_counter() - started) * 1000, meta={"mcp": m})
        try:
            self._writer.append(r)
            self.metrics.written()
        except ZcError as exc:  # a receipt that cannot be written is logged, the answer still goes out
            _log.error("receipt not written: %s", exc)


class _Server(Server):
    """The SDK's low-level server, announcing `tools.listChanged` under 2025-11-25 too."""

    def create_initialization_options(self, notification_options: NotificationOptions | None = None,
                                      experimental_capabilities: dict[str, dict[str, Any]] | None = None,
                                      extensions: dict[str, dict[str, Any]] | None = None) -> Any:
        return super().create_initialization_options(notification_options
                                                     or NotificationOptions(tools_changed=True),
                                                     experimental_capabilities, extensions)


_PARAM_TYPES = {"tools/call": (("name", str, "a string"), ("arguments", dict, "an object")),
                "tools/list": (("cursor", str, "a string"),)}


async def _params_checked(ctx: Any, call_next: Any) -> Any:
    """Refuse malformed params of the methods the gateway judges with their `$.params` path
    (the SDK would say only "Invalid request parameters")."""
    fields = _PARAM_TYPES.get(ctx.method)
    if fields and ctx.request_id is not None:
        params = ctx.params
        if params is not None and not isinstance(params, Mapping):
            raise MCPError(INVALID_PARAMS, f"$.params: expected an object, got {json_type(params)}")
        for key, typ, what in fields:
            value = (params or {}).get(key)
            if value is None and key == "name":
                raise MCPError(INVALID_PARAMS, "$.params.name: required (the tool to call)")
            if value is not None and not isinstance(value, typ):
                raise MCPError(INVALID_PARAMS, f"$.params.{key}: expected {what}, got {json_type(value)}")
    return await call_next(ctx)


def _listener(session: Session) -> tuple[InMemorySubscriptionBus, ListenHandler]:
    """A session's own change events (kept with it, so a forgotten session takes them along)."""
    if session.listeners is None:
        bus = InMemorySubscriptionBus()
        session.listeners = (bus, ListenHandler(bus))
    return session.listeners


def _meta(ctx: Any) -> dict[str, Any] | None:
    """The request's `_meta` as a plain dict (None when it has none)."""
    meta = ctx.meta
    if meta is None:
        return None
    return dict(meta) if isinstance(meta, Mapping) else meta.model_dump(by_alias=True, exclude_none=True)


def _renamed(tool: types.Tool, name: str) -> types.Tool:
    """The server's tool under its exposed name; everything else (annotations, outputSchema, _meta) as it
    came."""
    return tool if tool.name == name else tool.model_copy(update={"name": name})


def _cursor(offset: int, digest: str) -> str:
    return base64.urlsafe_b64encode(msgspec.json.encode([offset, digest])).decode().rstrip("=")


def _cursor_offset(cursor: str | None, digest: str, n: int) -> int:
    """Where a cursor resumes; -32602 for a cursor this gateway did not issue or a list that changed."""
    if cursor is None:
        return 0
    try:
        offset, issued = msgspec.json.decode(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)),
                                             type=tuple[int, str])
    except (ValueError, msgspec.DecodeError, msgspec.ValidationError):
        raise MCPError(INVALID_PARAMS, "invalid cursor (not one this gateway issued)") from None
    if issued != digest:
        raise MCPError(INVALID_PARAMS, "the legal tools changed since this cursor was issued; list again "
                                       "from the start")
    if not 0 <= offset <= n:
        raise MCPError(INVALID_PARAMS, "invalid cursor (out of range)")
    return offset


def _forwarded_meta(meta: dict[str, Any] | None) -> dict[str, Any] | None:
    """The request's `_meta` for the server: the trace context and the caller's own keys, not the
    protocol envelope (the gateway's client writes its own) nor zc's session key and user message."""
    if not meta:
        return None
    own = (SESSION_META, USER_META, "progressToken")
    out = {k: v for k, v in meta.items() if not k.startswith("io.modelcontextprotocol/") and k not in own}
    return out or None


def _clashes(upstreams: Sequence[Upstream]) -> str | None:
    seen: set[str] = set()
    for up in upstreams:
        for exposed in up.tools:
            if exposed in seen:
                return exposed
            seen.add(exposed)
    return None


def _version() -> str:
    from importlib.metadata import version

    return version("zcompile")
