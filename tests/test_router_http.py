"""The router over real HTTP: a local OpenAI-compatible stub in every behaviour, random legal sets; the
deadline against trickling servers, kept connections, every failure an abstention with its cause."""

from __future__ import annotations

import asyncio
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from openai_stub import FAST_BEHAVIOURS, OpenAIStub, free_port

import zcompile
from zcompile.router import Router
from zcompile.tiers import OpenAITier

ACTIONS = ["fs.read", "fs.write", "fetch", "json.extract", "deploy", "ask_user", "stop", "escalate"]
STATE = "state {\n  allowed: set[action] = {}\n  mode: enum(normal, fault) = normal\n}\n"
POLICY = "policy open\n" + STATE + "".join(f"action {a} tags(t)\n" for a in ACTIONS) + """
fallback escalate
rule allowed_only: * requires self in allowed
tier specialist max_ms 5
tier small max_ms 300 cost 1
tier large max_ms 1000 cost 10
route default: use small, large
"""


@pytest.fixture(scope="module")
def policy():
    return zcompile.compile_text(POLICY, "open.zc")


@pytest.fixture(scope="module")
def servers():
    with OpenAIStub() as small, OpenAIStub() as large:
        yield small, large


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(allowed=st.lists(st.sampled_from(ACTIONS), min_size=0, max_size=8, unique=True),
       b1=st.sampled_from(FAST_BEHAVIOURS), b2=st.sampled_from(FAST_BEHAVIOURS),
       mode=st.sampled_from(["tools", "json_schema"]))
def test_illegal_proposals_are_never_returned(policy, servers, allowed, b1, b2, mode):
    small, large = servers
    small.reset(b1)
    large.reset(b2)
    tiers = {"small": zcompile.OpenAITier(small.base_url, "s", timeout_ms=300, mode=mode),
             "large": zcompile.OpenAITier(large.base_url, "l", timeout_ms=300, mode=mode)}
    d = Router(policy, tiers=tiers).decide({"allowed": allowed})
    legal = d.legal.actions
    assert d.action is None or d.action in legal
    if d.tier in ("small", "large"):
        assert {"small": b1, "large": b2}[d.tier] == "correct"
    for rung in d.rungs:
        assert rung.action is None or rung.action in legal
    if len(legal) > 1 and "correct" not in (b1, b2):
        assert d.tier in ("fallback", "none")
    for t in tiers.values():
        t.close()


def test_slow_tier_abandoned_next_rung_answers(policy):
    with OpenAIStub("slow") as small, OpenAIStub("correct") as large:
        small.delay_ms = 2000
        tiers = {"small": zcompile.OpenAITier(small.base_url, "s", timeout_ms=5000),
                 "large": zcompile.OpenAITier(large.base_url, "l")}
        started = time.perf_counter()
        d = Router(policy, tiers=tiers).decide({"allowed": ["fs.read", "stop", "escalate"]})
        took = time.perf_counter() - started
        for t in tiers.values():
            t.close()
    assert d.rungs[0].outcome == "timeout" and d.tier == "large" and d.action == "fs.read"
    assert took < 1.2  # the policy gives `small` 300 ms


def test_overall_deadline_over_http(policy):
    with OpenAIStub("slow") as small:
        small.delay_ms = 2000
        tiers = {"small": zcompile.OpenAITier(small.base_url, "s"),
                 "large": zcompile.OpenAITier(small.base_url, "l")}
        started = time.perf_counter()
        d = Router(policy, tiers=tiers, deadline_ms=150).decide({"allowed": ["fs.read", "stop", "escalate"]})
        took = time.perf_counter() - started
        for t in tiers.values():
            t.close()
    assert took < 0.6 and d.tier == "fallback" and d.action == "escalate"
    assert [r.outcome for r in d.rungs] == ["timeout", "skipped"]


@pytest.mark.parametrize("deadline_ms", [300, 600])
@pytest.mark.parametrize("trickle_body", [False, True], ids=["head", "body"])
def test_deadline_bounds_the_whole_call_against_a_trickling_server(policy, deadline_ms, trickle_body):
    # the server sends its status line and headers (or, with `trickle_body`, the headers at once and
    # then its body) one byte every 100 ms: per-read timeouts never fire
    with OpenAIStub("trickle") as small:
        small.delay_ms, small.trickle_body = 100, trickle_body
        tier = zcompile.OpenAITier(small.base_url, "s", timeout_ms=30_000)
        started = time.perf_counter()
        d = Router(policy, tiers={"small": tier}, deadline_ms=deadline_ms).decide(
            {"allowed": ["fs.read", "stop", "escalate"]})
        took = (time.perf_counter() - started) * 1000
        tier.close()
    assert d.rungs[0].outcome == "timeout" and d.tier == "fallback"
    assert took < deadline_ms + 50, f"{took:.0f} ms against a {deadline_ms} ms deadline"


def test_tier_budget_bounds_the_whole_call(policy):
    with OpenAIStub("trickle") as stub:
        stub.delay_ms = 20
        tier = zcompile.OpenAITier(stub.base_url, "s", timeout_ms=250)
        started = time.perf_counter()
        ans = tier.propose({"allowed": []}, ("fs.read", "stop"), timeout_s=10.0)
        took = (time.perf_counter() - started) * 1000
        tier.close()
    assert ans.outcome == "timeout" and took < 300, (ans, took)


def test_deadline_bounds_a_server_that_never_accepts(policy):
    """A listening socket whose accept queue is full: the connect (or, if the kernel completes it, the
    wait for a reply nobody sends) ends by the deadline."""
    import socket

    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(0)
    port = srv.getsockname()[1]
    fill = []
    for _ in range(3):
        c = socket.socket()
        c.setblocking(False)
        c.connect_ex(("127.0.0.1", port))
        fill.append(c)
    try:
        tier = zcompile.OpenAITier(f"http://127.0.0.1:{port}/v1", "s", timeout_ms=30_000)
        started = time.perf_counter()
        d = Router(policy, tiers={"small": tier}, deadline_ms=400).decide({"allowed": [
            "fs.read", "stop", "escalate"]})
        took = (time.perf_counter() - started) * 1000
        tier.close()
    finally:
        for c in (*fill, srv):
            c.close()
    assert d.rungs[0].outcome == "timeout" and took < 450, (d.rungs, took)


ALLOWED = {"allowed": ["fs.read", "stop", "escalate"]}
# what a loaded machine (the suite on 2 cores) may add past a deadline; a trickle that outlived it would add
# ten seconds or more
SLACK_S = 1.0


@pytest.fixture
def stub(servers):
    small, _ = servers
    small.reset()
    yield small
    small.reset()


def test_connections_are_kept_across_decisions(policy, stub):
    before = stub.connections
    with OpenAITier(stub.base_url, "m") as t:
        router = Router(policy, tiers={"small": t})
        decisions = [router.decide(ALLOWED) for _ in range(30)]
    assert all((d.tier, d.action) == ("small", "fs.read") for d in decisions)
    assert len(stub.requests) == 30 and stub.connections - before == 1


def test_adecide_over_http_shares_the_tiers_connections(policy, stub):
    before = stub.connections
    with OpenAITier(stub.base_url, "m") as t:
        router = Router(policy, tiers={"small": t})

        async def eight():
            return await asyncio.gather(*(router.adecide(ALLOWED) for _ in range(8)))

        decisions = asyncio.run(eight()) + asyncio.run(eight())
    assert all((d.tier, d.action) == ("small", "fs.read") for d in decisions)
    assert len(stub.requests) == 16 and stub.connections - before <= 8


FAILURES = [  # stub settings -> the rung's cause and the start of its detail
    ({"behaviour": "http_error"}, "error", "HTTP 500: stub failure"),
    ({"behaviour": "http_error", "status": 429}, "error", "HTTP 429: stub failure"),
    ({"behaviour": "garbage"}, "error", "malformed reply: body is not JSON: '<html>"),
    ({"behaviour": "malformed"}, "error", 'malformed reply: no "choices" list'),
    ({"behaviour": "drop"}, "error", "connection dropped: "),
    ({"behaviour": "illegal"}, "illegal", "proposed `deploy` outside the legal set"),
    ({"behaviour": "empty"}, "declined", "empty answer"),
    ({"content": "I would read the file."}, "declined", "no tool call; replied 'I would read the file.'"),
    ({"behaviour": "slow", "delay_ms": 1500}, "timeout", "timed out after 200 ms (read)"),
    ({"behaviour": "trickle", "delay_ms": 50}, "timeout", "timed out after 200 ms (read)"),
    ({"behaviour": "trickle", "delay_ms": 50, "trickle_body": True}, "timeout",
     "timed out after 200 ms (read)"),
]


@pytest.mark.parametrize("settings, cause, detail", FAILURES, ids=lambda x: str(x)[:40])
def test_every_failure_is_an_abstention_with_its_cause(policy, stub, settings, cause, detail):
    for key, value in settings.items():
        setattr(stub, key, value)
    with OpenAITier(stub.base_url, "m", timeout_ms=200) as t:
        started = time.perf_counter()
        d = Router(policy, tiers={"small": t}).decide(ALLOWED)
        took = time.perf_counter() - started
    rung = d.rungs[0]
    assert (rung.kind, rung.rung, rung.cause) == ("abstain", "small", cause), rung
    assert rung.detail.startswith(detail), rung.detail
    assert (d.tier, d.action) == ("fallback", "escalate")
    assert took < 0.2 + SLACK_S, took


def test_a_refused_connection_is_an_abstention_with_its_cause(policy):
    with OpenAITier(f"http://127.0.0.1:{free_port()}/v1", "m", timeout_ms=500) as t:
        d = Router(policy, tiers={"small": t}).decide(ALLOWED)
    assert (d.rungs[0].cause, d.rungs[0].detail) == ("error", "connection refused")
    assert (d.tier, d.action) == ("fallback", "escalate")


def test_a_closed_tier_abstains_with_its_cause(policy, stub):
    t = OpenAITier(stub.base_url, "m")
    t.close()
    d = Router(policy, tiers={"small": t}).decide(ALLOWED)
    assert d.rungs[0].cause == "error" and d.rungs[0].detail.startswith("tier unavailable: ")
    assert stub.requests == []
