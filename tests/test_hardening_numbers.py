"""Numbers never fail open: non-finite and out-of-range values are refused, overflow is unknown."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from zcompile import interp
from zcompile.driver import check_source, compile_text
from zcompile.errors import ZcError
from zcompile.source import Source
from zcompile.state import StateError

POLICY = """\
policy money
state {
  spend:  float = 0.0
  limit:  float?
  n:      int = 0
  box.m:  int?
}
action pay(amount: float, times: int?)
action wait
fallback wait
rule cap:      forbid pay when spend > 10.0
rule inf_diff: forbid pay when spend - spend > 1.0
rule scaled:   pay requires spend * 10.0 < 1.0e300
rule counted:  forbid pay when n * n * n > 5
rule args_cap: forbid pay when args.amount > 10.0
"""
NON_FINITE = [math.nan, math.inf, -math.inf]
HUGE_INTS = [2**63, -(2**63) - 1, 10**400, -(10**30)]


@pytest.fixture(scope="module")
def policy():
    return compile_text(POLICY, "money.zc")


@pytest.mark.parametrize("value", NON_FINITE + [10**400])
@pytest.mark.parametrize("where", [("spend",), ("limit",)])
def test_non_finite_state_numbers_are_refused_with_their_path(policy, value, where):
    with pytest.raises(StateError) as exc:
        policy.legal({where[0]: value})
    assert exc.value.path == f"$.{where[0]}"
    assert str(exc.value).startswith(f"$.{where[0]}: ")


@pytest.mark.parametrize("value", HUGE_INTS + [1.5])
def test_integers_past_64_bits_are_refused(policy, value):
    with pytest.raises(StateError) as exc:
        policy.legal({"box": {"m": value}})
    assert exc.value.path == "$.box.m"


@pytest.mark.parametrize("value", NON_FINITE + [10**400])
def test_non_finite_arguments_never_allow_a_call(policy, value):
    verdict = policy.check({}, "pay", {"amount": value})
    assert not verdict.allowed
    assert any(r.kind == "schema" for r in verdict.reasons)


def test_overflow_at_evaluation_is_unknown_and_removes(policy):
    # 1e308 * 10 is +inf: `spend * 10.0 < 1e300` is unknown, so `pay` is not kept (fail closed)
    got = policy.legal({"spend": 1e308})
    assert "pay" not in got
    assert {r.rule for r in got.removed["pay"]} >= {"cap", "scaled"}
    # 2**62 cubed is past every float: unknown, removed
    assert "pay" not in policy.legal({"n": 2**62})
    assert "pay" in policy.legal({"n": 1})


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spend=st.floats(allow_nan=True, allow_infinity=True),
       n=st.one_of(st.integers(), st.integers(-(2**63), 2**63 - 1)),
       amount=st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers()))
def test_any_number_is_refused_or_judged_like_the_reference(policy, spend, n, amount):
    """Whatever the numbers, either the state is refused (naming the field) or `pay` is legal
    exactly when the reference interpreter keeps it, and a call is allowed only then."""
    state = {"spend": spend, "n": n}
    finite = math.isfinite(spend) and -(2**63) <= n < 2**63
    try:
        got = policy.legal(state)
    except StateError as exc:
        assert not finite and exc.path in ("$.spend", "$.n")
        return
    assert finite
    checked = check_source(Source("money.zc", POLICY))
    flat = {"spend": float(spend), "limit": None, "n": n, "box.m": None, "history": None}
    want, _, _ = interp.legal([(a.name.text, 0) for a in checked.actions], checked.targets,
                              checked.policy.rules, flat, ["pay", "wait"], "wait")
    assert got.actions == want
    verdict = policy.check(state, "pay", {"amount": amount})
    if verdict.allowed:
        assert "pay" in got and isinstance(amount, (int, float)) and math.isfinite(amount)
        assert amount <= 10.0 and (isinstance(amount, float) or -(2**63) <= amount < 2**63)


@settings(max_examples=120, deadline=None)
@given(st.one_of(
    st.tuples(st.sampled_from("123456789"), st.sampled_from("0123456789"), st.integers(0, 6000))
    .map(lambda t: t[0] + t[1] * t[2]),  # 1 to 6,001 digits
    st.tuples(st.integers(0, 10**30), st.integers(0, 10**5), st.integers(-999, 9999))
    .map(lambda t: f"{t[0]}.{t[1]}e{t[2]}"),
    st.text("0123456789", min_size=1, max_size=40)))
def test_random_number_literals_compile_or_get_zc0008(literal):
    """Any number literal (400, 5,000 digits; huge exponents) compiles and runs, or is ZC0008."""
    src = POLICY + f"rule lit: forbid pay when spend > {literal} or n == {literal.split('.')[0]}\n" \
        + f"action big cost {literal}\n"
    try:
        p = compile_text(src, "lit.zc")
    except ZcError as exc:
        assert {d.code for d in exc.diagnostics} <= {"ZC0008", "ZC0313"}, exc.render()
        assert exc.diagnostics
        return
    assert math.isfinite(float(literal))
    p.legal({"spend": 1.0})


@settings(max_examples=80, deadline=None)
@given(a=st.floats(allow_nan=False, allow_infinity=False), b=st.floats(allow_nan=False,
       allow_infinity=False), op=st.sampled_from(["+", "-", "*"]))
def test_constant_arithmetic_folds_or_is_zc0313(a, b, op):
    """Arithmetic on literals that overflows is refused at check time; otherwise it runs."""
    src = POLICY + f"rule folded: forbid pay when spend > {a:.17e} {op} ({b:.17e})\n"
    exact = {"+": a + b, "-": a - b, "*": a * b}[op]
    try:
        p = compile_text(src, "fold.zc")
    except ZcError as exc:
        assert [d.code for d in exc.diagnostics] == ["ZC0313"], exc.render()
        assert not math.isfinite(exact)
        return
    assert math.isfinite(exact)
    assert ("pay" in p.legal({})) == (not 0.0 > exact)


@pytest.mark.parametrize("text, where", [
    ('{"spend": 1e999}', "$.spend"),
    ('{"n": 1' + "0" * 400 + "}", "$.n"),
    ('{"spend": 1' + "0" * 400 + "}", "$.spend"),
    ('{"spend": -1e400}', "$.spend"),
])
def test_json_numbers_out_of_range_name_their_path(tmp_path, text, where):
    from click.testing import CliRunner

    from zcompile.cli import main

    (tmp_path / "money.zc").write_text(POLICY)
    (tmp_path / "s.json").write_text(text)
    result = CliRunner().invoke(main, ["legal", str(tmp_path / "money.zc"), "--state",
                                       str(tmp_path / "s.json")])
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output and f"{where}" in result.output, result.output
    json.loads(text)  # the input itself is valid JSON: the refusal is about range, not syntax
