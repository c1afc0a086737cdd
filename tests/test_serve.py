"""zc serve over real HTTP: the official openai client -> the gateway -> the stub upstream."""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx
import msgspec
import openai
import pytest
from openai import OpenAI
from openai_stub import OpenAIStub

import zcompile
from zcompile.gateway import FALLBACK_TEXT, Gateway, Running
from zcompile.receipts import read
from zcompile.receipts.chat import default_extract

ROOT = Path(__file__).resolve().parents[1]
AIRLINE = ROOT / "policies" / "airline_chat.zc"
DESK = ROOT / "examples" / "gateway" / "desk.zc"
SPECIALIST = ROOT / "specialists" / "airline_chat"
DEADLINE_MS = 600


def tool(name: str, **params: str) -> dict:
    return {"type": "function", "function": {"name": name, "description": f"the {name} tool", "parameters": {
        "type": "object", "properties": {p: {"type": t} for p, t in params.items()},
        "required": list(params)}}}


TOOLS = [tool("get_user_details", user_id="string"), tool("get_reservation_details", reservation_id="string"),
         tool("cancel_reservation", reservation_id="string"), tool("delete_everything", confirm="boolean")]
START = [{"role": "system", "content": "You are an airline agent."},
         {"role": "user", "content": "Hi, I am mia_li_3668; please cancel reservation ABC123."}]


@pytest.fixture(scope="module")
def airline():
    return zcompile.compile_text(AIRLINE.read_text(), str(AIRLINE))


@pytest.fixture(scope="module")
def stub():
    with OpenAIStub() as s:
        yield s


@pytest.fixture(scope="module")
def served(airline, stub, tmp_path_factory):
    receipts = tmp_path_factory.mktemp("serve") / "receipts.jsonl"
    gw = Gateway(airline, stub.base_url, "stub-model", specialists=str(SPECIALIST), receipts=receipts,
                 timeout_ms=DEADLINE_MS)
    with Running(gw) as srv:
        yield srv
    gw.close()


@pytest.fixture
def client(served, stub):
    stub.reset()
    return OpenAI(base_url=served.base_url, api_key="unused", max_retries=0, timeout=10)


def receipts_of(served) -> list:
    return list(read(served.gateway.receipts))


def calls_of(message) -> list[tuple[str, dict]]:
    return [(c.function.name, json.loads(c.function.arguments)) for c in message.tool_calls or ()]


def judged_legal(policy, messages, calls) -> None:
    """Every call the client got passes Policy.check in the state of its conversation."""
    state = default_extract(messages, len(messages), {})
    for name, args in calls:
        verdict = policy.check(state, name, args)
        assert verdict.allowed, (name, args, verdict.reasons)


def test_forwards_a_legal_call_and_offers_only_legal_tools(client, stub, served, airline):
    before = len(receipts_of(served))
    stub.answer, stub.arguments = "get_user_details", {"user_id": "mia_li_3668"}
    raw = client.chat.completions.with_raw_response.create(model="any", messages=START, tools=TOOLS)
    r = raw.parse()
    assert calls_of(r.choices[0].message) == [("get_user_details", {"user_id": "mia_li_3668"})]
    assert r.choices[0].finish_reason == "tool_calls"
    sent = stub.requests[-1]
    assert sent["model"] == "stub-model" and "x_zc" not in sent
    # cancel_reservation is declared but not legal yet; delete_everything is not declared at all
    assert [t["function"]["name"] for t in sent["tools"]] == ["get_user_details", "get_reservation_details"]
    assert sent["messages"] == START
    x = r.model_extra["x_zc"]
    assert x["stripped"] == {"undeclared": ["delete_everything"], "illegal": ["cancel_reservation"]}
    assert x["rung"] == "remote" and x["blocked"] == []
    assert raw.headers["x-zc-stripped"] == "delete_everything,cancel_reservation"
    got = receipts_of(served)
    assert len(got) == before + 1
    last = got[-1]
    assert last.id == x["receipt"] == raw.headers["x-zc-receipt"]
    assert (last.action, last.arguments, last.tier, last.model) == ("get_user_details", {
        "user_id": "mia_li_3668"},
                                                                    "remote", "stub-model")
    assert last.meta["gateway"]["undeclared"] == ["delete_everything"]
    assert last.cost == 100.0  # the policy's `tier remote cost 100`
    specialist = [a for a in last.meta["rungs"] if a["tier"] == "specialist"]
    assert specialist and specialist[0]["outcome"] != "answered"  # asked, and not sure of a call


def test_an_illegal_call_is_reasked_once_then_answered_with_the_fallback(client, stub, served, airline):
    before = len(receipts_of(served))
    stub.behaviour, stub.illegal_action, stub.arguments = "illegal", "cancel_reservation", {
        "reservation_id": "ABC123"}
    raw = client.chat.completions.with_raw_response.create(model="any", messages=START, tools=TOOLS)
    r = raw.parse()
    msg = r.choices[0].message
    assert msg.tool_calls is None and msg.content == FALLBACK_TEXT
    assert len(stub.requests) == 2  # asked, then re-asked once with the reasons
    reask = stub.requests[1]["messages"]
    assert reask[:2] == START and reask[2]["tool_calls"][0]["function"]["name"] == "cancel_reservation"
    assert reask[3]["role"] == "tool" and "confirm_writes" not in reask[3]["content"]  # reasons, in words
    assert "forbidden" in reask[3]["content"] or "must come after" in reask[3]["content"]
    x = r.model_extra["x_zc"]
    assert x["fallback"] is True and len(x["blocked"]) == 2
    assert all(b["action"] == "cancel_reservation" and b["reasons"] for b in x["blocked"])
    blocked_header = json.loads(raw.headers["x-zc-blocked"])
    assert blocked_header[0]["action"] == "cancel_reservation"
    got = receipts_of(served)
    assert len(got) == before + 1
    assert (got[-1].tier, got[-1].action) == ("fallback", "respond")
    assert got[-1].meta["gateway"]["blocked"] == x["blocked"]


def test_bad_arguments_are_blocked_and_the_reask_can_fix_them(client, stub, served, airline):
    stub.script = [{"answer": "get_user_details", "arguments": {"user": "mia"}},  # unknown argument
                   {"answer": "get_user_details", "arguments": {"user_id": "mia_li_3668"}}]
    r = client.chat.completions.create(model="any", messages=START, tools=TOOLS)
    assert calls_of(r.choices[0].message) == [("get_user_details", {"user_id": "mia_li_3668"})]
    assert len(stub.requests) == 2
    x = r.model_extra["x_zc"]
    assert len(x["blocked"]) == 1 and "missing required argument `user_id`" in " ".join(
        x["blocked"][0]["reasons"])


def test_one_illegal_call_among_several_blocks_the_message(client, stub, airline):
    stub.calls = [("get_user_details", {"user_id": "mia_li_3668"}),
                  ("cancel_reservation", {"reservation_id": "X"})]
    r = client.chat.completions.create(model="any", messages=START, tools=TOOLS)
    assert r.choices[0].message.tool_calls is None and r.choices[0].message.content == FALLBACK_TEXT


@pytest.mark.parametrize("stream", [False, True])
def test_a_legal_call_the_harness_did_not_offer_never_reaches_it(client, stub, stream):
    """The harness offered get_user_details only: a legal get_reservation_details from the upstream
    is blocked like an illegal one (re-asked, then the fallback); with `tool_choice: "none"` every
    call is; a harness that offers no tools gets none."""
    offered = [TOOLS[0]]
    for kwargs in ({"tools": offered}, {"tools": offered, "tool_choice": "none"}, {}):
        stub.reset()
        stub.answer, stub.arguments = ("get_reservation_details", {"reservation_id": "ABC123"}) \
            if "tool_choice" not in kwargs else ("get_user_details", {"user_id": "mia_li_3668"})
        got = client.chat.completions.create(model="any", messages=START, stream=stream, **kwargs)
        chunks = list(got) if stream else None
        message = None if stream else got.choices[0].message
        calls = ([t for c in chunks for t in c.choices[0].delta.tool_calls or ()] if stream
                 else message.tool_calls)
        x = (chunks[-1] if stream else got).model_extra["x_zc"]
        assert not calls, kwargs
        assert len(stub.requests) == 2 and x["blocked"] and "not offered" in x["blocked"][0]["reasons"][0], x
        assert x["fallback"] is True
        assert x["offer"] == (["respond"] if kwargs.get("tool_choice") == "none" or not kwargs
                              else ["get_user_details", "respond"])


def test_forced_tool_choice_is_kept_and_bounds_the_answer(client, stub):
    choice = {"type": "function", "function": {"name": "get_user_details"}}
    stub.answer, stub.arguments = "get_reservation_details", {"reservation_id": "ABC123"}
    with pytest.raises(openai.UnprocessableEntityError) as err:  # a forced tool is never answered with text
        client.chat.completions.create(model="any", messages=START, tools=TOOLS, tool_choice=choice)
    assert stub.requests[0]["tool_choice"] == choice
    assert err.value.body["code"] == "no_tool_call" and err.value.response.json()["x_zc"]["blocked"]
    stub.reset()  # forcing a tool that is not legal here: "auto" upstream, any offered legal call
    stub.answer, stub.arguments = "get_user_details", {"user_id": "mia_li_3668"}
    r = client.chat.completions.create(model="any", messages=START, tools=TOOLS, tool_choice={
        "type": "function", "function": {"name": "cancel_reservation"}})
    assert stub.requests[0]["tool_choice"] == "auto"
    assert calls_of(r.choices[0].message) == [("get_user_details", {"user_id": "mia_li_3668"})]


def test_tool_names_any_header_can_carry(client, stub):
    """Stripped tool names travel percent-encoded in `x-zc-stripped` (control characters and
    non-ASCII names included), never as a header the server cannot send."""
    odd = ["get\u0000user", "réserver", "a,b"]
    stub.answer, stub.arguments = "get_user_details", {"user_id": "mia_li_3668"}
    raw = client.chat.completions.with_raw_response.create(model="any", messages=START,
                                                           tools=[TOOLS[0], *(tool(n) for n in odd)])
    assert raw.headers["x-zc-stripped"] == "get%00user,r%C3%A9server,a%2Cb"
    assert raw.parse().model_extra["x_zc"]["stripped"]["undeclared"] == odd


def test_streaming_forwards_a_judged_call(client, stub, airline):
    stub.answer, stub.arguments = "get_reservation_details", {"reservation_id": "ABC123"}
    chunks = list(client.chat.completions.create(model="any", messages=START, tools=TOOLS, stream=True))
    deltas = [c.choices[0].delta for c in chunks]
    calls = [(t.function.name, json.loads(t.function.arguments)) for d in deltas for t in d.tool_calls or ()]
    assert calls == [("get_reservation_details", {"reservation_id": "ABC123"})]
    assert chunks[-1].choices[0].finish_reason == "tool_calls"
    assert chunks[-1].model_extra["x_zc"]["rung"] == "remote"
    assert stub.requests[-1]["stream"] is True  # streamed upstream; the call held until judged whole


def test_streaming_passes_text_through_as_it_arrives(client, stub, served):
    stub.content = "Let me look that up for you; one moment please."
    before = len(receipts_of(served))
    chunks = list(client.chat.completions.create(model="any", messages=START, tools=TOOLS, stream=True))
    texts = [c.choices[0].delta.content for c in chunks if c.choices[0].delta.content]
    assert len(texts) >= 3  # the upstream's own deltas (the stub sends three), not one synthesised piece
    assert "".join(texts) == stub.content
    assert len({c.id for c in chunks}) == 1 and chunks[-1].choices[0].finish_reason == "stop"
    assert chunks[-1].model_extra["x_zc"]["rung"] == "remote"
    assert len(receipts_of(served)) == before + 1 and receipts_of(served)[-1].action == "respond"


def test_a_stream_cut_mid_call_never_delivers_the_call(client, stub, served):
    before = len(receipts_of(served))
    stub.behaviour, stub.answer, stub.arguments = "cut", "get_user_details", {"user_id": "mia_li_3668"}
    with pytest.raises(openai.APIStatusError) as err:  # nothing had reached the harness: a plain 502
        list(client.chat.completions.create(model="any", messages=START, tools=TOOLS, stream=True))
    assert err.value.status_code == 502
    assert len(receipts_of(served)) == before + 1


def test_a_stream_cut_mid_text_ends_with_an_error_event(client, stub, served):
    before = len(receipts_of(served))
    stub.behaviour, stub.content = "cut", "A long answer, cut short by the upstream."
    got = []
    with pytest.raises(openai.APIError), \
            client.chat.completions.create(model="any", messages=START, tools=TOOLS, stream=True) as stream:
        for c in stream:
            got.append(c)
    assert got and not any(c.choices and c.choices[0].delta.tool_calls for c in got)
    assert len(receipts_of(served)) == before + 1


def test_streaming_never_carries_a_blocked_call(client, stub):
    stub.behaviour, stub.illegal_action = "illegal", "cancel_reservation"
    chunks = list(client.chat.completions.create(model="any", messages=START, tools=TOOLS, stream=True))
    assert not any(c.choices[0].delta.tool_calls for c in chunks)
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == FALLBACK_TEXT


@pytest.mark.parametrize("behaviour,status", [("garbage", 502), ("drop", 502), ("http_error", 502),
                                              ("malformed", 502), ("slow", 504), ("trickle", 504)])
def test_upstream_failures_are_clear_errors_with_one_receipt(client, stub, served, behaviour, status):
    before = len(receipts_of(served))
    stub.behaviour, stub.delay_ms = behaviour, 2000.0
    started = time.perf_counter()
    with pytest.raises(openai.APIStatusError) as err:
        client.chat.completions.create(model="any", messages=START, tools=TOOLS)
    elapsed = time.perf_counter() - started
    assert err.value.status_code == status
    body = err.value.response.json()
    assert body["error"]["code"] == ("upstream_timeout" if status == 504 else "upstream_error")
    assert body["x_zc"]["receipt"]
    assert elapsed < DEADLINE_MS / 1000 + 1.0  # the deadline holds (the stub would take 2 s or more)
    got = receipts_of(served)
    assert len(got) == before + 1 and got[-1].meta["gateway"]["failure"] in ("timeout", "error")


def test_a_text_reply_passes_and_its_receipt_says_respond(client, stub, served):
    stub.content = "Could you confirm the reservation id?"
    r = client.chat.completions.create(model="any", messages=START, tools=TOOLS)
    assert r.choices[0].message.content == "Could you confirm the reservation id?"
    assert receipts_of(served)[-1].action == "respond"


def test_models_health_and_http_errors(served):
    base = served.base_url.removesuffix("/v1")
    with httpx.Client(base_url=base, timeout=5) as h:
        models = h.get("/v1/models").json()
        assert [m["id"] for m in models["data"]] == ["stub-model"]
        health = h.get("/healthz").json()
        assert health["status"] == "ok" and health["policy"] == "airline_chat"
        assert health["specialists"] == ["airline_chat"]
        for body, status, where in [(b"{nope", 400, "not JSON"), (b"[]", 400, "$: expected a JSON object"),
                                    (b'{"messages": []}', 400, "$.messages"),
                                    (b'{"messages": [{"role": "robot"}]}', 400, "$.messages[0].role"),
                                    (b'{"messages": [{"role": "user", "content": "x"}], "tools": [{"x": 1}]}',
                                     400, "$.tools[0]"),
                                    (b'{"messages": [{"role": "user", "content": "x"}], "n": 2}', 400, "$.n"),
                                    (b'{"messages": [{"role": "user", "content": "x"}], "tool_choice": 5}',
                                     400, "$.tool_choice")]:
            r = h.post("/v1/chat/completions", content=body, headers={"content-type": "application/json"})
            assert r.status_code == status, body
            assert where in r.json()["error"]["message"]
        big = (b'{"messages": [{"role": "user", "content": "' + b"x" * (served.gateway.max_body_bytes + 1)
               + b'"}]}')
        r = h.post("/v1/chat/completions", content=big)
        assert r.status_code == 413 and r.json()["error"]["code"] == "body_too_large"
        assert h.get("/v1/nothing").status_code == 404
        assert h.get("/v1/chat/completions").json()["error"]["code"] == "method_not_allowed"


def test_a_state_the_policy_refuses_is_422(client, stub):
    messages = [*START, {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "delete_everything", "arguments": "{}"}}]},
                {"role": "tool", "tool_call_id": "c1", "content": "ok"}]
    with pytest.raises(openai.APIStatusError) as err:
        client.chat.completions.create(model="any", messages=messages, tools=TOOLS)
    assert err.value.status_code == 422
    assert "$.last.tool" in err.value.response.json()["error"]["message"]
    assert stub.requests == []


# ---- the local path: the compiler answers a complete call, the upstream is not asked -------------
@pytest.fixture(scope="module")
def desk(stub, tmp_path_factory):
    policy = zcompile.compile_text(DESK.read_text(), str(DESK))
    gw = Gateway(policy, stub.base_url, "stub-model", receipts=tmp_path_factory.mktemp("desk") / "r.jsonl",
                 timeout_ms=DEADLINE_MS)
    with Running(gw) as srv:
        yield srv
    gw.close()


DESK_TOOLS = [tool("list_all_airports"), tool("get_user_details", user_id="string")]


@pytest.mark.parametrize("stream", [False, True])
def test_the_compiler_answers_a_lookup_locally(desk, stub, stream):
    stub.reset()
    client = OpenAI(base_url=desk.base_url, api_key="unused", max_retries=0)
    if stream:
        chunks = list(client.chat.completions.create(model="any", messages=START, tools=DESK_TOOLS,
                                                     stream=True))
        calls = [t for c in chunks for t in c.choices[0].delta.tool_calls or ()]
        x = chunks[-1].model_extra["x_zc"]
    else:
        r = client.chat.completions.create(model="any", messages=START, tools=DESK_TOOLS)
        calls, x = r.choices[0].message.tool_calls, r.model_extra["x_zc"]
    assert [(c.function.name, json.loads(c.function.arguments)) for c in calls] == [("list_all_airports", {})]
    assert x["rung"] == "compiler" and x["upstream_requests"] == 0
    assert stub.requests == []
    assert list(read(desk.gateway.receipts))[-1].tier == "compiler"


def test_receipts_reimport_bit_for_bit(client, stub, served, airline, tmp_path):
    """Each request's receipt equals, field for field (bytes), what `zc receipts import --format
    chat` makes of the conversation it belongs to."""
    from zcompile.receipts import import_chat

    convo = list(START)
    stub.script = [{"answer": "get_user_details", "arguments": {"user_id": "mia_li_3668"}},
                   {"content": "I found your profile. Which reservation?"},
                   {"answer": "get_reservation_details", "arguments": {"reservation_id": "ABC123"}}]
    ids = []
    for follow in ({"role": "tool", "tool_call_id": "call_0",
                    "content": '{"name": "Mia", "reservations": ["ABC123"]}'},
                   {"role": "user", "content": "ABC123 please"}, None):
        r = client.chat.completions.create(model="any", messages=convo, tools=TOOLS)
        ids.append(r.model_extra["x_zc"]["receipt"])
        convo.append(r.choices[0].message.model_dump(exclude_none=True, exclude={"annotations", "refusal"}))
        if follow is not None:
            convo.append(follow)
    log = tmp_path / "chat.jsonl"
    log.write_text(json.dumps({"id": "c", "messages": convo}) + "\n")
    imported = list(import_chat(log, policy=airline))
    served_by_id = {r.id: r for r in receipts_of(served)}
    fields = ("state", "legal", "policy", "action", "arguments", "candidates")
    assert len(imported) == len(ids) == 3
    for rid, want in zip(ids, imported):
        got = served_by_id[rid]
        for f in fields:
            assert msgspec.json.encode(getattr(got, f)) == msgspec.json.encode(getattr(want, f)), f
        assert got.meta["turn"] == want.meta["turn"] and got.meta["extractor"] == want.meta["extractor"]


def test_concurrent_requests_each_get_their_own_decision_and_receipt(client, stub, served):
    from concurrent.futures import ThreadPoolExecutor

    before = len(receipts_of(served))
    stub.behaviour, stub.delay_ms, stub.answer = "slow", 150.0, "get_user_details"
    users = [f"user_{i}_1000" for i in range(8)]

    def ask(i: int):
        messages = [START[0], {"role": "user", "content": f"I am {users[i]}."}]
        return client.chat.completions.create(model="any", messages=messages, tools=TOOLS,
                                              extra_body={"x_zc": {"task": f"t{i}"}})

    stub.arguments = None  # the stub answers without arguments: every call is refused and re-asked
    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(ask, range(8)))
    got = {r.id: r for r in receipts_of(served)[before:]}
    assert len(got) == 8
    assert len(stub.requests) == 16  # each asked, and re-asked once
    for i, r in enumerate(results):
        x = r.model_extra["x_zc"]
        assert got[x["receipt"]].task == f"t{i}"  # each receipt is its own request's
        assert r.choices[0].message.tool_calls is None  # missing user_id: refused twice, the fallback
        assert [b["action"] for b in x["blocked"]] == ["get_user_details"] * 2


def desk_extract(messages, index, conversation):
    """A harness's own extractor: the desk's state from the number of user messages alone."""
    users = sum(1 for m in messages[:index] if m.get("role") == "user")
    return {"prev": {"role": messages[index - 1]["role"]}, "user_turns": users,
            "history": ["list_all_airports"]}


def test_a_harness_extractor_decides_the_state_as_the_importer_would(stub, tmp_path):
    from zcompile.receipts import import_chat

    policy = zcompile.compile_text(DESK.read_text(), str(DESK))
    gw = Gateway(policy, stub.base_url, "stub-model", extract=desk_extract, receipts=tmp_path / "r.jsonl")
    stub.reset()
    stub.answer, stub.arguments = "get_user_details", {"user_id": "mia_li_3668"}
    with Running(gw) as srv:
        r = OpenAI(base_url=srv.base_url, api_key="unused", max_retries=0).chat.completions.create(
            model="any", messages=START, tools=DESK_TOOLS)
    gw.close()
    assert r.model_extra["x_zc"]["rung"] == "remote"  # this state has list_all_airports in history already
    got = list(read(tmp_path / "r.jsonl"))[-1]
    assert got.state == desk_extract(START, 2, {}) and got.meta["extractor"].endswith(":desk_extract")
    log = tmp_path / "chat.jsonl"
    convo = [*START, r.choices[0].message.model_dump(exclude_none=True, exclude={"annotations", "refusal"})]
    log.write_text(json.dumps({"id": "c", "messages": convo}) + "\n")
    want = list(import_chat(log, extract=desk_extract, policy=policy))[-1]
    assert msgspec.json.encode(got.state) == msgspec.json.encode(want.state)
    assert got.meta["extractor"] == want.meta["extractor"] and got.legal == want.legal


def test_a_developer_message_is_a_system_message(client, stub, served, airline, tmp_path):
    """Newer clients send instructions as `developer`: the state reads it as `system` (the policy's
    enum), the upstream gets it as it was sent, and the import of the same log agrees."""
    from zcompile.receipts import import_chat

    messages = [{"role": "developer", "content": "You are an airline agent."}]
    stub.content = "Hello! How can I help?"
    raw = client.chat.completions.with_raw_response.create(model="any", messages=messages, tools=TOOLS)
    assert raw.parse().choices[0].message.content == "Hello! How can I help?"
    assert stub.requests[-1]["messages"] == messages
    got = {r.id: r for r in receipts_of(served)}[raw.headers["x-zc-receipt"]]
    assert got.state["prev"] == {"role": "system"}
    assert got.state == default_extract([{"role": "system", "content": "x"}], 1, {})
    log = tmp_path / "chat.jsonl"
    log.write_text(json.dumps({"id": "c", "messages": [*messages,
                                                       {"role": "assistant", "content": "Hello!"}]}) + "\n")
    (imported,) = import_chat(log, policy=airline)
    assert msgspec.json.encode(imported.state) == msgspec.json.encode(got.state)


def test_time_queued_for_a_worker_counts_against_the_deadline(airline, stub, tmp_path):
    """One worker, a slow upstream, six requests at once: each is answered (200) or refused (504)
    within its deadline from arrival (plus scheduling slack), never later, and each leaves exactly
    one receipt, named in its response."""
    from concurrent.futures import ThreadPoolExecutor

    stub.reset()
    # 600 ms an answer, one at a time: were the time queued not counted, the sixth would answer at 3.6 s
    stub.behaviour, stub.delay_ms, stub.answer, stub.arguments = "slow", 600.0, "get_user_details", {
        "user_id": "mia_li_3668"}
    timeout_ms = 800
    gw = Gateway(airline, stub.base_url, "stub-model", receipts=tmp_path / "r.jsonl", timeout_ms=timeout_ms,
                 workers=1)

    def ask(i: int):
        t = time.perf_counter()
        r = httpx.post(f"{srv.base_url}/chat/completions", timeout=10, json={
            "model": "m", "tools": TOOLS, "messages": [START[0],
                                                       {"role": "user", "content": f"I am user_{i}_1000."}]})
        return r.status_code, time.perf_counter() - t, r.json()

    with Running(gw) as srv, ThreadPoolExecutor(6) as pool:
        got = list(pool.map(ask, range(6)))
    gw.close()
    statuses = sorted(s for s, _, _ in got)
    assert set(statuses) <= {200, 504} and statuses[0] == 200 and statuses[-1] == 504, statuses
    # 1 s of slack: six client threads, the server and its worker share one interpreter, and the
    # suite's other workers its 2 cores (0.5 s was exceeded once under `make test`)
    assert max(dt for _, dt, _ in got) < timeout_ms / 1000 + 1.0, [round(dt, 3) for _, dt, _ in got]
    for _, _, body in got:
        assert body["x_zc"]["receipt"], body  # every response names its receipt
    assert len(list(read(tmp_path / "r.jsonl"))) == 6


def test_a_decision_still_queued_at_the_504_leaves_a_receipt_that_answers_nothing(airline, stub, tmp_path):
    """A stuck worker (an extractor taking 1.5 s against a 300 ms deadline): both requests are
    answered 504; each decision still runs when a worker frees, and writes one receipt that answers
    nothing and offers nothing, so the log agrees with what the harness got."""
    from concurrent.futures import ThreadPoolExecutor

    def slow_extract(messages, index, conversation):
        time.sleep(1.5)
        return default_extract(messages, index, conversation)

    stub.reset()
    gw = Gateway(airline, stub.base_url, "stub-model", extract=slow_extract, receipts=tmp_path / "r.jsonl",
                 timeout_ms=300, workers=1)
    with Running(gw) as srv, ThreadPoolExecutor(2) as pool:
        got = list(pool.map(lambda _: httpx.post(f"{srv.base_url}/chat/completions", timeout=10, json={
            "model": "m", "tools": TOOLS, "messages": START}), range(2)))
    gw.close()  # waits for the queued decision
    assert [r.status_code for r in got] == [504, 504]
    written = list(read(tmp_path / "r.jsonl"))
    assert len(written) == 2 and stub.requests == []
    assert all(r.tier == "none" and r.action is None and r.meta["offer"] == [] for r in written)


def test_compressed_request_bodies(client, stub, served):
    """gzip and deflate bodies are inflated (to the body limit: a bomb is 413); a body that is not
    what its Content-Encoding says is 400; other encodings are 415."""
    import gzip
    import zlib

    stub.answer, stub.arguments = "get_user_details", {"user_id": "mia_li_3668"}
    body = json.dumps({"model": "m", "messages": START, "tools": TOOLS}).encode()
    url = f"{served.base_url}/chat/completions"
    for encoding, data in (("gzip", gzip.compress(body)), ("deflate", zlib.compress(body))):
        r = httpx.post(url, content=data, headers={"content-encoding": encoding,
                                                   "content-type": "application/json"})
        assert r.status_code == 200 and r.json()["choices"][0]["message"]["tool_calls"], r.text
    bomb = gzip.compress(b'{"messages": "' + b" " * (served.gateway.max_body_bytes * 4) + b'"}')
    assert len(bomb) < served.gateway.max_body_bytes // 100
    for data, encoding, status in ((bomb, "gzip", 413), (body, "gzip", 400),
                                   (gzip.compress(body)[:-9], "gzip", 400), (body, "br", 415)):
        r = httpx.post(url, content=data, headers={"content-encoding": encoding})
        assert r.status_code == status, (encoding, r.text)
        assert r.json()["error"]["message"]


def test_the_gateway_derives_the_importers_state_facts(client, stub, served, tmp_path):
    """Extractor v3's facts (`unused.*`, `calls_since_user`) beside the older ones: the state `zc serve`
    writes for a request is the state `zc receipts import` writes for the same assistant message."""
    from zcompile.receipts.chat import import_chat

    call = lambda name, args: {"role": "assistant", "content": None, "tool_calls": [  # noqa: E731
        {"id": "c", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}]}
    messages = [*START, call("get_user_details", {"user_id": "mia_li_3668"}),
                {"role": "tool", "content": '{"reservations": ["ABC123"]}', "tool_call_id": "c"},
                call("get_reservation_details", {"reservation_id": "XYZ999"}),
                {"role": "tool", "content": '{"error": "not found"}', "tool_call_id": "c"},
                {"role": "assistant", "content": "Which one?"}]
    log = tmp_path / "chat.jsonl"
    log.write_text(json.dumps({"id": "conv", "task": "t", "messages": messages}) + "\n")
    imported = {r.meta["turn"]: r.state for r in import_chat(log)}
    assert imported[4]["unused"]["reservation_id"] is True and imported[4]["unused"]["user_id"] is False
    assert imported[4]["calls_since_user"] == 1 and imported[6]["calls_since_user"] == 2
    stub.answer = "respond"
    for turn, want in sorted(imported.items()):
        before = len(receipts_of(served))
        client.chat.completions.create(model="any", messages=messages[:turn], tools=TOOLS)
        got = receipts_of(served)
        assert len(got) == before + 1 and got[-1].state == want, turn


USAGE = {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10}  # the stub's, per reply
ZERO = {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}


def usage_of(u) -> dict:
    return {k: getattr(u, k) for k in ZERO}


@pytest.mark.parametrize("include", [True, False])
def test_a_stream_ends_with_the_upstreams_usage_when_asked(client, stub, served, include):
    stub.content = "Let me look that up for you."
    chunks = list(client.chat.completions.create(model="any", messages=START, tools=TOOLS, stream=True,
                                                 stream_options={"include_usage": include}))
    # forwarded, and the usage asked for whatever the harness said: the receipt counts the tokens
    assert stub.requests[-1]["stream_options"] == {"include_usage": True}
    with_usage = [c for c in chunks if c.usage is not None]
    if include:  # one last chunk, no choice, the usage (as OpenAI sends it)
        assert with_usage == [chunks[-1]] and chunks[-1].choices == [] and usage_of(chunks[-1].usage) == USAGE
    else:
        assert with_usage == []
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == stub.content
    assert receipts_of(served)[-1].meta["gateway"]["usage"] == USAGE


def test_usage_sums_the_reask_and_a_local_answer_has_zero(client, stub, desk):
    stub.script = [{"answer": "get_user_details", "arguments": {"user": "mia"}},  # refused, re-asked
                   {"answer": "get_user_details", "arguments": {"user_id": "mia_li_3668"}}]
    r = client.chat.completions.create(model="any", messages=START, tools=TOOLS)
    assert r.model_extra["x_zc"]["upstream_requests"] == 2
    assert usage_of(r.usage) == {k: 2 * v for k, v in USAGE.items()}
    local = OpenAI(base_url=desk.base_url, api_key="unused", max_retries=0)
    r = local.chat.completions.create(model="any", messages=START, tools=DESK_TOOLS)
    assert r.model_extra["x_zc"]["rung"] == "compiler" and usage_of(r.usage) == ZERO
    chunks = list(local.chat.completions.create(model="any", messages=START, tools=DESK_TOOLS, stream=True,
                                                stream_options={"include_usage": True}))
    assert chunks[-1].choices == [] and usage_of(chunks[-1].usage) == ZERO


@pytest.mark.parametrize("stream", [False, True])
def test_required_tool_choice_never_gets_text(client, stub, served, stream):
    """The upstream answers text to `tool_choice: "required"`; the fallback (`respond`) is no tool:
    an OpenAI error the client raises, never text."""
    stub.content = "I would rather chat."
    before = len(receipts_of(served))
    with pytest.raises(openai.UnprocessableEntityError) as err:
        out = client.chat.completions.create(model="any", messages=START, tools=TOOLS, tool_choice="required",
                                             stream=stream)
        list(out) if stream else out
    body = err.value.body
    assert body["code"] == "no_tool_call" and err.value.response.headers["x-zc-rung"] == "fallback"
    assert err.value.response.json()["x_zc"]["rung"] == "fallback"
    assert len(stub.requests) == 2  # asked, re-asked (a text reply is not what the harness can take)
    assert len(receipts_of(served)) == before + 1


ESCALATING = """policy escalating
state { prev.role: enum(system, user, assistant, tool)? }
action lookup(id: text) tags(read)
action escalate()       tags(control)
action respond          tags(control, reply)
fallback escalate
tier remote
route default: use remote
"""


def test_required_tool_choice_gets_the_fallback_tool_as_a_call(stub, tmp_path):
    policy = zcompile.compile_text(ESCALATING, "escalating.zc")
    gw = Gateway(policy, stub.base_url, "stub-model", receipts=tmp_path / "r.jsonl", timeout_ms=DEADLINE_MS)
    stub.reset()
    stub.content = "Just text."
    with Running(gw) as srv:
        client = OpenAI(base_url=srv.base_url, api_key="unused", max_retries=0)
        r = client.chat.completions.create(model="any", messages=START, tool_choice="required",
                                           tools=[tool("lookup", id="string"), tool("escalate")])
    gw.close()
    assert calls_of(r.choices[0].message) == [("escalate", {})] and r.choices[0].finish_reason == "tool_calls"
    assert r.model_extra["x_zc"]["rung"] == "fallback" and r.choices[0].message.content is None


KEYS = {"team-a": "sk-zc-team-a-0123456789", "team-b": "sk-zc-team-b-9876543210"}


def test_client_keys_401_as_openai_error_and_the_key_name_in_the_receipt(airline, stub, tmp_path,
                                                                         monkeypatch):
    monkeypatch.setenv("ZC_TEST_UPSTREAM_KEY", "sk-upstream-secret-000")
    gw = Gateway(airline, stub.base_url, "stub-model", receipts=tmp_path / "r.jsonl", timeout_ms=DEADLINE_MS,
                 api_key_env="ZC_TEST_UPSTREAM_KEY", client_keys=KEYS)
    stub.reset()
    stub.answer, stub.arguments = "get_user_details", {"user_id": "mia_li_3668"}
    with Running(gw) as srv:
        none = httpx.post(f"{srv.base_url}/chat/completions", json={"model": "m", "messages": START})
        assert none.status_code == 401 and none.json()["error"]["code"] == "invalid_api_key"
        assert none.headers["www-authenticate"] == "Bearer"
        for key in ("sk-wrong-key-0000000000", "sk-upstream-secret-000"):
            bad = OpenAI(base_url=srv.base_url, api_key=key, max_retries=0)
            with pytest.raises(openai.AuthenticationError) as err:
                bad.chat.completions.create(model="any", messages=START, tools=TOOLS)
            assert err.value.body["code"] == "invalid_api_key"
            assert "sk-upstream-secret" not in err.value.response.text
            with pytest.raises(openai.AuthenticationError):
                bad.models.list()
        assert stub.requests == []  # nothing reached the upstream
        good = OpenAI(base_url=srv.base_url, api_key=KEYS["team-b"], max_retries=0)
        r = good.chat.completions.create(model="any", messages=START, tools=TOOLS)
        assert calls_of(r.choices[0].message) == [("get_user_details", {"user_id": "mia_li_3668"})]
        assert [m.id for m in good.models.list()] == ["stub-model"]
    gw.close()
    # the upstream got its own key, never the client's
    assert stub.headers[-1]["Authorization"] == "Bearer sk-upstream-secret-000"
    rs = list(read(tmp_path / "r.jsonl"))
    assert [r.meta["gateway"]["client"] for r in rs] == ["team-b"]
    assert "sk-zc-team-b" not in (tmp_path / "r.jsonl").read_text()


def test_client_keys_from_a_file_and_the_environment(tmp_path, monkeypatch):
    from zcompile.errors import ZcError
    from zcompile.gateway import load_client_keys

    f = tmp_path / "keys.txt"
    f.write_text("# name key\nteam-a sk-zc-team-a-0123456789\n\n")
    monkeypatch.setenv("ZC_TEST_CLIENT_KEY", "sk-zc-from-the-env-12345")
    assert load_client_keys(str(f), ["ZC_TEST_CLIENT_KEY"]) == {
        "team-a": "sk-zc-team-a-0123456789", "ZC_TEST_CLIENT_KEY": "sk-zc-from-the-env-12345"}
    f.write_text("team-a sk-zc-team-a-0123456789\nteam-b\n")
    with pytest.raises(ZcError, match=r"keys.txt:2: expected `NAME KEY`"):
        load_client_keys(str(f))
    f.write_text("team-a short\n")
    with pytest.raises(ZcError, match=r"keys.txt:1: the key of `team-a` is shorter than 16"):
        load_client_keys(str(f))


def test_serve_refuses_a_network_address_without_client_keys(tmp_path):
    from click.testing import CliRunner

    from zcompile.cli import main

    args = ["serve", "--policy", str(DESK), "--upstream", "http://127.0.0.1:9/v1", "--model", "m",
            "--receipts", str(tmp_path / "r.jsonl"), "--host", "0.0.0.0"]
    out = CliRunner().invoke(main, args)
    assert out.exit_code == 1 and "not a loopback address, and no client keys" in out.output
    assert "Traceback" not in out.output


def test_readiness_and_prometheus_metrics(client, stub, served):
    from prometheus_client.parser import text_string_to_metric_families

    def samples() -> dict[tuple, float]:
        text = httpx.get(served.origin + "/metrics").text
        return {(s.name, tuple(sorted(s.labels.items()))): s.value
                for f in text_string_to_metric_families(text) for s in f.samples}

    ready = httpx.get(served.origin + "/readyz")
    assert ready.status_code == 200 and ready.json()["ready"] is True
    before = samples()
    stub.behaviour, stub.illegal_action = "illegal", "cancel_reservation"
    stub.arguments = {"reservation_id": "X"}
    client.chat.completions.create(model="any", messages=START, tools=TOOLS)  # refused twice: the fallback
    stub.reset()
    stub.behaviour = "http_error"
    with pytest.raises(openai.APIStatusError):
        client.chat.completions.create(model="any", messages=START, tools=TOOLS)
    after = samples()

    def grew(name: str, **labels: str) -> float:
        key = (name, tuple(sorted({"door": "serve", **labels}.items())))
        return after.get(key, 0) - before.get(key, 0)
    assert grew("zc_requests_total", status="200") == 1 and grew("zc_requests_total", status="502") == 1
    assert grew("zc_answers_total", rung="fallback") == 2
    rules = {dict(ls)["rule"] for (n, ls), v in after.items()
             if n == "zc_blocked_calls_total" and v > before.get((n, ls), 0)}
    blocked = receipts_of(served)[-2].meta["gateway"]["blocked"]  # the two refused calls, each by its rules
    assert rules == {r for b in blocked for r in b["rules"]}
    assert all(grew("zc_blocked_calls_total", rule=r) == sum(r in b["rules"] for b in blocked) for r in rules)
    assert grew("zc_upstream_errors_total", kind="error") == 1
    assert grew("zc_upstream_seconds_count") == 3 and grew("zc_request_seconds_count") == 2
    assert grew("zc_receipts_written_total") == 2
