"""Property: whatever the conversation and whatever the upstream answers, every tool call zc serve
returns passes `Policy.check`, the upstream is offered only legal tools, and each request leaves
exactly one receipt."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from openai import APIStatusError, OpenAI

import zcompile
from openai_stub import OpenAIStub
from zcompile.gateway import Gateway, Running
from zcompile.gateway.upstream import REASK
from zcompile.receipts import read
from zcompile.receipts.chat import default_extract

ROOT = Path(__file__).resolve().parents[1]
AIRLINE = ROOT / "policies" / "airline_chat.zc"
POLICY = zcompile.compile_text(AIRLINE.read_text(), str(AIRLINE))
NAMES = [a for a in POLICY.actions if a != "respond"]
REFUSED = REASK.split("{")[0]


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    with OpenAIStub() as stub:
        gw = Gateway(POLICY, stub.base_url, "stub-model", receipts=tmp_path_factory.mktemp("p") / "r.jsonl",
                     timeout_ms=2000)
        with Running(gw) as srv:
            yield stub, srv
        gw.close()


def _tool(name: str) -> dict:
    params = POLICY.ir.actions[POLICY.actions.index(name)].params or ()
    return {"type": "function", "function": {"name": name, "parameters": {
        "type": "object", "properties": {p.name: {} for p in params}}}}


values = st.one_of(st.sampled_from(["mia_li_3668", "ABC123", "JFK", "2024-05-01", ""]), st.integers(-3, 3),
                   st.booleans(), st.none(), st.lists(st.just("x"), max_size=2))
arguments = st.one_of(
    st.dictionaries(st.sampled_from(["user_id", "reservation_id", "origin", "destination", "date", "expression",
                                     "thought", "summary", "amount", "bogus"]), values, max_size=4),
    st.just("{not json"), st.just("[1, 2]"))


@st.composite
def a_call(draw):
    """A tool call the upstream might make: well-typed arguments for the action's signature (most
    often), or anything."""
    name = draw(st.sampled_from([*NAMES, "rm_rf"]))
    params = POLICY.ir.actions[POLICY.actions.index(name)].params if name in POLICY.actions else None
    if params is None or draw(st.integers(0, 3)) == 0:
        return name, draw(arguments)
    typed = {"text": st.sampled_from(["mia_li_3668", "ABC123", "JFK"]), "int": st.integers(0, 3),
             "float": st.floats(0, 500), "bool": st.booleans(), "list": st.lists(st.just("x"), max_size=2)}
    return name, {p.name: draw(st.sampled_from(p.members) if p.kind == "enum" else typed[p.kind]) for p in params}


reply = st.one_of(
    st.builds(lambda c: {"content": c}, st.sampled_from(["Sure.", "Let me check."])),
    st.builds(lambda calls: {"calls": calls}, st.lists(a_call(), min_size=1, max_size=2)))
step = st.one_of(
    st.builds(lambda t: [{"role": "user", "content": t}],
              st.sampled_from(["hi", "I am mia_li_3668", "cancel ABC123 please", "yes"])),
    st.builds(lambda n, out: [{"role": "assistant", "content": None, "tool_calls": [
        {"id": "t", "type": "function", "function": {"name": n, "arguments": "{}"}}]},
                              {"role": "tool", "tool_call_id": "t", "content": out}],
              st.sampled_from(NAMES), st.sampled_from(['{"ok": true}', "Error: not found", "[]"])),
    st.just([{"role": "assistant", "content": "How can I help?"}]))
conversations = st.builds(lambda steps: [{"role": "system", "content": "airline agent"},
                                         *[m for s in steps for m in s]],
                          st.lists(step, min_size=1, max_size=6))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(messages=conversations, first=reply, second=reply, offer=st.lists(st.sampled_from(NAMES), max_size=6,
                                                                          unique=True), stream=st.booleans())
def test_every_returned_call_passes_policy_check(setup, messages, first, second, offer, stream):
    stub, srv = setup
    stub.reset()
    stub.script = [first, second]
    before = sum(1 for _ in read(srv.gateway.receipts)) if srv.gateway.receipts.exists() else 0
    client = OpenAI(base_url=srv.base_url, api_key="unused", max_retries=0)
    state = default_extract(messages, len(messages), {})
    legal = set(POLICY.legal(state).actions)
    tools = [_tool(n) for n in offer] or None
    try:
        if stream:
            chunks = list(client.chat.completions.create(model="m", messages=messages, tools=tools, stream=True))
            calls = [t.function for c in chunks for t in c.choices[0].delta.tool_calls or ()]
            x = chunks[-1].model_extra["x_zc"]
        else:
            r = client.chat.completions.create(model="m", messages=messages, tools=tools)
            calls = [t.function for t in r.choices[0].message.tool_calls or ()]
            x = r.model_extra["x_zc"]
    except APIStatusError as exc:  # the stub never fails here: no error is acceptable
        pytest.fail(f"{exc.status_code}: {exc.response.text}")
    event(f"{'stream' if stream else 'whole'}: rung {x['rung']}, {len(x['blocked'])} blocked, "
          f"{'a call' if calls else 'text'}")
    for call in calls:
        verdict = POLICY.check(state, call.name, json.loads(call.arguments))
        assert verdict.allowed, verdict.reasons
    for sent in stub.requests:  # the re-ask repeats the offer of the original request
        assert {t["function"]["name"] for t in sent.get("tools", ())} <= legal & set(offer)
        assert not any(isinstance(m.get("content"), str) and m["content"].startswith(REFUSED)
                       for m in sent["messages"][:len(messages)])
    assert sum(1 for _ in read(srv.gateway.receipts)) == before + 1
