"""Novelty: a tabular specialist abstains with cause `novel` on a state unlike its training data; the
cut is chosen on out-of-fold train + calibration rows, never on the test split."""

from __future__ import annotations

import json

import msgspec
import numpy as np
import pytest
from test_distill import POLICY, make_receipts

import zcompile
from zcompile import qroute as Q
from zcompile.qroute import novelty as N
from zcompile.qroute.manifest import validate
from zcompile.qroute.specialist import Specialist
from zcompile.router import Router

FAR = {"phase": "start", "fault": False, "tries": 1, "note": "qqq zzz www"}  # words never seen in training


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    """test_distill's toy policy and receipts, and a logistic specialist distilled from them."""
    policy = zcompile.compile_text(POLICY, "toy.zc")
    receipts = make_receipts(tmp_path_factory.mktemp("r") / "r.jsonl")
    out = tmp_path_factory.mktemp("s") / "toy"
    return policy, receipts, Q.distill([receipts], policy, out,
                                       Q.Settings(model="logistic", seed=3, unit="decision"))


def test_the_cut_is_stated_with_its_n_and_keeps_the_held_out_share(toy):
    distilled = toy[2]
    m = distilled.manifest
    nov = m.novelty
    assert nov is not None and nov.cut is not None
    assert nov.n == m.splits.train.decisions + m.splits.calibration.decisions == 510
    assert nov.tasks == len(m.splits.train.tasks) + len(m.splits.calibration.tasks)
    assert nov.kept / nov.n >= N.KEEP
    assert f"keeps {nov.kept} of {nov.n} held-out decisions" in nov.statement
    assert nov.rows == nov.n and nov.dim == m.features.dim and nov.k == N.COMPONENTS
    assert "Novelty (abstain with cause `novel`)" in distilled.report_text
    assert m.metrics["novelty"]["test_n"] == m.splits.test.decisions


def test_a_far_state_abstains_as_novel_and_a_training_state_does_not(toy):
    policy, receipts, distilled = toy
    sp = Specialist(distilled.directory, policy)
    first = json.loads(receipts.read_text().splitlines()[0])
    near = sp.decide(first["state"], policy.legal(first["state"]))
    assert not near.novel and near.novelty is not None and near.novelty <= sp.novelty_cut
    assert near.action is not None  # the toy teacher is learnable: a training state is answered
    far = sp.decide(FAR, policy.legal(FAR))
    assert far.novel and far.action is None and far.novelty > sp.novelty_cut
    assert far.best == "lookup" and far.confidence >= sp.tau  # it would have answered: novelty overrides

    router = Router(policy, specialists=[str(distilled.directory)])
    d = router.decide(FAR)
    rung = next(r for r in d.receipt.meta["rungs"] if r["tier"] == "specialist")
    assert rung["cause"] == "novel" and rung["outcome"] == "abstained" and rung["novelty"] == far.novelty
    assert d.tier != "specialist"
    ok = router.decide(first["state"])
    rung = next(r for r in ok.receipt.meta["rungs"] if r["tier"] == "specialist")
    assert "cause" not in rung and rung["novelty"] == near.novelty and ok.tier == "specialist"


def test_the_cut_never_reads_the_test_split(toy, tmp_path):
    """Receipts that differ only in the test split's tasks give the same novelty model and cut."""
    policy, receipts, distilled = toy
    test_tasks = set(distilled.manifest.splits.test.tasks)
    lines = []
    for line in receipts.read_text().splitlines():
        r = json.loads(line)
        if r["task"] in test_tasks:
            r["state"] = FAR
        lines.append(json.dumps(r))
    other = tmp_path / "r.jsonl"
    other.write_text("\n".join(lines) + "\n")
    again = Q.distill([other], policy, tmp_path / "toy",
                      Q.Settings(model="logistic", seed=3, unit="decision")).manifest
    assert again.splits.test.tasks == distilled.manifest.splits.test.tasks
    assert again.novelty == distilled.manifest.novelty
    assert again.metrics["novelty"]["test_novel"] == again.splits.test.decisions  # and there, each is novel


def test_scores_one_and_many_agree_and_a_bad_model_is_named():
    rng = np.random.default_rng(0)
    rows = rng.normal(size=(200, 12))
    model, oof = N.fit(rows, np.arange(200) % 4, [f"t{i % 20}" for i in range(200)], k=4)
    s = N.Scorer.of(model)
    x = rng.normal(size=(5, 12))
    assert np.allclose(s.many(x), [s.one(r) for r in x])
    assert s.one(rows[3]) < s.one(rows[3] + 50.0)  # moved far away: more novel
    assert model.n == 200 and 198 <= model.kept == int((oof <= model.cut).sum()) < 200  # ⌈0.99 · 201⌉ = 199
    assert N.problem(model, 12) is None
    assert N.problem(model, 13) == "$.novelty.dim: 12 features where $.features has 13"
    cut_short = msgspec.structs.replace(model, reference=model.reference[:-8])
    assert N.problem(cut_short, 12).startswith("$.novelty.reference: not base64 of 800 float32 numbers")
    bad = msgspec.structs.replace(model, cut=float("nan"))
    assert "$.novelty.cut" in N.problem(bad, 12)
    few, _ = N.fit(rows[:50], np.arange(50) % 2, ["t"] * 50)
    assert few.cut is None and "never abstains as novel" in few.statement


def test_a_manifest_with_a_broken_novelty_model_is_refused(toy):
    m = toy[2].manifest
    nan = N.packed(np.full(m.novelty.dim, np.nan))
    broken = msgspec.structs.replace(m.novelty, mean=nan)
    assert validate(msgspec.structs.replace(m, novelty=broken)) == "$.novelty.mean: a number is not finite"
