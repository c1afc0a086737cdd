"""Serving the gateway: MCP over stdio, or Streamable HTTP on 127.0.0.1 with uvicorn."""

from __future__ import annotations

import asyncio
import os
import stat
from typing import Any

import anyio

from ..gateway.server import GRACE_S, SIGNALS, Server
from .gateway import McpGateway

HOST = "127.0.0.1"  # the HTTP door binds the loopback interface only


async def run_stdio(gateway: McpGateway) -> None:
    """Connect the servers, then serve one agent over this process's stdin and stdout."""
    from mcp.server.stdio import stdio_server

    stdin = _stdin()
    async with (gateway.connected(), stdio_server(stdin=stdin) as (read, write),
                anyio.create_task_group() as tg):
        tg.start_soon(_stop_on_signal, gateway, stdin, tg.cancel_scope)
        await gateway.server.run(Refusing(read, write), write, gateway.server.create_initialization_options())
        tg.cancel_scope.cancel()  # stdin closed: the agent is gone


class _PipeLines:
    """stdin's lines read on the event loop, not in a worker thread: a signal can stop the gateway
    while the agent keeps stdin open (a thread blocked in read() would hold the exit)."""

    LIMIT = 1 << 26  # the longest line (one JSON-RPC message) read

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._reader: asyncio.StreamReader | None = None

    def __aiter__(self) -> _PipeLines:
        return self

    async def __anext__(self) -> str:
        reader = self._reader
        if reader is None:
            loop = asyncio.get_running_loop()
            reader = self._reader = asyncio.StreamReader(limit=self.LIMIT)
            pipe = os.fdopen(os.dup(self._fd), "rb", buffering=0)
            await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), pipe)
        line = await reader.readline()
        if not line:
            raise StopAsyncIteration
        return line.decode("utf-8", errors="replace")

    def close(self) -> None:
        """End the lines here, as if the agent had closed stdin."""
        if self._reader is not None:
            self._reader.feed_eof()


def _stdin() -> _PipeLines | None:
    """A pipe or terminal on stdin is read on the loop; a regular file (never blocking) by the SDK."""
    mode = os.fstat(0).st_mode
    return _PipeLines(0) if stat.S_ISFIFO(mode) or stat.S_ISCHR(mode) or stat.S_ISSOCK(mode) else None


async def _stop_on_signal(gateway: McpGateway, stdin: _PipeLines | None, scope: anyio.CancelScope) -> None:
    """At SIGTERM or SIGINT: let the calls in flight finish (at most GRACE_S), then end stdin as if
    the agent had gone; leaving `gateway.connected()` then stops the servers, each closed as the SDK
    closes a client."""
    with anyio.open_signal_receiver(*SIGNALS) as signals:
        async for _ in signals:
            break
    with anyio.move_on_after(GRACE_S):
        await gateway.drained()
    if stdin is not None:
        stdin.close()
    else:
        scope.cancel()


class Refusing:
    """The read stream with every line that is not a JSON-RPC message answered, instead of the
    SDK's silence: -32700 (not JSON) or -32600 (not a request, notification or response), with the
    line's id when it has one."""

    def __init__(self, read: Any, write: Any) -> None:
        self._read, self._write = read, write

    async def receive(self) -> Any:
        from mcp.shared.message import SessionMessage
        from mcp_types import INVALID_REQUEST, PARSE_ERROR, ErrorData, JSONRPCError

        while True:
            item = await self._read.receive()
            if not isinstance(item, Exception):
                return item
            errors = item.errors() if hasattr(item, "errors") else []
            rid, where = _request_id(errors)
            if any(e.get("type") == "json_invalid" for e in errors):
                code, text = PARSE_ERROR, "parse error: the line is not JSON"
            else:
                code, text = INVALID_REQUEST, "invalid request: " + (
                    where or "not a JSON-RPC 2.0 request, notification or response")
            await self._write.send(SessionMessage(JSONRPCError(jsonrpc="2.0", id=rid,
                                                               error=ErrorData(code=code, message=text))))

    def __aiter__(self) -> Refusing:
        return self

    async def __anext__(self) -> Any:
        try:
            return await self.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            raise StopAsyncIteration from None

    async def aclose(self) -> None:
        await self._read.aclose()

    async def __aenter__(self) -> Refusing:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    @property
    def last_context(self) -> Any:
        return getattr(self._read, "last_context", None)


def _request_id(errors: list[dict[str, Any]]) -> tuple[str | int | None, str | None]:
    """The id of a malformed request, when the line has one (so the caller is not left waiting),
    and the `$.path` of what is wrong with it as a request."""
    obj = next((e["input"] for e in errors if isinstance(e.get("input"), dict)), None)
    if obj is None or "result" in obj or "error" in obj:
        return None, None
    rid = obj.get("id")
    if isinstance(rid, bool) or not isinstance(rid, (str, int)):
        return None, None
    bad = next((e for e in errors if e.get("loc", ())[:1] == ("JSONRPCRequest",) and len(e["loc"]) > 1), None)
    where = (f"$.{'.'.join(map(str, bad['loc'][1:]))}: {bad['msg'][0].lower()}{bad['msg'][1:]}" if bad
             else None)
    return rid, where


def http_app(gateway: McpGateway, *, auth: Any = None, token_verifier: Any = None) -> Any:
    """The app serving `/mcp` (both protocol revisions, the SDK's session manager), with
    `GET /readyz` (every server connected) and Prometheus `GET /metrics`."""
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response

    from ..metrics import Instrumented

    app = gateway.server.streamable_http_app(host=HOST, auth=auth, token_verifier=token_verifier)

    async def ready(request: Request) -> Response:
        servers = {up.spec.label(): "ok" if up.client is not None else (up.failure or "not connected")
                   for up in gateway.upstreams}
        ok = all(v == "ok" for v in servers.values())
        return JSONResponse({"ready": ok, "servers": servers}, status_code=200 if ok else 503)

    async def metrics(request: Request) -> Response:
        body, ctype = gateway.metrics.exposition()
        return Response(body, media_type=ctype)

    app.add_route("/readyz", ready, methods=["GET"])
    app.add_route("/metrics", metrics, methods=["GET"])
    from .. import tracing

    return tracing.traced(Instrumented(app, gateway.metrics), "mcp", frozenset({"/mcp"}))


async def run_http(gateway: McpGateway, port: int, *, auth: Any = None, token_verifier: Any = None) -> None:
    """Connect the servers, then serve `http://127.0.0.1:PORT/mcp` until SIGTERM or SIGINT (then
    drain, and stop the servers)."""
    import uvicorn

    app = http_app(gateway, auth=auth, token_verifier=token_verifier)
    server = Server(uvicorn.Config(app, host=HOST, port=port, log_level="warning", lifespan="on",
                                   timeout_graceful_shutdown=GRACE_S))
    async with gateway.connected():
        await server.serve()
