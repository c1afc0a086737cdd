"""zc serve with a text tier: a reply the specialist hands on is written by the policy's text tier
(a local OpenAI-compatible stub standing in for a small model), and the upstream stub receives nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from openai import OpenAI
from openai_stub import OpenAIStub
from test_text_tier import Picks

import zcompile
from zcompile.errors import ZcError
from zcompile.gateway import Gateway, Running
from zcompile.receipts import read
from zcompile.router.router import TEXT_ONLY
from zcompile.tiers import load_tiers

SOURCE = (Path(__file__).resolve().parent / "fixtures" / "text_tier.zc").read_text()
TOOLS = [{"type": "function", "function": {"name": "get_user_details", "description": "look a user up",
                                           "parameters": {"type": "object", "properties": {
                                               "user_id": {"type": "string"}}, "required": ["user_id"]}}}]
START = [{"role": "system", "content": "You are an airline agent."},
         {"role": "user", "content": "Hi! What can you do for me?"}]
WRITTEN = "Hello! I can look up your booking or change it."


@pytest.fixture(scope="module")
def policy():
    return zcompile.compile_text(SOURCE, "text_tier.zc")


@pytest.fixture(scope="module")
def stubs():
    with OpenAIStub() as writer, OpenAIStub() as upstream:
        yield writer, upstream


@pytest.fixture(scope="module")
def served(policy, stubs, tmp_path_factory):
    writer, _ = stubs
    folder = tmp_path_factory.mktemp("text")
    toml = folder / "tiers.toml"  # bound as `zc serve --tiers` binds it
    toml.write_text(f'[tiers.writer]\nbase_url = "{writer.base_url}"\nmodel = "small-writer"\ntimeout_ms = '
                    '2000\n')
    picks = Picks("respond")
    gw = Gateway(policy, stubs[1].base_url, "big-upstream", specialists=picks, tiers=load_tiers(toml, policy),
                 receipts=folder / "receipts.jsonl", timeout_ms=3000)
    with Running(gw) as srv:
        yield srv, picks
    gw.close()


@pytest.fixture
def client(served, stubs):
    srv, picks = served
    picks.action, picks.arguments = "respond", None
    for s in stubs:
        s.reset()
    stubs[0].content, stubs[1].content = WRITTEN, "the upstream's reply"
    return OpenAI(base_url=srv.base_url, api_key="unused", max_retries=0, timeout=10)


def last_receipt(served):
    return list(read(served[0].gateway.receipts))[-1]


def test_a_handed_on_reply_is_written_by_the_text_tier(client, stubs, served):
    writer, upstream = stubs
    raw = client.chat.completions.with_raw_response.create(model="any", messages=START, tools=TOOLS,
                                                           temperature=0.2)
    r = raw.parse()
    assert r.choices[0].message.content == WRITTEN and r.choices[0].message.tool_calls is None
    assert r.choices[0].finish_reason == "stop"
    x = r.model_extra["x_zc"]
    assert (x["rung"], x["kind"], x["action"], x["upstream_requests"]) == ("writer", "reply", "respond", 0)
    assert raw.headers["x-zc-rung"] == "writer"
    assert upstream.requests == []  # the expensive model received nothing
    (sent,) = writer.requests
    assert sent["messages"] == START and sent["model"] == "small-writer" and sent["temperature"] == 0.2
    assert "tools" not in sent and "tool_choice" not in sent and sent["stream"] is False
    got = last_receipt(served)
    assert (got.tier, got.action, got.model, got.cost, got.meta["text"]) == (
        "writer", "respond", "small-writer", 5.0, WRITTEN)
    assert [a["tier"] for a in got.meta["rungs"]] == ["specialist", "writer"]


def test_streamed_the_text_tier_reply_arrives_as_a_normal_stream(client, stubs):
    writer, upstream = stubs
    chunks = list(client.chat.completions.create(model="any", messages=START, tools=TOOLS, stream=True))
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == WRITTEN
    assert chunks[-1].choices[0].finish_reason == "stop" and len({c.id for c in chunks}) == 1
    assert chunks[-1].model_extra["x_zc"]["rung"] == "writer"
    assert upstream.requests == [] and writer.requests[0]["stream"] is False


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("failure", ["http_error", "drop", "malformed", "tool_call", "empty"])
def test_when_the_text_tier_fails_the_upstream_is_asked(client, stubs, served, failure, stream):
    writer, upstream = stubs
    if failure == "tool_call":
        writer.content, writer.calls = None, [("get_user_details", {"user_id": "u1"})]
    elif failure == "empty":
        writer.content = "  "
    else:
        writer.behaviour = failure
    got = client.chat.completions.create(model="any", messages=START, tools=TOOLS, stream=stream)
    if stream:
        chunks = list(got)
        text, x = "".join(c.choices[0].delta.content or "" for c in chunks), chunks[-1].model_extra["x_zc"]
    else:
        text, x = got.choices[0].message.content, got.model_extra["x_zc"]
    assert (text, x["rung"], x["upstream_requests"]) == ("the upstream's reply", "remote", 1)
    assert len(writer.requests) == 1 and len(upstream.requests) == 1
    rungs = last_receipt(served).meta["rungs"]
    assert rungs[1]["tier"] == "writer" and rungs[1]["outcome"] != "answered"
    assert last_receipt(served).cost == 105.0


def test_the_text_tier_is_not_asked_for_calls(client, stubs, served):
    writer, upstream = stubs
    _, picks = served
    picks.action, picks.arguments = "get_user_details", {"user_id": "u7"}  # the specialist answers a call
    r = client.chat.completions.create(model="any", messages=START, tools=TOOLS)
    assert json.loads(r.choices[0].message.tool_calls[0].function.arguments) == {"user_id": "u7"}
    picks.action = None  # the specialist abstains: the upstream decides, the text tier is skipped
    upstream.content, upstream.answer, upstream.arguments = None, "get_user_details", {"user_id": "u8"}
    r = client.chat.completions.create(model="any", messages=START, tools=TOOLS)
    assert r.model_extra["x_zc"]["rung"] == "remote" and r.choices[0].message.tool_calls
    assert writer.requests == []
    skipped = [a for a in last_receipt(served).meta["rungs"] if a["tier"] == "writer"]
    assert skipped == [{"tier": "writer", "outcome": "skipped", "kind": "abstain", "latency_ms": 0.0,
                        "cause": "skipped", "detail": TEXT_ONLY}]


def test_the_upstream_is_never_bound_to_the_text_tier(policy, stubs):
    last = zcompile.compile_text(SOURCE.replace("route default: use specialist, writer, remote",
                                                "tier late cost 1 text\nroute default: use specialist, "
                                                "remote")
                                 .replace("cost 5   text", "cost 5"), "t.zc")
    gw = Gateway(last, stubs[1].base_url, "m")  # `late`, declared last, is the text tier: not the upstream's
    assert gw.upstream_tier == "remote"
    gw.close()
    with pytest.raises(ZcError, match="tier `writer` is the text tier of policy `chat_writer`: it writes"):
        Gateway(policy, stubs[1].base_url, "m", upstream_tier="writer")


def test_zc_serve_binds_the_text_tier_from_tiers_toml(tmp_path, monkeypatch):
    from click.testing import CliRunner

    import zcompile.gateway
    from zcompile.cli import main

    toml = tmp_path / "tiers.toml"
    toml.write_text('[tiers.writer]\nbase_url = "http://127.0.0.1:9/v1"\nmodel = "small-writer"\n')
    policy = str(Path(__file__).resolve().parent / "fixtures" / "text_tier.zc")
    args = ["serve", "--policy", policy, "--upstream", "http://127.0.0.1:9/v1", "--model", "big", "--tiers",
            str(toml), "--receipts", str(tmp_path / "r.jsonl")]
    served = []
    monkeypatch.setattr(zcompile.gateway, "serve", lambda gateway, host, port: served.append(gateway))
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 0, r.output
    assert "as tier `remote`, replies by text tier `writer` (small-writer)" in r.output
    (gw,) = served
    assert (gw.upstream_tier, gw.router.text_tier) == ("remote", "writer")
    assert gw.workers._max_workers == 64  # decisions at once, by default
    r = CliRunner().invoke(main, [*args, "--workers", "3"])
    assert r.exit_code == 0 and served[-1].workers._max_workers == 3
    r = CliRunner().invoke(main, [*args, "--workers", "0"])
    assert r.exit_code == 2 and "--workers" in r.output and "Traceback" not in r.output
    r = CliRunner().invoke(main, [*args, "--upstream-tier", "writer"])
    assert r.exit_code == 1 and "Traceback" not in r.output
    assert "tier `writer` is the text tier of policy `chat_writer`" in r.output
