"""`zc mcp` over Streamable HTTP, both revisions, with the SDK's client: state keys, isolation,
traceparent, bad requests; and an engine failure failing closed (in process)."""

from __future__ import annotations

import json
import sys
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import httpx
import mcp_types as types
import pytest
import uvicorn
from mcp import Client, MCPError

from zcompile.driver import compile_file
from zcompile.mcp import McpGateway, ServerSpec
from zcompile.mcp.serve import http_app
from zcompile.receipts import read

ROOT = Path(__file__).resolve().parent.parent
POLICY = ROOT / "tests/fixtures/mcp/reservations.zc"
SERVER = ROOT / "tests/mcp_servers/reservations.py"
AGENT = {"user": {"role": "agent"}}
TRACE = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
S1, S2 = {"io.zcompile/session": "s1"}, {"io.zcompile/session": "s2"}


def make(tmp_path: Path, **kw) -> McpGateway:
    spec = ServerSpec.parse(f"{sys.executable} {SERVER} --log {tmp_path / 'calls.jsonl'}")
    return McpGateway(compile_file(POLICY), [spec], receipts=tmp_path / "r.jsonl", **kw)


def reached(tmp_path: Path) -> list[str]:
    log = tmp_path / "calls.jsonl"
    return [json.loads(line)["tool"] for line in log.read_text().splitlines()] if log.exists() else []


def names(result) -> list[str]:
    return [t.name for t in result.tools]


@asynccontextmanager
async def serving(gateway: McpGateway, **kw):
    """The gateway on http://127.0.0.1:<free port>/mcp, in this event loop."""
    server = uvicorn.Server(uvicorn.Config(http_app(gateway, **kw), host="127.0.0.1", port=0,
                                           log_level="warning"))
    async with gateway.connected(), anyio.create_task_group() as tg:
        tg.start_soon(server.serve)
        with anyio.fail_after(20):
            while not server.started:
                await anyio.sleep(0.02)
        port = server.servers[0].sockets[0].getsockname()[1]
        try:
            yield f"http://127.0.0.1:{port}/mcp"
        finally:
            server.should_exit = True


def test_legacy_http_keys_state_by_session_and_isolates_sessions(tmp_path):
    gw = make(tmp_path, context=AGENT)

    async def main() -> None:
        async with serving(gw) as url:
            async with Client(url, mode="legacy") as a, Client(url, mode="legacy") as b:
                assert a.protocol_version == "2025-11-25"
                await a.call_tool("get_reservation", {"reservation_id": "X"}, meta={"traceparent": TRACE})
                assert "cancel" in names(await a.list_tools())
                assert "cancel" not in names(await b.list_tools())  # another session: its own state
                blocked = await b.call_tool("cancel", {"reservation_id": "X"})
                assert blocked.is_error
                assert not (await a.call_tool("cancel", {"reservation_id": "X"})).is_error
    anyio.run(main)
    gw.close()
    assert reached(tmp_path) == ["get_reservation", "cancel"]
    first = json.loads((tmp_path / "calls.jsonl").read_text().splitlines()[0])
    assert first["traceparent"] == TRACE  # the trace context goes on to the server
    rs = list(read(tmp_path / "r.jsonl"))
    assert rs[0].meta["mcp"]["traceparent"] == TRACE and rs[0].meta["mcp"]["key"] == "session"
    assert len({r.task for r in rs}) == 2


def test_modern_http_keys_state_by_the_declared_meta_key(tmp_path):
    gw = make(tmp_path, context=AGENT, state_key="meta:io.zcompile/session")

    async def main() -> None:
        async with serving(gw) as url:
            # one client per agent, each naming its session on every request (the SDK's client
            # re-lists on its own, without _meta, when it meets a tool it has not listed)
            async with Client(url, mode="2026-07-28") as c, Client(url, mode="2026-07-28") as d:
                assert c.protocol_version == "2026-07-28"
                with pytest.raises(MCPError) as err:
                    await c.list_tools()
                assert err.value.code == -32602 and '_meta["io.zcompile/session"]' in err.value.message
                assert "cancel" not in names(await c.list_tools(meta=S1))
                await c.call_tool("get_reservation", {"reservation_id": "X"}, meta=S1)
                listed = await c.list_tools(meta=S1)
                assert "cancel" in names(listed) and listed.cache_scope == "private"
                assert "cancel" not in names(await d.list_tools(meta=S2))
                assert (await d.call_tool("cancel", {"reservation_id": "X"}, meta=S2)).is_error
                assert not (await c.call_tool("cancel", {"reservation_id": "X"}, meta=S1)).is_error
    anyio.run(main)
    gw.close()
    assert reached(tmp_path) == ["get_reservation", "cancel"]
    rs = list(read(tmp_path / "r.jsonl"))
    assert {r.meta["mcp"]["key"] for r in rs} == {"meta"}
    assert all(r.meta["mcp"]["protocol"] == "2026-07-28" for r in rs)


def test_modern_http_header_key(tmp_path):
    gw = make(tmp_path, state_key="header:x-agent-session")

    async def main() -> None:
        async with serving(gw) as url:
            http = httpx.AsyncClient(headers={"x-agent-session": "h1"})
            from mcp.client.streamable_http import streamable_http_client

            async with Client(streamable_http_client(url, http_client=http), mode="2026-07-28") as c:
                assert "get_reservation" in names(await c.list_tools())
            await http.aclose()
    anyio.run(main)
    gw.close()
    assert [r.meta["mcp"]["key"] for r in read(tmp_path / "r.jsonl")] == ["header"]


def test_bad_http_requests_are_refused(tmp_path):
    gw = make(tmp_path)
    headers = {"content-type": "application/json", "accept": "application/json, text/event-stream",
               "mcp-protocol-version": "2026-07-28"}
    meta = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {}, **S1}

    async def main() -> None:
        async with serving(gw) as url, httpx.AsyncClient() as http:
            r = await http.post(url, content=b"{not json", headers=headers)
            assert r.status_code == 400 and r.json()["error"]["code"] == -32700
            body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                    "params": {"name": "search", "arguments": {}, "_meta": meta}}
            r = await http.post(url, json=body, headers={**headers, "mcp-method": "tools/call",
                                                         "mcp-name": "cancel"})
            assert r.status_code == 400 and r.json()["error"]["code"] == -32020  # Mcp-Name mismatch
            r = await http.post(url, json={**body, "params": {**body["params"], "arguments": [1]}},
                                headers={**headers, "mcp-method": "tools/call", "mcp-name": "search"})
            assert "$.params.arguments: expected an object, got an array" in r.text
    anyio.run(main)
    gw.close()
    assert reached(tmp_path) == []


def test_engine_failure_fails_closed(tmp_path):
    def extract(messages, index, conversation):
        if messages:
            raise RuntimeError("the harness's extractor broke")
        return {}

    gw = make(tmp_path, extract=extract)

    async def main() -> None:
        async with gw.connected(), Client(gw.server, mode="legacy") as c:
            assert "search" in names(await c.list_tools())
            assert not (await c.call_tool("get_reservation", {"reservation_id": "X"})).is_error
            with pytest.raises(MCPError) as err:
                await c.list_tools()
            assert err.value.code == -32603 and "the harness's extractor broke" in err.value.message
            with pytest.raises(MCPError) as err:
                await c.call_tool("search", {"q": "x"})
            assert err.value.code == -32603 and "not forwarded" in err.value.message
    anyio.run(main)
    gw.close()
    assert reached(tmp_path) == ["get_reservation"]
    rs = list(read(tmp_path / "r.jsonl"))
    assert "extractor broke" in rs[-1].meta["mcp"]["error"] and rs[-1].meta["mcp"]["forwarded"] is False


def test_list_changed_over_http_reaches_its_own_session_only(tmp_path):
    gw = make(tmp_path, context=AGENT, state_key="header:x-agent-session")
    seen: dict[str, list[str]] = {"legacy": [], "h1": [], "h2": []}

    def handler(who: str):
        async def on_message(message) -> None:
            if isinstance(message, types.ToolListChangedNotification):
                seen[who].append("list_changed")
        return on_message

    async def main() -> None:
        from mcp.client.streamable_http import streamable_http_client

        async with serving(gw) as url:
            # 2025-11-25: on the session's GET stream
            async with Client(url, mode="legacy", message_handler=handler("legacy")) as c:
                await c.list_tools()
                await c.call_tool("get_reservation", {"reservation_id": "X"})
                with anyio.fail_after(10):
                    while not seen["legacy"]:
                        await anyio.sleep(0.05)
            # 2026-07-28: on the key's subscriptions/listen streams, and only its own
            h1 = httpx.AsyncClient(headers={"x-agent-session": "h1"})
            h2 = httpx.AsyncClient(headers={"x-agent-session": "h2"})
            async with Client(streamable_http_client(url, http_client=h1),  # auto: server/discover
                              message_handler=handler("h1")) as one, \
                    Client(streamable_http_client(url, http_client=h2), mode="2026-07-28",
                           message_handler=handler("h2")) as two:
                caps = one.server_capabilities.tools
                assert one.protocol_version == "2026-07-28" and caps is not None and caps.list_changed
                await one.list_tools()
                await two.list_tools()
                async with one.listen(tools_list_changed=True) as sub:
                    await two.call_tool("get_reservation", {"reservation_id": "X"})  # h2's state, not h1's
                    await anyio.sleep(0.5)
                    assert seen["h1"] == []
                    await one.call_tool("get_reservation", {"reservation_id": "X"})
                    with anyio.fail_after(10):
                        async for _ in sub:
                            break
            await h1.aclose()
            await h2.aclose()
    anyio.run(main)
    gw.close()
    assert seen["legacy"] == ["list_changed"] and seen["h1"] == ["list_changed"]


def test_zc_mcp_http_from_the_command_line(tmp_path):
    import socket
    import subprocess
    import time

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "zcompile", "mcp", "--policy", str(POLICY), "--http",
                             str(port), "--server", f"{sys.executable} {SERVER} --log "
                                                    f"{tmp_path / 'calls.jsonl'}",
                             "--receipts", str(tmp_path / "r.jsonl")], cwd=ROOT, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline and proc.poll() is None, proc.stderr.read().decode()
                time.sleep(0.1)

        async def main() -> None:
            async with Client(f"http://127.0.0.1:{port}/mcp", mode="legacy") as c:
                assert "get_reservation" in names(await c.list_tools())
                assert (await c.call_tool("cancel", {"reservation_id": "X"})).is_error
        anyio.run(main)
    finally:
        proc.terminate()
        proc.wait(timeout=20)
    assert b"http://127.0.0.1:" in proc.stderr.read() and proc.returncode == 0
    proc.stderr.close()
    assert reached(tmp_path) == [] and len(list(read(tmp_path / "r.jsonl"))) == 2
