"""Pairwise specialists and BFCL import: a real fine-tune on (request, tool description) pairs, int8 or
float32 export with parity, choosing among tools never seen in training, abstaining when none fits."""

from __future__ import annotations

import json
import random
import shutil

import msgspec
import numpy as np
import pytest
from click.testing import CliRunner
from isolation import modules_after

from zcompile import ZcError, stats
from zcompile.cli import main
from zcompile.qroute.distill import NEVER, gate
from zcompile.qroute.pairdistill import (NONE_FITS_WEIGHT_MAX, PairDecision, distill_pairwise, load_pair_decisions,
                                         none_fits_weight, select_pair_threshold, training_pairs)
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


def test_pairwise_quantization_choice(tmp_path, monkeypatch):
    """As for classifiers: strict int8 fails when int8 fails parity (a bound no export meets) and writes
    nothing; float32 exports once."""
    import zcompile.qroute.pairdistill as PD

    rng = random.Random(5)
    paths = [receipts(tmp_path / f"{p}.jsonl", rng, 12, [0, 1, 2, 3]) for p in ("train", "cal", "test")]
    parts = dict(zip(("train", "calibration", "test"), (load_pair_decisions([p])[0] for p in paths)))
    small = {"max_steps": 3, "max_length": 24, "batch_size": 8}
    res = distill_pairwise(paths, tmp_path / "f32", parts=parts, options=small, quantization="float32")
    assert [a["quantization"] for a in res.manifest.metrics["parity"]["attempts"]] == ["float32"]
    monkeypatch.setattr(PD, "ARGMAX_AGREEMENT", 1.01)
    with pytest.raises(ZcError, match=r"parity check failed \(int8\).*--quantization auto ships float32"):
        distill_pairwise(paths, tmp_path / "strict", parts=parts, options=small, quantization="int8")
    assert not (tmp_path / "strict").exists()


def _decision(k, label):
    names = ("a.one", "b.two")
    return PairDecision(f"d{k}", f"t{k}", (0.0, k), {}, f"request {k}", names, {}, label)


@pytest.mark.parametrize("fits, none, weight", [(10, 0, 1), (10, 10, 1), (9, 3, 3), (10, 4, 2), (100, 2, 5), (1, 9, 1)])
def test_none_fits_weight_balances_and_is_capped(fits, none, weight):
    decisions = [_decision(k, "a.one") for k in range(fits)] + [_decision(fits + k, None) for k in range(none)]
    assert none_fits_weight(decisions) == weight <= NONE_FITS_WEIGHT_MAX
    pairs, y = training_pairs(decisions, negatives=0, seed=0)
    # each decision's two candidates, a none-fits decision `weight` times; only right answers are fits
    assert len(pairs) == 2 * (fits + weight * none)
    assert y.count("fit") == fits
    assert sum(1 for (req, _) in pairs if req == f"request {fits}") == (2 * weight if none else 0)


def test_pair_threshold_bounds_precision_where_fits_and_abstention_where_none_fits():
    # 12 decisions where an action fits (all right but the one at 0.55) and 40 where none does, two of
    # them confident (0.985, 0.935), the others at most 0.5. Clopper–Pearson one-sided 95% bounds:
    # 11 of 11: 0.762, 11 of 12: 0.661, 6 of 6: 0.607; abstaining on 38 / 39 / 40 of 40: 0.851 / 0.887 / 0.928
    conf_fit = np.array([0.99, 0.98, 0.97, 0.96, 0.95, 0.94, 0.93, 0.92, 0.91, 0.9, 0.8, 0.55])
    right = np.arange(12) < 11
    conf_none = np.concatenate([[0.985, 0.935], np.linspace(0.1, 0.5, 38)])
    conf = np.concatenate([conf_fit, conf_none])
    correct = np.concatenate([right, np.zeros(40, dtype=bool)])
    fits = np.arange(52) < 12
    assert stats.lower_bound(38, 40) >= 0.85 > stats.lower_bound(37, 40)
    # abstention ≥ 0.85 lets both confident ones be answered: τ is the precision rule's over the fits
    th = select_pair_threshold(conf, correct, fits, 0.75, 0.85)
    assert (th.tau, th.calibration_answered, th.calibration_correct) == (0.8, 11, 11)
    assert th.calibration_lower_bound == pytest.approx(0.05 ** (1 / 11))
    assert (th.calibration_none_fits, th.calibration_abstained) == (40, 38)
    assert th.calibration_abstention_lower_bound == pytest.approx(stats.lower_bound(38, 40))
    assert select_pair_threshold(conf, correct, fits, 0.6, 0.85).tau == 0.55  # 11 of 12 bound at 0.661
    # abstention ≥ 0.88 needs 39 of 40: τ rises above 0.935, where 6 of 6 answered bound at 0.607
    th = select_pair_threshold(conf, correct, fits, 0.6, 0.88)
    assert (th.tau, th.calibration_answered, th.calibration_abstained) == (0.94, 6, 39)
    # ≥ 0.9 needs all 40: above 0.985 one answer is left, which bounds nothing: never answer
    th = select_pair_threshold(conf, correct, fits, 0.6, 0.9)
    assert (th.tau, th.calibration_answered, th.calibration_abstained) == (NEVER, 0, 40)
    # 5 decisions where none fits cannot show 0.85 even when all abstain (bound 0.549): never answer
    assert select_pair_threshold(conf[:17], correct[:17], fits[:17], 0.6, 0.85).tau == NEVER
    # without decisions where none fits, or with the bound off, it is the classifiers' rule
    assert select_pair_threshold(conf_fit, right, np.ones(12, bool), 0.75, 0.85).tau == 0.8
    th = select_pair_threshold(conf, correct, fits, 0.75, 0.0)
    assert th.tau == 0.8 and th.calibration_abstained == 38


def test_gate_bounds_abstention_for_pairwise_specialists():
    m = {"illegal_selected": 0, "dangerous_selected": 0, "answered": 60, "precision_ci": [0.80, 0.95],
         "answered_where_fits": 50, "precision_where_fits_ci": [0.96, 1.0], "n_none_fits": 40,
         "abstained_where_none_fits_ci": [0.70, 0.9], "coverage": 0.6, "aurc": 0.1, "latency_us": {"p50": 40.0}}
    # the classifiers' gate reads the mixed precision
    assert gate(m, 0.95, 0.0, None).reasons == ("precision lower bound 0.800 < target 0.95",)
    g = gate(m, 0.95, 0.0, None, abstention=0.85)
    assert not g.promoted and g.reasons == ("abstention where no action fits: lower bound 0.700 < target 0.85",)
    assert gate(m, 0.95, 0.0, None, abstention=0.6).promoted
    assert gate(m | {"n_none_fits": 0}, 0.95, 0.0, None, abstention=0.85).promoted


def test_ensemble_decides_by_the_mean_of_its_members(tmp_path):
    """Two members fine-tuned with seeds 0 and 1, merged into one ONNX graph: its logits are the mean of
    the members' (parity with the float reference), and τ's calibration figures are those `decide` gives
    on the calibration split, where a third of the decisions fit no offered tool."""
    import onnx

    from zcompile.qroute.transformer import TransformerClassifier

    rng = random.Random(11)
    train = receipts(tmp_path / "train.jsonl", rng, 24, [0, 1, 2, 3])
    receipts(train, rng, 6, [0, 1, 2, 3], fits=False)
    cal = receipts(tmp_path / "cal.jsonl", rng, 20, [0, 1, 2, 3])
    receipts(cal, rng, 10, [0, 1, 2, 3], fits=False)
    test = receipts(tmp_path / "test.jsonl", rng, 12, [0, 1, 2, 3])
    paths = [train, cal, test]
    parts = dict(zip(("train", "calibration", "test"), (load_pair_decisions([p])[0] for p in paths)))
    res = distill_pairwise(paths, tmp_path / "ens", parts=parts, quantization="float32", target_precision=0.5,
                           target_abstention=0.3,
                           options={"max_steps": 4, "max_length": 32, "batch_size": 8, "ensemble": 2})
    m = res.manifest
    assert m.model.params["ensemble"] == 2 and m.model.params["steps"] == 8
    assert m.metrics["parity"]["max_abs_delta"] < 1e-4
    graph = onnx.load(str(res.directory / "model.onnx")).graph
    mean = [n for n in graph.node if n.op_type == "Mean"]
    assert len(mean) == 1 and len(mean[0].input) == 2 and [o.name for o in graph.output] == ["logits"]
    # the members' own logits, averaged, are what the merged graph computes
    sp = PairwiseSpecialist(res.directory)
    d = parts["test"][0]
    feed_pairs = [(d.request, desc) for desc in d.descriptions()]
    members = [TransformerClassifier(seed=s, max_steps=4, max_length=32, batch_size=8) for s in (0, 1)]
    from zcompile.qroute.pairdistill import training_pairs as tp

    pairs, y = tp(parts["train"], 3, 0)
    want = np.mean([c.fit(pairs, y).logits(feed_pairs) for c in members], axis=0)
    got = sp.margins(d.request, d.descriptions())
    assert got == pytest.approx(want[:, 0] - want[:, 1], abs=1e-4)
    # the threshold's figures, recounted from decide on the calibration split
    th = m.threshold
    answers = [(x, sp.decide(x.state, x.legal, x.tools)) for x in parts["calibration"]]
    fit_answered = [(x, a) for x, a in answers if x.label is not None and a.action is not None]
    assert th.calibration_none_fits == 10
    assert th.calibration_abstained == sum(1 for x, a in answers if x.label is None and a.action is None)
    assert th.calibration_answered == len(fit_answered)
    assert th.calibration_correct == sum(1 for x, a in fit_answered if a.action == x.label)


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
    res = CliRunner().invoke(main, ["distill", "--from", str(tmp_path), "-o", str(tmp_path / "o"), "--model", "mlp",
                                    "--target-abstention", "0.9"])
    assert res.exit_code == 2 and "--target-abstention only applies to --model pairwise" in res.output
    res = CliRunner().invoke(main, ["distill", "--from", str(tmp_path), "-o", str(tmp_path / "o"), "--model",
                                    "pairwise", "--ensemble", "0"])
    assert res.exit_code == 2 and "--ensemble" in res.output and "Traceback" not in res.output
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
    with pytest.raises(ZcError, match=r"\$\.tools: expected a list"):  # refused before deciding: no receipt
        router.decide(state, tools="music.play")
    # the receipt keeps the offered tools: distilling from it describes the actions as this step did
    router.close()
    again = load_pair_decisions([tmp_path / "r.jsonl"], policy)[0]
    assert decision.receipt.meta["tools"] == offered
    assert [d.tools for d in again] == [{t["name"]: t for t in offered}]
    with pytest.raises(ZcError, match="not a specialist directory"):
        Router(policy, specialists=tmp_path / "nowhere")
    with pytest.raises(ZcError, match="trained for policy"):  # distilled without a policy
        Router(policy, specialists=res.directory)


# ---- zc eval on a pairwise specialist ---------------------------------------------------------------------
def _expected(sp, rs, legal_of=lambda r: r.legal):
    """What the eval must report, computed here from `PairwiseSpecialist.decide` with each receipt's tools."""
    from zcompile import stats

    answers = [sp.decide(r.state, legal_of(r), r.meta.get("tools")) for r in rs]
    labels = [r.gold if r.gold is not None else r.action for r in rs]
    none = [a for a, lab in zip(answers, labels) if lab is None]
    return {
        "answered": sum(a.action is not None for a in answers),
        "correct": sum(a.action is not None and a.action == lab for a, lab in zip(answers, labels)),
        "answered_where_fits": sum(a.action is not None and lab is not None for a, lab in zip(answers, labels)),
        "none_fits": len(none),
        "abstained": sum(a.action is None for a in none),
        "aurc": stats.aurc(np.array([a.confidence for a in answers]),
                           np.array([float(a.best is not None and a.best == lab) for a, lab in zip(answers, labels)])),
    }


def test_cli_eval_pairwise_without_policy(trained, tmp_path):
    """`zc eval` without --policy: the receipts' legal sets, the offered tools, no compiler rung; the figures
    equal what `decide` gives receipt by receipt, and trained-on tasks stay out."""
    from zcompile import stats
    from zcompile.receipts import read

    res, _ = trained
    d = res.directory.parent
    rng = random.Random(11)
    fits = receipts(tmp_path / "fits.jsonl", rng, 12, [6, 7, 0, 1])
    nofit = receipts(tmp_path / "nofit.jsonl", rng, 10, list(range(len(TOOLS))), fits=False)
    held = list(read([d / "test.jsonl", fits, nofit]))
    want = _expected(PairwiseSpecialist(res.directory), held)
    assert want["none_fits"] == 10
    out_json, out_html = tmp_path / "r.json", tmp_path / "r.html"
    r = CliRunner().invoke(main, ["eval", "--specialists", str(res.directory), "--receipts", str(d / "train.jsonl"),
                                  str(d / "test.jsonl"), str(fits), str(nofit), "--json", str(out_json),
                                  "--html", str(out_html)])
    assert r.exit_code == 0, r.output
    rep = json.loads(out_json.read_text())
    n = len(held)
    assert (rep["n"], rep["policy"], rep["legal_sets"], rep["specialist"]["model"]) == (n, None, "receipts", "pairwise")
    assert rep["held_out"] and rep["excluded_trained_on"] == 150 and rep["excluded_tasks"] == 120
    assert (rep["test_tasks"], rep["unseen_tasks"], rep["counts"]["no_action_fits"]) == (40, 22, 40)
    assert set(rep["tiers"]) == {"specialist"}  # no policy: no compiler rung
    sp, o = rep["tiers"]["specialist"], rep["overall"]
    assert sp["reached"] == n and sp["answered"] == o["answered"] == want["answered"]
    assert sp["answered"] + rep["remote"]["reached"] == n
    assert sp["correct"] == want["correct"] and sp["precision_ci"] == list(stats.wilson(want["correct"],
                                                                                       want["answered"]))
    ab = sp["abstained_where_none_fits"]
    assert (ab["k"], ab["n"], ab["ci"]) == (want["abstained"], 10, list(stats.wilson(want["abstained"], 10)))
    assert o["abstained_where_none_fits"] == ab
    pf = sp["precision_where_fits"]  # an answer where none fits is wrong, so every right one is where one fits
    assert (pf["k"], pf["n"]) == (want["correct"], want["answered_where_fits"]) and o["precision_where_fits"] == pf
    # a verified abstention agrees when the specialist abstains, and counts against it when it answers
    ag = sp["agreement_gold"]
    assert (ag["k"], ag["n"]) == (want["correct"] + want["abstained"], want["answered"] + want["abstained"])
    assert sp["agreement_teacher"] == ag  # these receipts' teacher is their gold
    # the scores are those of `decide` with the offered tools (names alone score differently)
    assert rep["risk_coverage"]["n"] == n and rep["risk_coverage"]["aurc"] == pytest.approx(want["aurc"], abs=1e-9)
    lines = r.stdout.splitlines()
    assert lines[0].startswith("no policy (legal sets from the receipts), specialist spec (pairwise")
    assert "abstained where none fits [Wilson 95%] (k/n)" in lines[3]
    assert [ln.split()[0] for ln in lines[4:7]] == ["specialist", "remote", "overall"]
    share = f"{ab['rate']:.3f} [{ab['ci'][0]:.3f}, {ab['ci'][1]:.3f}] ({ab['k']}/10)"
    assert lines[4].endswith(share) and lines[6].endswith(share)
    assert lines[-1] == f"where no offered action fits (n = 10): abstained {share}; an answer there counts as wrong"
    page = out_html.read_text()
    assert "abstained where none fits" in page and "not answering it agrees" in page and "<td>compiler" not in page
    # trained-on tasks are refused under --split all, as for classifiers
    r = CliRunner().invoke(main, ["eval", "--specialists", str(res.directory), "--receipts", str(d / "train.jsonl"),
                                  "--split", "all"])
    assert r.exit_code == 1 and "receipts of 120 tasks the specialist was trained on" in r.output


def test_cli_eval_pairwise_errors(trained, tmp_path):
    res, _ = trained
    spec = str(res.directory)
    runner = CliRunner()
    # without a policy, receipts must list the offered actions
    bare = tmp_path / "bare.jsonl"
    bare.write_bytes(msgspec.json.encode(Receipt(id="a", task="a", state={"request": "x"}, tier="t", action="f"))
                     + b"\n")
    r = runner.invoke(main, ["eval", "--specialists", spec, "--receipts", str(bare)])
    assert r.exit_code == 1 and "receipt `a`: $.legal: missing" in r.output and "Traceback" not in r.output
    # a policy for a specialist distilled without one is refused (the router refuses it too)
    pol = tmp_path / "p.zc"
    pol.write_text("policy p\nstate { request: text? }\naction f\naction g\nfallback g\n")
    r = runner.invoke(main, ["eval", "--policy", str(pol), "--specialists", spec, "--receipts", str(bare)])
    assert r.exit_code == 1 and "was distilled without a policy: evaluate it without --policy" in r.output
    r = runner.invoke(main, ["eval", "--specialists", str(tmp_path / "nowhere"), "--receipts", str(bare)])
    assert r.exit_code == 1 and "not a specialist directory" in r.output and "Traceback" not in r.output
    nofit = receipts(tmp_path / "nofit.jsonl", random.Random(5), 3, [0, 1, 2], fits=False)
    r = runner.invoke(main, ["eval", "--specialists", spec, "--receipts", str(nofit), "--split", "bogus"])
    assert r.exit_code == 2


TOOLS_POLICY = ("policy tools\nstate {\n  request: text?\n  offered: set[action] = {}\n}\n"
                + "".join(f"action {t[0]}\n" for t in TOOLS) + "action respond\nfallback respond\n"
                + f"rule offered_only: forbid {', '.join(t[0] for t in TOOLS)} unless self in offered\n")


def test_cli_eval_pairwise_with_policy(trained, tmp_path):
    """A pairwise specialist distilled for a policy needs it: the policy masks the legal sets and its
    compiler answers singletons. (A copy of the fixture's specialist re-pointed at the policy in its
    manifest stands in for one distilled with it: a second fine-tune would double the fixture's time.)"""
    from zcompile import compile_file
    from zcompile.qroute.manifest import decode, encode
    from zcompile.receipts import read

    res, _ = trained
    (tmp_path / "tools.zc").write_text(TOOLS_POLICY)
    policy = compile_file(tmp_path / "tools.zc")
    spec = tmp_path / "spec"
    shutil.copytree(res.directory, spec)
    m = decode((spec / "manifest.json").read_bytes(), "manifest.json")
    (spec / "manifest.json").write_bytes(encode(msgspec.structs.replace(m, policy_name=policy.name,
                                                                        policy_sha256=policy.sha256)))
    rows = []
    for k, (req, offered, action) in enumerate([
            ("play some jazz music", [6, 1], "music.play"), ("book a hotel room in Oslo", [7, 2], "hotels.book"),
            ("what is the weather in Lima", [3, 4], None), ("hello there", [], "respond"),
            ("translate hello into French", [4, 0], "translate.text"), ("give me a recipe", [], None)]):
        names = [TOOLS[i][0] for i in offered]
        rows.append(Receipt(id=f"p{k}", task=f"p{k}", state={"request": req, "offered": names}, tier="gold",
                            legal=(*names, "respond"), action=action, gold=action, verified=True,
                            meta={"tools": [tool(i) for i in offered]}))
    path = tmp_path / "p.jsonl"
    path.write_bytes(b"".join(msgspec.json.encode(r) + b"\n" for r in rows))
    base = ["eval", "--specialists", str(spec), "--receipts", str(path)]
    r = CliRunner().invoke(main, base)
    assert r.exit_code == 2
    assert r.output == "error: --policy is required: pairwise specialist `spec` was distilled for policy `tools`\n"
    r = CliRunner().invoke(main, [*base, "--policy", str(tmp_path / "tools.zc"), "--json", str(tmp_path / "r.json")])
    assert r.exit_code == 0, r.output
    rep = json.loads((tmp_path / "r.json").read_text())
    assert rep["policy"]["name"] == "tools" and rep["legal_sets"] == "policy" and rep["n"] == 6
    c, sp, o = rep["tiers"]["compiler"], rep["tiers"]["specialist"], rep["overall"]
    # offered nothing: `respond` is the one legal action, answered by the compiler (wrongly for p5, none fits)
    assert (c["answered"], c["correct"], c["abstained_where_none_fits"]["n"]) == (2, 1, 2)
    # agreement: p3 right, p5 answered where none fits (disagrees), p2 passed on where none fits (agrees)
    assert (c["agreement_gold"]["k"], c["agreement_gold"]["n"]) == (2, 3)
    asked = [x for x in read([path]) if x.state["offered"]]
    want = _expected(PairwiseSpecialist(spec, policy), asked, lambda x: policy.legal(x.state).actions)
    assert sp["reached"] == 4 and (sp["answered"], sp["correct"]) == (want["answered"], want["correct"])
    assert sp["abstained_where_none_fits"]["k"] == want["abstained"] and sp["abstained_where_none_fits"]["n"] == 1
    assert o["abstained_where_none_fits"]["n"] == 2 and o["abstained_where_none_fits"]["k"] == want["abstained"]
    assert o["answered"] == 2 + want["answered"] and rep["remote"]["reached"] == 4 - want["answered"]
    wrong = tmp_path / "other.zc"
    wrong.write_text(TOOLS_POLICY.replace("action respond", "action wait\naction respond"))
    r = CliRunner().invoke(main, [*base, "--policy", str(wrong)])
    assert r.exit_code == 1 and "trained for policy `tools`" in r.output


def test_tool_schemas_refuse_what_is_not_tools(trained):
    """Offered tools come as a list of schemas or a dict by name; anything else is a clear error
    naming its $.path, from the specialist and from the router (before anything is decided)."""
    from zcompile.tools import tool_schemas

    assert tool_schemas(None) == {}
    assert tool_schemas([tool(1), tool(2)]) == {"flights.search": tool(1), "recipes.find": tool(2)}
    assert tool_schemas({"x": {"description": "d"}}) == {"x": {"description": "d"}}
    for bad, where in (("flights.search", r"\$\.tools: expected a list"), ([tool(1), "x"], r"\$\.tools\[1\]: expected"),
                       ([{"description": "d"}], r"\$\.tools\[0\]: a tool schema needs a string `name`"),
                       ({"x": 3}, r"\$\.tools\.x: expected a tool schema")):
        with pytest.raises(ZcError, match=where):
            tool_schemas(bad)
    res, _ = trained
    sp = PairwiseSpecialist(res.directory)
    with pytest.raises(ZcError, match=r"\$\.tools\[0\]"):
        sp.decide({"request": "play jazz"}, ["music.play"], [3])
