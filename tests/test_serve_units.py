"""The pieces zc serve is made of, without HTTP where none is needed: Policy.filter_tools, the tier's
offer of the given tools' schemas, the forwarded body, and the assembly of a streamed reply."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from openai_stub import OpenAIStub

import zcompile
from zcompile import ZcError
from zcompile.gateway.request import BadRequest, forwarded, parse
from zcompile.gateway.upstream import assemble
from zcompile.router import Router

ROOT = Path(__file__).resolve().parents[1]
POLICY = zcompile.compile_text((ROOT / "policies" / "airline_chat.zc").read_text(), "airline_chat.zc")
START = {"prev": {"role": "user"}, "user_turns": 1, "turn": 0}


def fn(name: str, **extra) -> dict:
    return {"type": "function", "function": {"name": name, **extra}}


def test_filter_tools_keeps_the_legal_declared_tools_in_order():
    tools = [fn("cancel_reservation"), fn("get_user_details"), fn("rm_rf"), {"name": "calculate"}]
    # cancel: not legal yet; rm_rf: undeclared
    assert POLICY.filter_tools(tools, START) == [tools[1], tools[3]]
    later = {**START, "history": ["get_reservation_details"], "turn": 1, "user_turns": 2}
    assert [t["function"]["name"] for t in POLICY.filter_tools(tools[:2], later)] == ["cancel_reservation",
                                                                                     "get_user_details"]
    assert POLICY.filter_tools([], START) == []


@pytest.mark.parametrize("tools,where", [({"a": 1}, "$.tools: expected an array"),
                                         ([{"type": "function"}], "$.tools[0]"), ([3], "$.tools[0]")])
def test_filter_tools_refuses_what_is_not_tools(tools, where):
    with pytest.raises(ZcError, match="^" + re.escape(where)):
        POLICY.filter_tools(tools, START)


def test_filter_tools_respects_the_intent():
    p = zcompile.compile_text("policy p\nstate { x: bool = false }\naction a\naction b\nfallback a\n"
                              "intent only_a \"a\" { allow a }\n")
    assert p.filter_tools([fn("a"), fn("b")], {}, "only_a") == [fn("a")]


def test_the_tier_offers_the_given_tools_schemas_and_the_router_checks_the_call():
    schema = {"type": "object", "properties": {"user_id": {"type": "string", "pattern": "^[a-z_0-9]+$"}},
              "required": ["user_id"]}
    with OpenAIStub() as stub:
        tier = zcompile.OpenAITier(stub.base_url, "stub", name="remote")
        router = Router(POLICY, tiers={"remote": tier})
        stub.answer, stub.arguments = "get_user_details", {"user_id": "mia_li_3668"}
        d = router.decide(START, tools=[{"name": "get_user_details", "description": "Find a user by id.",
                                         "parameters": schema}])
        offered = {t["function"]["name"]: t["function"] for t in stub.requests[-1]["tools"]}
        assert offered["get_user_details"]["parameters"] == schema  # the harness's schema, not the signature
        assert offered["get_user_details"]["description"] == "Find a user by id."
        # the signature
        assert offered["get_reservation_details"]["parameters"]["required"] == ["reservation_id"]
        assert (d.kind, d.action, d.arguments, d.tier) == ("call", "get_user_details",
                                                           {"user_id": "mia_li_3668"}, "remote")
        stub.arguments = {"user_id": 7}  # legal action, arguments the policy refuses
        d = router.decide(START)
        assert d.tier == "fallback" and d.rungs[-1].cause == "illegal"
        assert "expected a string" in d.rungs[-1].detail
        tier.close()


def test_a_complete_router_goes_past_a_bare_name():
    p = zcompile.compile_text("policy p\nstate { x: bool = false }\naction look(id: text)\naction respond "
                              "tags(reply)\nfallback respond\nrule r: forbid respond when x == false\n")
    assert Router(p).decide({}).kind == "name"  # the compiler's single legal action, arguments unknown
    d = Router(p, complete=True).decide({})
    # the name is recorded, not accepted; the fallback is not legal
    assert (d.tier, d.action) == ("none", None)
    assert d.rungs[0].kind == "name" and d.receipt.action is None


def test_the_forwarded_body_drops_zc_fields_and_unoffered_tool_choice():
    raw = (b'{"model": "m", "messages": [{"role": "user", "content": "hi"}], "temperature": 0.2, "x_zc": {},'
           b' "tools": [{"type": "function", "function": {"name": "a"}}, {"type": "function", "function":'
           b' {"name": "b"}}], "tool_choice": {"type": "function", "function": {"name": "b"}}, "stream": '
           b'true}')
    req = parse(raw)
    body = forwarded(req, req.tools[:1])
    assert body["tool_choice"] == "auto" and body["tools"] == req.tools[:1]
    assert "x_zc" not in body and "stream" not in body and body["temperature"] == 0.2
    assert "tools" not in forwarded(req, []) and "tool_choice" not in forwarded(req, [])
    with pytest.raises(BadRequest, match=r"\$\.x_zc\.intent"):
        parse(b'{"messages": [{"role": "user", "content": "x"}], "x_zc": {"intent": 3}}')


def test_a_stream_assembles_into_its_message():
    events = [{"id": "c", "model": "m", "choices": [{"delta": {"role": "assistant", "content": "Hel"}}]},
              {"choices": [{"delta": {"content": "lo"}}]},
              {"choices": [{"delta": {"tool_calls": [
                  {"index": 0, "id": "t", "function": {"name": "f", "arguments": '{"a"'}}]}}]},
              {"choices": [{"delta": {"tool_calls": [{"index": 0, "function": {"arguments": ": 1}"}}]}}]},
              {"choices": [{"delta": {}, "finish_reason": "tool_calls"}]}, "noise"]
    got = assemble(events)
    assert got["id"] == "c" and got["model"] == "m"
    assert got["choices"][0]["message"] == {"role": "assistant", "content": "Hello", "tool_calls": [
        {"id": "t", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}]}


def test_zc_serve_refuses_bad_setups_without_a_traceback():
    from click.testing import CliRunner

    from zcompile.cli import main

    runner = CliRunner()
    r = runner.invoke(main, ["serve", "--policy", str(ROOT / "policies" / "agent_core.zc"), "--upstream",
                             "http://127.0.0.1:9/v1", "--model", "m"])
    assert r.exit_code == 1 and "must declare `action respond" in r.output
    r = runner.invoke(main, ["serve", "--policy", str(ROOT / "policies" / "airline_chat.zc"), "--upstream",
                             "ftp://x", "--model", "m"])
    assert r.exit_code == 1 and "base_url must start with http://" in r.output
    r = runner.invoke(main, ["serve", "--policy", str(ROOT / "policies" / "airline_chat.zc"), "--upstream",
                             "http://127.0.0.1:9/v1", "--model", "m", "--extract", "nope"])
    assert r.exit_code == 1 and "module:function" in r.output
    r = runner.invoke(main, ["serve", "--policy", str(ROOT / "policies" / "airline_chat.zc"), "--upstream",
                             "http://127.0.0.1:9/v1", "--model", "m", "--upstream-tier", "specialist2"])
    assert r.exit_code == 1 and "declares no tier `specialist2` (did you mean `specialist`?)" in r.output
    # usage: --policy, --upstream missing
    assert runner.invoke(main, ["serve", "--model", "m"]).exit_code == 2


def test_a_failed_setup_leaves_no_receipts_file(tmp_path):
    from zcompile.gateway import Gateway

    with pytest.raises(ZcError, match="declares no tier `nope`"):
        Gateway(POLICY, "http://127.0.0.1:9/v1", "m", upstream_tier="nope", receipts=tmp_path / "r.jsonl")
    assert not (tmp_path / "r.jsonl").exists()


def test_zc_serve_on_a_busy_port_exits_1(tmp_path):
    import socket
    import subprocess
    import sys

    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        policy = str(ROOT / "policies" / "airline_chat.zc")
        run = subprocess.run([sys.executable, "-m", "zcompile", "serve", "--policy", policy,
                              "--upstream", "http://127.0.0.1:9/v1", "--model", "m", "--port", str(port),
                              "--receipts", str(tmp_path / "r.jsonl")], capture_output=True, text=True,
                             timeout=60)
    assert run.returncode == 1 and f"error: cannot listen on 127.0.0.1:{port}" in run.stderr
    assert "Traceback" not in run.stderr
