"""`zc mcp` end to end: the SDK's own client, through the gateway over stdio, to a real SDK server."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import anyio
import mcp_types as types
import pytest
from click.testing import CliRunner
from mcp import Client, MCPError, StdioServerParameters

from zcompile.cli import main
from zcompile.driver import compile_file
from zcompile.receipts import read

ROOT = Path(__file__).resolve().parent.parent
POLICY = ROOT / "tests/fixtures/mcp/reservations.zc"
SERVER = ROOT / "tests/mcp_servers/reservations.py"
REVISIONS = ["legacy", "2026-07-28"]  # the Client's mode: 2025-11-25 (initialize) or 2026-07-28
AGENT = {"user": {"role": "agent"}}


def upstream(tmp_path: Path) -> str:
    return f"{sys.executable} {SERVER} --log {tmp_path / 'calls.jsonl'}"


def gateway(tmp_path: Path, *args: str, context: dict | None = None) -> StdioServerParameters:
    extra = list(args)
    if context is not None:
        (tmp_path / "context.json").write_text(json.dumps(context))
        extra += ["--context", str(tmp_path / "context.json")]
    return StdioServerParameters(command=sys.executable, cwd=str(ROOT), args=[
        "-m", "zcompile", "mcp", "--policy", str(POLICY), "--server", upstream(tmp_path),
        "--receipts", str(tmp_path / "r.jsonl"), *extra])


def reached(tmp_path: Path) -> list[str]:
    """The tools the server was actually called with, in order."""
    log = tmp_path / "calls.jsonl"
    return [json.loads(line)["tool"] for line in log.read_text().splitlines()] if log.exists() else []


def receipts(tmp_path: Path) -> list:
    return list(read(tmp_path / "r.jsonl"))


def names(result: types.ListToolsResult) -> list[str]:
    return [t.name for t in result.tools]


def run(fn) -> None:
    anyio.run(fn)


@pytest.mark.parametrize("mode", REVISIONS)
def test_lists_legal_tools_blocks_and_advances_state(tmp_path, mode):
    async def main_() -> None:
        async with Client(gateway(tmp_path), mode=mode) as c:
            assert c.protocol_version == ("2025-11-25" if mode == "legacy" else mode)
            assert names(await c.list_tools()) == ["add_tool", "crash", "fail", "get_reservation", "search",
                                                   "slow"]
            blocked = await c.call_tool("cancel", {"reservation_id": "ABC123"})
            assert blocked.is_error
            text = blocked.content[0].text
            assert "lookup_first (after): `cancel` must come after `get_reservation`" in text
            assert "agents_cancel" in text  # every reason, not the first
            verdict = blocked.meta["io.zcompile/verdict"]
            assert not verdict["allowed"] and [r["rule"] for r in verdict["reasons"]] == [
                "lookup_first", "agents_cancel"]
            ok = await c.call_tool("get_reservation", {"reservation_id": "ABC123"})
            assert not ok.is_error and json.loads(ok.content[0].text)["id"] == "ABC123"
            # without the static context the role is `customer`: still not legal, still blocked
            assert "cancel" not in names(await c.list_tools())
            again = await c.call_tool("cancel", {"reservation_id": "ABC123"})
            assert again.is_error and "lookup_first" not in again.content[0].text
    run(main_)
    assert reached(tmp_path) == ["get_reservation"]  # the blocked calls never reached the server
    rs = receipts(tmp_path)
    assert [r.meta["mcp"]["method"] for r in rs] == ["tools/list", "tools/call", "tools/call", "tools/list",
                                                     "tools/call"]
    call = rs[1]
    assert (call.action == "cancel" and call.arguments == {"reservation_id": "ABC123"}
            and call.verified is False)
    assert call.meta["mcp"]["verdict"] == "blocked" and call.meta["mcp"]["forwarded"] is False
    assert call.meta["mcp"]["protocol"] == ("2025-11-25" if mode == "legacy" else mode)
    assert rs[2].meta["mcp"]["outcome"] == "ok" and rs[2].state["history"] == []
    assert rs[3].state["history"] == ["get_reservation"] and rs[3].state["last"]["result"] == "record"
    assert len({r.task for r in rs}) == 1 and {r.policy for r in rs} == {compile_file(POLICY).sha256}


@pytest.mark.parametrize("mode", REVISIONS)
def test_context_makes_cancel_legal_after_lookup_and_list_changed_is_sent(tmp_path, mode):
    seen: list[str] = []

    async def on_message(message) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            seen.append("list_changed")

    async def main_() -> None:
        async with Client(gateway(tmp_path, context=AGENT), mode=mode, message_handler=on_message) as c:
            assert "cancel" not in names(await c.list_tools())
            if mode == "legacy":
                await c.call_tool("get_reservation", {"reservation_id": "ABC123"})
                with anyio.fail_after(10):
                    while not seen:
                        await anyio.sleep(0.05)
            else:
                async with c.listen(tools_list_changed=True) as sub:
                    await c.call_tool("get_reservation", {"reservation_id": "ABC123"})
                    with anyio.fail_after(10):
                        async for event in sub:
                            seen.append(type(event).__name__)
                            break
            assert "cancel" in names(await c.list_tools())
            done = await c.call_tool("cancel", {"reservation_id": "ABC123"})
            assert not done.is_error and json.loads(done.content[0].text) == {"cancelled": "ABC123"}
            await c.call_tool("search", {"q": "x"})  # the legal set does not change: nothing sent
            await anyio.sleep(0.3)
    run(main_)
    # once, for get_reservation (under 2026-07-28 on the listen stream, which the handler sees too)
    assert sorted(seen) == (["list_changed"] if mode == "legacy" else ["ToolsListChanged", "list_changed"])
    assert reached(tmp_path) == ["get_reservation", "cancel", "search"]
    rs = receipts(tmp_path)
    assert rs[0].state["user"] == {"role": "agent"}


def test_receipts_are_read_by_zc_receipts_check(tmp_path):
    async def main_() -> None:
        async with Client(gateway(tmp_path, context=AGENT)) as c:
            await c.list_tools()
            await c.call_tool("cancel", {"reservation_id": "X"})
            await c.call_tool("get_reservation", {"reservation_id": "X"})
    run(main_)
    out = CliRunner().invoke(main, ["receipts", "check", str(tmp_path / "r.jsonl"), "--policy", str(POLICY)])
    assert out.exit_code == 0, out.output
    assert "3" in out.output
    # and as `zc distill` reads them: the list abstains, the blocked call was wrong, the lookup a decision
    from zcompile.qroute.dataset import load

    data = load([tmp_path / "r.jsonl"], compile_file(POLICY))
    assert data.counts["dropped_abstained"] == 1 and data.counts["dropped_judged_wrong"] == 1
    assert [d.label for d in data.decisions] == ["get_reservation"]


@pytest.mark.parametrize(("deny", "expect"), [("error", "error"), ("opaque", "opaque")])
def test_deny_modes(tmp_path, deny, expect):
    async def main_() -> None:
        async with Client(gateway(tmp_path, "--deny", deny)) as c:
            if expect == "error":
                with pytest.raises(MCPError) as err:
                    await c.call_tool("cancel", {"reservation_id": "X"})
                assert err.value.code == -32010
                assert "lookup_first" in err.value.message
                assert [r["rule"] for r in err.value.error.data["reasons"]] == [
                    "lookup_first", "agents_cancel"]
            else:
                r = await c.call_tool("cancel", {"reservation_id": "X"})
                assert r.is_error and r.content[0].text == "this call is not allowed here"
                assert not r.meta or "io.zcompile/verdict" not in r.meta
    run(main_)
    assert reached(tmp_path) == []
    assert receipts(tmp_path)[0].meta["mcp"]["reasons"]  # the receipt keeps every reason in each mode


def test_unknown_tool_and_bad_params_are_invalid_params(tmp_path):
    async def main_() -> None:
        async with Client(gateway(tmp_path)) as c:
            with pytest.raises(MCPError) as err:
                await c.call_tool("nope", {})
            assert err.value.code == -32602 and "Unknown tool: nope" in err.value.message
            with pytest.raises(MCPError) as err:
                await c.list_tools(cursor="not-a-cursor")
            assert err.value.code == -32602 and "cursor" in err.value.message
    run(main_)
    assert reached(tmp_path) == []
    (unknown,) = receipts(tmp_path)
    assert (unknown.action is None and unknown.meta["mcp"]["tool"] == "nope"
            and "unknown tool" in unknown.meta["mcp"]["error"])


def test_log_only_lists_and_forwards_everything_but_records_the_verdict(tmp_path):
    async def main_() -> None:
        async with Client(gateway(tmp_path, "--log-only")) as c:
            assert "cancel" in names(await c.list_tools())
            r = await c.call_tool("cancel", {"reservation_id": "X"})
            assert not r.is_error
    run(main_)
    assert reached(tmp_path) == ["cancel"]
    call = receipts(tmp_path)[1]
    assert call.meta["mcp"]["verdict"] == "blocked" and call.meta["mcp"]["forwarded"] is True
    assert call.meta["mcp"]["log_only"] is True


def test_a_failed_result_does_not_advance_the_state(tmp_path):
    params = gateway(tmp_path, "--server-env", "ZC_TEST_SERVER_ENV")
    params.env = {"ZC_TEST_SERVER_ENV": "passed on"}

    async def main_() -> None:
        async with Client(params) as c:
            r = await c.call_tool("fail", {})
            # the server's result, as it came
            assert r.is_error and "no such reservation" in r.content[0].text
            await c.list_tools()
    run(main_)
    rs = receipts(tmp_path)
    assert json.loads((tmp_path / "calls.jsonl").read_text())["env"] == "passed on"  # --server-env
    assert rs[0].meta["mcp"]["outcome"] == "tool_error"
    assert rs[1].state["history"] == [] and rs[1].state["tool_calls"] == 0


def test_passthrough_of_annotations_output_schema_meta_and_structured_content(tmp_path):
    async def main_() -> None:
        async with Client(gateway(tmp_path), mode="2026-07-28") as c:
            listed = await c.list_tools()
            assert listed.cache_scope == "private" and listed.ttl_ms == 0
            search = next(t for t in listed.tools if t.name == "search")
            assert search.annotations.read_only_hint is True and search.annotations.title == "Search"
            assert search.output_schema["required"] == ["hits"]
            assert search.meta == {"example.com/owner": "tests"}
            r = await c.call_tool("search", {"q": "x"})
            assert r.structured_content == {"hits": 2} and r.meta["example.com/page"] == 1
    run(main_)


def test_cursors_page_the_legal_list_in_a_stable_order(tmp_path):
    async def main_() -> None:
        async with Client(gateway(tmp_path, "--page-size", "2")) as c:
            pages, cursor = [], None
            while True:
                page = await c.list_tools(cursor=cursor, cache_mode="bypass")
                pages.append(names(page))
                cursor = page.next_cursor
                if cursor is None:
                    break
            assert pages == [["add_tool", "crash"], ["fail", "get_reservation"], ["search", "slow"]]
    run(main_)


def test_a_server_tool_list_change_is_read_again(tmp_path):
    async def main_() -> None:
        async with Client(gateway(tmp_path)) as c:
            assert "extra" not in names(await c.list_tools())
            assert not (await c.call_tool("add_tool", {})).is_error
            with anyio.fail_after(15):  # the server announces it on its listen stream; the next list reads it
                while "extra" not in names(await c.list_tools(cache_mode="bypass")):
                    await anyio.sleep(0.1)
            assert not (await c.call_tool("extra", {})).is_error
    run(main_)
    assert reached(tmp_path) == ["add_tool", "extra"]


def test_slow_and_crashing_servers_are_answered_in_bounded_time(tmp_path):
    async def main_() -> None:
        async with Client(gateway(tmp_path, "--timeout", "1.5")) as c:
            started = time.monotonic()
            with pytest.raises(MCPError) as err:
                await c.call_tool("slow", {"seconds": 30})
            assert time.monotonic() - started < 10
            assert "did not answer `slow` within 1.5 s" in err.value.message
            with pytest.raises(MCPError) as err:
                with anyio.fail_after(15):
                    await c.call_tool("crash", {})
            with pytest.raises(MCPError) as err:
                with anyio.fail_after(15):
                    await c.call_tool("get_reservation", {"reservation_id": "X"})
            assert "is not running" in err.value.message
            assert names(await c.list_tools())  # the gateway itself still answers
    run(main_)
    outcomes = [r.meta["mcp"].get("outcome") for r in receipts(tmp_path)
                if r.meta["mcp"]["method"] == "tools/call"]
    assert outcomes[0] == "timeout" and outcomes[1] in ("crashed", "failed") and outcomes[2] == "crashed"


def test_bad_json_rpc_lines_are_refused_over_stdio(tmp_path):
    params = gateway(tmp_path)
    proc = subprocess.Popen([params.command, *params.args], cwd=ROOT, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    meta = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {}}

    def ask(line: str) -> dict:
        proc.stdin.write(line.encode() + b"\n")
        proc.stdin.flush()
        return json.loads(proc.stdout.readline())

    try:
        assert ask("this is not json")["error"]["code"] == -32700
        assert ask('{"jsonrpc": "2.0", "id": 1}') == {"jsonrpc": "2.0", "id": 1, "error": {
            # its id: not left waiting
            "code": -32600, "message": "invalid request: $.method: field required"}}
        assert ask('{"jsonrpc": "2.0", "id": "x", "method": 5}')["error"]["message"] == \
            "invalid request: $.method: input should be a valid string"
        assert ask("[1, 2]")["error"]["code"] == -32600
        bad = ask(json.dumps({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                              "params": {"name": "cancel", "arguments": "x", "_meta": meta}}))
        assert bad["id"] == 2 and bad["error"] == {
            "code": -32602, "message": "$.params.arguments: expected an object, got a string"}
        ok = ask(json.dumps({"jsonrpc": "2.0", "id": 3, "method": "tools/list", "params": {"_meta": meta}}))
        assert ok["id"] == 3 and "get_reservation" in [t["name"] for t in ok["result"]["tools"]]
        assert ok["result"]["resultType"] == "complete" and ok["result"]["cacheScope"] == "private"
        assert ok["result"]["ttlMs"] == 0
        found = ask(json.dumps({"jsonrpc": "2.0", "id": 4, "method": "server/discover",
                                "params": {"_meta": meta}}))
        assert "2026-07-28" in found["result"]["supportedVersions"]
        assert found["result"]["capabilities"]["tools"] == {"listChanged": True}
    finally:
        proc.stdin.close()
        proc.wait(timeout=20)
        proc.stdout.close()
    assert reached(tmp_path) == []


def test_bad_configuration_is_refused_before_serving(tmp_path):
    runner = CliRunner()
    bad_ctx = tmp_path / "ctx.json"
    bad_ctx.write_text('{"user": {"role": "root"}}')
    out = runner.invoke(main, ["mcp", "--policy", str(POLICY), "--server", upstream(tmp_path), "--context",
                               str(bad_ctx)])
    assert out.exit_code == 1 and "static context" in out.output and "$.user.role" in out.output
    bad_ctx.write_text('{"history": ["cancel"]}')
    out = runner.invoke(main, ["mcp", "--policy", str(POLICY), "--server", upstream(tmp_path), "--context",
                               str(bad_ctx)])
    assert out.exit_code == 1 and "$.history" in out.output and "may only add fields" in out.output
    out = runner.invoke(main, ["mcp", "--policy", str(POLICY), "--server", "x", "--receipts", str(POLICY)])
    assert out.exit_code == 1 and "is not a receipts file; refusing to overwrite it" in out.output
    out = runner.invoke(main, ["mcp", "--policy", str(POLICY), "--server", "x", "--server-env",
                               "ZC_SURELY_UNSET_VAR"])
    assert out.exit_code == 1 and "--server-env ZC_SURELY_UNSET_VAR: not set" in out.output
    out = runner.invoke(main, ["mcp", "--policy", str(POLICY), "--server", "x", "--intent", "nope"])
    assert out.exit_code == 1 and "--intent `nope`: not an intent" in out.output
    out = runner.invoke(main, ["mcp", "--policy", str(POLICY), "--server", "a=x", "--server", "y"])
    assert out.exit_code == 1 and "name each one" in out.output
    out = runner.invoke(main, ["mcp", "--policy", str(POLICY), "--server", "x", "--state-key", "cookie:x"])
    assert out.exit_code == 1 and "--state-key `cookie:x`" in out.output
    out = runner.invoke(main, ["mcp", "--policy", str(POLICY), "--server", "x", "--auth-issuer",
                               "https://a.test"])
    assert out.exit_code == 2 and "needs --auth-issuer, --auth-resource and --auth-jwks" in out.output
    out = runner.invoke(main, ["mcp", "--policy", str(POLICY), "--server", "x", "--auth-issuer",
                               "https://a.test", "--auth-resource", "http://127.0.0.1:1/mcp", "--auth-jwks",
                               str(bad_ctx)])
    assert out.exit_code == 2 and "add --http PORT" in out.output
    out = runner.invoke(main, ["mcp", "--policy", str(POLICY), "--server", "x", "--http", "0",
                               "--auth-issuer", "https://a.test", "--auth-resource", "http://127.0.0.1:1/mcp",
                               "--auth-jwks", str(bad_ctx)])
    assert out.exit_code == 1 and "not a JWKS" in out.output
    out = runner.invoke(main, ["mcp", "--policy", str(POLICY), "--server",
                               f"{sys.executable} -c 'import sys; sys.exit(4)'", "--receipts",
                               str(tmp_path / "r.jsonl"), "--timeout", "10"])
    assert out.exit_code == 1 and "cannot connect" in out.output and "Traceback" not in out.output
