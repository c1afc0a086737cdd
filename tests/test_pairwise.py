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
from zcompile.qroute import NEVER, LoggedDecision, PairwiseSpecialist, Settings, distill, load_decisions
from zcompile.qroute.gate import gate
from zcompile.qroute.manifest import Threshold
from zcompile.qroute.pairs import NONE_FITS_WEIGHT_MAX, none_fits_weight, pair_input, training_pairs
from zcompile.qroute.pairwise import describe, render_plain
from zcompile.qroute.threshold import abstention_floor, learn_then_test, min_answers
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
                        gold=name if fits else None, verified=True,
                        meta={"tools": [tool(j) for j in offered]})
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
    parts = {"train": decisions(train), "calibration": decisions(cal), "test": decisions(test)}
    # 0.8: Learn-then-Test certifies it from 14 right answers; 0.95 would need 59 of the 60 calibration
    # decisions
    settings = pairwise(seed=0, target_precision=0.8, options={"max_steps": 40, "max_length": 48,
                                                               "batch_size": 8})
    res = distill([train, cal, test], None, d / "spec", settings, parts=parts)
    return res, parts


def decisions(path, policy=None):
    """Decisions of one receipts file, those where no offered action fits included."""
    return load_decisions([path], policy, none_fits=True).decisions


def pairwise(**kw):
    return Settings(model="pairwise", **kw)


@pytest.mark.slow  # the module's fine-tune (its fixture) runs here first
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
    # τ is certified on the calibration split, so the tests below see answers as well as abstentions
    th = m.threshold
    assert th.tau < NEVER and th.calibration_answered >= 14 and th.source == "calibration split", th


def test_pairwise_decide_is_masked_and_abstains(trained):
    res, _ = trained
    sp = PairwiseSpecialist(res.directory)
    ans = sp.decide({"request": "what is the weather in Lima"}, ["music.play"], [tool(6), tool(0)])
    assert ans.best == "music.play"  # only the legal action is scored
    assert sp.decide({"request": "anything"}, []).action is None
    # without a schema an action is described by its name
    assert describe("weather.forecast") == "weather forecast"
    assert describe("a_b", tool(0)).startswith("a b: Get the weather") and "query (required)" in describe(
        "x", tool(0))


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
    from zcompile.qroute.recipes import PairwiseRecipe

    rng = random.Random(5)
    paths = [receipts(tmp_path / f"{p}.jsonl", rng, 12, [0, 1, 2, 3]) for p in ("train", "cal", "test")]
    parts = dict(zip(("train", "calibration", "test"), (decisions(p) for p in paths)))
    small = {"max_steps": 3, "max_length": 24, "batch_size": 8, "layers": 1}
    res = distill(paths, None, tmp_path / "f32", pairwise(options=small | {"quantization": "float32"}),
                  parts=parts)
    assert [a["quantization"] for a in res.manifest.metrics["parity"]["attempts"]] == ["float32"]
    assert res.manifest.model.params["quantization"] == "float32"
    monkeypatch.setattr(PairwiseRecipe, "parity", ("decision_agreement", 1.01))
    with pytest.raises(ZcError, match=r"parity check failed \(int8\).*--quantization auto ships float32"):
        distill(paths, None, tmp_path / "strict", pairwise(options=small | {"quantization": "int8"}),
                parts=parts)
    assert not (tmp_path / "strict").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cal.jsonl", "f32", "test.jsonl", "train.jsonl"]


def _decision(k, label):
    return LoggedDecision(id=f"d{k}", task=f"t{k}", order=(0.0, k), state={"request": f"request {k}"},
                          root=None, intent=None, legal=("a.one", "b.two"), label=label)


@pytest.mark.parametrize("fits, none, weight", [(10, 0, 1), (10, 10, 1), (9, 3, 3), (10, 4, 2), (100, 2, 5),
                                                (1, 9, 1)])
def test_none_fits_weight_balances_and_is_capped(fits, none, weight):
    ds = [_decision(k, "a.one") for k in range(fits)] + [_decision(fits + k, None) for k in range(none)]
    assert none_fits_weight(ds) == weight <= NONE_FITS_WEIGHT_MAX
    x = [pair_input(d.state["request"], d, {}) for d in ds]
    assert x[0].descriptions == ("a one", "b two") and x[0].legal == ("a.one", "b.two")
    pairs, y = training_pairs(x, ds, {}, negatives=0, seed=0)
    # each decision's two candidates, a none-fits decision `weight` times; only right answers are fits
    assert len(pairs) == 2 * (fits + weight * none)
    assert y.count("fit") == fits
    assert sum(1 for (req, _) in pairs if req == f"request {fits}") == (2 * weight if none else 0)


def test_pair_threshold_bounds_precision_where_fits_and_abstention_where_none_fits():
    """τ of a pairwise specialist: `abstention_floor` over the decisions where no action fits, then
    Learn-then-Test above that floor over those where one does (as `pipeline` composes them)."""
    # 12 decisions where an action fits (all right but the one at 0.55) and 40 where none does, two of
    # them confident (0.985, 0.935), the others at most 0.5. Clopper–Pearson one-sided 95% lower bounds
    # on abstaining: 38 / 39 / 40 of 40: 0.851 / 0.887 / 0.928. Learn-then-Test p-values, P(Binom(n, t) ≥ k):
    # 11 of 11 at t = 0.75: 0.75^11 = 0.0422; 12 with 11 right: 0.75^11 · 3.75 = 0.158;
    # at t = 0.6: 6 of 6: 0.6^6 = 0.0467, 12 with 11 right: 0.6^11 · 5.4 = 0.0196
    conf_fit = np.array([0.99, 0.98, 0.97, 0.96, 0.95, 0.94, 0.93, 0.92, 0.91, 0.9, 0.8, 0.55])
    right = np.arange(12) < 11
    conf_none = np.concatenate([[0.985, 0.935], np.linspace(0.1, 0.5, 38)])
    assert stats.lower_bound(38, 40) >= 0.85 > stats.lower_bound(37, 40)
    assert stats.lower_bound(39, 40) >= 0.88 > stats.lower_bound(38, 40)
    assert stats.lower_bound(40, 40) >= 0.9 > stats.lower_bound(39, 40)
    assert (min_answers(0.75), min_answers(0.6)) == (11, 6)  # fewer answers, all right, certify nothing

    def tau(target_precision, target_abstention, delta=0.05, c=conf_fit, ok=right, none=conf_none):
        """(floor, Learn-then-Test's choice above it), the floor at δ = 0.05, the test at `delta`."""
        floor = abstention_floor(none, target_abstention)
        if floor is None:
            return None, None
        return floor, learn_then_test(c, ok, target_precision, delta, floor)

    # abstention ≥ 0.85 tolerates the two confident ones: the floor sits just above the third, 0.5
    floor, ch = tau(0.75, 0.85)
    assert floor == np.nextafter(0.5, np.inf)
    # testing starts at 11 answered (τ 0.8, p 0.0422 ≤ 0.05, rejected), stops at 12 (p 0.158)
    assert (ch.tau, ch.answered, ch.correct, ch.n, ch.guarantee) == (0.8, 11, 11, 12, "ltt")
    assert int((conf_none < ch.tau).sum()) == 38
    assert tau(0.75, 0.85, delta=0.0423)[1].tau == 0.8 and tau(0.75, 0.85, delta=0.0422)[1].tau == NEVER
    _, ch = tau(0.6, 0.85)  # every level from 6 answered down to 12 (p 0.0196) is rejected
    assert (ch.tau, ch.answered, ch.correct) == (0.55, 12, 11)
    # abstention ≥ 0.88 needs 39 of 40: τ rises above 0.935, leaving 6 of 6 (p 0.0467)
    floor, ch = tau(0.6, 0.88)
    assert floor == np.nextafter(0.935, np.inf)
    assert (ch.tau, ch.answered, ch.correct) == (0.94, 6, 6) and int((conf_none < ch.tau).sum()) == 39
    # ≥ 0.9 needs all 40: above 0.985 one answer is left, fewer than 6: never answer
    floor, ch = tau(0.6, 0.9)
    assert floor == np.nextafter(0.985, np.inf) and (ch.tau, ch.answered, ch.correct) == (NEVER, 0, 0)
    assert "abstains on everything" in ch.statement
    # 5 decisions where none fits cannot show 0.85 even when all abstain (bound 0.549): no floor at all
    assert stats.lower_bound(5, 5) < 0.85 and abstention_floor(conf_none[:5], 0.85) is None
    # without decisions where none fits, or with the bound off, it is the classifiers' rule
    assert abstention_floor(np.zeros(0), 0.85) == 0.0 == abstention_floor(conf_none, 0.0)
    assert learn_then_test(conf_fit, right, 0.75).tau == 0.8
    assert learn_then_test(conf_fit, right, 0.6).tau == 0.55


def test_pipeline_chooses_pairwise_tau_above_the_abstention_floor():
    """`pipeline` composes the two on the calibration split: the figures of the hand-computed case above,
    and when no τ keeps abstention, none is tested, on the same decisions (n is theirs, not 0)."""
    from zcompile.qroute import Progress, pipeline
    from zcompile.qroute.features import VERSION, FeatureSpec
    from zcompile.qroute.manifest import Calibration
    from zcompile.qroute.recipes import PairwiseRecipe

    conf = np.concatenate([[0.99, 0.98, 0.97, 0.96, 0.95, 0.94, 0.93, 0.92, 0.91, 0.9, 0.8, 0.55],
                           [0.985, 0.935], np.linspace(0.1, 0.5, 38)])
    best = ["a.one"] * 11 + ["b.two"] + ["a.one"] * 40  # the one at 0.55 is wrong
    oof = [_decision(k, "a.one" if k < 12 else None) for k in range(52)]
    rec = PairwiseRecipe(0, FeatureSpec(VERSION, (), ()), None, {})
    raw, platt = (np.log(conf / (1 - conf)), best), Calibration("platt", 1.0, 0.0)  # sigmoid(z) is conf

    def threshold(target_abstention, k=52):
        s = pairwise(target_precision=0.6, target_abstention=target_abstention)
        best, c, _ = rec.confidence((raw[0][:k], raw[1][:k]), oof[:k], platt)
        assert c == pytest.approx(conf[:k])
        return pipeline._threshold(rec, best, c, oof[:k], s, 1, Progress())

    th, fig = threshold(0.88)  # the floor above 0.935, then 6 of 6 (see the test above)
    assert (th.tau, th.n, th.calibration_answered, th.calibration_correct) == (pytest.approx(0.94), 12, 6, 6)
    assert (th.source, th.calibration_none_fits, th.calibration_abstained) == ("calibration split", 40, 39)
    assert th.calibration_abstention_lower_bound == pytest.approx(stats.lower_bound(39, 40))
    assert fig.abstention_certified is True and fig.none_fits == 40
    th, fig = threshold(0.85, k=17)  # 5 decisions where none fits cannot certify 0.85
    assert (th.tau, th.n, th.calibration_answered, th.calibration_abstained) == (NEVER, 12, 0, 5)
    assert "12 tasks, 12 decisions" in th.statement and fig.abstention_certified is False


def test_gate_bounds_abstention_for_pairwise_specialists():
    """The gate promotes on the certified τ; for a pairwise specialist abstention where no action fits
    must be certified as well; the test split only refutes (its one-sided upper bound below target)."""
    th = Threshold(0.9, 0.95, 0.05, 60, 60, stats.lower_bound(60, 60), n=80, source="calibration split",
                   target_abstention=0.85, calibration_none_fits=40, calibration_abstained=38)
    m = {"illegal_selected": 0, "dangerous_selected": 0, "answered": 20, "correct": 19,
         "precision_upper_one_sided": 0.997, "coverage": 0.6, "latency_us": {"p50": 40.0}}
    # 19 of 20 right on the test split cannot show 0.95 from below, and does not refute it: promoted
    assert gate(m, th, 0.0, None).promoted and gate(m, th, 0.0, None, abstention=(0.85, True)).promoted
    g = gate(m, th, 0.0, None, abstention=(0.85, False))
    assert not g.promoted and g.reasons == ("abstention where no action fits is not certified ≥ 0.85",)
    never = msgspec.structs.replace(th, tau=NEVER, statement="no τ qualifies")
    assert gate(m, never, 0.0, None, abstention=(0.85,
                                                 True)).reasons == ("no τ is certified (no τ qualifies)",)
    refuted = m | {"correct": 15, "precision_upper_one_sided": 0.91}
    assert gate(refuted, th, 0.0, None, abstention=(0.85, True)).reasons == (
        "the sealed test split refutes the target: 15 of 20 answered right, one-sided 95% upper bound 0.910 "
        "< 0.95",)
    # abstention is checked before coverage and latency: a larger key is a better specialist
    keys = [gate(m, th, 0.7, 0.01, abstention=(0.85, ok)).key for ok in (False, True)]
    assert keys[1] > keys[0]


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
    parts = dict(zip(("train", "calibration", "test"), (decisions(p) for p in paths)))
    small = {"max_steps": 4, "max_length": 32, "batch_size": 8, "layers": 1}
    options = small | {"ensemble": 2, "quantization": "float32"}
    res = distill(paths, None, tmp_path / "ens", pairwise(target_precision=0.5, target_abstention=0.3,
                                                          options=options),
                  parts=parts)
    m = res.manifest
    assert m.model.params["ensemble"] == 2 and m.model.params["steps"] == 8
    assert m.metrics["parity"]["max_abs_delta"] < 1e-4
    graph = onnx.load(str(res.directory / "model.onnx")).graph
    mean = [n for n in graph.node if n.op_type == "Mean"]
    assert len(mean) == 1 and len(mean[0].input) == 2 and [o.name for o in graph.output] == ["logits"]
    # the members' own logits, averaged, are what the merged graph computes
    sp = PairwiseSpecialist(res.directory)
    d = parts["test"][0]
    assert sp.request(d.state) == render_plain(d.state)  # without a policy: the state's keys, sorted
    inp = pair_input(sp.request(d.state), d, {})
    feed_pairs = [(inp.request, desc) for desc in inp.descriptions]
    members = [TransformerClassifier(seed=s, **small) for s in (0, 1)]
    x_train = [pair_input(sp.request(x.state), x, {}) for x in parts["train"]]
    pairs, y = training_pairs(x_train, parts["train"], {}, 3, 0)
    assert m.model.params["pairs"] == len(pairs) and m.model.params["none_fits_weight"] == none_fits_weight(
        parts["train"]) == 4  # 24 decisions where an action fits, 6 where none does
    want = np.mean([c.fit(pairs, y).logits(feed_pairs) for c in members], axis=0)
    got = sp.margins(inp.request, list(inp.descriptions))
    assert got == pytest.approx(want[:, 0] - want[:, 1], abs=1e-4)
    # the threshold's figures, recounted from decide on the calibration split
    th = m.threshold
    answers = [(x, sp.decide(x.state, x.legal, x.tools)) for x in parts["calibration"]]
    fit_answered = [(x, a) for x, a in answers if x.label is not None and a.action is not None]
    assert th.calibration_none_fits == 10
    assert th.calibration_abstained == sum(1 for x, a in answers if x.label is None and a.action is None)
    assert th.calibration_answered == len(fit_answered)
    assert th.calibration_correct == sum(1 for x, a in fit_answered if a.action == x.label)
    # τ was chosen on the calibration split (a fine-tune is not cross-fitted), above the abstention floor
    assert (th.source, th.n, th.guarantee, th.target_abstention) == ("calibration split", 20, "ltt", 0.3)
    conf_none = np.array([a.confidence for x, a in answers if x.label is None])
    floor = abstention_floor(conf_none, 0.3)
    assert floor is not None  # 0.3 of 10 is certified by abstaining on all of them
    assert th.tau >= floor and th.calibration_abstention_lower_bound == pytest.approx(
        stats.lower_bound(th.calibration_abstained, 10))
    assert m.metrics["calibration"]["abstention_certified"] is True
    assert not any("abstention" in r for r in m.gate.reasons)


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


def test_bfcl_question_offering_no_function_is_an_abstention(tmp_path):
    """A question that offers no function at all (BFCL's live irrelevance has them) is a decision where
    no action fits, with an answers file or without: nothing can be called, so abstaining is right."""
    from types import SimpleNamespace as NS

    from zcompile import evals
    from zcompile.receipts import read

    bare = {"id": "x_1", "question": [[{"role": "user", "content": "hello there"}]], "function": []}
    q, a = _bfcl(tmp_path, [Q, bare], [{"id": "x_0", "ground_truth": [{"math.add": {"a": [2]}}]}])
    got, none = list(import_bfcl(q, a)), list(import_bfcl(q, None))
    for r in (got[1], none[1]):
        assert (r.legal, r.action, r.gold, r.verified, r.meta["no_function"]) == ((), None, None, True, True)
    assert got[0].action == "math.add" and "no_function" not in got[0].meta
    out = tmp_path / "r.jsonl"
    res = CliRunner().invoke(main, ["receipts", "import", "--format", "bfcl", str(q), "--answers", str(a),
                                    "-o", str(out)])
    assert res.exit_code == 0 and "imported 2 questions" in res.output, res.output
    assert [(r.id, r.legal, r.action) for r in read(out)] == [("x_0", ("math.add", "math.mul"), "math.add"),
                                                               ("x_1", (), None)]
    # a pairwise distillation and zc eval read it as a decision where no action fits
    (d,) = [d for d in load_decisions([out], none_fits=True).decisions if d.id == "x_1"]
    assert (d.legal, d.label) == ((), None)

    class Eager:  # answers whenever anything is offered: only an empty legal set stops it
        name, pairwise = "eager", True
        manifest = NS(name="eager", model=NS(kind="pairwise"), policy_sha256="", policy_name="",
                      threshold=NS(tau=0.5, target_precision=0.9), gate=NS(promoted=False),
                      splits=NS(train=NS(tasks=()), calibration=NS(tasks=()), test=NS(tasks=())))

        def decide(self, state, legal, tools):
            return NS(action=legal[0] if legal else None, confidence=0.9 if legal else 0.0,
                      best=legal[0] if legal else None, arguments=None)

    rep = evals.report([out], None, Eager(), decisions=True)
    assert [(row.id, row.rung) for row in rep["decisions"]] == [("x_0", "specialist"), ("x_1", "remote")]
    none_fits = rep["overall"]["abstained_where_none_fits"]
    assert none_fits["k"] == none_fits["n"] == 1
    # an answer naming a function where none was offered is refused, naming the place
    q2, a2 = _bfcl(tmp_path, [bare], [{"id": "x_1", "ground_truth": [{"math.add": {}}]}])
    with pytest.raises(ZcError, match=r"q.json:1: \$\.function: no function offered, yet the answer names "):
        list(import_bfcl(q2, a2))


def test_cli_distill_policy_rules(tmp_path):
    res = CliRunner().invoke(main, ["distill", "--from", str(tmp_path), "-o", str(tmp_path / "o"), "--model",
                                    "mlp"])
    assert res.exit_code == 2 and "--policy is required (except for --model pairwise)" in res.output
    res = CliRunner().invoke(main, ["distill", "--from", str(tmp_path), "-o", str(tmp_path / "o"), "--model",
                                    "mlp", "--target-abstention", "0.9"])
    assert res.exit_code == 2 and "--target-abstention only applies to --model pairwise" in res.output
    res = CliRunner().invoke(main, ["distill", "--from", str(tmp_path), "-o", str(tmp_path / "o"), "--model",
                                    "pairwise", "--ensemble", "0"])
    assert res.exit_code == 2 and "--ensemble" in res.output and "Traceback" not in res.output
    # pairwise without a policy needs receipts that list the offered actions
    r = tmp_path / "r.jsonl"
    r.write_bytes(msgspec.json.encode(Receipt(id="a", task="a", state={"request": "x"}, tier="t", action="f"))
                  + b"\n")
    res = CliRunner().invoke(main, ["distill", "--from", str(r), "-o", str(tmp_path / "o"), "--model",
                                    "pairwise"])
    assert (res.exit_code == 1 and "receipt `a`: $.legal: missing" in res.output
            and "Traceback" not in res.output)


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
    again = decisions(tmp_path / "r.jsonl", policy)
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
        "answered_where_fits": sum(a.action is not None and lab is not None for a,
                                   lab in zip(answers, labels)),
        "none_fits": len(none),
        "abstained": sum(a.action is None for a in none),
        "aurc": stats.aurc(np.array([a.confidence for a in answers]),
                           np.array([float(a.best is not None and a.best == lab) for a,
                                     lab in zip(answers, labels)])),
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
    assert want["none_fits"] == 10 and want["answered"] > 0  # else no agreement figure (below)
    out_json, out_html = tmp_path / "r.json", tmp_path / "r.html"
    r = CliRunner().invoke(main, ["eval", "--specialists", str(res.directory), "--receipts",
                                  str(d / "train.jsonl"), str(d / "test.jsonl"), str(fits), str(nofit),
                                  "--json", str(out_json), "--html", str(out_html)])
    assert r.exit_code == 0, r.output
    rep = json.loads(out_json.read_text())
    n = len(held)
    assert (rep["n"], rep["policy"], rep["legal_sets"], rep["specialist"]["model"]) == (
        n, None, "receipts", "pairwise")
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
    # an answer where none fits is wrong, so every right one is where one fits
    pf = sp["precision_where_fits"]
    assert ((pf["k"], pf["n"]) == (want["correct"], want["answered_where_fits"])
            and o["precision_where_fits"] == pf)
    # a verified abstention agrees when the specialist abstains, and counts against it when it answers
    ag = sp["agreement_gold"]
    assert (ag["k"], ag["n"]) == (want["correct"] + want["abstained"], want["answered"] + want["abstained"])
    assert sp["agreement_teacher"] == ag  # these receipts' teacher is their gold
    # the scores are those of `decide` with the offered tools (names alone score differently)
    assert rep["risk_coverage"]["n"] == n and rep["risk_coverage"]["aurc"] == pytest.approx(
        want["aurc"], abs=1e-9)
    head, *lines = r.stdout.splitlines()
    assert head.startswith("taken off the expensive model: ") and "no text tier is declared" in head
    assert lines[0].startswith("no policy (legal sets from the receipts), specialist spec (pairwise")
    assert "abstained where none fits [Wilson 95%] (k/n)" in lines[3]
    assert [ln.split()[0] for ln in lines[4:7]] == ["specialist", "remote", "overall"]
    share = f"{ab['rate']:.3f} [{ab['ci'][0]:.3f}, {ab['ci'][1]:.3f}] ({ab['k']}/10)"
    assert lines[4].endswith(share) and lines[6].endswith(share)
    assert lines[-1] == (f"where no offered action fits (n = 10): abstained {share}; an answer there counts "
                         "as wrong")
    page = " ".join(out_html.read_text().split())  # the template wraps its sentences
    assert ("Abstained where none fits" in page and "not answering it agrees" in page
            and "<td>compiler" not in page)
    # trained-on tasks are refused under --split all, as for classifiers
    r = CliRunner().invoke(main, ["eval", "--specialists", str(res.directory), "--receipts",
                                  str(d / "train.jsonl"), "--split", "all"])
    assert r.exit_code == 1 and "receipts of 120 tasks the specialist was trained on" in r.output


def test_cli_eval_pairwise_errors(trained, tmp_path):
    res, _ = trained
    spec = str(res.directory)
    runner = CliRunner()
    # without a policy, receipts must list the offered actions
    bare = tmp_path / "bare.jsonl"
    bare.write_bytes(msgspec.json.encode(Receipt(id="a", task="a", state={"request": "x"}, tier="t",
                                                 action="f"))
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
            ("play some jazz music", [6, 1], "music.play"), ("book a hotel room in Oslo", [7, 2],
                                                             "hotels.book"),
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
    assert r.output == ("error: --policy is required: pairwise specialist `spec` was distilled for policy "
                        "`tools`\n")
    r = CliRunner().invoke(main, [*base, "--policy", str(tmp_path / "tools.zc"), "--json",
                                  str(tmp_path / "r.json")])
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
    assert (sp["abstained_where_none_fits"]["k"] == want["abstained"]
            and sp["abstained_where_none_fits"]["n"] == 1)
    assert (o["abstained_where_none_fits"]["n"] == 2
            and o["abstained_where_none_fits"]["k"] == want["abstained"])
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
    for bad, where in (("flights.search", r"\$\.tools: expected a list"),
                       ([tool(1), "x"], r"\$\.tools\[1\]: expected"),
                       ([{"description": "d"}], r"\$\.tools\[0\]: a tool schema needs a string `name`"),
                       ({"x": 3}, r"\$\.tools\.x: expected a tool schema")):
        with pytest.raises(ZcError, match=where):
            tool_schemas(bad)
    res, _ = trained
    sp = PairwiseSpecialist(res.directory)
    with pytest.raises(ZcError, match=r"\$\.tools\[0\]"):
        sp.decide({"request": "play jazz"}, ["music.play"], [3])
