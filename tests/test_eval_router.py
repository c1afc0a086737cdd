"""`zc eval` drives the router: on the bundled receipts, every per-receipt decision and every headline
count of the report equals what `Router.decide` does on the same states."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace as NS

import pytest

import zcompile
from zcompile import evals, stats
from zcompile.receipts import read
from zcompile.router import Router

ROOT = Path(__file__).parents[1]
RECEIPTS = ROOT / "receipts"


@dataclass(frozen=True)
class Raw:
    action: str | None
    confidence: float
    best: str | None
    arguments: dict | None = None


class Rule:
    """A specialist that answers by a fixed rule on the chat state: calls with arguments, bare names,
    and abstentions below threshold."""

    name = "rule"
    manifest = NS(name="rule", model=NS(kind="logistic"), policy_sha256="", policy_name="airline_chat",
                  threshold=NS(tau=0.5, target_precision=0.95), gate=NS(promoted=False),
                  splits=NS(train=NS(tasks=()), calibration=NS(tasks=()), test=NS(tasks=())))

    def decide(self, state, legal, candidates=None):
        prev = (state.get("prev") or {}).get("role")
        last = (state.get("last") or {}).get("tool")
        if prev == "user" and "get_user_details" in legal and state.get("tool_calls", 0) == 0:
            return Raw("get_user_details", 0.97, "get_user_details", {"user_id": "from_the_rule"})
        if prev == "tool" and last == "get_user_details" and "get_reservation_details" in legal:
            return Raw("get_reservation_details", 0.96, "get_reservation_details")  # a bare name
        if prev == "tool" and "calculate" in legal and state.get("turn", 0) % 7 == 3:
            return Raw("calculate", 0.9, "calculate", {"expression": "1 + 1"})
        return Raw(None, 0.2, legal[0])


@pytest.fixture(scope="module")
def policy():
    return zcompile.compile_file(ROOT / "policies" / "airline_chat.zc")


def _tier(d) -> str:
    return d.tier if d.tier in ("compiler", "specialist") else "remote"


def test_eval_decisions_equal_router_decisions(policy):
    rule = Rule()
    rep = evals.report([RECEIPTS], policy, rule, split="all", decisions=True)  # no task trained on
    by_id = {r.id: r for r in read([RECEIPTS], policy=policy)}
    router = Router(policy, specialists=rule)
    kinds: Counter = Counter()
    for row in rep["decisions"]:
        r = by_id[row.id]
        d = router.decide(r.state, r.intent)
        rung = _tier(d)
        assert (row.rung, row.action, row.arguments, row.kind) == (
            rung, d.action if rung != "remote" else None, d.arguments if rung != "remote" else None,
            d.kind if rung != "remote" else "none"), row.id
        kinds[rung, row.kind] += 1
    assert rep["n"] == len(rep["decisions"]) == sum(kinds.values())
    # the rule answered calls and names: the headline counts are those of the router's decisions
    calls = kinds["specialist", "call"] + kinds["compiler", "call"]
    assert kinds["specialist", "call"] > 0 and kinds["specialist", "name"] > 0
    assert rep["tiers"]["specialist"]["answered"] == kinds["specialist", "call"] + kinds["specialist", "name"]
    assert rep["tiers"]["compiler"]["answered"] == sum(v for (rung, _), v in kinds.items()
                                                       if rung == "compiler")
    assert rep["calls"]["answered"] == calls == rep["cost"]["teacher_calls_removed"]
    assert rep["cost"]["names_answered_not_removed"] == sum(v for (rung, k), v in kinds.items()
                                                            if rung != "remote" and k == "name")
    # the teacher's arguments are not in these receipts: no call can be judged right at call level
    assert rep["calls"]["correct"] == 0 and rep["overall"]["correct"] > 0
    text = evals.render_text(rep)
    assert "complete tool calls (name and arguments): " + str(calls) + " answered" in text
    # power: the claim's n against what a Wilson lower bound at the target needs (73 answers at 0.95)
    pw = rep["power"]["calls"]
    assert (pw["answered"], pw["n"], pw["answers_needed"]) == (calls, rep["calls"]["n"], 73)
    assert pw["decisions_needed"] == -(-73 * rep["calls"]["n"] // calls) and pw["enough"] == (calls >= 73)
    assert 0 < pw["detectable_precision_difference"] < 1 and "power (calls): " in text
    assert all(t["handed_to_text_tier"] == 0 for name, t in rep["tiers"].items() if name != "specialist")


def test_eval_replays_the_offer_each_receipt_recorded(policy, tmp_path):
    """A receipt's `meta.offer` (what the harness could take) bounds the replay as it bounded the
    live decision: the rule's get_user_details is not offered in half the receipts."""
    import msgspec

    from zcompile.receipts import ReceiptWriter

    original = list(read([RECEIPTS], policy=policy))
    path = tmp_path / "offered.jsonl"
    with ReceiptWriter(path) as w:
        for i, r in enumerate(original):
            if i % 2 == 0:
                offer = sorted(a for a in policy.legal(r.state, r.intent).actions if a != "get_user_details")
                r = msgspec.structs.replace(r, meta={**r.meta, "offer": offer})
            w.append(r)
    rule = Rule()
    rep = evals.report([path], policy, rule, split="all", decisions=True)
    by_id = {r.id: r for r in read([path], policy=policy)}
    router = Router(policy, specialists=rule)
    blocked = 0
    for row in rep["decisions"]:
        r = by_id[row.id]
        offer = r.meta.get("offer")
        d = router.decide(r.state, r.intent, offer=offer)
        assert (row.rung, row.action) == (_tier(d), d.action if _tier(d) != "remote" else None), row.id
        if offer is not None:
            assert row.action != "get_user_details"
            blocked += router.decide(r.state, r.intent).action == "get_user_details"
    assert blocked > 0  # without the offer the rule would have answered some of them
    bad = tmp_path / "bad.jsonl"
    bad.write_text(path.read_text().replace('"offer":[', '"offer":[1,', 1))
    with pytest.raises(zcompile.ZcError, match=r"\$\.meta\.offer: expected an array of action names"):
        evals.report([bad], policy, rule, split="all")


def test_eval_reports_live_shadow_agreement(policy, tmp_path):
    """Receipts written with a shadow specialist: zc eval reports its live agreement with the action
    taken, with an interval, from the receipts alone."""
    taken = list(read([RECEIPTS], policy=policy))[:300]

    class Teacher:  # the remote tier answers what the receipt recorded
        model = "teacher"

        def __init__(self):
            self.next = None

        def propose(self, state, legal, *, timeout_s, intent=None, descriptions=None):
            from zcompile.tiers import TierAnswer

            return TierAnswer("answered", self.next)

    teacher = Teacher()
    path = tmp_path / "shadow.jsonl"
    agree = answered = 0
    with Router(policy, tiers={"remote": teacher}, shadow=[Rule()], receipts=path) as router:
        for r in taken:
            if r.action is None:
                continue
            teacher.next = r.action
            d = router.decide(r.state, r.intent, task=r.task)
            for s in d.receipt.meta.get("shadow", ()):
                answered += s["outcome"] == "answered"
                agree += s["outcome"] == "answered" and s["action"] == d.action
            assert d.tier in ("compiler", "remote", "fallback")  # the shadow never decides
    rep = evals.report([path], policy, Rule(), split="all", allow_trained=True)
    s = rep["shadow"]["rule"]
    assert answered > 0 and (s["answered"], s["agree"]) == (answered, agree)
    assert s["agreement_ci"][0] <= s["agreement"] <= s["agreement_ci"][1]
    assert "shadow rule: live agreement" in evals.render_text(rep)
    # by task (the unit zc promote certifies on): a task is clean when every answer in it was right
    from zcompile.router.shadow import label_of, record_right

    clean: dict = {}
    for r in read([path]):
        for record in r.meta.get("shadow", ()):
            if record["outcome"] == "answered":
                clean[r.task] = clean.get(r.task, True) and record_right(record, *label_of(r))
    assert len(clean) > 1
    assert (s["tasks"], s["clean_tasks"]) == (len(clean), sum(clean.values()))
    assert s["task_lower_bound"] == stats.lower_bound(s["clean_tasks"], s["tasks"])
    assert "tasks with every answer right as a whole output" in evals.render_text(rep)


def test_policyless_pairwise_replay_asks_the_router_rung(tmp_path):
    """Without a policy (a pairwise specialist distilled without one) the specialist rung is asked with
    each receipt's legal list and offered tools, as the router asks it; no compiler rung."""
    from zcompile.receipts import Receipt, write_file

    class Pair:
        name, pairwise = "pair", True
        manifest = NS(name="pair", model=NS(kind="pairwise"), policy_sha256="", policy_name="",
                      threshold=NS(tau=0.5, target_precision=0.9), gate=NS(promoted=False),
                      splits=NS(train=NS(tasks=()), calibration=NS(tasks=()), test=NS(tasks=())))

        def __init__(self):
            self.seen = []

        def decide(self, state, legal, tools):
            self.seen.append((tuple(legal), sorted(tools)))
            pick = next((a for a in legal if a in state["request"]), None)
            return Raw(pick, 0.9 if pick else 0.1, pick or legal[0])

    rows = [Receipt(id=f"r{i}", task=f"t{i}", state={"request": req}, tier="gold", legal=legal, action=action,
                    gold=action, verified=True, meta={"tools": [{"name": a, "description": a}
                                                                for a in legal]})
            for i, (req, legal, action) in enumerate([("play jazz", ("play", "stop"), "play"),
                                                      ("stop it", ("play", "stop"), "play"),
                                                      ("hello", ("play", "stop"), None)])]
    write_file(tmp_path / "p.jsonl", rows)
    sp = Pair()
    rep = evals.report([tmp_path / "p.jsonl"], None, sp, decisions=True)
    assert set(rep["tiers"]) == {"specialist"} and rep["legal_sets"] == "receipts"
    assert [(d.rung, d.action, d.kind) for d in rep["decisions"]] == [
        ("specialist", "play", "name"), ("specialist", "stop", "name"), ("remote", None, "none")]
    s = rep["tiers"]["specialist"]
    assert (s["answered"], s["correct"], s["abstained_where_none_fits"]["k"]) == (2, 1, 1)
    assert sp.seen[-3:] == [(("play", "stop"), ["play", "stop"])] * 3
    assert rep["cost"]["teacher_calls_removed"] == 0  # names only, without a policy to check calls


class Handing(Rule):
    """The rule above, plus a text reply recognised after a tool result that holds a record: the
    specialist rung hands it on (it cannot write text)."""

    def decide(self, state, legal, candidates=None):
        if (state.get("prev") or {}).get("role") == "tool" and (state.get("last")
                                                                or {}).get("result") == "record" \
                and "respond" in legal and state.get("turn", 0) % 3 == 0:
            return Raw("respond", 0.99, "respond")
        got = super().decide(state, legal, candidates)
        ids = [c.value for c in candidates or () if isinstance(c.value, str)
               and re.fullmatch(r"[a-z]+_[a-z]+_\d+", c.value)]
        # a user id seen before: right when the teacher looks it up
        if got.action == "get_user_details" and ids:
            return Raw("get_user_details", 0.97, "get_user_details", {"user_id": ids[0]})
        return got


def test_acceptable_figures_equal_the_judge_over_router_decisions(policy):
    """The acceptable and strict figures, the share taken off the teacher, the handed replies and their
    precision, recomputed from `Router.decide` and the judge receipt by receipt."""
    from zcompile.qroute.dataset import make_judge
    from zcompile.receipts.judge import accepts, conversation_of, strict

    rule = Handing()
    rep = evals.report([RECEIPTS], policy, rule, split="all", decisions=True)
    receipts = list(read([RECEIPTS], policy=policy))
    judge = make_judge(policy)
    for i, r in enumerate(receipts):
        judge.add(conversation_of(r), (float("inf"), i), r.id, r.action, r.arguments, r.gold)
    router = Router(policy, specialists=rule)
    replies = frozenset({"respond"})
    calls = ok_calls = strict_calls = handed = handed_right = 0
    for r in receipts:
        d = router.decide(r.state, r.intent, candidates=r.candidates)
        acc = judge.acceptable(r.id)
        if d.tier in ("compiler", "specialist") and d.kind == "call":
            calls += 1
            ok_calls += accepts(acc, d.action, d.arguments, replies)
            strict_calls += strict(acc, d.action, d.arguments, replies)
        sp = (next(a for a in d.rungs if a.rung == "specialist")
              if any(a.rung == "specialist" for a in d.rungs) else None)
        if sp is not None and sp.cause == "handed_on":
            handed += 1
            handed_right += r.action == "respond"
    assert handed > 0 and ok_calls > 0
    assert rep["calls"]["answered"] == calls
    assert (rep["calls"]["acceptable"]["correct"], rep["calls"]["correct"]) == (ok_calls, strict_calls)
    o = rep["overall"]
    assert (o["handed_to_text_tier"], o["handed_precision"]["k"]) == (handed, handed_right)
    assert o["handed_precision"]["ci"] == list(stats.wilson(handed_right, handed))
    # the policy's text tier `writer` takes the handed replies off the teacher, at its cost of 5
    off = rep["off_teacher"]
    assert off["text_tier"] == "writer" and off["handed_to_text_tier"] == handed
    assert off["taken"] == calls + handed and off["acceptable"]["correct"] == ok_calls + handed_right
    c = rep["cost"]
    assert c["saved"] == calls * 100 + handed * (100 - 5) and c["replies_to_text_tier"] == handed
    text = evals.render_text(rep)
    assert text.startswith("taken off the expensive model: ") and "reply-recognition precision" in text
    assert "noise floor: " in text and "the judge: " in text
    html = evals.render_html(rep)
    assert "taken off the expensive model" in html and "The noise floor" in html
    assert "reply-recognition precision" in html


class FlawedWriter:
    """The text tier, writing the reply of every even turn with a leaked template token (fault injection)."""

    writes_text = True
    name = "writer"

    def __init__(self) -> None:
        self.n = 0

    def answer(self, step, timeout_s):
        from zcompile.router.rung import Answer

        self.n += 1
        flawed = step.state.get("turn", 0) % 2 == 0
        text = "Here is what I found for you." + (" <|im_end|>" if flawed else "")
        return Answer("reply", action="respond", text=text, model="small")


def test_with_the_text_tier_live_only_replies_the_grader_passed_are_off_the_teacher(policy):
    """`zc eval --tiers --grader` with the policy's text tier bound: a handed reply counts as taken off
    the expensive model only when the text tier wrote one that passed; a failed one is an escalation."""
    from zcompile.router.grader import Grader

    base = evals.report([RECEIPTS], policy, Handing(), split="all")
    writer = FlawedWriter()
    rep = evals.report([RECEIPTS], policy, Handing(), split="all", tiers={"writer": writer}, grader=Grader(),
                       decisions=True)
    handed = base["off_teacher"]["handed_to_text_tier"]
    off = rep["off_teacher"]
    passed, failed = off["handed_to_text_tier"], off["handed_escalated"]
    assert off["text_tier_live"] and passed > 0 and failed > 0 and passed + failed == handed > 4
    assert writer.n == handed  # asked live once for each handed reply (no warm-up with live tiers)
    rows = [r for r in rep["decisions"] if r.handed_on]
    written = [r for r in rows if r.rung == "writer"]
    assert len(written) == passed and all(r.text == "Here is what I found for you." for r in written)
    sent_back = [r for r in rows if r.rung == "remote"]
    assert len(sent_back) == failed and all(r.text is None and "leak" in r.graded for r in sent_back)
    assert off["taken"] == base["off_teacher"]["taken"] - failed
    assert rep["cost"]["saved"] == base["cost"]["saved"] - failed * (100 - 5)
    line = f"{passed} of them replies the text tier `writer` wrote and the grader passed ({failed} handed"
    assert line in evals.render_text(rep)
