"""Distillation: split sealing, threshold selection, calibration, ONNX parity, masking, the gate."""

from __future__ import annotations

import json
import random

import msgspec
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from isolation import modules_after
from scipy import stats as sst

import zcompile
from zcompile import ZcError
from zcompile import qroute as Q
from zcompile.qroute.features import Featurizer, spec_for
from zcompile.qroute.specialist import Specialist, masked_confidence
from zcompile.qroute.threshold import NEVER, conformal_selection, learn_then_test
from zcompile.receipts import Receipt

POLICY = """
policy toy
state {
  phase:  enum(start, lookup, confirm, done)
  fault:  bool = false
  tries:  int = 0
  note:   text?
}
action lookup  tags(read)
action update  tags(write, money)
action retry   tags(control)
action reply   tags(control)
action handoff tags(control)
fallback handoff
rule confirm_first: update requires phase == confirm
rule money_guard:   forbid update when fault
rule retry_faults:  retry requires fault and tries < 3
"""

TEACHER = {"start": "lookup", "lookup": "reply", "confirm": "update", "done": "reply"}


def make_receipts(path, tasks=20, per_task=30, seed=1, noise=0.0):
    """Receipts of a teacher that follows a learnable rule, with optional label noise."""
    rng = random.Random(seed)
    with open(path, "wb") as fh:
        for t in range(tasks):
            for i in range(per_task):
                phase = rng.choice(list(TEACHER))
                fault = rng.random() < 0.2
                state = {"phase": phase, "fault": fault, "tries": rng.randrange(5),
                         "note": rng.choice(["please check", "yes go ahead", "thanks"])}
                action = "retry" if fault and state["tries"] < 3 else TEACHER[phase]
                if fault and action == "update":
                    action = "reply"
                if rng.random() < noise:
                    action = rng.choice(["lookup", "reply", "handoff"])
                r = Receipt(id=f"t{t}-{i}", task=f"task-{t:02d}", state=state, tier="remote",
                            action=action, ts=float(t * 100 + i))
                fh.write(msgspec.json.encode(r) + b"\n")
    return path


@pytest.fixture(scope="module")
def policy():
    return zcompile.compile_text(POLICY, "toy.zc")


@pytest.fixture(scope="module")
def receipts(tmp_path_factory):
    return make_receipts(tmp_path_factory.mktemp("r") / "r.jsonl")


@pytest.fixture(scope="module", params=["logistic", "mlp", "gbt"])
def trained(request, policy, receipts, tmp_path_factory):
    out = tmp_path_factory.mktemp("s") / f"toy_{request.param}"
    # 17 tasks out of the test split cannot certify 0.95 for a new task (tests/test_task_certificate.py):
    # the toy machinery is certified by decision
    return Q.distill([receipts], policy, out, Q.Settings(model=request.param, seed=3, unit="decision"))


def test_split_is_by_task_chronological_and_sealed(policy, receipts):
    parts = Q.split_by_task(Q.load_decisions([receipts], policy).decisions)
    assert [len(parts[k]) for k in ("train", "calibration", "test")] == [420, 90, 90]
    task_sets = [{d.task for d in parts[k]} for k in ("train", "calibration", "test")]
    assert not (task_sets[0] & task_sets[1]) and not (task_sets[1] & task_sets[2])
    assert max(task_sets[0]) < min(task_sets[1]) <= max(task_sets[1]) < min(task_sets[2])  # chronological
    sealed = Q.seal(parts["test"])
    import hashlib

    assert sealed.sha256 == hashlib.sha256("\n".join(sorted(task_sets[2])).encode()).hexdigest()


def test_decisions_carry_the_validated_state(policy, receipts):
    d = Q.load_decisions([receipts], policy).decisions[0]
    assert d.root is not None and d.legal == policy.legal(d.state, d.intent).actions


def test_split_needs_three_tasks(policy, tmp_path):
    path = make_receipts(tmp_path / "r.jsonl", tasks=2, per_task=5)
    decisions = Q.load_decisions([path], policy).decisions
    with pytest.raises(ZcError, match="at least 3 tasks"):
        Q.split_by_task(decisions)


def test_crossfit_never_trains_on_the_scored_task_or_the_test_split(policy, receipts, monkeypatch):
    """Every fold model is fit on tasks disjoint from the ones it scores, and never on a test task."""
    from zcompile.qroute import pipeline
    from zcompile.qroute.recipes import TabularRecipe

    parts = Q.split_by_task(Q.load_decisions([receipts], policy).decisions)
    test_tasks = {d.task for d in parts["test"]}
    seen_fits = []
    real_fit = TabularRecipe.fit

    def spy(self, x, decisions, report):
        seen_fits.append({d.task for d in decisions})
        return real_fit(self, x, decisions, report)

    monkeypatch.setattr(TabularRecipe, "fit", spy)
    pool = parts["train"] + parts["calibration"]
    rec = TabularRecipe("logistic", 0, spec_for(policy.ir))
    rec.prepare(pool)
    from zcompile.qroute.dataset import Progress, task_folds

    folds = np.array(task_folds(pool, 5))
    (p, seen), refit = pipeline.crossfit(rec, rec.inputs(pool), pool, folds, Progress())
    assert refit is None  # asked for the folds only
    assert len(seen_fits) == 5 and p.shape == (len(pool), len(rec.actions))
    # the fits run two at a time, so in any order: each is fit on exactly the other folds' tasks
    fold_tasks = [{d.task for d, f in zip(pool, folds) if f == j} for j in range(5)]
    every = {d.task for d in pool}
    assert sorted(map(sorted, seen_fits)) == sorted(sorted(every - t) for t in fold_tasks)
    assert not any(tasks & test_tasks for tasks in seen_fits)
    for t in {d.task for d in pool}:  # a task lies in exactly one fold
        assert len({f for d, f in zip(pool, folds) if d.task == t}) == 1


def test_masked_confidence_never_puts_mass_outside_legal():
    probs = np.array([[0.7, 0.2, 0.1], [0.1, 0.1, 0.8]])
    class_index = np.array([0, 2, 3])  # model classes -> policy action columns (4 actions)
    mask = np.array([[0, 1, 1, 0], [1, 1, 0, 0]], dtype=np.float32)
    conf = masked_confidence(probs, class_index, mask, 1.0)
    assert conf[0].tolist() == pytest.approx([0, 0, 1, 0])  # only action 2 is legal and known
    assert conf[1].tolist() == pytest.approx([1, 0, 0, 0])
    assert (conf[:, mask.sum(0) == 0] == 0).all()


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_specialist_never_proposes_an_illegal_action(trained, policy, data):
    sp = Specialist(trained.directory, policy)
    legal = data.draw(st.lists(st.sampled_from(policy.actions), min_size=1, unique=True))
    state = {"phase": data.draw(st.sampled_from(list(TEACHER))), "fault": data.draw(st.booleans()),
             "tries": data.draw(st.integers(0, 9))}
    answer = sp.decide(state, legal)
    assert answer.best is None or answer.best in legal
    assert answer.action is None or answer.action in legal


def test_single_decision_agrees_with_batch_confidences(trained, policy):
    sp = Specialist(trained.directory, policy)
    rng = random.Random(5)
    for _ in range(50):
        legal = rng.sample(policy.actions, rng.randint(1, len(policy.actions)))
        state = {"phase": rng.choice(list(TEACHER)), "fault": rng.random() < 0.5, "tries": rng.randrange(6)}
        mask = np.zeros((1, len(sp.actions)), np.float32)
        mask[0, [sp.actions.index(a) for a in legal]] = 1
        conf = sp.confidences(sp.featurizer.one(state, legal)[None, :], mask)[0]
        ans = sp.decide(state, legal)
        if conf.max() == 0:
            assert ans.best is None
        else:
            assert ans.best == sp.actions[int(conf.argmax())]
            assert ans.confidence == pytest.approx(float(conf.max()), rel=1e-5)


def test_onnx_parity_with_scikit_learn(trained):
    from zcompile.qroute.recipes import PARITY_TOLERANCE

    assert trained.manifest.metrics["parity"]["max_abs_delta"] <= PARITY_TOLERANCE


def test_learnable_teacher_is_learned_and_promoted(trained):
    m = trained.manifest
    t = m.metrics
    assert m.gate.promoted, m.gate.reasons
    assert m.threshold.source == "cross-fitted" and m.threshold.n == 510 and m.threshold.guarantee == "ltt"
    assert t["coverage"] > 0.8 and t["precision"] > 0.97
    assert t["illegal_selected"] == 0 and t["dangerous_selected"] == 0
    assert m.splits.test.decisions == t["n"] == 90
    assert (trained.directory / "model.onnx").exists()
    text = (trained.directory / "report.md").read_text()
    assert text.splitlines()[2] == "**Verdict: promoted.**" and "Sealed test split" in text


def test_manifest_records_everything(trained, receipts, policy):
    raw = json.loads((trained.directory / "manifest.json").read_text())
    assert raw["policy_sha256"] == policy.sha256 and raw["name"] == trained.directory.name
    assert raw["data"][0]["path"] == str(receipts)
    assert set(raw["splits"]) == {"train", "calibration", "test"}
    assert raw["features"]["version"] == 2 and raw["calibration"]["method"] == "temperature"
    assert 0 < raw["threshold"]["tau"] <= 1 and raw["threshold"]["target_precision"] == 0.95
    assert "Learn-then-Test" in raw["threshold"]["statement"] and "n = 510" in raw["threshold"]["statement"]
    assert raw["model"]["sha256"] and raw["counts"]["used"] == 600 and len(raw["sha256"]) == 64


def test_noisy_teacher_abstains_rather_than_guess(policy, tmp_path):
    path = make_receipts(tmp_path / "noisy.jsonl", noise=0.5, seed=7)
    res = Q.distill([path], policy, tmp_path / "noisy", Q.Settings(model="logistic"))
    t = res.manifest.metrics
    assert t["coverage"] < 0.9  # it must abstain on a good share
    if t["answered"]:
        assert t["precision"] >= 0.8


def test_auto_keeps_one_candidate_and_certifies_at_a_bonferroni_share(policy, receipts, tmp_path):
    res = Q.distill([receipts], policy, tmp_path / "auto", Q.Settings(model="auto"))
    assert res.manifest.model.kind in ("logistic", "mlp", "gbt")
    assert res.manifest.threshold.alpha == pytest.approx(0.05 / 3)
    assert sorted(p.name for p in (tmp_path / "auto").iterdir()) == [
        "manifest.json", "model.onnx", "report.md"]
    assert [p.name for p in tmp_path.iterdir()] == ["auto"]  # no staging directory left behind


# ---- thresholds: hand-computed cases and simulations of the nominal error rates -------------------------
def test_ltt_matches_hand_computed_binomial_tests():
    # 100 decisions; the 70 most confident are right, then 30 wrong
    conf = np.linspace(1.0, 0.01, 100)
    correct = np.r_[np.ones(70, bool), np.zeros(30, bool)]
    c = learn_then_test(conf, correct, 0.95, 0.05)
    # fixed sequence from 59 answered (the fewest that can certify 0.95) down while P(Binom(n,.95) >= k) <=
    # .05
    assert c.answered == 70 and c.correct == 70 and c.tau == pytest.approx(conf[69])
    assert sst.binom.sf(69, 70, 0.95) <= 0.05 < sst.binom.sf(69, 71, 0.95)  # P(X >= 70)
    # one error among the first 59: the first test fails, so nothing is certified
    correct2 = correct.copy()
    correct2[3] = False
    assert learn_then_test(conf, correct2, 0.95, 0.05).tau == NEVER
    assert learn_then_test(conf[:40], correct[:40], 0.95, 0.05).tau == NEVER  # 40 < 59 answers: never


def test_conformal_matches_hand_computed_fdr_estimates():
    conf = np.linspace(1.0, 0.01, 100)
    correct = np.r_[np.ones(70, bool), np.zeros(30, bool)]
    c = conformal_selection(conf, correct, 0.95)
    # answered a: (1 + wrong(a)) * 100 / (101 * a) <= 0.05 -> with 0 wrong: a >= 19.8; with w wrong among
    # a = 70 + w: (1 + w) * 100 / (101 * (70 + w)) <= .05 -> w <= 2
    assert (c.answered, c.correct) == (72, 70)


def _simulate(chooser, target: float, runs: int, rng) -> tuple[list[float], list[bool]]:
    """True precision at the chosen τ over `runs` calibration draws from a known model: confidence
    c ~ U(0, 1), right with probability 0.75 + 0.25 c (true precision above τ has a closed form)."""
    fdp, held = [], []
    for _ in range(runs):
        c = rng.random(400)
        ok = rng.random(400) < 0.75 + 0.25 * c
        ch = chooser(c, ok, target)
        if ch.tau < NEVER:
            true_prec = 0.75 + 0.25 * (1 + ch.tau) / 2
            held.append(true_prec >= target)
            test = rng.random(400)
            ans = test >= ch.tau
            fdp.append(float((rng.random(ans.sum()) >= 0.75 + 0.25 * test[ans]).mean()) if ans.any() else 0.0)
        else:
            held.append(True)
            fdp.append(0.0)
    return fdp, held


def test_simulated_ltt_holds_its_guarantee_with_95_percent_probability():
    rng = np.random.default_rng(0)
    _, held = _simulate(lambda c, ok, t: learn_then_test(c, ok, t, 0.05), 0.95, 300, rng)
    # the guarantee: P(true precision at τ >= target) >= 0.95; 300 runs: allow sampling noise
    assert np.mean(held) >= 0.92


def test_simulated_conformal_selection_holds_its_expected_fdr():
    rng = np.random.default_rng(1)
    fdp, _ = _simulate(lambda c, ok, t: conformal_selection(c, ok, t), 0.95, 300, rng)
    assert np.mean(fdp) <= 0.05 + 0.01  # expected false-discovery rate <= 1 - target (+ Monte Carlo noise)


# ---- the gate -------------------------------------------------------------------------------------------
def _th(tau=0.9):
    from zcompile.qroute.manifest import Threshold

    return Threshold(tau, 0.95, 0.05, 100, 99, 0.95, statement="…", n=500)


def test_gate_orders_safety_before_speed():
    from zcompile.qroute.gate import gate

    base = {"illegal_selected": 0, "dangerous_selected": 0, "answered": 20, "correct": 20,
            "precision_upper_one_sided": 1.0, "coverage": 0.5, "aurc": 0.1, "latency_us": {"p50": 40.0}}
    slow_right = gate({**base, "latency_us": {"p50": 9000.0}}, _th(), 0.0, 5)
    fast_wrong = gate({**base, "dangerous_selected": 1}, _th(), 0.0, 5)
    assert not slow_right.promoted and not fast_wrong.promoted
    assert slow_right.key > fast_wrong.key
    assert gate(base, _th(), 0.0, 5).promoted
    assert not gate(base, _th(NEVER), 0.0, 5).promoted  # nothing certified


def test_gate_refuses_when_the_test_split_refutes_the_target():
    from zcompile.qroute.gate import gate

    ok = {"illegal_selected": 0, "dangerous_selected": 0, "answered": 20, "correct": 20,
          "precision_upper_one_sided": 1.0, "coverage": 0.13, "aurc": 0.1, "latency_us": {"p50": 40.0}}
    refuted = dict(ok, correct=14, precision_upper_one_sided=0.88)
    assert gate(ok, _th(), 0.0, 5).promoted  # 20/20 cannot reach a Wilson bound of .95, and need not
    g = gate(refuted, _th(), 0.0, 5)
    assert not g.promoted and "refutes the target" in g.reasons[0]


# ---- output directories are never lost ------------------------------------------------------------------
def test_distill_refuses_a_directory_it_did_not_write(policy, receipts, tmp_path):
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "todo.txt").write_text("mine")
    with pytest.raises(ZcError, match="not a specialist directory"):
        Q.distill([receipts], policy, notes, Q.Settings(model="logistic"))
    assert (notes / "todo.txt").read_text() == "mine" and sorted(tmp_path.iterdir()) == [notes]
    afile = tmp_path / "afile"
    afile.write_text("x")
    with pytest.raises(ZcError, match="not a directory"):
        Q.distill([receipts], policy, afile, Q.Settings(model="logistic"))
    assert afile.read_text() == "x"


def test_distill_replaces_a_specialist_whole(trained, policy, receipts, tmp_path):
    import shutil

    out = tmp_path / "sp"
    shutil.copytree(trained.directory, out)
    (out / "stale.txt").write_text("from an old run")
    Q.distill([receipts], policy, out, Q.Settings(model="logistic"))
    assert not (out / "stale.txt").exists() and Specialist(out, policy).manifest.model.kind == "logistic"


def test_failed_distillation_leaves_the_old_specialist(trained, policy, tmp_path):
    import shutil

    out = tmp_path / "sp"
    shutil.copytree(trained.directory, out)
    before = sorted((p.name, p.read_bytes()) for p in out.iterdir())
    bad = tmp_path / "one_action.jsonl"
    bad.write_bytes(b"".join(msgspec.json.encode(Receipt(id=f"{t}-{i}", task=f"t{t}",
                                                         state={"phase": "start"}, tier="remote",
                                                         action="lookup")) + b"\n"
                             for t in range(5) for i in range(5)))
    with pytest.raises(ZcError, match="fewer than two distinct actions"):
        Q.distill([bad], policy, out, Q.Settings(model="logistic"))
    assert sorted((p.name, p.read_bytes()) for p in out.iterdir()) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["one_action.jsonl", "sp"]


def test_specialist_refuses_other_policy_and_tampering(trained, policy, tmp_path):
    other = zcompile.compile_text(POLICY.replace("tries < 3", "tries < 4"), "toy.zc")
    with pytest.raises(ZcError, match="trained for policy"):
        Specialist(trained.directory, other)
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(trained.directory, copy)
    blob = bytearray((copy / "model.onnx").read_bytes())
    blob[-1] ^= 1
    (copy / "model.onnx").write_bytes(bytes(blob))
    with pytest.raises(ZcError, match="does not match the sha256"):
        Specialist(copy, policy)
    with pytest.raises(ZcError, match="not a specialist directory"):
        Specialist(tmp_path / "nowhere", policy)


def test_feature_layout_is_named_and_deterministic(policy):
    spec = spec_for(policy.ir)
    fz = Featurizer(spec)
    x1 = fz.one({"phase": "start", "note": "Yes, MDCLVA please"}, ["lookup"])
    x2 = fz.one({"phase": "start", "note": "Yes, MDCLVA please"}, ["lookup"])
    assert len(spec.names()) == fz.dim == len(x1)
    assert (x1 == x2).all()
    names = spec.names()
    assert x1[names.index("phase=start")] == 1 and x1[names.index("lookup legal")] == 1
    assert x1[names.index("tries bucket <=0")] == 1


@pytest.mark.parametrize("edit", [
    lambda m: m["threshold"].__setitem__("tau", 0.01),
    lambda m: m["calibration"].__setitem__("temperature", 0.5),
    lambda m: m["model"].__setitem__("classes", list(reversed(m["model"]["classes"]))),
    lambda m: m["features"].__setitem__("text_dim", 64),
    lambda m: m.__setitem__("sha256", "0" * 64),
    lambda m: m.pop("sha256"),
])
def test_an_edited_manifest_is_refused(trained, policy, tmp_path, edit):
    import shutil

    copy = tmp_path / "edited"
    shutil.copytree(trained.directory, copy)
    raw = json.loads((copy / "manifest.json").read_text())
    edit(raw)
    (copy / "manifest.json").write_text(json.dumps(raw))
    with pytest.raises(ZcError, match="does not match its sha256"):
        Specialist(copy, policy)


@pytest.mark.parametrize("version", [0, -1, 1, 2, 3, 7, 99, True, "5"])
def test_manifest_versions_other_than_this_builds_are_refused(trained, policy, tmp_path, version):
    import shutil

    copy = tmp_path / "v"
    shutil.copytree(trained.directory, copy)
    raw = json.loads((copy / "manifest.json").read_text())
    raw["version"] = version
    (copy / "manifest.json").write_text(json.dumps(raw))
    with pytest.raises(ZcError, match="not read by this zc|no `version`"):
        Specialist(copy, policy)


def test_decision_time_imports_only_onnxruntime_and_numpy(trained, policy):
    code = f"""
import sys, zcompile
from zcompile.qroute.specialist import Specialist
p = zcompile.compile_text({POLICY!r}, "toy.zc")
sp = Specialist({str(trained.directory)!r}, p)
sp.decide({{"phase": "start"}}, ["lookup", "reply"])
"""
    assert modules_after(code).isdisjoint({"sklearn", "skl2onnx", "torch", "transformers", "scipy"})
