"""Call arguments: candidate extraction, the argument model's choices and abstentions, numpy parity, the
spec."""

from __future__ import annotations

import json
import random
import time

import msgspec
import numpy as np
import pytest
from isolation import modules_after

from zcompile.qroute import arguments as A
from zcompile.qroute.arguments import (
    ArgumentModel,
    ArgumentModelSpec,
    ArgumentScorer,
    Candidate,
    _rows,
    call_examples,
    normalize,
    shape,
)
from zcompile.receipts.candidates import extract_candidates


def call(name: str, **args) -> dict:
    return {"role": "assistant", "content": None,
            "tool_calls": [{"id": "c", "type": "function", "function": {"name": name, "arguments": json.dumps(
                args)}}]}


def by(cands: list[Candidate], source: str) -> dict:
    return {(c.value, c.key): c for c in cands if c.source == source}


# --- candidates ------------------------------------------------------------------------------


def test_user_spans_are_typed_and_keyed_empty():
    msgs = [{"role": "system", "content": "policy SECRET_9 text"},
            {"role": "user", "content": "I'm mia_li_3668, mail mia.li@example.com. Reservation 8JX2WO on "
                                        "2024-05-20 from JFK, 3 bags, $30.50 paid, card 0042."}]
    user = by(extract_candidates(msgs), "user")
    for value in ("mia_li_3668", "mia.li@example.com", "8JX2WO", "2024-05-20", "JFK", 3, 30.5, "0042"):
        assert (value, "") in user, value
    assert isinstance(user[(3, "")].value, int) and isinstance(user[(30.5, "")].value, float)
    assert not any(c.value == "SECRET_9" for c in extract_candidates(msgs))  # the system prompt is skipped


def test_tool_leaves_keep_their_key_and_calls_their_action():
    out = {"user_id": "u_1", "name": {"first_name": "Mia"}, "reservations": ["AAA111", "BBB222"],
           "payment": [{"id": "gift_card_1", "amount": 100.0, "ok": True}], "note": None}
    msgs = [{"role": "user", "content": "hi"}, call("get_user", user_id="u_1"),
            {"role": "tool", "content": json.dumps(out)}]
    cands = extract_candidates(msgs)
    tool = by(cands, "tool")
    assert set(tool) == {("u_1", "user_id"), ("Mia", "first_name"), ("AAA111", "reservations"),
                         ("BBB222", "reservations"), ("gift_card_1", "id"), (100, "amount"), (True, "ok")}
    assert isinstance(tool[(100, "amount")].value, int)  # 100.0 arrives as 100
    assert by(cands, "call") == {("u_1", "get_user.user_id"): Candidate(
        "u_1", "call", "get_user.user_id", 2, 1)}
    # list order inside a message is kept (a scorer reads siblings' positions from it)
    assert [c.value for c in cands if c.key == "reservations"] == ["AAA111", "BBB222"]


def test_recency_counts_and_a_plain_text_tool_output():
    msgs = [{"role": "user", "content": "order W1 please"},
            {"role": "tool", "content": "Error: order W1 not found"},
            {"role": "assistant", "content": "Which order, W1 or W2?"},  # assistant text is not a source
            {"role": "user", "content": "W1, W1 really"}]
    cands = extract_candidates(msgs)
    w1 = by(cands, "user")[("W1", "")]
    assert (w1.age, w1.count) == (1, 3)  # last seen in the last message, three times over two messages
    assert by(cands, "tool")[("W1", "")].age == 3
    assert ("W2", "") not in by(cands, "user") and not by(cands, "call")
    assert [c.age for c in cands] == sorted(c.age for c in cands)


def test_limit_keeps_the_most_recent():
    msgs = [{"role": "user", "content": f"id_{i}"} for i in range(50)]
    cands = extract_candidates(msgs, limit=10)
    assert [c.value for c in cands] == [f"id_{i}" for i in range(49, 39, -1)]


def test_hostile_tool_outputs_are_bounded():
    deep = "[" * 100_000 + "]" * 100_000
    nested: object = "leaf_0"
    for _ in range(200):
        nested = {"k": nested}
    huge = json.dumps([{"id": f"x_{i}", "n": i} for i in range(200_000)])
    msgs = [{"role": "tool", "content": deep}, {"role": "tool", "content": json.dumps(nested)},
            {"role": "tool", "content": huge}, {"role": "tool", "content": "word " * 1_000_000},
            {"role": "user", "content": None}, {"role": "tool", "content": [{"type": "text", "text": "T_1"}]},
            "not a message", {"role": "assistant", "tool_calls": [{"function": {"arguments": "{bad"}}]}]
    start = time.process_time()
    cands = extract_candidates(msgs)
    assert time.process_time() - start < 5  # a generous sanity bound, not a speed claim
    assert len(cands) <= 256 and any(c.value == "T_1" for c in cands)
    assert not any(c.value == "leaf_0" for c in cands)  # beyond the depth followed


def test_normalize_compares_json_values():
    assert normalize(1) == normalize(1.0) and normalize({"a": 1, "b": [2.0]}) == normalize({"b": [
        2], "a": 1.0})
    assert normalize(True) != normalize(1) and normalize("1") != normalize(1)
    assert shape("mia_li_3668") == "a_a_9:4" and shape("mia_li_3668", fine=False) == "a_a_9"
    assert shape("8JX2WO") == "X:6" and shape("2024-05-20") == "9:4-9:2-9:2" and shape(3) == "int"


def test_candidate_encodes_compactly():
    c = Candidate("8JX2WO", "tool", "reservations", 3, 1)
    assert msgspec.json.encode(c) == b'["8JX2WO","tool","reservations",3,1]'
    assert msgspec.json.decode(b'["8JX2WO","tool","reservations",3,1]', type=Candidate) == c
    with pytest.raises(msgspec.ValidationError):
        msgspec.json.decode(b'["x","llm","",1,1]', type=Candidate)


# --- the model -------------------------------------------------------------------------------

LOOKUP = {"type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]}
REFUND = {"type": "object", "required": ["order_id", "amount", "reason"],
          "properties": {"order_id": {"type": "string"}, "amount": {"type": "number"},
                         "reason": {"type": "string", "enum": ["damaged", "late"]},
                         "note": {"type": "string"}}}
ITEMS = {"type": "object", "properties": {"items": {"type": "array"}}, "required": ["items"]}


def conversation(rng: random.Random) -> tuple[list[dict], list[tuple[str, dict, list[dict], dict]]]:
    """A synthetic shop chat: the user names an order among distractors, the agent looks it up and refunds.

    The looked-up order is the one the user names (a tool output lists all the user's orders, so
    shape alone does not decide); the refund reuses the looked-up order and the record's `total`
    (not the other numbers around), with the reason the user said (an enum, spelt with a capital).
    """
    def oid() -> str:
        return "".join(rng.choice("ABCDEFGHJKLMNPQRSTUVWXYZ0123456789") for _ in range(6))

    orders = [oid() for _ in range(rng.randint(3, 5))]
    target = rng.choice(orders)
    user = f"user_{rng.randint(100, 999)}"
    msgs = [{"role": "user", "content": f"Hi, I am {user} and I have {len(orders)} orders."},
            call("get_user", user_id=user),
            {"role": "tool", "content": json.dumps({"user_id": user, "orders": orders,
                                                    "zip": rng.randint(10000, 99999)})},
            {"role": "user", "content": f"The order {target} came {rng.choice(['Damaged', 'Late'])}, "
                                        f"{rng.randint(2, 9)} days ago, code {oid()}."}]
    calls = [("lookup", LOOKUP, list(msgs), {"order_id": target})]
    total = round(rng.uniform(10, 500), 2)
    msgs += [call("lookup", order_id=target),
             {"role": "tool", "content": json.dumps({"order_id": target, "total": total,
                                                     "items": rng.randint(1, 4),
                                                     "weight": round(rng.uniform(1, 9), 1)})}]
    reason = "damaged" if "Damaged" in msgs[3]["content"] else "late"
    calls.append(("refund", REFUND, list(msgs), {"order_id": target, "amount": total, "reason": reason}))
    return msgs, calls


def dataset(seed: int, n: int) -> list[tuple[str, dict, list[Candidate], dict, str]]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        for action, params, before, args in conversation(rng)[1]:
            out.append((action, params, extract_candidates(before), args, f"{seed}-{i}"))
    return out


def examples(data):
    return [e for a, p, c, args, g in data for e in call_examples(a, p, c, args, group=g)]


@pytest.fixture(scope="module")
def fitted():
    return {kind: ArgumentModel(kind=kind, n_estimators=30).fit(examples(dataset(0, 40)))
            for kind in ("gbt", "logistic")}


def test_the_model_picks_the_teachers_values(fitted):
    test = dataset(1, 40)
    for kind in ("gbt", "logistic"):
        scorer = ArgumentScorer(fitted[kind].spec())
        props = [scorer.propose(a, p, c) for a, p, c, _, _ in test]
        exact = sum(pr.arguments == args for pr, (_, _, _, args, _) in zip(props, test))
        answered = [pr for pr in props if pr.arguments is not None]
        assert exact >= 0.9 * len(test), (kind, exact, len(test))
        assert all(0 < pr.confidence <= 1 for pr in answered)
        # an optional argument training never saw passed
        assert all("note" not in pr.arguments for pr in answered)


def test_above_max_rows_the_classifier_trains_on_a_seeded_sample(fitted):
    """Bounded training: whole arguments sampled (seeded), statistics from every example, and the
    sampled model still picks the teacher's values."""
    rows = examples(dataset(0, 40))
    total = sum(len(e.candidates) for e in rows if e.present)  # the arguments the teacher passed
    full = fitted["gbt"]
    assert full.sampled_ is None and full.rows_ > total // 4
    fit = lambda seed: ArgumentModel(n_estimators=30, max_rows=total // 4, seed=seed).fit(rows)  # noqa: E731
    small, again, other = fit(0), fit(0), fit(1)
    kept, n, seen = small.sampled_
    assert (seen == total and n == sum(e.present for e in rows) and 0 < kept < n
            and small.rows_ < full.rows_ / 2)
    assert small.spec() == again.spec() and other.spec() != small.spec()
    assert small.spec().actions == full.spec().actions and small.spec().names == full.spec().names
    test = dataset(1, 40)
    scorer = ArgumentScorer(small.spec())
    exact = sum(scorer.propose(a, p, c).arguments == args for a, p, c, args, _ in test)
    assert exact >= 0.8 * len(test), (exact, len(test))


def test_the_model_abstains_when_no_candidate_fits(fitted):
    scorer = ArgumentScorer(fitted["gbt"].spec())
    nothing = scorer.propose("lookup", LOOKUP, [])
    assert (nothing.arguments is None and nothing.confidence == 0.0
            and nothing.confidences == {"order_id": 0.0})
    # a boolean fills neither a string, a number nor an enum
    assert scorer.propose("refund", REFUND, [Candidate(True, "user", "", 1, 1)]).arguments is None
    cands = dataset(2, 1)[1][2]
    assert scorer.propose("pack", ITEMS, cands).arguments is None  # arrays are not built from scalars
    # an action with no arguments is complete as it is
    assert scorer.propose("ping", {"type": "object", "properties": {}}, cands).arguments == {}


def test_the_model_abstains_when_two_values_fit_equally(fitted):
    """A rival order named in the same breath: the model never picks it with confidence, abstains
    when the rival is named first (in training the first order the user names is the one), and its
    confidence is the best value's probability discounted by the rival's: p_best * (1 - p_second)."""
    scorer = ArgumentScorer(fitted["gbt"].spec())
    for seed in range(5, 10):
        _, _, cands, args, _ = dataset(seed, 1)[0]
        clear = scorer.propose("lookup", LOOKUP, cands)
        assert clear.arguments == args and clear.confidence >= 0.5
        rival = [msgspec.structs.replace(c, value="ZZ99ZZ") for c in cands if c.value == args["order_id"]]
        after = scorer.propose("lookup", LOOKUP, cands + rival)
        assert after.arguments in (None, args) and after.confidences["order_id"] <= clear.confidence
        first = scorer.propose("lookup", LOOKUP, rival + cands)
        assert first.arguments is None and first.confidences["order_id"] == 0.0
        values, norms, rows = A._rows("lookup", "order_id", {"type": "string"}, rival + cands,
                                      scorer.stats("lookup", "order_id"))
        best: dict[str, float] = {}
        for key, p in zip(norms, scorer.predict_proba(rows)):
            best[key] = max(best.get(key, 0.0), float(p))
        top, second = sorted(best.values(), reverse=True)[:2]
        assert scorer.choose("lookup", "order_id", {"type": "string"}, rival + cands)[1] == pytest.approx(
            top * (1 - second))


def test_numpy_scoring_equals_sklearn(fitted):
    data = dataset(3, 20)
    for kind, model in fitted.items():
        scorer = ArgumentScorer(model.spec())
        xs = [_rows(a, name, schema, c, scorer.stats(a, name))[2]
              for a, p, c, _, _ in data for name, schema in p["properties"].items()]
        x = np.concatenate([r for r in xs if len(r)])
        assert len(x) > 200
        assert np.max(np.abs(scorer.predict_proba(x) - model.predict_proba(x))) <= 1e-6, kind


def test_spec_round_trips_through_json(fitted):
    spec = fitted["gbt"].spec()
    back = msgspec.json.decode(msgspec.json.encode(spec), type=ArgumentModelSpec)
    assert back == spec
    a, p, c, _, _ = dataset(4, 1)[1]
    assert ArgumentScorer(back).propose(a, p, c) == fitted["gbt"].propose(a, p, c)
    with pytest.raises(ValueError, match="version"):
        ArgumentScorer(msgspec.structs.replace(spec, version=99))
    trees = spec.model
    loop = msgspec.structs.replace(trees, left=((0,) * len(trees.left[0]),) + trees.left[1:])
    with pytest.raises(ValueError, match="tree 0"):  # a child pointing back at the root: rejected, no hang
        ArgumentScorer(msgspec.structs.replace(spec, model=loop))
    far = msgspec.structs.replace(trees, feature=((99,) * len(trees.feature[0]),) + trees.feature[1:])
    with pytest.raises(ValueError, match="out of range"):
        ArgumentScorer(msgspec.structs.replace(spec, model=far))


def test_fit_rejects_unusable_input():
    with pytest.raises(ValueError, match="kind"):
        ArgumentModel(kind="mlp").fit([])
    with pytest.raises(ValueError, match="right and wrong"):
        ArgumentModel().fit(call_examples("lookup", LOOKUP, [], {"order_id": "X"}))


def test_decision_time_needs_no_scikit_learn():
    loaded = modules_after("from zcompile.qroute.arguments import ArgumentScorer; from "
                           "zcompile.receipts.candidates import extract_candidates")
    assert not any(m == "sklearn" or m.startswith("sklearn.") for m in loaded)


def test_a_list_value_seen_in_every_task_is_never_a_constant():
    """Constants are offered as candidates, which are scalars: a list argument the teacher always passes
    the same way (seen in every task) stays out of them, and the spec still decodes."""
    rows = []
    for g in range(12):
        cands = extract_candidates([{"role": "user", "content": f"order ORD{g:03d} please"}])
        rows += call_examples("ship", ITEMS, cands, {"items": ["box", "tape"]}, group=f"t{g}")
        rows += call_examples("lookup", LOOKUP, cands, {"order_id": f"ORD{g:03d}"}, group=f"t{g}")
    spec = ArgumentModel(kind="logistic").fit(rows).spec()
    back = msgspec.json.decode(msgspec.json.encode(spec), type=ArgumentModelSpec)
    constants = [c for per_action in back.actions.values() for stats in per_action.values()
                 for c in stats.constants]
    assert all(isinstance(c, (str, int, float, bool)) for c in constants)
