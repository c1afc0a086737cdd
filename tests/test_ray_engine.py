"""`--engine ray`: Ray Data over Parquet shards on a local instance gives bit for bit the local engine's
features."""

from __future__ import annotations

import msgspec
import pytest
from click.testing import CliRunner
from test_distill import POLICY, make_receipts

import zcompile
from zcompile import ZcError
from zcompile.cli import main
from zcompile.qroute import dataset as D
from zcompile.qroute import engine as E
from zcompile.qroute import features as F
from zcompile.qroute.recipes import recipe
from zcompile.receipts import read, write_file

pytest.importorskip("pyarrow", reason="the `distill` extra (pyarrow) is not installed")
ray = pytest.importorskip("ray", reason="the `ray` extra (ray[data]) is not installed")


@pytest.fixture(scope="module")
def local_ray():
    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield ray
    ray.shutdown()


@pytest.fixture(scope="module")
def policy():
    return zcompile.compile_text(POLICY, "toy.zc")


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    d = tmp_path_factory.mktemp("shards")
    rs = list(read(make_receipts(d / "all.jsonl", tasks=12, per_task=25)))
    for i in range(3):  # three shards, one row group each
        write_file(d / "p" / f"part-{i}.parquet", rs[i * 100:(i + 1) * 100])
    return d / "p"


def _both(policy, shards, tmp_path, limit):
    b = D.load_split([shards], policy, limit=limit, seed=5)
    rec = recipe("logistic", 0, F.spec_for(policy.ir), policy, {}, 3)
    rec.prepare(b.parts["train"] + b.parts["calibration"])
    (tmp_path / "local").mkdir()
    (tmp_path / "ray").mkdir()
    local = E.Local().inputs(rec, b.parts, tmp_path / "local", D.Progress())
    engine = E.make("ray", [shards], policy)
    engine.sampling = b.sampling
    return b, local, engine.inputs(rec, b.parts, tmp_path / "ray", D.Progress())


@pytest.mark.parametrize("limit", [10_000, 120])
def test_ray_features_are_the_local_ones_bit_for_bit(local_ray, policy, shards, tmp_path, limit):
    b, local, remote = _both(policy, shards, tmp_path, limit)
    assert b.sampling.method == ("all" if limit > 300 else "sample")
    for p in D.PARTS:
        assert len(local[p]) == len(b.parts[p]) > 0
        assert remote[p].dtype == local[p].dtype and remote[p].tobytes() == local[p].tobytes()


def _bounded(b):
    return ({p: [d.id for d in ds] for p, ds in b.parts.items()}, b.splits, dict(b.counts), b.sampling)


def test_ray_pass_one_is_the_local_one(local_ray, policy, shards):
    """Beyond the limit the first pass (validate, split by task, sample) runs in Ray workers: the
    same decisions, splits, seal, counts and sample as the local pass."""
    local = D.load_split([shards], policy, limit=120, seed=5)
    remote = D.load_split([shards], policy, limit=120, seed=5, scan=E.make("ray", [shards], policy).scan)
    assert local.sampling.method == "sample" and _bounded(remote) == _bounded(local)


def test_ray_pass_one_refuses_or_skips_an_invalid_row_as_the_local_pass_does(
    local_ray, policy, shards, tmp_path):
    rs = list(read(shards))
    bad = msgspec.structs.replace(rs[130], state={**rs[130].state, "phase": "nowhere"})  # not an enum member
    d = tmp_path / "bad"
    write_file(d / "part-0.parquet", rs[:100])
    write_file(d / "part-1.parquet", [*rs[100:130], bad, *rs[131:200]])
    with pytest.raises(ZcError) as local:
        D.load_split([d], policy, limit=50)
    with pytest.raises(ZcError) as remote:
        D.load_split([d], policy, limit=50, scan=E.make("ray", [d], policy).scan)
    assert str(remote.value) == str(local.value) and ("part-1.parquet:row 31: "
                                                      "$.state.phase") in str(local.value)
    skipped = [D.load_split([d], policy, limit=50, skip_invalid=True, scan=scan)
               for scan in (None, E.make("ray", [d], policy, skip_invalid=True).scan)]
    assert _bounded(skipped[1]) == _bounded(skipped[0]) and skipped[0].counts["skipped_invalid"] == 1


def test_distill_with_the_ray_engine_matches_the_local_one(local_ray, policy, shards, tmp_path):
    runner = CliRunner()
    zcp = tmp_path / "toy.zcp"
    (tmp_path / "toy.zc").write_text(POLICY)
    assert runner.invoke(main, ["compile", str(tmp_path / "toy.zc"), "-o", str(tmp_path)]).exit_code == 0
    outs = {}
    for engine in ("local", "ray"):
        res = runner.invoke(main, ["distill", "--from", str(shards), "--policy", str(zcp), "-o",
                                   str(tmp_path / engine), "--model", "logistic", "--engine", engine,
                                   "--max-decisions", "120"])  # beyond it: pass 1 in Ray too
        assert res.exit_code == 0, res.output
        outs[engine] = zcompile.qroute.read_manifest(tmp_path / engine)
    a, b = outs["local"], outs["ray"]
    assert (a.splits, a.features, a.threshold,
            a.model.sha256) == (b.splits, b.features, b.threshold, b.model.sha256)
    assert a.counts == b.counts and a.counts["sampled_out"] > 0


def test_the_ray_engine_reads_parquet_only(policy, tmp_path):
    src = make_receipts(tmp_path / "r.jsonl", tasks=3, per_task=2)
    with pytest.raises(ZcError, match=r"r\.jsonl: --engine ray reads Parquet shards; convert it with `zc "
                                      r"receipts convert"):
        E.make("ray", [src], policy)
