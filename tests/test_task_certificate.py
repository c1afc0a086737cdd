"""The unit of evidence is the task: τ certified over tasks holds for new tasks where a decision-level bound
over correlated decisions does not; and a call's arguments carry their grounding (typed by the user, or
picked out of what the agent saw), which calibrates its confidence."""

from __future__ import annotations

import math

import numpy as np
import pytest

from zcompile.qroute.threshold import NEVER, choose, min_answers
from zcompile.receipts.candidates import (
    Candidate,
    Provenance,
    extract_candidates,
    grounding,
    provenance_of,
    value_provenance,
)


def _one_shifted_task(rng: np.random.Generator, tasks: int = 30, per: int = 20):
    """`tasks` tasks of `per` decisions, all right but in one task, where a quarter are wrong at middling
    confidences (the task the specialist has not understood: 5 errors in 600 decisions, all in one task)."""
    conf = rng.uniform(0.6, 1.0, tasks * per)
    task = np.repeat([f"t{i:02d}" for i in range(tasks)], per)
    correct = np.ones(tasks * per, dtype=bool)
    wrong = np.flatnonzero(task == "t07")[: per // 4]
    correct[wrong] = False
    conf[wrong] = rng.uniform(0.7, 0.8, len(wrong))
    return conf, correct, task


@pytest.mark.parametrize("guarantee", ["ltt", "conformal"])
def test_a_shifted_task_passes_a_decision_level_bound_and_not_the_task_level_one(guarantee):
    conf, correct, task = _one_shifted_task(np.random.default_rng(3))
    by_decision = choose(conf, correct, 0.95, guarantee, 0.05)
    assert by_decision.tau < NEVER and by_decision.unit == "decision"
    # it certifies answers that include the shifted task's errors
    assert by_decision.correct < by_decision.answered
    by_task = choose(conf, correct, 0.95, guarantee, 0.05, tasks=task)
    assert by_task.unit == "task" and by_task.tasks == 30
    # conformal may still answer, but only above every wrong answer of the shifted task
    if by_task.tau < NEVER:
        assert by_task.tasks_clean == by_task.tasks_answered
        assert conf[~correct].max() < by_task.tau
    else:
        assert by_task.needs_tasks > 0 and "more than the" in by_task.statement
    assert "30 tasks, 600 decisions" in by_task.statement


def test_the_task_level_bound_counts_tasks_not_decisions():
    """1,000 right decisions from 10 tasks cannot certify 0.95 for a new task; 59 clean tasks can (LTT)."""
    rng = np.random.default_rng(0)
    few = choose(rng.uniform(0.5, 1, 1000), np.ones(1000, bool), 0.95, "ltt", 0.05,
                 tasks=np.repeat(np.arange(10), 100))
    assert few.tau == NEVER and few.needs_tasks == min_answers(0.95, 0.05) - 10 == 49
    assert "needs 59 clean answered tasks, 49 more than the 10" in few.statement
    # by decision
    assert choose(rng.uniform(0.5, 1, 1000), np.ones(1000, bool), 0.95, "ltt", 0.05).tau < NEVER
    many = choose(rng.uniform(0.5, 1, 590), np.ones(590, bool), 0.95, "ltt", 0.05,
                  tasks=np.repeat(np.arange(59), 10))
    assert many.tau < NEVER and many.tasks_answered == many.tasks_clean == 59
    # why 59: all clean, the bound just reaches 0.95
    assert math.isclose(0.05 ** (1 / 59), 0.9505, abs_tol=1e-4)


def test_a_task_is_answered_at_its_highest_confidence_and_clean_above_its_wrong_ones():
    conf = np.array([0.9, 0.5, 0.8, 0.7, 0.95])
    correct = np.array([True, False, True, False, True])
    task = np.array(["a", "a", "b", "b", "c"])
    # q = 0.4: at 0.7 (1 + 1) · 3 / (4 · 3) = 0.5 is too many
    c = choose(conf, correct, 0.6, "conformal", tasks=task)
    # at τ = 0.8: a (0.9, its wrong one at 0.5 below), b (0.8 right; 0.7 wrong below) and c answered, all
    # clean
    assert (c.tau, c.tasks_answered, c.tasks_clean, c.answered, c.correct) == (0.8, 3, 3, 3, 3)


# ---- grounding ------------------------------------------------------------------------------------
PROFILE = '{"user_id": "mia_li_3668", "reservations": ["NO6JO3", "AIXC49", "HKEG34"]}'


def _conversation(user_says: str) -> list[Candidate]:
    return extract_candidates([
        {"role": "user", "content": "Hi, I'm mia_li_3668."},
        {"role": "assistant", "tool_calls": [{"function": {"name": "get_user_details",
                                                            "arguments": '{"user_id": "mia_li_3668"}'}}]},
        {"role": "tool", "content": PROFILE},
        {"role": "user", "content": user_says},
    ])


def test_a_profile_listing_three_reservations_and_a_user_who_names_none():
    c = _conversation("I want to book a new flight to Boston.")
    assert grounding({"reservation_id": "AIXC49"}, c) == "picked"  # out of the list: not the user's words
    assert value_provenance("AIXC49", provenance_of(c)) is Provenance.TOOL
    assert grounding({"user_id": "mia_li_3668"}, c) == "typed"  # typed, and used in a call since: typed wins
    assert value_provenance("mia_li_3668", provenance_of(c)) is Provenance.USER
    assert grounding({}, c) == "bare" and grounding(None, c) == "bare"
    assert grounding({"amount": 0}, c) == "picked"  # a falsy value is a value, not no arguments


def test_the_user_naming_one_reservation():
    c = _conversation("What's the status of reservation HKEG34?")
    assert grounding({"reservation_id": "HKEG34"}, c) == "typed"
    assert grounding({"reservation_id": "HKEG34", "user_id": "mia_li_3668"}, c) == "typed"
    assert grounding({"reservation_id": "NO6JO3"}, c) == "picked"
    # one value nobody typed
    assert grounding({"reservation_id": "HKEG34", "cabin": "economy"}, c) == "picked"
    assert grounding({"passengers": [{"first_name": "Mia"}]}, c) == "picked"  # nested values count too
    assert value_provenance("ZZZZZZ", provenance_of(c)) is Provenance.NONE
