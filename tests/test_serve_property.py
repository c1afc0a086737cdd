"""Property: whatever the policy, the conversation's state, the harness's offer and `tool_choice`
and the upstream's answers, every tool call zc serve returns passes `Policy.check` and is one the
harness offered (and allowed by its `tool_choice`), the upstream is offered only legal tools, and
each request leaves exactly one receipt. Two tests: the shipped `airline_chat` with states derived from
drawn conversations by the default extractor, and random policies (tests/strategies.py, the
differential test's generator) with drawn states delivered by an `--extract`-style extractor."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from openai import APIError, APIStatusError, OpenAI
from openai_stub import OpenAIStub
from starlette.testclient import TestClient
from strategies import calls, overflow_dropped, policies, states

import zcompile
from zcompile.gateway import Gateway, Running, create_app
from zcompile.gateway.upstream import REASK
from zcompile.receipts import read
from zcompile.receipts.chat import default_extract
from zcompile.tools import openai_tools

ROOT = Path(__file__).resolve().parents[1]
AIRLINE = ROOT / "policies" / "airline_chat.zc"
POLICY = zcompile.compile_text(AIRLINE.read_text(), str(AIRLINE))
NAMES = [a for a in POLICY.actions if a != "respond"]
REFUSED = REASK.split("{")[0]
UNDECLARED = "rm_rf"
FAILURES = ("garbage", "malformed", "http_error", "empty", "drop")  # the stub's broken upstreams


@pytest.fixture(scope="module")
def stub():
    """One stub upstream for every example of both tests (reset before each request)."""
    with OpenAIStub() as s:
        yield s


@pytest.fixture(scope="module")
def setup(stub, tmp_path_factory):
    gw = Gateway(POLICY, stub.base_url, "stub-model", receipts=tmp_path_factory.mktemp("p") / "r.jsonl",
                 timeout_ms=2000)
    with Running(gw) as srv:
        yield stub, srv
    gw.close()


def _tool(name: str) -> dict:
    params = POLICY.ir.actions[POLICY.actions.index(name)].params or ()
    return {"type": "function", "function": {"name": name, "parameters": {
        "type": "object", "properties": {p.name: {} for p in params}}}}


def _signature(policy, name: str):
    """The declared parameters of `name` (None: undeclared, or declared without a signature)."""
    return policy.ir.actions[policy.actions.index(name)].params if name in policy.actions else None


def typed(params, text) -> st.SearchStrategy[dict]:
    """Arguments that fit a signature: every required parameter, optional ones absent, null or set."""
    kinds = {"int": st.integers(-2, 6), "float": st.floats(0, 500), "bool": st.booleans(),
             "list": st.lists(st.integers(0, 3), max_size=3), "text": text}
    value = lambda p: st.sampled_from(p.members) if p.kind == "enum" else kinds[p.kind]  # noqa: E731
    return st.fixed_dictionaries({p.name: value(p) for p in params if not p.optional},
                                 optional={p.name: st.one_of(st.none(), value(p)) for p in params
                                           if p.optional})


@st.composite
def a_call(draw, policy, names, anything, text):
    """A tool call the upstream might make: a name from `names` (declared or not), with arguments
    well-typed for its signature (most often) or drawn from `anything`."""
    name = draw(st.sampled_from(names))
    params = _signature(policy, name)
    if params is None or draw(st.integers(0, 3)) == 0:
        return name, draw(anything)
    return name, draw(typed(params, text))


values = st.one_of(st.sampled_from(["mia_li_3668", "ABC123", "JFK", "2024-05-01", ""]), st.integers(-3, 3),
                   st.booleans(), st.none(), st.lists(st.just("x"), max_size=2))
arguments = st.one_of(
    st.dictionaries(st.sampled_from(["user_id", "reservation_id", "origin", "destination", "date",
                                     "expression", "thought", "summary", "amount", "bogus"]), values,
                    max_size=4),
    st.just("{not json"), st.just("[1, 2]"))


reply = st.one_of(
    st.builds(lambda c: {"content": c}, st.sampled_from(["Sure.", "Let me check."])),
    st.builds(lambda calls: {"calls": calls}, st.lists(
        a_call(POLICY, [*NAMES, UNDECLARED], arguments, st.sampled_from(["mia_li_3668", "ABC123", "JFK"])),
        min_size=1, max_size=2)))
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


CHOICES = st.sampled_from([None, "auto", "none", "required", *({"type": "function", "function": {"name": n}}
                                                                for n in ("get_user_details",
                                                                          "cancel_reservation"))])


def allowed_by(choice, offer: list[str], name: str) -> bool:
    """Whether a returned call of `name` is one the harness asked for: among the legal tools it
    offered (`offer`), and allowed by its `tool_choice` (one naming any other tool counts as "auto")."""
    if name not in offer or choice == "none":
        return False
    return (not isinstance(choice, dict) or choice["function"]["name"] not in offer
            or choice["function"]["name"] == name)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(messages=conversations, first=reply, second=reply, offer=st.lists(st.sampled_from(NAMES), max_size=6,
                                                                          unique=True), stream=st.booleans(),
       choice=CHOICES)
def test_every_returned_call_passes_policy_check(setup, messages, first, second, offer, stream, choice):
    stub, srv = setup
    stub.reset()
    stub.script = [first, second]
    before = sum(1 for _ in read(srv.gateway.receipts)) if srv.gateway.receipts.exists() else 0
    client = OpenAI(base_url=srv.base_url, api_key="unused", max_retries=0)
    state = default_extract(messages, len(messages), {})
    legal = set(POLICY.legal(state).actions)
    tools = [_tool(n) for n in offer] or None
    extra = {"tool_choice": choice} if choice is not None and tools else {}
    kept = [n for n in offer if n in legal]
    requires_call = bool(extra) and (choice == "required" or (
        isinstance(choice, dict) and choice["function"]["name"] in kept))
    refused = False
    try:
        if stream:
            chunks = list(client.chat.completions.create(model="m", messages=messages, tools=tools,
                                                         stream=True, **extra))
            calls = [t.function for c in chunks for t in c.choices[0].delta.tool_calls or ()]
            x = chunks[-1].model_extra["x_zc"]
        else:
            r = client.chat.completions.create(model="m", messages=messages, tools=tools, **extra)
            calls = [t.function for t in r.choices[0].message.tool_calls or ()]
            x = r.model_extra["x_zc"]
    except APIStatusError as exc:  # the stub never fails here: only a required call nobody can make
        if not (requires_call and exc.status_code == 422 and exc.body.get("code") == "no_tool_call"):
            pytest.fail(f"{exc.status_code}: {exc.response.text}")
        calls, x, refused = [], exc.response.json()["x_zc"], True
        assert x["rung"] == "fallback"
    event(f"{'stream' if stream else 'whole'}: rung {x['rung']}, {len(x['blocked'])} blocked, "
          f"{'a call' if calls else 'text'}")
    assert calls or refused or not requires_call, (choice, x)  # a required call is never answered with text
    for call in calls:
        verdict = POLICY.check(state, call.name, json.loads(call.arguments))
        assert verdict.allowed, verdict.reasons
        assert allowed_by(extra.get("tool_choice"), [n for n in offer if n in legal],
                          call.name), (call, offer, choice)
    for sent in stub.requests:  # the re-ask repeats the offer of the original request
        assert {t["function"]["name"] for t in sent.get("tools", ())} <= legal & set(offer)
        assert not any(isinstance(m.get("content"), str) and m["content"].startswith(REFUSED)
                       for m in sent["messages"][:len(messages)])
    assert sum(1 for _ in read(srv.gateway.receipts)) == before + 1


# ---- random policies ----------------------------------------------------------------------------
def state_in_system_message(messages: list[dict], index: int, conversation: dict) -> dict:
    """The extractor of the random-policy test (as `--extract` would name it): the drawn state
    travels as the JSON of the system message."""
    return json.loads(messages[0]["content"])


GARBAGE = st.sampled_from(["{not json", "[1, 2]", "null", '"k"', ""])  # `arguments` strings a model may send


@st.composite
def upstream_reply(draw, policy, actions, legal):
    """One upstream answer for a drawn policy: tool calls (a legal action, half the time; else any
    declared action, `respond`, `ping` or an undeclared name) with well-typed, wrong-typed, missing,
    extra or unparsable arguments; text; or a broken upstream."""
    kind = draw(st.integers(0, 9))
    if kind == 0:
        return {"content": draw(st.sampled_from(["Sure.", "Done, anything else?"]))}
    if kind == 1:
        return {"behaviour": draw(st.sampled_from(FAILURES))}
    anything = st.one_of(calls(actions).map(lambda c: c[1]), GARBAGE)
    names = [*actions, "respond", "ping", UNDECLARED]
    call = a_call(policy, legal if legal and draw(st.booleans()) else names, anything, st.text(max_size=3))
    return {"calls": draw(st.lists(call, min_size=1, max_size=2))}


def _answer(client: OpenAI, messages: list[dict], tools: list[dict] | None, intent: str | None, stream: bool):
    """(status, the tool calls returned, x_zc) of one request; status is the HTTP error's, or 200."""
    extra = {"x_zc": {"intent": intent}} if intent else None
    try:
        if stream:
            chunks = list(client.chat.completions.create(model="m", messages=messages, tools=tools,
                                                         stream=True, extra_body=extra))
            return 200, [t.function for c in chunks for t in c.choices[0].delta.tool_calls or ()], \
                chunks[-1].model_extra["x_zc"]
        r = client.chat.completions.create(model="m", messages=messages, tools=tools, extra_body=extra)
        return 200, [t.function for t in r.choices[0].message.tool_calls or ()], r.model_extra["x_zc"]
    except APIStatusError as exc:
        return exc.status_code, [], exc.body
    except APIError as exc:  # an `error` event after streamed text
        return 502, [], exc.body


COUNTER = itertools.count()


@settings(max_examples=30, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
def test_random_policies_every_returned_call_passes_policy_check(stub, tmp_path_factory, data):
    src, actions = data.draw(policies(served=True))
    with overflow_dropped():
        policy = zcompile.compile_text(src, "random.zc")
    tools = [*openai_tools(policy), {"type": "function", "function": {
        "name": UNDECLARED, "parameters": {"type": "object", "properties": {}}}}]
    receipts = tmp_path_factory.getbasetemp() / f"random-{next(COUNTER)}.jsonl"
    gw = Gateway(policy, stub.base_url, "stub-model", extract=state_in_system_message, receipts=receipts,
                 timeout_ms=10_000)  # no slow upstream here: only a loaded machine nears it
    try:
        with TestClient(create_app(gw)) as http:  # the app in-process; the upstream is the stub
            client = OpenAI(base_url=f"{http.base_url}/v1", api_key="unused", http_client=http, max_retries=0)
            for n in range(1, data.draw(st.integers(1, 3)) + 1):
                state = data.draw(states(actions))
                intent = data.draw(st.sampled_from([None, "focus"]))
                offer = data.draw(st.lists(st.sampled_from(tools), unique_by=lambda t: t["function"]["name"]))
                legal = policy.legal(state, intent).actions
                script = data.draw(st.lists(upstream_reply(policy, actions, legal), min_size=2, max_size=2))
                stream = data.draw(st.booleans())
                stub.reset()
                stub.script = list(script)
                messages = [{"role": "system", "content": json.dumps(state)},
                            {"role": "user", "content": "go"}]
                status, returned, x = _answer(client, messages, offer or None, intent, stream)
                event(f"{status}, rung {x.get('rung') if status == 200 else '-'}, "
                      f"{'a call' if returned else 'no call'}")
                if status != 200:  # only a broken upstream answers an error
                    assert status in (502, 504) and any(r.get("behaviour") in FAILURES
                                                        for r in script), (status, x)
                names = {t["function"]["name"] for t in offer}
                for call in returned:
                    verdict = policy.check(state, call.name, json.loads(call.arguments), intent)
                    assert verdict.allowed, (src, state, intent, call, verdict.reasons)
                    assert call.name in names, (src, state, call.name, names)  # only what the harness offered
                for sent in stub.requests:  # the re-ask repeats the offer of the original request
                    assert {t["function"]["name"] for t in sent.get("tools", ())} <= set(legal) & names, (
                        src, state)
                written = list(read(receipts))
                assert len(written) == n  # exactly one receipt per request, errors included
                assert written[-1].state == json.loads(messages[0]["content"])  # the extractor's state
    finally:
        gw.close()
