"""The judge (receipts/judge.py): strict and acceptable answers on hand-made conversations."""

from __future__ import annotations

import pytest

from zcompile import compile_text
from zcompile.receipts.judge import LOOKAHEAD, Judge, accepts, lenient_actions, strict

REPLIES = frozenset({"respond"})
READS = frozenset({"get_user", "get_order", "search"})


def judge_of(steps: list[tuple], lenient=READS) -> Judge:
    """A judge over one conversation of (action, arguments) steps, keyed by position."""
    j = Judge(lenient, REPLIES)
    for i, (action, args) in enumerate(steps):
        j.add("c1", (float("inf"), i), i, action, args)
    return j


def ok(j: Judge, at: int, action: str, args=None) -> bool:
    return accepts(j.acceptable(at), action, args, REPLIES)


def test_a_read_made_later_is_acceptable_now():
    j = judge_of([("respond", None), ("respond", None), ("get_user", {"id": "u1"}),
                  ("cancel", {"order": "o1"})])
    assert ok(j, 0, "respond")
    assert ok(j, 0, "get_user", {"id": "u1"})  # the teacher replied twice, then looked the user up
    assert not strict(j.acceptable(0), "get_user", {"id": "u1"}, REPLIES)
    assert not ok(j, 0, "get_user", {"id": "u2"})  # other arguments are not the call the teacher made
    assert ok(j, 2, "get_user", {"id": "u1"})


def test_a_write_is_never_judged_leniently():
    j = judge_of([("get_user", {"id": "u1"}), ("cancel", {"order": "o1"}), ("respond", None)])
    assert not ok(j, 0, "cancel", {"order": "o1"})  # made one step later, but it writes
    assert ok(j, 1, "cancel", {"order": "o1"})
    assert not ok(j, 1, "respond")  # a reply is right only where the teacher replied
    assert ok(j, 2, "respond")


def test_a_read_after_an_intervening_write_is_not_acceptable():
    j = judge_of([("respond", None), ("cancel", {"order": "o1"}), ("get_order", {"order": "o1"})])
    assert not ok(j, 0, "get_order", {"order": "o1"})
    assert j.acceptable(0) == (("respond", None),)


def test_after_a_write_the_teacher_made_nothing_else_is_acceptable():
    j = judge_of([("cancel", {"order": "o1"}), ("get_order", {"order": "o1"})])
    assert j.acceptable(0) == (("cancel", '{"order":"o1"}'),)


def test_a_repeated_read_is_not_acceptable():
    j = judge_of([("get_user", {"id": "u1"}), ("respond", None), ("get_user", {"id": "u1"})])
    assert not ok(j, 1, "get_user", {"id": "u1"})  # already made at step 0
    assert ok(j, 2, "get_user", {"id": "u1"})  # the teacher's own (repeated) call is still strict


def test_arguments_compare_as_canonical_json():
    j = judge_of([("respond", None), ("search", {"b": 1.0, "a": "x"})])
    assert ok(j, 0, "search", {"a": "x", "b": 1})


def test_unknown_arguments_never_match_later():
    j = judge_of([("respond", None), ("get_user", None)])
    assert j.acceptable(0) == (("respond", None),)


def test_an_abstention_ends_the_run():
    j = judge_of([("respond", None), (None, None), ("get_user", {"id": "u1"})])
    assert not ok(j, 0, "get_user", {"id": "u1"})
    assert j.acceptable(1) == ()


def test_reads_of_a_run_and_replies_between_them():
    steps = [("get_user", {"id": "u1"}), ("respond", None), ("get_order", {"order": "o1"}),
             ("search", {"q": 1}), ("cancel", {"order": "o1"}), ("search", {"q": 2})]
    j = judge_of(steps)
    got = j.acceptable(0)
    assert got[0] == ("get_user", '{"id":"u1"}')
    assert {a for a, _ in got} == {"get_user", "get_order", "search"}
    assert not ok(j, 0, "search", {"q": 2})  # after the write


def test_conversations_are_judged_apart_and_sorted_by_order():
    j = Judge(READS, REPLIES)
    j.add("a", (2.0, 0), "a2", "get_user", {"id": "u1"})
    j.add("b", (1.0, 1), "b1", "respond", None)
    j.add("a", (1.0, 2), "a1", "respond", None)
    j.add("b", (2.0, 3), "b2", "cancel", {})
    assert accepts(j.acceptable("a1"), "get_user", {"id": "u1"}, REPLIES)
    assert not accepts(j.acceptable("b1"), "get_user", {"id": "u1"}, REPLIES)


def test_gold_replaces_the_teacher_and_allows_nothing_else():
    j = Judge(READS, REPLIES)
    j.add("c", (0, 0), 0, "respond", None, gold="get_user")
    j.add("c", (0, 1), 1, "get_order", {"order": "o1"})
    assert j.acceptable(0) == (("get_user", "{}"),)


def test_the_lookahead_is_bounded():
    steps = [("respond", None)] + [("search", {"q": i}) for i in range(LOOKAHEAD + 5)]
    j = judge_of(steps)
    assert ok(j, 0, "search", {"q": LOOKAHEAD - 1})
    assert not ok(j, 0, "search", {"q": LOOKAHEAD + 1})


def test_names_judge_by_action_only():
    j = judge_of([("respond", None), ("get_user", {"id": "u1"})])
    assert accepts(j.acceptable(0), "get_user", None, REPLIES, names=True)
    assert not strict(j.acceptable(0), "get_user", None, REPLIES, names=True)


POLICY = """
policy p
state { x: bool = false }
action get_user(id: text) tags(read)
action note(text: text) tags(generic, pure)
action refund(id: text) tags(read, money)
action wipe() tags(pure, write)
action respond tags(control, reply)
fallback respond
"""


def test_the_policy_names_its_side_effect_free_actions():
    assert lenient_actions(compile_text(POLICY)) == {"get_user", "note"}  # write and risky tags never
    assert lenient_actions(None) == frozenset()


@pytest.mark.parametrize("args", [None, {"id": "u1"}])
def test_an_unanswered_decision_is_never_right(args):
    j = judge_of([("get_user", {"id": "u1"})])
    assert not accepts(j.acceptable(0), None, args, REPLIES)
