"""The noise floor (evals/floor.py): the teacher's agreement with itself at the same state, by hand."""

from __future__ import annotations

from types import SimpleNamespace as NS

import pytest

import zcompile
from zcompile.evals.floor import NoiseFloor

POLICY = """
policy p
state {
  step: int = 0
  note: text?
}
action lookup(id: text) tags(read)
action cancel(id: text) tags(write)
action respond tags(control, reply)
fallback respond
"""


def d(task: str, step: int, acceptable: tuple, note: str = "") -> NS:
    return NS(task=task, state={"step": step, "note": note, "history": []}, acceptable=acceptable)


LOOK = ("lookup", '{"id":"A"}')
LOOK_B = ("lookup", '{"id":"B"}')
REPLY = ("respond", None)


@pytest.fixture
def policy():
    return zcompile.compile_text(POLICY)


def test_agreement_strict_and_acceptable_by_hand(policy):
    f = NoiseFloor(policy)
    # task t, state step=1, three trials: lookup A; reply (then lookup A); lookup B
    f.add(d("t", 1, (LOOK,), "x"), "c1")
    f.add(d("t", 1, (REPLY, LOOK), "y"), "c2")  # the note is text: not part of the state
    f.add(d("t", 1, (LOOK_B,)), "c3")
    f.add(d("t", 2, (REPLY,)), "c1")  # a state met in one trial only: no pair
    f.add(d("u", 1, (LOOK,)), "c9")  # another task: apart
    got = f.figures()
    assert (got["states"], got["decisions"], got["pairs"]) == (1, 3, 6)
    # strict: c1 agrees with none of c2, c3; c2 with none; c3 with none
    assert got["strict"]["rate"] == 0.0
    # acceptable: c1's lookup A is acceptable at c2 (1 of 2); c2's reply is not acceptable at c1 or c3
    # (0 of 2); c3's lookup B at neither (0 of 2): mean of 1/2, 0, 0
    assert got["acceptable"]["rate"] == pytest.approx(1 / 6)
    lo, hi = got["acceptable"]["ci"]
    assert lo <= got["acceptable"]["rate"] <= hi


def test_the_same_conversation_is_never_its_own_witness(policy):
    f = NoiseFloor(policy)
    f.add(d("t", 1, (LOOK,)), "c1")
    f.add(d("t", 1, (LOOK,)), "c1")
    got = f.figures()
    assert got["decisions"] == 0 and got["strict"]["rate"] is None


def test_full_agreement(policy):
    f = NoiseFloor(policy)
    for c in ("c1", "c2", "c3"):
        f.add(d("t", 1, (LOOK,)), c)
        f.add(d("t", 2, (REPLY,)), c)
    got = f.figures()
    assert got["strict"] == {"rate": 1.0, "ci": [1.0, 1.0]} and got["acceptable"]["rate"] == 1.0
