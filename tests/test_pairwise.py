"""Pairwise specialists and BFCL import: a real fine-tune on (request, tool description) pairs, int8 or
float32 export with parity, choosing among tools never seen in training, abstaining when none fits."""

from __future__ import annotations

import json
import random

import msgspec
import pytest
from click.testing import CliRunner
from isolation import modules_after

from zcompile import ZcError
from zcompile.cli import main
from zcompile.qroute.pairdistill import distill_pairwise, load_pair_decisions
from zcompile.qroute.pairwise import PairwiseSpecialist, describe
from zcompile.receipts import Receipt, import_bfcl

# (tool name, description, requests): every tool of its own domain
TOOLS = [
    ("weather.forecast", "Get the weather forecast for a city", ["will it rain in {c} tomorrow",
                                                                 "what is the weather in {c}"]),
    ("flights.search", "Search flights between two airports", ["find me a flight from {c} to Rome",
                                                               "book a plane ticket to {c}"]),
    ("recipes.find", "Find cooking recipes by ingredient", ["how do i cook pasta with tomatoes",
                                                            "give me a recipe with chicken"]),
    ("stocks.quote", "Get the current stock price of a company", ["what is the share price of Apple",
                                                                   "how much is Tesla stock today"]),
    ("translate.text", "Translate text into another language", ["translate hello into French",
                                                                "how do you say thank you in {c}"]),
    ("math.area_circle", "Compute the area of a circle from its radius", ["area of a circle of radius 4",
                                                                          "circle with radius 2: what area"]),
    ("music.play", "Play a song or an artist", ["play some jazz music", "put on a song by Adele"]),
    ("hotels.book", "Book a hotel room in a city", ["i need a hotel room in {c}",
                                                    "reserve a hotel in {c} for two nights"]),
]
CITIES = ["Paris", "Tokyo", "Lima", "Oslo", "Cairo", "Delhi"]


def tool(i):
    name, desc, _ = TOOLS[i]
    return {"name": name, "description": desc, "parameters": {"type": "dict", "properties": {
        "query": {"type": "string"}}, "required": ["query"]}}


def receipts(path, rng, n, choices, fits=True):
    with open(path, "ab") as fh:
        for k in range(n):
            i = rng.choice(choices)
            offered = [i] + rng.sample([j for j in choices if j != i], 1)
            if not fits:  # none of the offered tools fits the request
                pool = [j for j in range(len(TOOLS)) if j not in offered]
                i = rng.choice(pool)
            rng.shuffle(offered)
            req = rng.choice(TOOLS[i][2]).format(c=rng.choice(CITIES))
            name = TOOLS[i][0]
            r = Receipt(id=f"{path.stem}-{k}", task=f"{path.stem}-{k}", state={"request": req}, tier="gold",
                        legal=tuple(TOOLS[j][0] for j in offered), action=name if fits else None,
                        gold=name if fits else None, verified=True, meta={"tools": [tool(j) for j in offered]})
            fh.write(msgspec.json.encode(r) + b"\n")
    return path


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    d = tmp_path_factory.mktemp("pw")
    rng = random.Random(3)
    seen, unseen = [0, 1, 2, 3, 4, 5], [6, 7]
    train = receipts(d / "train.jsonl", rng, 120, seen)
    receipts(d / "train.jsonl", rng, 30, seen, fits=False)
    cal = receipts(d / "cal.jsonl", rng, 60, seen)
    test = receipts(d / "test.jsonl", rng, 40, unseen + [0, 1])
    parts = {"train": load_pair_decisions([train])[0], "calibration": load_pair_decisions([cal])[0],
             "test": load_pair_decisions([test])[0]}
    res = distill_pairwise([train, cal, test], d / "spec", parts=parts, seed=0,
                           options={"max_steps": 40, "max_length": 48})
    return res, parts


def test_pairwise_learns_and_chooses_among_unseen_tools(trained):
    res, parts = trained
    m = res.manifest
    t = m.metrics
    assert m.model.kind == "pairwise" and m.model.classes == ("fit", "other")
    assert m.calibration.method == "platt" and t["parity"]["decision_agreement"] >= 0.995
    assert t["illegal_selected"] == 0
    # tools 6 and 7 were never in training: the scorer still picks them by their descriptions
    sp = PairwiseSpecialist(res.directory)
    picks = [sp.decide({"request": "play a song by the Beatles"}, ["music.play", "weather.forecast"],
                       [tool(6), tool(0)]).best,
             sp.decide({"request": "book a hotel room in Oslo"}, ["hotels.book", "recipes.find"],
                       [tool(7), tool(2)]).best]
    assert picks == ["music.play", "hotels.book"]
    assert t["accuracy_top1"] >= 0.8, t


def test_pairwise_decide_is_masked_and_abstains(trained):
    res, _ = trained
    sp = PairwiseSpecialist(res.directory)
    ans = sp.decide({"request": "what is the weather in Lima"}, ["music.play"], [tool(6), tool(0)])
    assert ans.best == "music.play"  # only the legal action is scored
    assert sp.decide({"request": "anything"}, []).action is None
    # without a schema an action is described by its name
    assert describe("weather.forecast") == "weather forecast"
    assert describe("a_b", tool(0)).startswith("a b: Get the weather") and "query (required)" in describe("x", tool(0))


def test_pairwise_decision_time_imports(trained):
    res, _ = trained
    code = f"""
import sys
from zcompile.qroute.pairwise import PairwiseSpecialist
sp = PairwiseSpecialist({str(res.directory)!r})
sp.decide({{"request": "play jazz"}}, ["a", "b"])
"""
    assert modules_after(code).isdisjoint({"torch", "transformers", "optimum", "sklearn", "scipy"})


def test_classifier_loader_refuses_pairwise(trained):
    from zcompile.qroute.specialist import Specialist

    with pytest.raises(ZcError, match="pairwise specialist"):
        Specialist(trained[0].directory)


def _bfcl(tmp_path, questions, answers=None):
    q = tmp_path / "q.json"
    q.write_text("".join(json.dumps(x) + "\n" for x in questions))
    a = None
    if answers is not None:
        a = tmp_path / "a.json"
        a.write_text("".join(json.dumps(x) + "\n" for x in answers))
    return q, a


Q = {"id": "x_0", "question": [[{"role": "user", "content": "what is 2+2"}]],
     "function": [{"name": "math.add", "description": "Add numbers", "parameters": {}},
                  {"name": "math.mul", "description": "Multiply", "parameters": {}}]}


def test_bfcl_import(tmp_path):
    q, a = _bfcl(tmp_path, [Q], [{"id": "x_0", "ground_truth": [{"math.add": {"a": [2]}}]}])
    (r,) = list(import_bfcl(q, a))
    assert r.legal == ("math.add", "math.mul") and r.action == r.gold == "math.add" and r.verified
    assert r.state == {"request": "what is 2+2"} and r.meta["tools"][1]["name"] == "math.mul"
    (r,) = list(import_bfcl(q, None))
    assert r.action is None and r.verified is True
    # the CLI writes receipts; bad input names the file, the line and the path
    out = tmp_path / "r.jsonl"
    res = CliRunner().invoke(main, ["receipts", "import", "--format", "bfcl", str(q), "--answers", str(a),
                                    "-o", str(out)])
    assert res.exit_code == 0 and "imported 1 question" in res.output and out.exists()
    res = CliRunner().invoke(main, ["receipts", "import", "--format", "bfcl", str(q), "-o", str(out)])
    assert res.exit_code == 1 and "pass --answers FILE, or --answers none" in res.output
    bad, _ = _bfcl(tmp_path, [{**Q, "function": "nope"}])
    res = CliRunner().invoke(main, ["receipts", "import", "--format", "bfcl", str(bad), "--answers", "none",
                                    "-o", str(out)])
    assert res.exit_code == 1 and f"{bad}:1: $.function: expected `array`" in res.output
    assert "Traceback" not in res.output
    q2, a2 = _bfcl(tmp_path, [Q], [{"id": "x_0", "ground_truth": [{"math.div": {}}]}])
    with pytest.raises(ZcError, match=r"q.json:1: the answer `math.div` is not one of the offered functions"):
        list(import_bfcl(q2, a2))


def test_cli_distill_policy_rules(tmp_path):
    res = CliRunner().invoke(main, ["distill", "--from", str(tmp_path), "-o", str(tmp_path / "o"), "--model", "mlp"])
    assert res.exit_code == 2 and "--policy is required (except for --model pairwise)" in res.output
    # pairwise without a policy needs receipts that list the offered actions
    r = tmp_path / "r.jsonl"
    r.write_bytes(msgspec.json.encode(Receipt(id="a", task="a", state={"request": "x"}, tier="t", action="f"))
                  + b"\n")
    res = CliRunner().invoke(main, ["distill", "--from", str(r), "-o", str(tmp_path / "o"), "--model", "pairwise"])
    assert res.exit_code == 1 and "receipt `a`: $.legal: missing" in res.output and "Traceback" not in res.output


def test_router_gives_a_pairwise_specialist_the_offered_tools(trained, tmp_path):
    """The specialist rung scores exactly what a direct call with the same tools scores; the policy's
    legal set (here: the offered tools) masks it, and the receipt records the rung."""
    from zcompile import Router, compile_text

    res, _ = trained
    names = [t[0] for t in TOOLS]
    policy = compile_text(
        "policy tools\nstate {\n  request: text?\n  offered: set[action] = {}\n}\n"
        + "".join(f"action {n}\n" for n in names) + "action respond\nfallback respond\n"
        + f"rule offered_only: forbid {', '.join(names)} unless self in offered\n", name="tools.zc")
    sp = PairwiseSpecialist(res.directory)
    router = Router(policy, specialists=sp, receipts=tmp_path / "r.jsonl")
    offered = [tool(6), tool(7), tool(1)]  # two tools never seen in training
    state = {"request": "play some jazz music", "offered": [t["name"] for t in offered]}
    legal = policy.legal(state).actions
    assert set(legal) == {t["name"] for t in offered} | {"respond"}  # a reply is always legal
    direct = sp.decide(state, legal, offered)
    bare = sp.decide(state, legal)  # described by their names only
    assert direct.confidence != bare.confidence
    decision = router.decide(state, tools=offered)
    spec = next(r for r in decision.rungs if r.tier == "specialist")
    assert spec.confidence == pytest.approx(direct.confidence)
    assert spec.outcome == ("answered" if direct.action else "abstained")
    assert decision.action == (direct.action or "respond") and decision.action in legal
    with pytest.raises(ZcError, match="not a specialist directory"):
        Router(policy, specialists=tmp_path / "nowhere")
    with pytest.raises(ZcError, match="trained for policy"):  # distilled without a policy
        Router(policy, specialists=res.directory)
