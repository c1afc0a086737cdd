"""Bounded-memory distillation: a seeded task-stratified sample beyond the limit, the split sealed over
every task, features in memory-mapped float32 chunks identical to the row-by-row ones."""

from __future__ import annotations

import gc
import tracemalloc

import msgspec
import numpy as np
import pytest
from test_distill import POLICY, make_receipts

import zcompile
from zcompile import qroute as Q
from zcompile.qroute import dataset as D
from zcompile.qroute import engine as E
from zcompile.qroute import features as F
from zcompile.qroute.recipes import recipe


@pytest.fixture(scope="module")
def policy():
    return zcompile.compile_text(POLICY, "toy.zc")


@pytest.fixture(scope="module")
def receipts(tmp_path_factory):
    return make_receipts(tmp_path_factory.mktemp("r") / "r.jsonl", tasks=30, per_task=40)


def test_under_the_limit_everything_is_used_as_before(policy, receipts):
    b = D.load_split([receipts], policy, limit=10_000)
    data = D.load([receipts], policy)
    parts = D.split_by_task(data.decisions)
    assert b.sampling.method == "all" and b.sampling.kept == 1200
    assert {p: [d.id for d in b.parts[p]] for p in D.PARTS} == {p: [d.id for d in parts[p]] for p in D.PARTS}
    assert b.splits == D.seal_all(parts)
    assert "sampled_out" not in b.counts


def test_beyond_the_limit_a_seeded_task_stratified_sample_sealed_over_every_task(policy, receipts):
    full = D.split_by_task(D.load([receipts], policy).decisions)
    b = D.load_split([receipts], policy, limit=300, seed=7)
    assert b.sampling.method == "sample" and "sample of" in b.sampling.text()
    assert b.splits == D.seal_all(full)  # the seal names every task and counts every decision
    for p in D.PARTS:
        kept = {d.task for d in b.parts[p]}
        assert kept == {d.task for d in full[p]}  # a quarter of 40: every task keeps 10, in its own split
        for t in kept:  # and its share: 40 decisions a task, a quarter kept
            assert sum(d.task == t for d in b.parts[p]) == 10
        ids = [d.id for d in b.parts[p]]
        assert ids == [d.id for d in full[p] if d.id in set(ids)]  # input order kept
    assert b.counts["used"] == 300 and b.counts["sampled_out"] == 900 and b.counts["sample_limit"] == 300
    again = D.load_split([receipts], policy, limit=300, seed=7)
    other = D.load_split([receipts], policy, limit=300, seed=8)
    ids = lambda x: [d.id for p in D.PARTS for d in x.parts[p]]  # noqa: E731
    assert ids(again) == ids(b) and ids(other) != ids(b)
    kept = [d for p in D.PARTS for d in b.parts[p]]
    by_id = {d.id: d for d in D.load([receipts], policy).decisions}
    assert all(d == by_id[d.id] for d in kept)  # the same decision, position included


def test_the_sample_holds_memory_to_the_limit(policy, tmp_path):
    def peak(fn):
        gc.collect()
        tracemalloc.start()
        try:
            kept = fn()
            return tracemalloc.get_traced_memory()[1], kept
        finally:
            tracemalloc.stop()

    small, big = (make_receipts(tmp_path / f"{n}.jsonl", tasks=60, per_task=n) for n in (50, 200))
    full = [peak(lambda f=f: D.load([f], policy))[0] for f in (small, big)]
    bounded = [peak(lambda f=f: D.load_split([f], policy, limit=300)) for f in (small, big)]
    assert all(b.sampling.kept <= 360 for _, b in bounded)
    # four times the receipts: the full load grows with them, the bounded one hardly does
    assert bounded[1][0] - bounded[0][0] < (full[1] - full[0]) / 5, (bounded, full)


def test_features_are_written_in_float32_chunks_identical_to_rows(policy, receipts, tmp_path, monkeypatch):
    monkeypatch.setattr(E, "BATCH", 64)
    parts = D.split_by_task(D.load([receipts], policy).decisions)
    rec = recipe("logistic", 0, F.spec_for(policy.ir), policy, {}, 3)
    rec.prepare(parts["train"] + parts["calibration"])
    x = E.Local().inputs(rec, parts, tmp_path, D.Progress())
    for p in D.PARTS:
        assert isinstance(x[p], np.memmap) and x[p].dtype == np.float32
        rows = np.stack([rec.featurizer.row(d.root, d.legal) for d in parts[p]])
        assert x[p].tobytes() == rows.tobytes()
    assert sorted(f.name.split("-")[0] for f in (tmp_path / ".features").iterdir()) == list(sorted(D.PARTS))


def test_a_sampled_distillation_says_so_and_leaves_no_feature_files(policy, receipts, tmp_path):
    out = tmp_path / "s"
    res = Q.distill([receipts], policy, out, Q.Settings(model="logistic", max_decisions=300, seed=1))
    m = res.manifest
    assert m.counts["sampled_out"] == 900 and m.counts["sample_limit"] == 300
    assert "sampled_out 900" in res.report_text
    full = D.seal_all(D.split_by_task(D.load([receipts], policy).decisions))
    assert m.splits == full
    assert not (out / ".features").exists() and not any(p.name.startswith(".") for p in out.iterdir())


def test_parquet_receipts_distil_like_json_lines(policy, receipts, tmp_path):
    pytest.importorskip("pyarrow", reason="the `distill` extra (pyarrow) is not installed")
    from zcompile.receipts import read, write_file

    write_file(tmp_path / "r.parquet", read(receipts))
    a = Q.distill([receipts], policy, tmp_path / "a", Q.Settings(model="logistic")).manifest
    b = Q.distill([tmp_path / "r.parquet"], policy, tmp_path / "b", Q.Settings(model="logistic")).manifest
    assert (a.splits, a.features, a.threshold,
            a.calibration) == (b.splits, b.features, b.threshold, b.calibration)
    assert a.model.sha256 == b.model.sha256
    assert msgspec.json.encode(a.metrics["coverage"]) == msgspec.json.encode(b.metrics["coverage"])


def test_the_sample_is_the_same_from_parquet_shards(policy, receipts, tmp_path):
    pytest.importorskip("pyarrow", reason="the `distill` extra (pyarrow) is not installed")
    from zcompile.receipts import read, write_file
    from zcompile.receipts.parquet import write_parquet

    rs = list(read(receipts))
    write_parquet(tmp_path / "p" / "a.parquet", rs[:500], row_group_rows=128)  # several row groups
    write_file(tmp_path / "p" / "b.parquet", rs[500:])
    a = D.load_split([receipts], policy, limit=300, seed=3)
    b = D.load_split([tmp_path / "p"], policy, limit=300, seed=3)
    assert b.sampling.method == "sample" and b.splits == a.splits
    assert {p: b.parts[p] for p in D.PARTS} == {p: a.parts[p] for p in D.PARTS}


def test_with_more_tasks_than_the_limit_the_total_stays_near_it(policy, tmp_path):
    many = make_receipts(tmp_path / "many.jsonl", tasks=300, per_task=4)
    b = D.load_split([many], policy, limit=60, seed=2)
    assert 30 <= b.sampling.kept <= 90  # 0.2 of a decision per task in expectation, not one each
    assert len(b.splits.train.tasks) + len(b.splits.calibration.tasks) + len(b.splits.test.tasks) == 300
