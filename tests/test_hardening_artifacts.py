"""Hand-edited artifacts (hash recomputed) are verified like source: refused, or load and run cleanly."""

from __future__ import annotations

import copy
import hashlib
import json
import random
from functools import partial

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from zcompile import ir
from zcompile.driver import artifact_bytes, compile_source
from zcompile.errors import ZcError
from zcompile.runtime import Policy
from zcompile.source import Source

POLICY = """\
policy shop
state {
  user.role:     enum(customer, agent, admin)
  user.verified: bool
  order.status:  enum(pending, processed)?
  retries:       int = 0
  amount:        float = 0.0
  confirmed:     set[action] = {}
}
action get_order     tags(read)
action cancel_order(reason: enum(late, broken), n: int?)  tags(write, destructive)  cost 2
action retry         tags(control)
action escalate      tags(control)
fallback escalate
intent support { allow get_order, escalate }
rule pending_only: cancel_order requires order.status == pending and user.verified
rule admins:       forbid tags(destructive) unless user.role == admin and self in confirmed
rule bounded:      retry requires retries * 2 < 3 and -amount > -100.0 or cost >= retries
rule ordered:      cancel_order after get_order
rule why:          forbid cancel_order when args.reason == late and args.n > retries
tier small max_ms 100
route first: when user.role in {agent, admin} use small
"""
STATES = [
    {"user": {"role": "admin", "verified": True}, "order": {"status": "pending"}},
    {"user": {"role": "customer", "verified": False}, "retries": 5, "amount": 1e308},
    {"user": {"role": "agent", "verified": True}, "confirmed": ["cancel_order"],
     "history": ["get_order"]},
]


@pytest.fixture(scope="module")
def body() -> dict:
    policy, _ = compile_source(Source("shop.zc", POLICY))
    env = json.loads(artifact_bytes(policy))
    return env["policy"]


def _artifact(body: dict) -> bytes:
    """An artifact whose sha256 matches its (edited) body: only verification can refuse it."""
    raw = json.dumps(body).encode()
    return json.dumps({"format": "zcp", "version": ir.VERSION, "compiler": "hand",
                       "sha256": hashlib.sha256(raw).hexdigest()}).encode()[:-1] + \
        b', "policy": ' + raw + b"}"


def _load(body: dict) -> Policy:
    policy, _ = ir.loads(_artifact(body), "edited.zcp")
    return Policy(policy)


def _exercise(p: Policy) -> None:
    for state in STATES:
        for call in (partial(p.legal, state), partial(p.legal, state, "support"),
                     partial(p.check, state, p.actions[0], {"reason": "late", "n": 3}),
                     partial(p.check, state, p.actions[-1]), partial(p.route, state)):
            try:
                result = call()
            except ZcError:
                continue  # the state no longer fits the edited schema, or an intent is gone
            if hasattr(result, "removed"):
                result.to_dict()


def test_unedited_body_loads(body):
    _exercise(_load(body))


def _rule(body, name):
    return next(r for r in body["rules"] if r["name"] == name)


def _edit_reads(b):
    _rule(b, "pending_only")["reads"] = ["user.verified"]


def _edit_type(b):
    _rule(b, "pending_only")["cond"]["operands"][0]["right"] = {"type": "const", "value": 3}


def _edit_enum(b):
    next(f for f in b["fields"] if f["path"] == "user.role")["members"] = []


def _edit_clash(b):
    b["fields"].append({"path": "user", "kind": "bool"})


def _edit_deep(b):
    cond = {"type": "field", "path": "user.verified"}
    for _ in range(ir.MAX_DEPTH + 1):
        cond = {"type": "not", "operand": cond}
    _rule(b, "pending_only")["cond"] = cond


def _edit_nan(b):
    _rule(b, "pending_only")["cond"]["operands"][0] = {
        "type": "cmp", "op": "<", "left": {"type": "field", "path": "amount"},
        "right": {"type": "const", "value": 10**400}}


@pytest.mark.parametrize("edit, needle", [
    (_edit_reads, "reads"),
    (_edit_type, "compares"),
    (_edit_enum, "no members"),
    (_edit_clash, "clashes"),
    (_edit_deep, "nested"),
    (_edit_nan, "corrupt artifact"),
    (lambda b: b["actions"].append(dict(b["actions"][0])), "declared twice"),
    (lambda b: b.update(fallback="nobody"), "unknown action `nobody`"),
    (lambda b: _rule(b, "why").update(args=[]), "arguments"),
    (lambda b: _rule(b, "bounded")["cond"]["operands"][0]["operands"][0]["left"].update(
        left={"type": "field", "path": "user.verified"}), "needs num"),
    (lambda b: b["routes"][0].update(tiers=["huge"]), "unknown tier"),
    (lambda b: b["routes"][0].update(when={"type": "self"}), "outside a rule"),
    (lambda b: b["actions"][1].update(cost="2"), "corrupt artifact"),
    (lambda b: b["actions"][1].update(cost=10**30), "cost"),
    (lambda b: _rule(b, "admins")["cond"]["operands"][1].update(path="user.role"), "not a set"),
])
def test_the_issue_edits_are_refused(body, edit, needle):
    edited = copy.deepcopy(body)
    edit(edited)
    with pytest.raises(ZcError) as exc:
        _load(edited)
    assert "corrupt artifact" in str(exc.value) and needle in str(exc.value), str(exc.value)


# ---- random edits -------------------------------------------------------------------------------
def _paths(node, here=()):
    """Every (path, value) of a JSON tree."""
    yield here, node
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _paths(v, here + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _paths(v, here + (i,))


NAMES = ["user.role", "user", "amount", "retries", "confirmed", "history", "admin", "pending",
         "cancel_order", "escalate", "nobody", "reason", "late", "n", "", "x.y.", "small"]
TAGS = ["field", "arg", "len", "const", "self", "cost", "not", "and", "or", "cmp", "in_const",
        "in_set", "arith", "neg"]
VALUES = st.one_of(st.sampled_from(NAMES), st.sampled_from(TAGS), st.integers(-3, 3),
                   st.sampled_from([2**63, -(2**70), 1e308, -1e308, 0.5]), st.booleans(), st.none(),
                   st.just([]), st.just({}), st.lists(st.sampled_from(NAMES), max_size=3),
                   st.just({"type": "field", "path": "amount"}),
                   st.just({"type": "const", "value": "admin"}),
                   st.just({"type": "and", "operands": []}))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.integers(0, 10**6), st.sampled_from(["set", "drop", "dup"]), VALUES),
                min_size=1, max_size=3))
def test_random_edits_are_refused_or_run_cleanly(body, edits):
    edited = copy.deepcopy(body)
    for pick, how, value in edits:
        spots = [(p, v) for p, v in _paths(edited) if p]
        path, _ = spots[pick % len(spots)]
        parent = edited
        for k in path[:-1]:
            parent = parent[k]
        key = path[-1]
        if how == "set":
            parent[key] = copy.deepcopy(value)  # a fresh copy: a shared one could make a cycle
        elif how == "drop":
            del parent[key]
        elif isinstance(parent, list):
            parent.insert(key, copy.deepcopy(parent[key]))
        else:
            parent[key] = copy.deepcopy(parent[key])
    try:
        p = _load(edited)
    except ZcError as exc:
        assert str(exc).startswith("edited.zcp: corrupt artifact") or "corrupt artifact" in str(exc)
        return
    _exercise(p)  # loaded: every evaluation answers or raises a ZcError, never anything else


def test_random_edits_seeded_bulk(body):
    """A seeded generator of 2,000 single edits, for a fixed, wide sweep beside Hypothesis."""
    rng = random.Random(15)
    values = [*NAMES, *TAGS, 0, 1, -1, 2**63, 1e308, True, False, None, [], {}]
    loaded = refused = 0
    for _ in range(2000):
        edited = copy.deepcopy(body)
        spots = [(p, v) for p, v in _paths(edited) if p]
        path, _ = rng.choice(spots)
        parent = edited
        for k in path[:-1]:
            parent = parent[k]
        parent[path[-1]] = rng.choice(values)
        try:
            p = _load(edited)
        except ZcError:
            refused += 1
            continue
        loaded += 1
        _exercise(p)
    assert refused > 1000 and loaded > 50  # both outcomes are exercised
