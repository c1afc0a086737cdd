"""`zc mcp` started with no state-key flag, met by the MCP SDK's default `Client` and fastmcp's
`Client`, over stdio and Streamable HTTP (both negotiate the 2026-07-28 revision by default)."""

from __future__ import annotations

import json
import signal
import sys
from pathlib import Path

import anyio
import fastmcp
import pytest
from doors import ROOT, free_port, start, stop
from fastmcp.client.transports import StdioTransport
from mcp import Client, StdioServerParameters

from zcompile.receipts import read

POLICY = ROOT / "tests/fixtures/mcp/reservations.zc"
SERVER = ROOT / "tests/mcp_servers/reservations.py"


def gateway_args(tmp_path: Path) -> list[str]:
    (tmp_path / "agent.json").write_text(json.dumps({"user": {"role": "agent"}}))
    return [
        "mcp",
        "--policy",
        str(POLICY),
        "--server",
        f"{sys.executable} {SERVER} --log {tmp_path / 'calls.jsonl'}",
        "--context",
        str(tmp_path / "agent.json"),
        "--receipts",
        str(tmp_path / "r.jsonl"),
    ]


def reached(tmp_path: Path) -> list[str]:
    return [json.loads(line)["tool"] for line in (tmp_path / "calls.jsonl").read_text().splitlines()]


async def sdk_session(client: Client) -> tuple[str, list[str], list[str], bool, bool]:
    async with client as c:
        before = sorted(t.name for t in (await c.list_tools()).tools)
        early = await c.call_tool("cancel", {"reservation_id": "X"})
        await c.call_tool("get_reservation", {"reservation_id": "X"})
        after = sorted(t.name for t in (await c.list_tools()).tools)
        done = await c.call_tool("cancel", {"reservation_id": "X"})
        return c.protocol_version, before, after, early.is_error, bool(done.is_error)


async def fastmcp_session(client: fastmcp.Client) -> tuple[list[str], list[str], bool, bool]:
    async with client as c:
        before = sorted(t.name for t in await c.list_tools())
        early = await c.call_tool("cancel", {"reservation_id": "X"}, raise_on_error=False)
        await c.call_tool("get_reservation", {"reservation_id": "X"})
        after = sorted(t.name for t in await c.list_tools())
        done = await c.call_tool("cancel", {"reservation_id": "X"}, raise_on_error=False)
        return before, after, early.is_error, done.is_error


def check(tmp_path: Path, before: list[str], after: list[str], early: bool, done: bool) -> None:
    assert "cancel" not in before and "cancel" in after  # the state advanced by the lookup
    assert early and not done
    assert reached(tmp_path) == ["get_reservation", "cancel"]  # the early cancel never reached the server
    assert any(r.meta["mcp"]["protocol"] == "2026-07-28" for r in read(tmp_path / "r.jsonl"))


@pytest.mark.parametrize("which", ["sdk", "fastmcp"])
def test_default_clients_over_stdio(tmp_path, which):
    args = ["-m", "zcompile", *gateway_args(tmp_path)]
    if which == "sdk":
        version, *rest = anyio.run(
            sdk_session, Client(StdioServerParameters(command=sys.executable, args=args, cwd=str(ROOT)))
        )
        assert version == "2026-07-28"
    else:
        rest = anyio.run(fastmcp_session, fastmcp.Client(StdioTransport(sys.executable, args, cwd=str(ROOT))))
    check(tmp_path, *rest)
    assert {r.meta["mcp"]["key"] for r in read(tmp_path / "r.jsonl")} == {"stdio"}


def test_default_clients_over_http_with_no_flags(tmp_path):
    """The SDK's `Client(url)` and fastmcp's `Client(url)` as a user writes them: each one gateway
    (the default state is this gateway's one agent, announced at start-up)."""
    for which in ("sdk", "fastmcp"):
        here = tmp_path / which
        here.mkdir()
        port = free_port()
        proc = start([*gateway_args(here), "--http", str(port)], port)
        url = f"http://127.0.0.1:{port}/mcp"
        try:
            if which == "sdk":
                version, *rest = anyio.run(sdk_session, Client(url))
                assert version == "2026-07-28"
            else:
                rest = anyio.run(fastmcp_session, fastmcp.Client(url))
        finally:
            code, err, _ = stop(proc, signal.SIGTERM)
        check(here, *rest)
        assert {r.meta["mcp"]["key"] for r in read(here / "r.jsonl")} == {"instance"}
        assert "share this gateway's one agent state" in err and code == 0, err


def test_a_named_session_keeps_its_own_state_under_the_default(tmp_path):
    """Under the default, a request naming `_meta["io.zcompile/session"]` reads its own state,
    never the gateway's one-agent state."""
    port = free_port()
    proc = start([*gateway_args(tmp_path), "--http", str(port)], port)
    url = f"http://127.0.0.1:{port}/mcp"

    async def main() -> tuple[list[str], list[str]]:
        async with Client(url) as c:
            await c.call_tool("get_reservation", {"reservation_id": "X"})
            own = await c.list_tools()
            named = await c.list_tools(meta={"io.zcompile/session": "agent-2"})
            return [t.name for t in own.tools], [t.name for t in named.tools]

    try:
        own, named = anyio.run(main)
    finally:
        stop(proc, signal.SIGTERM)
    assert "cancel" in own and "cancel" not in named
    assert {r.meta["mcp"]["key"] for r in read(tmp_path / "r.jsonl")} == {"instance", "meta"}


def test_readiness_and_metrics_of_the_http_door(tmp_path):
    import httpx
    from prometheus_client.parser import text_string_to_metric_families

    port = free_port()
    proc = start([*gateway_args(tmp_path), "--http", str(port)], port)
    try:
        ready = httpx.get(f"http://127.0.0.1:{port}/readyz")
        anyio.run(sdk_session, Client(f"http://127.0.0.1:{port}/mcp"))
        text = httpx.get(f"http://127.0.0.1:{port}/metrics").text
    finally:
        stop(proc, signal.SIGTERM)
    assert ready.status_code == 200 and ready.json()["ready"] is True
    got = {(s.name, tuple(sorted(s.labels.items()))): s.value
           for f in text_string_to_metric_families(text) for s in f.samples}
    assert got[("zc_blocked_calls_total", (("door", "mcp"), ("rule", "lookup_first")))] == 1
    assert got[("zc_upstream_seconds_count", (("door", "mcp"),))] == 2  # the two calls forwarded
    assert got[("zc_receipts_written_total", (("door", "mcp"),))] == len(list(read(tmp_path / "r.jsonl")))
    assert got[("zc_requests_total", (("door", "mcp"), ("status", "200")))] >= 5
