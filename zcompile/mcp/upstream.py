"""The servers behind `zc mcp`: one SDK `Client` each (stdio or Streamable HTTP), supervised, with bounded
calls."""

from __future__ import annotations

import logging
import shlex
from dataclasses import dataclass, field
from typing import Any

import anyio
import mcp_types as types
from mcp import Client, StdioServerParameters
from mcp_types import CONNECTION_CLOSED
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from ..errors import ZcError

_log = logging.getLogger("zcompile.mcp")
MAX_PAGES = 100  # a server's tools/list is read at most this many pages deep
PREFIX_SEP = "."  # `billing.refund`: a dotted action name, as the policy language allows


class UpstreamError(Exception):
    """A server that failed, crashed or did not answer in time: `outcome` is failed | crashed | timeout."""

    def __init__(self, outcome: str, message: str) -> None:
        super().__init__(message)
        self.outcome, self.message = outcome, message


@dataclass
class ServerSpec:
    """One server: a command started over stdio, or a Streamable HTTP URL; `name` prefixes its tools."""

    target: str
    name: str | None = None
    env: dict[str, str] | None = None

    @classmethod
    def parse(cls, text: str, env: dict[str, str] | None = None) -> ServerSpec:
        """`[NAME=]COMMAND ARGS…` or `[NAME=]URL` (`env`: variables a stdio server gets beside the
        SDK's default few); ZcError when malformed."""
        name, sep, rest = text.partition("=")
        if sep and name and name.replace("_", "a").isalnum() and not name[0].isdigit() and " " not in name:
            text = rest
        else:
            name = None
        if not text.strip():
            raise ZcError(f"--server `{name or ''}=`: expected a command or an http(s) URL after the name")
        return cls(text.strip(), name, env)

    @property
    def is_url(self) -> bool:
        return self.target.startswith(("http://", "https://"))

    def label(self) -> str:
        return self.name or (self.target if len(self.target) <= 80 else self.target[:77] + "...")

    def client_target(self) -> StdioServerParameters | str:
        if self.is_url:
            return self.target
        try:
            argv = shlex.split(self.target)
        except ValueError as exc:
            raise ZcError(f"--server `{self.target}`: cannot split the command: {exc}") from None
        return StdioServerParameters(command=argv[0], args=argv[1:], env=self.env)


@dataclass
class Upstream:
    """One connected server: its tools by exposed name, and bounded calls to it."""

    spec: ServerSpec
    prefix: str | None
    timeout_s: float
    tools: dict[str, tuple[str, types.Tool]] = field(default_factory=dict)  # exposed -> (its name, tool)
    failure: str | None = None
    client: Client | None = None
    stale: bool = False

    def __post_init__(self) -> None:
        self._stop = anyio.Event()

    def exposed(self, name: str) -> str:
        return f"{self.prefix}{PREFIX_SEP}{name}" if self.prefix else name

    async def run(self, *, task_status: Any = anyio.TASK_STATUS_IGNORED) -> None:
        """Connect, read the tools, report started, then hold the connection until `stop`. A failure
        before the start is raised (the gateway does not start); one after it marks the server down."""
        started = False
        try:
            async with Client(self.spec.client_target(), read_timeout_seconds=self.timeout_s, cache=None,
                              message_handler=self._on_message) as client:
                self.client = client
                with anyio.fail_after(self.timeout_s):
                    await self.refresh()
                started = True
                task_status.started()
                async with anyio.create_task_group() as tg:
                    caps = client.server_capabilities.tools
                    modern = client.protocol_version in MODERN_PROTOCOL_VERSIONS
                    if modern and caps is not None and caps.list_changed:
                        tg.start_soon(self._listen, client)  # 2026-07-28: changes come on a listen stream
                    await self._stop.wait()
                    tg.cancel_scope.cancel()
        except Exception as exc:  # noqa: BLE001 - any failure of the server or its transport
            self.failure = _describe(exc)
            if not started:
                raise ZcError(f"server `{self.spec.label()}`: cannot connect: {self.failure}") from None
            _log.error("server `%s` is down: %s", self.spec.label(), self.failure)
        finally:
            self.client = None

    def stop(self) -> None:
        self._stop.set()

    async def _listen(self, client: Client) -> None:
        """Mark the tools stale at each change the server announces (read again at the next list)."""
        try:
            async with client.listen(tools_list_changed=True) as sub:
                async for _ in sub:
                    self.stale = True
        except Exception as exc:  # noqa: BLE001 - the tools stay as last read; calls say what fails
            _log.warning("server `%s`: no tool-list changes: %s", self.spec.label(), _describe(exc))

    async def _on_message(self, message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            self.stale = True  # read again at the next tools/list
        await anyio.lowlevel.checkpoint()

    async def refresh(self) -> None:
        """Read the server's whole tool list (every page, at most MAX_PAGES)."""
        client = self._client()
        tools: dict[str, tuple[str, types.Tool]] = {}
        cursor: str | None = None
        for _ in range(MAX_PAGES):
            page = await client.list_tools(cursor=cursor)
            for t in page.tools:
                tools[self.exposed(t.name)] = (t.name, t)
            cursor = page.next_cursor
            if cursor is None:
                break
        self.tools, self.stale = tools, False

    def _client(self) -> Client:
        if self.client is None:
            raise UpstreamError("crashed", f"server `{self.spec.label()}` is not running"
                                           f"{f' ({self.failure})' if self.failure else ''}")
        return self.client

    async def call(self, name: str, arguments: dict[str, Any], meta: dict[str, Any]
                   | None) -> types.CallToolResult:
        """Call tool `name` (the server's own name), bounded by `timeout_s`; UpstreamError otherwise."""
        client = self._client()
        try:
            with anyio.fail_after(self.timeout_s):
                return await client.call_tool(name, arguments, meta=meta or None)
        except TimeoutError:
            raise UpstreamError("timeout", f"server `{self.spec.label()}` did not answer `{name}` within "
                                           f"{self.timeout_s:g} s") from None
        except Exception as exc:  # noqa: BLE001 - the server's error, a dropped connection, a bad result
            from mcp import MCPError

            crashed = self.client is None or not isinstance(exc, MCPError) or exc.code == CONNECTION_CLOSED
            if crashed:  # the connection is gone: later calls are refused at once, naming why
                self.failure = _describe(exc)
                self.client = None
                self._stop.set()
            raise UpstreamError("crashed" if crashed else "failed",
                                f"server `{self.spec.label()}` failed on `{name}`: "
                                f"{_describe(exc)}") from None


def _describe(exc: BaseException) -> str:
    """One line for an exception, the first leaf of an exception group."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0][:300]


async def fetch_tools(specs: list[ServerSpec], timeout_s: float = 30.0) -> dict[str, Any]:
    """The servers' tools as one MCP `tools/list` result, under their exposed names (prefixed by
    the servers' names): what `zc tools import --server` and `zc check --tools-server` read."""
    ups = [Upstream(s, s.name, timeout_s) for s in specs]
    tools: list[dict[str, Any]] = []
    async with anyio.create_task_group() as tg:
        try:
            for up in ups:
                await tg.start(up.run)
                for exposed, (_, tool) in sorted(up.tools.items()):
                    tools.append({**tool.model_dump(by_alias=True, exclude_none=True, mode="json"),
                                  "name": exposed})
        finally:
            for up in ups:
                up.stop()
    return {"tools": tools}


def fetch_tools_sync(texts: list[str], timeout_s: float = 30.0) -> dict[str, Any]:
    """`fetch_tools` for `[NAME=]COMMAND|URL` texts, from synchronous code; ZcError when one fails."""
    specs = [ServerSpec.parse(t) for t in texts]
    if len(specs) > 1 and any(s.name is None for s in specs):
        raise ZcError("with several --server, name each one (`NAME=COMMAND` or `NAME=URL`): the name "
                      "prefixes its tools")
    try:
        return anyio.run(fetch_tools, specs, timeout_s)
    except BaseExceptionGroup as group:
        raise user_error(group) from None


def user_error(group: BaseExceptionGroup) -> BaseException:
    """The first ZcError inside an exception group from a task group (a server that failed to
    start), else the group itself."""
    matched, _ = group.split(ZcError)
    if matched is None:
        return group
    while isinstance(matched, BaseExceptionGroup):
        matched = matched.exceptions[0]
    return matched
