"""Training on the judge's targets: where the teacher sometimes replies before a lookup it then
makes, the specialist learns the lookup, certifies it on out-of-fold acceptable correctness, and
reports strict figures beside."""

from __future__ import annotations

import random

import pytest

import zcompile
from zcompile import qroute as Q
from zcompile.qroute.specialist import Specialist
from zcompile.receipts import Receipt, write_file
from zcompile.receipts.candidates import Candidate

POLICY = """
policy desk
state {
  phase:   enum(start, looked, done) = start
  replied: bool = false
}
action get_user(user_id: text) tags(read)
action cancel(order: text) tags(write)
action respond tags(control, reply)
fallback respond
rule look_first: cancel after get_user
"""


def conversations(n: int, seed: int = 0) -> list[Receipt]:
    """n conversations of one task each: half look the user up at once, half reply first."""
    rng = random.Random(seed)
    rows = []
    for c in range(n):
        uid, order = f"u{c}_{rng.randrange(10**6)}", f"o{c}_{rng.randrange(10**6)}"
        user, tool = [Candidate(uid, "user", "", 1, 1)], [Candidate(order, "tool", "order_id", 1, 1)]
        steps = [({"phase": "start", "replied": False}, "get_user", {"user_id": uid}, [])]
        if c % 2:
            steps = [({"phase": "start", "replied": False}, "respond", None, []),
                     ({"phase": "start", "replied": True}, "get_user", {"user_id": uid}, [])]
        steps += [({"phase": "looked", "replied": c % 2 == 1}, "cancel", {"order": order}, ["get_user"]),
                  ({"phase": "done", "replied": c % 2 == 1}, "respond", None, ["get_user", "cancel"])]
        for i, (state, action, args, history) in enumerate(steps):
            rows.append(Receipt(id=f"c{c}:{i}", task=f"task-{c:03d}", state={**state, "history": history},
                                tier="remote", action=action, arguments=args,
                                candidates=user + (tool if history else []),
                                meta={"conversation": f"c{c}"}))
    return rows


@pytest.fixture(scope="module")
def distilled(tmp_path_factory):
    d = tmp_path_factory.mktemp("acceptable")
    policy = zcompile.compile_text(POLICY, "desk.zc")
    write_file(d / "r.jsonl", conversations(240))
    res = Q.distill([d / "r.jsonl"], policy, d / "desk", Q.Settings(model="logistic", target_precision=0.9,
                                                                       guarantee="conformal"))
    return policy, res, Specialist(d / "desk", policy)


def test_replies_before_a_lookup_learn_the_lookup(distilled):
    policy, res, sp = distilled
    judge = res.manifest.metrics["judge"]
    assert judge["mode"] == "acceptable" and judge["lenient_actions"] == ["get_user"]
    # each reply-first conversation's first reply is acceptable as the lookup; train + calibration
    # hold about 85% of the 120 such replies
    assert 90 <= judge["targets_changed"] <= 110 and judge["more_than_strict"] == 120
    start = {"phase": "start", "replied": False, "history": []}
    cands = [Candidate("u9_1", "user", "", 1, 1)]
    ans = sp.decide(start, policy.legal(start).actions, cands)
    assert (ans.action, ans.kind, ans.arguments) == ("get_user", "call", {"user_id": "u9_1"})
    assert res.manifest.threshold.tau < 1  # certified on out-of-fold acceptable correctness


def test_test_figures_are_given_under_both_judges(distilled):
    _, res, _ = distilled
    t = res.manifest.metrics
    # on the test split, the lookup answered where the teacher replied first is acceptable, not strict
    assert t["calls"]["correct"] > t["calls"]["strict"]["correct"] > 0
    assert t["strict"]["correct"] < t["correct"] and t["precision"] >= 0.9
    assert "Judged strictly" in res.report_text and "The judge (acceptable)" in res.report_text
