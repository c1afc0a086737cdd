"""The router: ladder order, deadlines, illegal proposals, fallback, receipts, threads, asyncio."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from dataclasses import dataclass

import pytest

import zcompile
from zcompile import StateError
from zcompile.receipts import read
from zcompile.router import Router

POLICY = """
policy desk
state {
  role:    enum(customer, admin)
  outcome: enum(ok, timeout, error) = ok
  units:   int = 10
}
action lookup   tags(read)
action refund   tags(write, money)  cost 3
action reply    tags(control)
action escalate tags(control)
fallback escalate
rule admins_refund: forbid refund unless role == admin
rule money_guard:   refund requires units >= 3
rule no_reply_when_broken: forbid reply when outcome == error
tier specialist max_ms 5
tier small      max_ms 200  cost 1
tier large      max_ms 1000 cost 10
route fault:   when outcome != ok use large
route default: use specialist, small, large
"""


@dataclass
class Answer:
    outcome: str
    action: str | None = None
    confidence: float | None = None
    detail: str = ""
    latency_ms: float = 0.0
    model: str | None = None


class FakeTier:
    """An in-process tier for ladder logic (HTTP tiers are tested in test_tiers.py)."""

    def __init__(self, action=None, outcome="answered", sleep_s=0.0, model="fake"):
        self.action, self.outcome, self.sleep_s, self.model = action, outcome, sleep_s, model
        self.calls = []

    def propose(self, state, legal, *, timeout_s, intent=None, descriptions=None):
        self.calls.append((legal, timeout_s))
        if self.sleep_s > timeout_s:
            time.sleep(timeout_s)
            return Answer("timeout", detail="timed out")
        time.sleep(self.sleep_s)
        action = self.action(legal) if callable(self.action) else self.action
        return Answer(self.outcome, action if self.outcome == "answered" else None, 0.9, model=self.model)


@pytest.fixture(scope="module")
def policy():
    return zcompile.compile_text(POLICY, "desk.zc")


S = {"role": "customer"}


def test_single_legal_action_is_answered_by_the_compiler(policy):
    small = FakeTier("reply")
    p = zcompile.compile_text(POLICY + "rule only_escalate: forbid lookup, reply when units < 0\n", "d.zc")
    d = Router(p, tiers={"small": small}).decide({"role": "customer", "units": -1})
    assert d.action == "escalate" and d.tier == "compiler" and d.confidence == 1.0
    assert d.rungs[0].outcome == "answered" and small.calls == []


def test_unbound_tier_is_skipped(policy):
    d = Router(policy, tiers={"small": FakeTier("reply")}).decide({**S, "outcome": "error"})
    assert d.rungs[0].tier == "large" and d.rungs[0].outcome == "skipped" and d.tier == "fallback"


def test_first_answering_rung_wins_and_later_rungs_are_not_called(policy):
    small, large = FakeTier("reply"), FakeTier("lookup")
    d = Router(policy, tiers={"small": small, "large": large}).decide(S)
    assert (d.action, d.tier) == ("reply", "small") and large.calls == []
    assert [r.tier for r in d.rungs] == ["specialist", "small"]
    assert d.rungs[0].outcome == "skipped"  # no specialist loaded
    assert small.calls[0][0] == ("lookup", "reply", "escalate")  # only legal actions offered


def test_route_rules_choose_the_ladder(policy):
    small, large = FakeTier("reply"), FakeTier("lookup")
    d = Router(policy, tiers={"small": small, "large": large}).decide({**S, "outcome": "timeout"})
    assert d.tier == "large" and small.calls == [] and d.receipt.meta["route"] == "fault"


def test_illegal_proposal_is_never_returned(policy):
    small, large = FakeTier("refund"), FakeTier("lookup")
    d = Router(policy, tiers={"small": small, "large": large}).decide(S)
    assert d.action == "lookup" and d.tier == "large"
    assert d.rungs[1].outcome == "illegal" and "refund" in d.rungs[1].detail and d.rungs[1].action is None


def test_slow_tier_is_abandoned_and_next_rung_answers(policy):
    small, large = FakeTier("reply", sleep_s=1.0), FakeTier("lookup")
    started = time.perf_counter()
    d = Router(policy, tiers={"small": small, "large": large}).decide(S)
    assert time.perf_counter() - started < 0.6  # small's max_ms is 200
    assert d.rungs[1].outcome == "timeout" and d.tier == "large"
    assert small.calls[0][1] == pytest.approx(0.2)


def test_without_budgets_a_tier_gets_the_time_it_takes(policy):
    """A measurement (`zc eval --tiers`, `zc arms`, `zc grader replies`): the policy's max_ms (200 ms
    for `small`) does not turn a slow answer into a timeout; a deadline still bounds it."""
    small, large = FakeTier("reply", sleep_s=0.4), FakeTier("lookup")
    d = Router(policy, tiers={"small": small, "large": large}, budgets=False).decide(S)
    assert d.tier == "small" and small.calls[0][1] > 0.4  # not 0.2: its max_ms is not applied
    d = Router(policy, tiers={"small": small, "large": large}, budgets=False, deadline_ms=100).decide(S)
    assert small.calls[1][1] <= 0.1 and d.rungs[1].outcome == "timeout"


def test_overall_deadline_skips_remaining_rungs(policy):
    small, large = FakeTier("reply", sleep_s=1.0), FakeTier("lookup")
    d = Router(policy, tiers={"small": small, "large": large}, deadline_ms=50).decide(S)
    assert small.calls[0][1] <= 0.05
    assert d.rungs[-1].tier == "large" and d.rungs[-1].outcome == "skipped"
    assert d.tier == "fallback" and d.action == "escalate"


def test_fallback_when_every_rung_abstains(policy):
    small, large = FakeTier(outcome="abstained"), FakeTier(outcome="error")
    d = Router(policy, tiers={"small": small, "large": large}).decide(S)
    assert (d.action, d.tier, d.confidence) == ("escalate", "fallback", None)
    assert [r.outcome for r in d.rungs] == ["skipped", "abstained", "error"]


def test_tier_exceptions_are_recorded_not_raised(policy):
    class Broken:
        model = "x"

        def propose(self, *a, **k):
            raise RuntimeError("boom")

    d = Router(policy, tiers={"small": Broken(), "large": FakeTier("reply")}).decide(S)
    assert d.rungs[1].outcome == "error" and "boom" in d.rungs[1].detail and d.tier == "large"


def test_invalid_state_is_an_error(policy):
    with pytest.raises(StateError, match=r"\$\.role"):
        Router(policy).decide({"role": "root"})


def test_unknown_tier_name_is_refused(policy):
    with pytest.raises(zcompile.ZcError, match=r"policy `\w+` declares no tier `tiny`"):
        Router(policy, tiers={"tiny": FakeTier("reply")})


def test_receipts_are_complete_and_parse_back(policy, tmp_path):
    path = tmp_path / "live.jsonl"
    with Router(policy, tiers={"small": FakeTier("reply"), "large": FakeTier("lookup")}, receipts=path) as r:
        d1 = r.decide(S, task="t1", meta={"step": 1})
        d2 = r.decide({**S, "outcome": "timeout"}, task="t1")
    got = list(read([path], policy=policy))
    assert [g.id for g in got] == [d1.receipt.id, d2.receipt.id]
    g = got[0]
    assert (g.action, g.tier, g.task, g.model, g.policy) == ("reply", "small", "t1", "fake", policy.sha256)
    assert g.legal == ("lookup", "reply", "escalate") and g.state == S and g.cost == 1.0
    assert g.meta["step"] == 1 and [x["outcome"] for x in g.meta["rungs"]] == ["skipped", "answered"]
    assert got[1].tier == "large" and got[1].cost == 10.0 and g.latency_ms > 0 and g.ts > 0


def test_eight_threads_lose_no_receipt(policy, tmp_path):
    path = tmp_path / "threads.jsonl"
    router = Router(policy, tiers={"small": FakeTier(lambda legal: legal[-1])}, receipts=path)
    ids: list[str] = []
    lock = threading.Lock()

    def work(k):
        for i in range(100):
            state = {"role": "admin" if (i + k) % 2 else "customer", "units": i % 7}
            d = router.decide(state, task=f"t{k}")
            assert d.action in d.legal.actions
            with lock:
                ids.append(d.receipt.id)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    router.close()
    lines = path.read_bytes().splitlines()
    assert len(lines) == 800 and all(json.loads(line)["id"] for line in lines)
    assert sorted(r.id for r in read([path])) == sorted(ids)


def test_adecide_runs_concurrently(policy):
    router = Router(policy, tiers={"small": FakeTier("reply", sleep_s=0.1)})

    async def main():
        started = time.perf_counter()
        ds = await asyncio.gather(*(router.adecide(S) for _ in range(4)))
        return ds, time.perf_counter() - started

    ds, took = asyncio.run(main())
    assert all(d.action == "reply" for d in ds) and took < 0.35


def test_specialist_rung(policy, tmp_path):
    class Sp:
        name = "toy"

        def decide(self, state, legal):
            from zcompile.qroute.specialist import Answer as A

            return A("lookup", 0.99, "lookup") if state["role"] == "admin" else A(None, 0.4, "reply")

    small = FakeTier("reply")
    r = Router(policy, specialists=Sp(), tiers={"small": small})
    d = r.decide({"role": "admin"})
    assert (d.action, d.tier, d.confidence, d.receipt.model) == ("lookup", "specialist", 0.99, "toy")
    d = r.decide(S)
    assert d.tier == "small" and d.rungs[0].outcome == "abstained"
