"""`zc pdp` against the policy itself, on random policies, states and calls (the differential
test's generators): every decision is `Policy.check`'s, every action search the legal set, every
batch its semantic's prefix, and paging through a search gives the whole answer once."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import calls, overflow_dropped, policies, states

from zcompile.authzen import PDP, MappingFile
from zcompile.authzen.mapping import Mapping
from zcompile.authzen.model import BadInput
from zcompile.driver import compile_text
from zcompile.state import StateError

SUB, RES = {"type": "agent", "id": "a1"}, {"type": "desk", "id": "d1"}


def _pdp(src: str, max_page: int = 1000) -> PDP:
    with overflow_dropped():
        policy = compile_text(src, "random.zc")
    mapping = Mapping(MappingFile(intent="context.zc_intent"), policy)
    return PDP(policy, mapping, max_page=max_page)


def _request(state: dict, intent: str | None, name: str, args: dict) -> dict:
    context = json.loads(json.dumps(state))  # what a PEP would send: JSON
    if intent is not None:
        context["zc_intent"] = intent
    return {"subject": SUB, "action": {"name": name, "properties": args}, "resource": RES, "context": context}


def _expected(policy, state, name, args, intent) -> bool | None:
    try:
        return policy.check(state, name, args, intent).allowed
    except StateError:
        return None


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_decisions_are_the_policys(data):
    src, actions = data.draw(policies())
    pdp = _pdp(src)
    for _ in range(4):
        state = data.draw(states(actions))
        intent = data.draw(st.sampled_from([None, "focus"]))
        name, args = data.draw(calls(actions))
        want = _expected(pdp.policy, state, name, args, intent)
        if want is None:
            with pytest.raises(BadInput):
                pdp.evaluate(_request(state, intent, name, args))
            continue
        got = pdp.evaluate(_request(state, intent, name, args))
        assert got["decision"] is want, (src, state, name, args)
        if not want:
            reasons = pdp.policy.check(state, name, args, intent).reasons
            assert [r["rule"] for r in got["context"]["zc"]["reasons"]] == [r.rule for r in reasons]
        search = pdp.search_action({"subject": SUB, "resource": RES,
                                    "context": _request(state, intent, "x", {})["context"]})
        assert [x["name"] for x in search["results"]] == list(pdp.policy.legal(state, intent).actions)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_batches_stop_where_their_semantic_says(data):
    src, actions = data.draw(policies())
    pdp = _pdp(src)
    state = data.draw(states(actions))
    if _expected(pdp.policy, state, actions[0], {}, None) is None:
        return
    drawn = data.draw(st.lists(calls(actions), min_size=1, max_size=6))
    semantic = data.draw(st.sampled_from(["execute_all", "deny_on_first_deny", "permit_on_first_permit"]))
    want = [pdp.policy.check(state, n, a).allowed for n, a in drawn]
    stop = {"execute_all": None, "deny_on_first_deny": False, "permit_on_first_permit": True}[semantic]
    if stop is not None and stop in want:
        want = want[:want.index(stop) + 1]
    body = {"subject": SUB, "resource": RES, "context": json.loads(json.dumps(state)),
            "options": {"evaluations_semantic": semantic},
            "evaluations": [{"action": {"name": n, "properties": a}} for n, a in drawn]}
    assert [d["decision"] for d in pdp.evaluate_many(body)["evaluations"]] == want


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_paging_returns_the_whole_answer_once(data):
    src, actions = data.draw(policies())
    pdp = _pdp(src, max_page=data.draw(st.integers(1, 4)))
    state = data.draw(states(actions))
    if _expected(pdp.policy, state, actions[0], {}, None) is None:
        return
    body = {"subject": SUB, "resource": RES, "context": json.loads(json.dumps(state))}
    limit = data.draw(st.one_of(st.none(), st.integers(1, 5)))
    if limit is not None:
        body["page"] = {"limit": limit}
    got, token = [], None
    for _ in range(len(actions) + 2):
        b = json.loads(json.dumps(body))
        if token:
            b.setdefault("page", {})["token"] = token
        answer = pdp.search_action(b)
        got += [x["name"] for x in answer["results"]]
        token = answer["page"]["next_token"]
        if not token:
            break
    assert got == list(pdp.policy.legal(state).actions) and not token
