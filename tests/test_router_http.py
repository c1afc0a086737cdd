"""The router over real HTTP: a local OpenAI-compatible stub in every behaviour, random legal sets."""

from __future__ import annotations

import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from openai_stub import FAST_BEHAVIOURS, OpenAIStub

import zcompile
from zcompile.router import Router

ACTIONS = ["fs.read", "fs.write", "fetch", "json.extract", "deploy", "ask_user", "stop", "escalate"]
POLICY = "policy open\nstate {\n  allowed: set[action] = {}\n  mode: enum(normal, fault) = normal\n}\n" + "".join(
    f"action {a} tags(t)\n" for a in ACTIONS) + """
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
def test_deadline_bounds_the_whole_call_against_a_trickling_server(policy, deadline_ms):
    # the server sends its status line and headers one byte every 100 ms: per-read timeouts never fire
    with OpenAIStub("trickle") as small:
        small.delay_ms = 100
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
        d = Router(policy, tiers={"small": tier}, deadline_ms=400).decide({"allowed": ["fs.read", "stop", "escalate"]})
        took = (time.perf_counter() - started) * 1000
        tier.close()
    finally:
        for c in (*fill, srv):
            c.close()
    assert d.rungs[0].outcome == "timeout" and took < 450, (d.rungs, took)
