"""Several servers behind `zc mcp` (one over stdio, one over Streamable HTTP), their tools prefixed;
`zc tools import --server` and `zc check --tools-server` reading the same tools/list."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import anyio
import pytest
from click.testing import CliRunner
from mcp import Client, StdioServerParameters

from zcompile.cli import main
from zcompile.receipts import read

ROOT = Path(__file__).resolve().parent.parent
POLICY = ROOT / "tests/fixtures/mcp/two_servers.zc"
SERVER = ROOT / "tests/mcp_servers/reservations.py"


@pytest.fixture
def http_server(tmp_path):
    """reservations.py over Streamable HTTP on a free port: (url, its call log)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = tmp_path / "b.jsonl"
    proc = subprocess.Popen([sys.executable, str(SERVER), "--log", str(log), "--http", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            assert time.monotonic() < deadline and proc.poll() is None, "the HTTP test server did not start"
            time.sleep(0.1)
    yield f"http://127.0.0.1:{port}/mcp", log
    proc.terminate()
    proc.wait(timeout=10)


def calls(log: Path) -> list[str]:
    return [json.loads(line)["tool"] for line in log.read_text().splitlines()] if log.exists() else []


def test_two_servers_prefixed_one_stdio_one_http(tmp_path, http_server):
    url, b_log = http_server
    a_log = tmp_path / "a.jsonl"
    params = StdioServerParameters(command=sys.executable, cwd=str(ROOT), args=[
        "-m", "zcompile", "mcp", "--policy", str(POLICY), "--receipts", str(tmp_path / "r.jsonl"),
        "--server", f"a={sys.executable} {SERVER} --log {a_log}", "--server", f"b={url}"])

    async def main_() -> None:
        async with Client(params) as c:
            assert [t.name for t in (await c.list_tools()).tools] == ["a.get_reservation", "b.search"]
            assert (await c.call_tool("a.cancel", {"reservation_id": "X"})).is_error
            undeclared = await c.call_tool("b.get_reservation", {"reservation_id": "X"})
            assert (undeclared.is_error
                    and "not an action of policy `two_servers`" in undeclared.content[0].text)
            assert not (await c.call_tool("b.search", {"q": "x"})).is_error
            # b's call is not a's lookup
            assert "a.cancel" not in [t.name for t in (await c.list_tools()).tools]
            assert not (await c.call_tool("a.get_reservation", {"reservation_id": "X"})).is_error
            assert "a.cancel" in [t.name for t in (await c.list_tools()).tools]
            assert not (await c.call_tool("a.cancel", {"reservation_id": "X"})).is_error
    anyio.run(main_)
    assert calls(a_log) == ["get_reservation", "cancel"] and calls(b_log) == ["search"]
    servers = [r.meta["mcp"].get("server") for r in read(tmp_path / "r.jsonl")
               if r.meta["mcp"]["method"] == "tools/call"]
    assert servers == ["a", "b", "b", "a", "a"]


def test_tools_import_and_drift_from_the_servers(tmp_path, http_server):
    url, _ = http_server
    a = f"a={sys.executable} {SERVER}"
    runner = CliRunner()
    out = runner.invoke(main, ["tools", "import", "--server", a, "--server", f"b={url}"])
    assert out.exit_code == 0, out.output
    assert "action a.cancel(reservation_id: text) tags(destructive)" in out.output
    assert 'action b.search(q: text?) tags(read) "Search reservations."' in out.output
    assert out.output.startswith("# imported from MCP servers a, b by `zc tools import`: 14 actions")
    imported = tmp_path / "imported.zc"
    imported.write_text("policy imported\n" + out.output + "action escalate tags(control)\nfallback "
                                                           "escalate\n")
    out = runner.invoke(main, ["check", str(imported), "--tools-server", a, "--tools-server", f"b={url}"])
    assert out.exit_code == 0, out.output  # what was imported from the servers has no drift from them
    imported.write_text(imported.read_text().replace("b.search(q: text?)", "b.search(q: int?)"))
    out = runner.invoke(main, ["check", str(imported), "--tools-server", a, "--tools-server", f"b={url}"])
    assert out.exit_code == 1 and "ZC05" in out.output and "`b.search`" in out.output, out.output
    out = runner.invoke(main, ["tools", "import", "--server", a, "--server", "y"])
    assert out.exit_code == 1 and "name each one" in out.output
    out = runner.invoke(main, ["tools", "import", "--server", "a=http://127.0.0.1:9/mcp"])
    assert out.exit_code == 1 and "server `a`: cannot connect" in out.output
