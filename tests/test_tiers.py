"""LLM tiers over real HTTP against a local OpenAI-compatible stub: every failure is a non-answer."""

from __future__ import annotations

import json
import re
import threading
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from openai_stub import BEHAVIOURS, FAST_BEHAVIOURS, OpenAIStub, free_port, offered

from zcompile.errors import ZcError
from zcompile.tiers import OpenAITier, Tier, TierAnswer, load_tiers, render_state, tool_names

MODES = ("tools", "json_schema")
LEGAL = ("fs.read", "fs.write", "escalate")
STATE = {"user": {"role": "agent", "verified": True}, "history": ["fs.read"], "ünïcode": "é", "n": 3}

EXPECTED = {  # behaviour -> (outcome, a piece of the detail)
    "correct": ("answered", ""),
    "garbage": ("error", "malformed reply: body is not JSON"),
    "illegal": ("illegal", "proposed `deploy` outside the legal set"),
    "empty": ("abstained", "empty answer"),
    "http_error": ("error", "HTTP 500"),
    "drop": ("error", "connection dropped"),
    "malformed": ("error", 'malformed reply: no "choices"'),
    "refuse": ("abstained", "declined"),
}


@pytest.fixture(scope="module")
def server():
    with OpenAIStub() as s:
        yield s


@pytest.fixture
def stub(server):
    server.reset()
    yield server
    server.reset()


@pytest.fixture(scope="module", params=MODES)
def tier(request, server):
    with OpenAITier(server.base_url, "stub-model", timeout_ms=2000, mode=request.param) as t:
        yield t


def test_tier_satisfies_the_protocol(tier):
    assert isinstance(tier, Tier)
    assert tier.name == "stub-model"


@pytest.mark.parametrize("behaviour", sorted(EXPECTED))
def test_every_behaviour_maps_to_its_outcome(tier, stub, behaviour):
    stub.behaviour = behaviour
    ans = tier.propose(STATE, LEGAL, timeout_s=2.0, intent="read")
    outcome, detail = EXPECTED[behaviour]
    assert isinstance(ans, TierAnswer)
    assert ans.outcome == outcome, ans
    assert detail in ans.detail
    assert (ans.action is not None) == (outcome == "answered")
    if outcome == "answered":
        assert ans.action == "fs.read"
        assert ans.model == "stub-model"
    assert ans.latency_ms > 0


def test_http_error_status_is_named(tier, stub):
    stub.behaviour, stub.status = "http_error", 503
    ans = tier.propose(STATE, LEGAL, timeout_s=2.0)
    assert (ans.outcome, ans.action) == ("error", None)
    assert ans.detail.startswith("HTTP 503")


@pytest.mark.parametrize("mode", MODES)
def test_refused_connection_is_an_error(mode):
    with OpenAITier(f"http://127.0.0.1:{free_port()}/v1", "m", mode=mode) as t:
        ans = t.propose(STATE, LEGAL, timeout_s=1.0)
    assert (ans.outcome, ans.action, ans.detail) == ("error", None, "connection refused")


@pytest.mark.parametrize("mode", MODES)
def test_the_chosen_action_is_returned(mode, stub):
    with OpenAITier(stub.base_url, "m", mode=mode) as t:
        for i, action in enumerate(LEGAL):
            stub.answer = i
            assert t.propose(STATE, LEGAL, timeout_s=2.0).action == action


def test_dotted_names_round_trip_in_tools_mode(stub):
    legal = ("fs.read", "fs_read", "fs-read", "a.b.c", "x" * 70 + ".y", "ok")
    with OpenAITier(stub.base_url, "m", mode="tools") as t:
        for i, action in enumerate(legal):
            stub.answer = i
            ans = t.propose(STATE, legal, timeout_s=2.0)
            assert (ans.outcome, ans.action) == ("answered", action), ans
    names = offered(stub.requests[-1])
    assert len(set(names)) == len(legal)
    assert all(len(n) <= 64 and n.replace("_", "").replace("-", "").isalnum() for n in names)
    assert names[0] == "fs_read_2" and names[1] == "fs_read" and names[-1] == "ok"


def test_tool_names_are_injective_and_valid():
    legal = ("a.b", "a_b", "a-b", "a b", "a/b", "", "é")
    names = tool_names(legal)
    assert len(set(names.values())) == len(legal)
    assert names["a_b"] == "a_b" and names["a-b"] == "a-b"


def test_a_dotted_original_name_from_the_model_is_accepted(stub):
    stub.answer = "fs.write"  # a server that answers the action rather than the tool name
    with OpenAITier(stub.base_url, "m", mode="tools") as t:
        assert t.propose(STATE, LEGAL, timeout_s=2.0).action == "fs.write"


@pytest.mark.parametrize("mode", MODES)
def test_only_legal_actions_are_offered(mode, stub):
    descriptions = {"fs.read": "read a file", "escalate": "hand over to a human", "deploy": "never offered"}
    with OpenAITier(stub.base_url, "m", mode=mode) as t:
        t.propose(STATE, LEGAL, timeout_s=2.0, intent="read", descriptions=descriptions)
    body = stub.requests[-1]
    assert len(offered(body)) == len(LEGAL)
    if mode == "tools":
        assert body["tool_choice"] == "required"
        assert "response_format" not in body
        back = {v: k for k, v in tool_names(LEGAL).items()}
        assert tuple(back[n] for n in offered(body)) == LEGAL
        tools = {tl["function"]["name"]: tl["function"] for tl in body["tools"]}
        assert "read a file" in tools["fs_read"]["description"]
        assert tools["escalate"]["parameters"] == {"type": "object", "properties": {}}
    else:
        assert tuple(offered(body)) == LEGAL
        fmt = body["response_format"]
        assert fmt["type"] == "json_schema" and fmt["json_schema"]["strict"] is True
        assert fmt["json_schema"]["schema"]["required"] == ["action"]
        assert fmt["json_schema"]["schema"]["additionalProperties"] is False
        assert "tools" not in body
    text = json.dumps(body)
    assert "deploy" not in text and "never offered" not in text
    user = body["messages"][1]["content"]
    assert render_state(STATE) in user and "Intent: read" in user and "hand over to a human" in user
    assert body["messages"][0]["role"] == "system" and "exactly one" in body["messages"][0]["content"]
    assert body["model"] == "m" and body["temperature"] == 0.0 and body["max_tokens"] == 64
    assert stub.paths[-1] == "/v1/chat/completions"


def test_state_rendering_is_deterministic(stub):
    a = {"b": 1, "a": {"d": [3, 1], "c": None}, "é": "ü"}
    b = {"é": "ü", "a": {"c": None, "d": [3, 1]}, "b": 1}
    with OpenAITier(stub.base_url, "m") as t:
        t.propose(a, LEGAL, timeout_s=2.0)
        t.propose(b, LEGAL, timeout_s=2.0)
    first, second = stub.requests
    assert first == second
    assert render_state(a) == '{"a": {"c": null, "d": [3, 1]}, "b": 1, "é": "ü"}'
    assert render_state({"s": {"z", "a"}}) == '{"s": ["a", "z"]}'


def test_authorization_header_only_with_api_key_env(stub, monkeypatch):
    with OpenAITier(stub.base_url, "m") as t:
        t.propose(STATE, LEGAL, timeout_s=2.0)
    assert "Authorization" not in stub.headers[-1]
    monkeypatch.setenv("ZC_TEST_KEY", "sekrit")
    with OpenAITier(stub.base_url, "m", api_key_env="ZC_TEST_KEY") as t:
        t.propose(STATE, LEGAL, timeout_s=2.0)
    assert stub.headers[-1]["Authorization"] == "Bearer sekrit"


def test_missing_api_key_env_is_named(monkeypatch):
    monkeypatch.delenv("ZC_NO_SUCH_KEY", raising=False)
    with pytest.raises(ZcError, match="ZC_NO_SUCH_KEY"):
        OpenAITier("http://127.0.0.1:1/v1", "m", api_key_env="ZC_NO_SUCH_KEY")


@pytest.mark.parametrize("kwargs", [{"mode": "grammar"}, {"timeout_ms": 0}])
def test_bad_constructor_arguments(kwargs):
    with pytest.raises(ZcError):
        OpenAITier("http://127.0.0.1:1/v1", "m", **kwargs)


def test_extra_body_and_system_prompt(stub):
    with OpenAITier(stub.base_url, "m", system_prompt="Pick one.", extra_body={"seed": 7, "top_k": 1},
                    temperature=0.2, max_tokens=8) as t:
        assert t.propose(STATE, LEGAL, timeout_s=2.0).outcome == "answered"
    body = stub.requests[-1]
    assert body["messages"][0] == {"role": "system", "content": "Pick one."}
    assert (body["seed"], body["top_k"], body["temperature"], body["max_tokens"]) == (7, 1, 0.2, 8)


@pytest.mark.parametrize("mode", MODES)
def test_slow_server_times_out_within_the_budget(mode, stub):
    stub.behaviour, stub.delay_ms = "slow", 500
    with OpenAITier(stub.base_url, "m", timeout_ms=100, mode=mode) as t:
        t0 = time.perf_counter()
        ans = t.propose(STATE, LEGAL, timeout_s=5.0)
        elapsed = time.perf_counter() - t0
    assert (ans.outcome, ans.action) == ("timeout", None)
    assert "100 ms" in ans.detail
    assert elapsed < 0.3


def test_the_callers_budget_wins_when_smaller(stub):
    stub.behaviour, stub.delay_ms = "slow", 500
    with OpenAITier(stub.base_url, "m", timeout_ms=4000) as t:
        t0 = time.perf_counter()
        ans = t.propose(STATE, LEGAL, timeout_s=0.1)
        assert time.perf_counter() - t0 < 0.3
        assert ans.outcome == "timeout"
        assert t.propose(STATE, LEGAL, timeout_s=0).outcome == "timeout"


def test_slow_but_in_time_answers(stub):
    stub.behaviour, stub.delay_ms = "slow", 50
    with OpenAITier(stub.base_url, "m", timeout_ms=1000) as t:
        ans = t.propose(STATE, LEGAL, timeout_s=5.0)
    assert ans.outcome == "answered" and ans.latency_ms >= 50


# what a loaded machine (the suite on 2 cores) may add past a deadline; a trickle that outlived it would add
# ten seconds or more
SLACK_S = 1.0


@pytest.mark.parametrize("mode", MODES)
def test_a_body_trickled_past_the_deadline_times_out_by_it(mode, stub):
    """The status line and headers come at once, then the body a byte every 50 ms: each read gets a
    byte well within httpx's read timeout, so only the whole-call deadline can end the call."""
    stub.behaviour, stub.delay_ms, stub.trickle_body = "trickle", 50, True
    with OpenAITier(stub.base_url, "m", timeout_ms=300, mode=mode) as t:
        t0 = time.perf_counter()
        ans = t.propose(STATE, LEGAL, timeout_s=10.0)
        elapsed = time.perf_counter() - t0
    assert (ans.outcome, ans.action, ans.detail) == ("timeout", None, "timed out after 300 ms (read)"), ans
    assert elapsed < 0.3 + SLACK_S, elapsed


def test_a_trickled_stream_times_out_by_the_deadline_after_passing_on_what_came(stub):
    """A streamed reply (the gateway's `exchange` with `on_event`) whose events come one every 150 ms:
    the events that arrived in time were handed on as they came, and the call ends by its deadline."""
    stub.behaviour, stub.delay_ms = "trickle", 150
    seen: list = []
    with OpenAITier(stub.base_url, "m") as t:
        body = t.request_body(STATE, LEGAL) | {"stream": True}
        t0 = time.perf_counter()
        outcome, reply, detail = t.exchange(body, t0 + 0.4, seen.append)
        elapsed = time.perf_counter() - t0
    assert (outcome, reply, detail) == ("timeout", None, "timed out after 400 ms (read)")
    assert seen and all(e["object"] == "chat.completion.chunk" for e in seen)
    assert elapsed < 0.4 + SLACK_S, elapsed


def test_connections_are_reused(stub):
    before = stub.connections
    with OpenAITier(stub.base_url, "m") as t:
        answers = [t.propose({"i": i}, LEGAL, timeout_s=2.0) for i in range(50)]
    assert all(a.outcome == "answered" for a in answers)
    assert stub.connections - before == 1
    assert len(stub.requests) == 50


def test_a_dropped_connection_is_replaced(stub):
    before = stub.connections
    with OpenAITier(stub.base_url, "m") as t:
        assert t.propose(STATE, LEGAL, timeout_s=2.0).outcome == "answered"
        stub.behaviour = "drop"
        assert t.propose(STATE, LEGAL, timeout_s=2.0).outcome == "error"
        stub.behaviour = "correct"
        assert t.propose(STATE, LEGAL, timeout_s=2.0).outcome == "answered"
    assert stub.connections - before == 2


def test_concurrent_calls_from_8_threads(stub):
    before = stub.connections
    results: list[TierAnswer] = []
    lock = threading.Lock()
    with OpenAITier(stub.base_url, "m", mode="tools") as t:

        def work(k: int) -> None:
            for i in range(15):
                legal = (f"a.{k}", f"b.{k}", "c")
                ans = t.propose({"thread": k, "i": i}, legal, timeout_s=5.0)
                with lock:
                    results.append(ans)
                assert ans.action == f"a.{k}", ans

        threads = [threading.Thread(target=work, args=(k,)) for k in range(8)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
    assert len(results) == 120 and all(a.outcome == "answered" for a in results)
    assert stub.connections - before <= 8


def test_closed_tier_does_not_raise(stub):
    t = OpenAITier(stub.base_url, "m")
    t.close()
    ans = t.propose(STATE, LEGAL, timeout_s=1.0)
    assert (ans.outcome, ans.action) == ("error", None)


def test_empty_legal_set_abstains_without_a_call(stub):
    with OpenAITier(stub.base_url, "m") as t:
        assert t.propose(STATE, (), timeout_s=1.0).outcome == "abstained"
    assert stub.requests == []


def test_stub_behaviours_are_all_covered():
    assert set(EXPECTED) | {"slow", "trickle"} == set(BEHAVIOURS)  # both tested with timeouts


# --- the property: whatever the server does, no action outside the legal set ----------------------

_atom = st.text("abcdefghijklmnopqrstuvwxyz_", min_size=1, max_size=8)
_name = st.lists(_atom, min_size=1, max_size=3).map(".".join)
_legal = st.lists(_name, min_size=1, max_size=12, unique=True).map(tuple)


@pytest.fixture(scope="module")
def property_tiers(server):
    tiers = {m: OpenAITier(server.base_url, "m", mode=m) for m in MODES}
    yield tiers
    for t in tiers.values():
        t.close()


@settings(max_examples=60, deadline=None)
@given(legal=_legal, behaviour=st.sampled_from(FAST_BEHAVIOURS), mode=st.sampled_from(MODES),
       answer=st.one_of(st.none(), st.integers(0, 11)), illegal=st.one_of(st.none(), _name))
def test_property_never_an_action_outside_the_legal_set(server, property_tiers, legal, behaviour, mode,
                                                        answer, illegal):
    server.reset(behaviour)
    server.answer = answer % len(legal) if answer is not None else None
    server.illegal_action = illegal
    ans = property_tiers[mode].propose({"legal": list(legal)}, legal, timeout_s=2.0)
    assert ans.outcome in {"answered", "abstained", "timeout", "illegal", "error"}
    assert ans.action is None or ans.action in legal
    assert (ans.action is not None) == (ans.outcome == "answered")
    if behaviour == "correct":
        assert ans.action == legal[server.answer or 0]
    if behaviour == "illegal" and (illegal is None or illegal not in legal):
        assert ans.outcome == "illegal"


# --- tiers.toml -----------------------------------------------------------------------------------

VALID = """\
[tiers.small]
base_url = "http://127.0.0.1:8080/v1"
model = "hammer2.1-3b"
timeout_ms = 250
mode = "tools"
temperature = 0
max_tokens = 64

[tiers.large]
base_url = "http://127.0.0.1:11434/v1"
model = "qwen2.5:7b"
mode = "json_schema"
api_key_env = "ZC_TEST_TIER_KEY"
extra_body = { seed = 1 }
"""


def test_load_tiers_valid(tmp_path, monkeypatch):
    monkeypatch.setenv("ZC_TEST_TIER_KEY", "k")
    path = tmp_path / "tiers.toml"
    path.write_text(VALID)
    tiers = load_tiers(path)
    try:
        assert list(tiers) == ["small", "large"]
        small, large = tiers["small"], tiers["large"]
        assert (small.name, small.model, small.timeout_ms, small.mode) == (
            "small", "hammer2.1-3b", 250.0, "tools")
        assert small.url == "http://127.0.0.1:8080/v1/chat/completions"
        assert (large.mode, large.timeout_ms, large.api_key_env, large.extra_body) == (
            "json_schema", 4000.0, "ZC_TEST_TIER_KEY", {"seed": 1})
    finally:
        for t in tiers.values():
            t.close()


def test_load_tiers_talks_to_the_stub(tmp_path, stub):
    path = tmp_path / "tiers.toml"
    path.write_text(f'[tiers.local]\nbase_url = "{stub.base_url}"\nmodel = "m"\nmode = "json_schema"\n')
    tier = load_tiers(path)["local"]
    try:
        assert tier.propose(STATE, LEGAL, timeout_s=1.0).action == "fs.read"
    finally:
        tier.close()


@pytest.mark.parametrize("text, message", [
    ('[tiers.small]\nbase_url = "http://x/v1"\nmodle = "m"\n',
     '[tiers.small] unknown key "modle" (did you mean `model`?)'),
    ('[tiers.small]\nbase_url = "http://x/v1"\n', '[tiers.small] missing key "model"'),
    ('[tiers.small]\nbase_url = "http://x/v1"\nmodel = "m"\ntimeout_ms = "fast"\n',
     '[tiers.small] key "timeout_ms": expected `float`, got `str`'),
    ('[tiers.small]\nbase_url = "http://x/v1"\nmodel = "m"\ntimeout_ms = -1\n',
     '[tiers.small] key "timeout_ms": expected `float` > 0.0'),
    ('[tiers.small]\nbase_url = "http://x/v1"\nmodel = "m"\nmode = "grammar"\n', '[tiers.small] key "mode"'),
    ('[tiers.small]\nbase_url = "http://x/v1"\nmodel = "m"\nmax_tokens = 1.5\n',
     '[tiers.small] key "max_tokens"'),
    ('[tiers.small]\nbase_url = "x/v1"\nmodel = "m"\n', "[tiers.small] base_url must start with http"),
    ('[tiers.small]\nbase_url = "http://x/v1"\nmodel = "m"\napi_key_env = "ZC_UNSET_VAR"\n',
     "[tiers.small] environment variable ZC_UNSET_VAR is not set"),
    ('[tier.small]\nmodel = "m"\n', 'unknown key "tier"'),
    ('tiers = 3\n', '"tiers" must be a table'),
    ("[tiers]\nsmall = 1\n", "[tiers.small] must be a table"),
    ("[tiers.small\n", "not valid TOML"),
    ("[tiers.small]\nextra_body = {x = " + "[" * 5000 + "]" * 5000 + "}\n", "not valid TOML"),
])
def test_load_tiers_invalid(tmp_path, monkeypatch, text, message):
    monkeypatch.delenv("ZC_UNSET_VAR", raising=False)
    path = tmp_path / "tiers.toml"
    path.write_text(text)
    with pytest.raises(ZcError) as err:
        load_tiers(path)
    assert str(err.value).startswith(f"{path}: ")
    assert message in str(err.value)


def test_load_tiers_missing_file(tmp_path):
    with pytest.raises(ZcError, match="cannot read"):
        load_tiers(tmp_path / "nope.toml")


def test_readme_tiers_toml_loads(tmp_path, monkeypatch):
    readme = (Path(__file__).parents[1] / "docs" / "router.md").read_text()  # the tiers.toml the docs show
    block = re.search(r"### tiers\.toml\n\n```toml\n(.*?)```", readme, re.S).group(1)
    monkeypatch.setenv("SMALL_API_KEY", "k")
    path = tmp_path / "tiers.toml"
    path.write_text(block)
    tiers = load_tiers(path)
    try:
        small, large = tiers["small"], tiers["large"]
        assert (small.timeout_ms, small.mode, large.mode) == (250.0, "tools", "json_schema")
    finally:
        for t in tiers.values():
            t.close()


@pytest.mark.parametrize("depth", [201, 5000])
def test_deeply_nested_replies_are_malformed_not_a_crash(stub, depth):
    """Arguments (tools mode) or content (json_schema mode) nested past the bound of every other JSON
    input (200 levels) are a malformed reply: an error outcome, never a RecursionError."""
    deep = '{"a": ' * depth + "1" + "}" * depth
    with OpenAITier(stub.base_url, "stub-model", timeout_ms=2000, mode="tools") as t:
        stub.behaviour, stub.arguments = "correct", deep
        ans = t.propose(STATE, LEGAL, timeout_s=2.0)
        assert (ans.outcome, ans.action) == ("error", None) and "malformed reply" in ans.detail, ans
    stub.reset()
    with OpenAITier(stub.base_url, "stub-model", timeout_ms=2000, mode="json_schema") as t:
        stub.behaviour, stub.content = "correct", '{"action": "fs.read", "x": ' + deep + "}"
        ans = t.propose(STATE, LEGAL, timeout_s=2.0)
        assert ans.action is None and ans.outcome in ("error", "abstained"), ans


@pytest.mark.parametrize("finish, named", [("length", True), ("stop", False)])
def test_a_reply_cut_at_max_tokens_names_the_cut(finish, named):
    """JSON left open by the token cap is malformed, and the detail says the cap cut it (a model writing
    prose inside an argument string until max_tokens is what the real local model does)."""
    from zcompile.tiers.offer import Malformed, Offer, judge

    offer = Offer(LEGAL, None, "json_schema")
    cut = {"choices": [{"message": {"content": '{"action": "fs.read", "arguments": {"path": "}} ``` This'},
                        "finish_reason": finish}]}
    with pytest.raises(Malformed) as exc:
        judge(cut, offer)
    assert ('finish_reason "length"' in str(exc.value)) is named, exc.value
