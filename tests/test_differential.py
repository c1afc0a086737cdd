"""Differential test: the compiled runtime agrees with the reference interpreter over the checked AST."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import calls, overflow_dropped, policies, states

from zcompile import interp
from zcompile.driver import check_source, compile_text
from zcompile.source import Source
from zcompile.testing import flat_state
from zcompile.verify import verify


def _checked(src: str):
    with overflow_dropped():
        return check_source(Source("random.zc", src))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_runtime_matches_reference_interpreter(data):
    src, actions = data.draw(policies())
    checked = _checked(src)
    policy = compile_text(src, "random.zc")
    verify(policy.ir)  # the compiler's IR passes the verifier (compile_text does not verify it again)
    for _ in range(5):
        state = data.draw(states(actions))
        intent = data.draw(st.sampled_from([None, "focus"]))
        universe = ([a.text for a in checked.policy.intents[0].allow] if intent else actions)
        want_legal, want_removed, want_fb = interp.legal(
            [(a, checked.costs[a]) for a in actions], checked.targets, checked.policy.rules,
            flat_state(checked, state), universe, checked.fallback)
        got = policy.legal(state, intent)
        assert got.actions == want_legal, (src, state, intent)
        assert got.fallback == want_fb
        got_removed = {a: sorted(r.rule for r in rs) for a, rs in got.removed.items()}
        assert got_removed == {a: sorted(rs) for a, rs in want_removed.items()}, (src, state)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_check_matches_reference_interpreter(data):
    src, actions = data.draw(policies())
    checked = _checked(src)
    policy = compile_text(src, "random.zc")
    for _ in range(5):
        state = data.draw(states(actions))
        action, args = data.draw(calls(actions))
        intent = data.draw(st.sampled_from([None, "focus"]))
        universe = ([a.text for a in checked.policy.intents[0].allow] if intent else actions)
        want_allowed, want_blocked = interp.check(
            [(a, checked.costs[a]) for a in actions], checked.targets, checked.policy.rules,
            checked.params, flat_state(checked, state), universe, checked.fallback, action, args)
        got = policy.check(state, action, args, intent)
        assert got.allowed == want_allowed, (src, state, action, args, intent)
        assert sorted(r.rule for r in got.reasons) == sorted(want_blocked), (src, state, action, args)
