"""One test per sentence of the semantics in docs/design.md (and docs/language.md's semantics)."""

from __future__ import annotations

import pytest

import zcompile
from zcompile import StateError, ZcError

BASE = """
policy sem
state {
  role:    enum(customer, admin)
  status:  enum(pending, done)?
  outcome: enum(ok, timeout) = ok
  units:   int = 10
  ok_set:  set[action] = {}
}
action read    tags(read)            cost 1
action write   tags(write)           cost 3
action nuke    tags(destructive)     cost 8
action escalate tags(control)
fallback escalate
intent look { allow read, escalate }
"""


def policy(rules: str = "") -> zcompile.Policy:
    return zcompile.compile_text(BASE + rules, "sem.zc")


def removed_by(ls, action):
    return [r.rule for r in ls.removed.get(action, ())]


S = {"role": "customer"}


def test_universe_is_every_action_without_intent():
    assert policy().legal(S).actions == ("read", "write", "nuke", "escalate")


def test_universe_is_intent_allow_list_and_default_deny_is_a_reason():
    ls = policy().legal(S, intent="look")
    assert ls.actions == ("read", "escalate")
    assert [r.kind for r in ls.removed["write"]] == ["intent"]
    assert "look" in ls.removed["write"][0].message


def test_requires_keeps_targets_only_when_true():
    p = policy("rule r: write requires role == admin\n")
    assert "write" in p.legal({"role": "admin"}).actions
    assert removed_by(p.legal(S), "write") == ["r"]


def test_forbid_when_removes_when_true():
    p = policy("rule r: forbid write when outcome == timeout\n")
    assert "write" in p.legal(S).actions
    assert removed_by(p.legal({**S, "outcome": "timeout"}), "write") == ["r"]


def test_forbid_unless_removes_unless_true():
    p = policy("rule r: forbid nuke unless role == admin\n")
    assert "nuke" in p.legal({"role": "admin"}).actions
    assert removed_by(p.legal(S), "nuke") == ["r"]


def test_after_requires_each_in_history():
    p = policy("rule r: write after read, nuke\n")
    assert removed_by(p.legal({**S, "history": ["read"]}), "write") == ["r"]
    assert "write" in p.legal({**S, "history": ["read", "nuke"]}).actions
    assert "`nuke`" in p.legal({**S, "history": ["read"]}).removed["write"][0].message


def test_deny_wins_and_rule_order_does_not_matter():
    a = policy("rule p: write requires role == customer\nrule f: forbid write when units < 20\n")
    b = policy("rule f: forbid write when units < 20\nrule p: write requires role == customer\n")
    for p in (a, b):
        assert removed_by(p.legal(S), "write") == ["f"]
        assert removed_by(p.legal({"role": "admin", "units": 30}), "write") == ["p"]


@pytest.mark.parametrize("rule, legal", [
    ("rule r: write requires status == pending\n", False),   # unknown is not true: removed
    ("rule r: forbid write when status == pending\n", False),  # unknown is not false: removed
    ("rule r: forbid write unless status == pending\n", False),
    ("rule r: forbid write when status == pending and role == admin\n", True),  # false and unknown = false
    ("rule r: write requires status == pending or role == customer\n", True),  # unknown or true = true
    ("rule r: write requires not (status == pending)\n", False),  # not unknown = unknown
])
def test_absent_optional_field_is_unknown_and_fails_closed(rule, legal):
    ls = policy(rule).legal(S)  # `status` absent
    assert ("write" in ls.actions) is legal


def test_null_is_absent():
    p = policy("rule r: write requires status == pending\n")
    assert "write" not in p.legal({**S, "status": None}).actions
    assert "write" in p.legal({**S, "status": "pending"}).actions


def test_defaults_apply_when_absent():
    p = policy("rule r: forbid write when outcome != ok or units < 5\n")
    assert "write" in p.legal(S).actions


def test_every_removal_carries_every_reason_with_values_and_span():
    p = policy("rule a: forbid nuke unless role == admin\nrule b: nuke requires self in ok_set\n"
               "rule c: forbid * when cost > units\n")
    reasons = p.legal(S).removed["nuke"]
    assert [r.rule for r in reasons] == ["a", "b"]
    assert reasons[0].values == (("role", "customer"),)
    assert reasons[0].span.line == BASE.count("\n") + 1
    assert "role = customer" in reasons[0].message
    cost_reason = p.legal({**S, "role": "admin", "ok_set": ["nuke"], "units": 5}).removed["nuke"][0]
    assert cost_reason.rule == "c" and ("cost", 8) in cost_reason.values


def test_empty_legal_set_returns_fallback_flagged():
    p = policy("rule r: forbid * when role == customer\n")
    ls = p.legal(S)
    assert ls.actions == ("escalate",) and ls.fallback
    assert set(ls.removed) == {"read", "write", "nuke"}
    assert not p.legal({"role": "admin"}).fallback


def test_policy_without_fallback_is_an_error():
    with pytest.raises(ZcError) as exc:
        zcompile.compile_text(BASE.replace("fallback escalate", ""))
    assert [d.code for d in exc.value.diagnostics] == ["ZC0108"]


def test_rule_reading_text_field_is_an_error():
    with pytest.raises(ZcError) as exc:
        zcompile.compile_text(BASE.replace("state {", "state {\n  note: text?") +
                              "rule r: write requires note == note\n")
    assert "ZC0305" in {d.code for d in exc.value.diagnostics}


def test_targets_list_tags_and_star():
    p = policy("rule a: forbid read, write when units < 0\nrule b: forbid tags(destructive) when true\n"
               "rule c: forbid * when units > 100\n")
    assert p.legal(S).actions == ("read", "write", "escalate")
    assert removed_by(p.legal({**S, "units": -1}), "write") == ["a"]
    assert p.legal({**S, "units": 101}).fallback


def test_self_and_cost_and_arithmetic():
    p = policy("rule r: forbid * when cost * 2 > units + 1\nrule s: forbid * when self == read and units == "
               "99\n")
    assert p.legal({**S, "units": 4}).actions == ("read", "escalate")
    assert removed_by(p.legal({**S, "units": 99}), "read") == ["s"]


def test_in_sets_and_not_in():
    p = policy("rule r: write requires outcome not in {timeout} and units in {10, 11}\n")
    assert "write" in p.legal(S).actions
    assert "write" not in p.legal({**S, "units": 12}).actions


def test_dotted_fields_read_nested_objects():
    p = zcompile.compile_text("policy d\nstate { user.role: enum(a, b) }\naction x\naction y\nfallback y\n"
                              "rule r: x requires user.role == a\n")
    assert "x" in p.legal({"user": {"role": "a"}}).actions
    assert "x" not in p.legal({"user": {"role": "b"}}).actions


def test_invalid_state_is_an_error_not_a_guess():
    p = policy()
    with pytest.raises(StateError, match=r"\$\.role: expected one of customer\|admin, got \"root\""):
        p.legal({"role": "root"})
    with pytest.raises(StateError, match=r"\$\.role: required field is missing"):
        p.legal({})
    with pytest.raises(StateError, match=r"\$\.units: expected `int"):
        p.legal({**S, "units": "3"})
    with pytest.raises(StateError, match=r"\$: expected `object`, got `array`"):
        p.legal([])
    with pytest.raises(StateError, match=r"\$\.ok_set\[0\]: expected one of"):
        p.legal({**S, "ok_set": ["bogus"]})


def test_unknown_keys_ignored_unless_strict():
    p = policy()
    assert p.legal({**S, "extra": 1}).actions
    with pytest.raises(StateError, match="extra"):
        p.legal({**S, "extra": 1}, strict=True)


def test_unknown_intent_is_an_error():
    with pytest.raises(ZcError, match="did you mean `look`"):
        policy().legal(S, intent="lok")


def test_routes_first_holding_route_wins():
    src = BASE + "tier specialist max_ms 5\ntier big cost 10\n" \
        "route fault: when outcome != ok use big\nroute default: use specialist, big\n"
    p = zcompile.compile_text(src)
    assert p.route({**S, "outcome": "timeout"}).name == "fault"
    assert p.route(S).tiers == ("specialist", "big")


def test_design_example_compiles_unchanged():
    import pathlib
    import re

    design = pathlib.Path(__file__).parents[1] / "docs" / "design.md"
    blocks = re.findall(r"```zc\n(policy .*?)```", design.read_text(), re.S)
    assert len(blocks) == 1
    golden = pathlib.Path(__file__).parent / "golden" / "ok" / "support_desk.zc"
    zcompile.compile_text(blocks[0], "design.zc")
    assert golden.read_text() == blocks[0]
