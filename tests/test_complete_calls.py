"""Complete calls end to end: receipts with arguments and candidates -> a specialist that answers whole
calls (name and arguments, checked), hands text replies on, and abstains when it cannot complete a call."""

from __future__ import annotations

import random

import msgspec
import pytest

import zcompile
from zcompile import qroute as Q
from zcompile.qroute.arguments import Candidate
from zcompile.qroute.specialist import Specialist

POLICY = """
policy desk
state {
  phase: enum(start, asked, looked, done)
  turn:  int = 0
}
action get_order(order_id: text)     tags(read)
action cancel_order(order_id: text)  tags(write, destructive)
action reply                         tags(reply)
fallback reply
rule confirm_cancel: cancel_order requires phase == looked
"""


def _id(rng: random.Random) -> str:
    return "".join(rng.choice("ABCDEFGHJKLMNPQRSTUVWXYZ23456789") for _ in range(6))


def make_receipts(path, tasks=24, per_task=20, seed=3):
    """The teacher replies at the start and when done, looks up the order the user just named, and
    never cancels; the named id is one user span among older tool-output ids."""
    rng = random.Random(seed)
    lines = []
    for t in range(tasks):
        for i in range(per_task):
            phase = rng.choice(["start", "asked", "asked", "done"])
            wanted = _id(rng)
            cands = [Candidate(wanted, "user", "", 1, 1)] + [
                Candidate(_id(rng), "tool", "order_id", rng.randint(3, 9), 1) for _ in range(3)]
            rng.shuffle(cands)
            action, args = ("get_order", {"order_id": wanted}) if phase == "asked" else ("reply", None)
            lines.append({"id": f"t{t}-{i}", "task": f"task-{t:02d}", "ts": float(t * 100 + i),
                          "tier": "remote", "state": {"phase": phase, "turn": i}, "action": action,
                          "arguments": args, "candidates": msgspec.to_builtins(cands)})
    path.write_bytes(b"".join(msgspec.json.encode(x) + b"\n" for x in lines))
    return path


@pytest.fixture(scope="module")
def policy():
    return zcompile.compile_text(POLICY, "desk.zc")


@pytest.fixture(scope="module")
def trained(policy, tmp_path_factory):
    receipts = make_receipts(tmp_path_factory.mktemp("r") / "r.jsonl")
    return Q.distill([receipts], policy, tmp_path_factory.mktemp("s") / "desk",
                     Q.Settings(model="logistic", unit="decision"))


def test_whole_calls_are_learned_certified_and_counted_apart(trained):
    m = trained.manifest
    t = m.metrics
    assert m.calls is not None and m.calls.replies == ("reply",) and m.calls.risky == ("cancel_order",)
    assert m.calls.arguments is not None  # an argument model shipped
    assert m.threshold.tau < 1 and m.calls.reply_threshold.tau < 1, (m.threshold, m.calls.reply_threshold)
    assert t["calls"]["answered"] >= 0.8 * t["calls"]["n"] and t["calls"]["precision"] >= 0.95, t["calls"]
    assert t["replies"]["handed_to_text_tier"] > 0 and t["replies"]["precision"] == 1.0
    assert t["teacher_calls_removed"] == t["calls"]["answered"] and t["dangerous_selected"] == 0
    assert m.gate.promoted, m.gate.reasons


def test_above_the_row_limit_the_argument_model_trains_on_a_sample(policy, tmp_path, monkeypatch):
    """Bounded training: past `arguments.MAX_ROWS` candidates each argument model fit trains on a
    seeded sample of whole arguments; the report says so and whole calls are still learned."""
    from zcompile.qroute import arguments

    monkeypatch.setattr(arguments, "MAX_ROWS", 400)
    receipts = make_receipts(tmp_path / "r.jsonl")
    steps = []
    res = Q.distill([receipts], policy, tmp_path / "desk", Q.Settings(model="logistic", unit="decision"),
                    report=Q.Progress(step=steps.append))
    sample = res.manifest.metrics["argument_sample"]
    assert sample["limit"] == 400 and 0 < sample["kept"] < sample["n"] and sample["candidates"] > 400, sample
    assert any("each fit trains on a seeded sample of whole arguments" in s for s in steps), steps
    assert (f"trained on a seeded sample of {sample['kept']} of {sample['n']} teacher "
            "arguments") in res.report_text
    calls = res.manifest.metrics["calls"]
    assert calls["answered"] >= 0.5 * calls["n"] and calls["precision"] >= 0.95, calls


def test_specialist_answers_a_complete_call_or_abstains(trained, policy):
    sp = Specialist(trained.directory, policy)
    state = {"phase": "asked", "turn": 3}
    legal = policy.legal(state).actions
    cands = [["QX7TPA", "user", "", 1, 1], ["ZZZ999", "tool", "order_id", 5, 1]]
    a = sp.decide(state, legal, cands)
    assert (a.kind, a.action, a.arguments) == ("call", "get_order", {"order_id": "QX7TPA"})
    none = sp.decide(state, legal)  # no candidates: the call cannot be completed
    assert (none.kind, none.action, none.best) == ("name", None, "get_order")
    r = sp.decide({"phase": "start"}, policy.legal({"phase": "start"}).actions, cands)
    assert (r.kind, r.action) == ("reply", "reply")


def test_a_call_that_cannot_reach_tau_proposes_no_arguments(trained, policy):
    """Arguments are proposed only when certain ones could lift the call to τ: below, the call
    abstains with that ceiling (at least the confidence a proposal would have given)."""
    sp = Specialist(trained.directory, policy)
    asked = []

    class Spy:
        def __init__(self, real):
            self.real = real

        def propose(self, *args):
            asked.append(args[0])
            return self.real.propose(*args)

    sp._arguments = Spy(sp._arguments)
    state = {"phase": "asked", "turn": 3}
    cands = [["QX7TPA", "user", "", 1, 1], ["ZZZ999", "tool", "order_id", 5, 1]]
    reached = sp.decide(state, policy.legal(state), cands)
    assert asked == ["get_order"] and (reached.kind, reached.action) == ("call", "get_order")
    sp.tau = 1.5  # beyond any confidence
    skipped = sp.decide(state, policy.legal(state), cands)
    assert asked == ["get_order"], "arguments were proposed for a call that could not pass"
    assert (skipped.kind, skipped.action, skipped.arguments,
            skipped.best) == ("call", None, None, "get_order")
    assert reached.confidence <= skipped.confidence <= 1.0


def test_router_returns_the_checked_call_and_hands_replies_on(trained, policy, tmp_path):
    router = zcompile.Router(policy, specialists=str(trained.directory),
                             receipts=str(tmp_path / "live.jsonl"))
    d = router.decide({"phase": "asked", "turn": 2}, candidates=[["QX7TPA", "user", "", 1, 1]])
    assert (d.tier, d.kind, d.action, d.arguments) == ("specialist", "call", "get_order",
                                                       {"order_id": "QX7TPA"})
    assert d.receipt.arguments == {"order_id": "QX7TPA"}
    reply = router.decide({"phase": "done", "turn": 9}, candidates=[["QX7TPA", "user", "", 1, 1]])
    assert reply.tier != "specialist" and any(a.cause == "handed_on" for a in reply.rungs)
