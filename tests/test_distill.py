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
from zcompile.qroute import distill as D
from zcompile.qroute.features import Featurizer, spec_for
from zcompile.qroute.specialist import Specialist, masked_confidence
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


@pytest.fixture(scope="module", params=["logistic", "mlp"])
def trained(request, policy, receipts, tmp_path_factory):
    out = tmp_path_factory.mktemp("s") / f"toy_{request.param}"
    return D.distill([receipts], policy, out, model=request.param, seed=3)


def test_split_is_by_task_chronological_and_sealed(policy, receipts):
    decisions, _, _ = D.load_decisions([receipts], policy)
    parts = D.split_by_task(decisions)
    tasks = {k: {d.task for d in v} for k, v in parts.items()}
    assert tasks["train"].isdisjoint(tasks["calibration"]) and tasks["train"].isdisjoint(tasks["test"])
    assert tasks["calibration"].isdisjoint(tasks["test"])
    assert [len(v) for v in tasks.values()] == [14, 3, 3]
    assert max(tasks["train"]) < min(tasks["calibration"]) <= max(tasks["calibration"]) < min(tasks["test"])
    sealed = D.seal(parts["test"])
    assert sealed.tasks == tuple(sorted(tasks["test"]))
    import hashlib

    assert sealed.sha256 == hashlib.sha256("\n".join(sealed.tasks).encode()).hexdigest()


def test_split_needs_three_tasks(policy, tmp_path):
    path = make_receipts(tmp_path / "r.jsonl", tasks=2)
    decisions, _, _ = D.load_decisions([path], policy)
    with pytest.raises(ZcError, match="at least 3 tasks"):
        D.split_by_task(decisions)


def test_threshold_matches_hand_computed_bounds():
    # 10 decisions by confidence; the wrong ones sit at 0.6 and 0.3
    conf = np.array([0.99, 0.98, 0.97, 0.95, 0.9, 0.8, 0.7, 0.6, 0.5, 0.3])
    correct = np.array([1, 1, 1, 1, 1, 1, 1, 0, 1, 0], dtype=bool)
    # answering the top 7 gives 7/7: Clopper-Pearson one-sided 95% lower bound 0.05 ** (1/7)
    assert D.stats.lower_bound(7, 7) == pytest.approx(0.05 ** (1 / 7))
    tau, n, k, lb = D.select_threshold(conf, correct, target=0.6)
    assert (tau, n, k) == (0.7, 7, 7) and lb == pytest.approx(0.05 ** (1 / 7))  # 0.652 ≥ 0.6
    # a target the data cannot support: never answer
    tau, n, k, lb = D.select_threshold(conf, correct, target=0.9)
    assert tau == D.NEVER and n == 0
    # with 8/9 at τ=0.5: the bound is beta.ppf(0.05, 8, 2)
    tau, n, k, lb = D.select_threshold(conf, correct, target=0.55)
    assert (tau, n, k) == (0.5, 9, 8) and lb == pytest.approx(sst.beta.ppf(0.05, 8, 2))


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
    assert trained.manifest.metrics["parity_max_abs_delta"] <= D.PARITY_TOLERANCE


def test_learnable_teacher_is_learned_and_promoted(trained):
    m = trained.manifest
    t = m.metrics
    assert m.gate.promoted, m.gate.reasons
    assert t["coverage"] > 0.8 and t["precision"] > 0.97
    assert t["illegal_selected"] == 0 and t["dangerous_selected"] == 0
    assert m.splits.test.decisions == t["n"] == 90
    assert (trained.directory / "model.onnx").exists() and (trained.directory / "report.md").exists()
    assert "Sealed test split" in (trained.directory / "report.md").read_text()


def test_manifest_records_everything(trained, receipts, policy):
    raw = json.loads((trained.directory / "manifest.json").read_text())
    assert raw["policy_sha256"] == policy.sha256 and raw["name"] == trained.directory.name
    assert raw["data"][0]["path"] == str(receipts)
    assert set(raw["splits"]) == {"train", "calibration", "test"}
    assert raw["features"]["version"] == 2 and raw["calibration"]["method"] == "temperature"
    assert 0 < raw["threshold"]["tau"] <= 1 and raw["threshold"]["target_precision"] == 0.95
    assert raw["model"]["sha256"] and raw["counts"]["used"] == 600


def test_noisy_teacher_abstains_rather_than_guess(policy, tmp_path):
    path = make_receipts(tmp_path / "noisy.jsonl", noise=0.5, seed=7)
    res = D.distill([path], policy, tmp_path / "noisy", model="logistic")
    t = res.manifest.metrics
    assert t["coverage"] < 0.9  # it must abstain on a good share
    if t["answered"]:
        assert t["precision"] >= 0.8


def test_gate_orders_safety_before_speed():
    base = {"illegal_selected": 0, "dangerous_selected": 0, "answered": 50, "precision_ci": [0.96, 1.0],
            "coverage": 0.5, "aurc": 0.1, "latency_us": {"p50": 40.0}}
    slow_right = D.gate({**base, "latency_us": {"p50": 9000.0}}, 0.95, 0.0, 5)
    fast_wrong = D.gate({**base, "dangerous_selected": 1, "precision_ci": [0.9, 0.99]}, 0.95, 0.0, 5)
    assert not slow_right.promoted and not fast_wrong.promoted
    assert slow_right.key != fast_wrong.key and slow_right.key > fast_wrong.key
    assert D.gate(base, 0.95, 0.0, 5).promoted


def test_gate_ranks_ranking_quality_before_timing_noise():
    """Two candidates that both abstain on everything tie on every check: AURC decides, not latency."""
    none = {"illegal_selected": 0, "dangerous_selected": 0, "answered": 0, "precision_ci": [0.0, 1.0],
            "coverage": 0.0}
    good_slow = D.gate({**none, "aurc": 0.21, "latency_us": {"p50": 190.0}}, 0.95, 0.0, 5)
    poor_fast = D.gate({**none, "aurc": 0.25, "latency_us": {"p50": 120.0}}, 0.95, 0.0, 5)
    assert good_slow.key > poor_fast.key
    same_slow = D.gate({**none, "aurc": 0.21, "latency_us": {"p50": 300.0}}, 0.95, 0.0, 5)
    assert good_slow.key > same_slow.key  # equal on quality: the faster one


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


def test_specialist_of_other_feature_version_refused(trained, policy, tmp_path):
    import shutil

    copy = tmp_path / "old"
    shutil.copytree(trained.directory, copy)
    raw = json.loads((copy / "manifest.json").read_text())
    raw["features"]["version"] = 1
    (copy / "manifest.json").write_text(json.dumps(raw))
    with pytest.raises(ZcError, match="features of version 1 are not computed by this zc"):
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
