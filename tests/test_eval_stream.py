"""`zc eval` streams: the report on the bundled receipts is the one the in-memory evaluation gave, its
memory does not grow with the receipts, and beyond the sample's size the latencies and the curve come
from a seeded uniform sample while every count stays exact."""

from __future__ import annotations

import hashlib
import random
import tracemalloc
from pathlib import Path
from types import SimpleNamespace as NS

import msgspec
import pytest
from click.testing import CliRunner
from test_eval import POLICY, STATES, teacher
from test_eval_router import Raw, Rule

import zcompile
from zcompile import evals
from zcompile.cli import main
from zcompile.evals.metrics import Sample
from zcompile.receipts import Receipt, write_file

ROOT = Path(__file__).parents[1]
FIXTURES = Path(__file__).parent / "fixtures" / "eval"


def masked(v):
    """The report without its timings (µs, which differ run to run)."""
    if isinstance(v, dict):
        return {k: masked(x) for k, x in v.items() if not k.endswith("_us")}
    if isinstance(v, list):
        return [masked(x) for x in v]
    return v


def same(got, want, where="$"):
    """Equal, floats to 1e-9 relative (ONNX scores may differ in the last bits on another CPU)."""
    if isinstance(want, float) and isinstance(got, float):
        assert got == pytest.approx(want, rel=1e-9, abs=1e-12), where
    elif isinstance(want, dict):
        assert isinstance(got, dict) and list(got) == list(want), where
        for k in want:
            same(got[k], want[k], f"{where}.{k}")
    elif isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want), where
        for i, (g, w) in enumerate(zip(got, want)):
            same(g, w, f"{where}[{i}]")
    else:
        assert got == want, where


@pytest.fixture(scope="module")
def airline():
    return zcompile.compile_file(ROOT / "policies" / "airline_chat.zc")


def test_bundled_reports_equal_the_in_memory_evaluation(airline):
    """The fixtures are the reports `zc eval` gave before it streamed (every decision in memory), with
    the timings left out: the bundled specialist on the sealed test split, and a rule specialist that
    answers calls and names on every decision (its per-decision outcomes by digest). The first was
    recorded again when a call that cannot reach τ stopped proposing arguments: only the
    specialist's confidences on such calls (its risk–coverage curve) moved; and again when the
    specialist was distilled on the judge's targets and the report gained the judge's figures
    (issue 25); and again when it was distilled with the histogram-based argument model (issue 26).
    Issue 37 added blocks (precision per task, calls by provenance, risk–coverage of calls and of
    replies, reliability bins) and richer decision rows, and moved the names curve's point to the
    specialist's committed outputs (each kind at its own τ): every figure before stayed equal, and
    the rows' earlier fields hash as before (3f3fcab0…); recorded again when the
    shipped specialist's calibration fits were re-run to their optimum (issue 36.1: floats within 1e-6,
    every count the same); and again when the bundled receipts gained the request features and the
    specialist was certified by task, with a novelty model (issue 37); `off_teacher` gained
    `text_tier_live` and `handed_escalated` (issue 39: false and 0 without the text tier bound), and
    the rows gained `text` and `graded` (null without live tiers: the earlier fields hash as before,
    26ab45f1…)."""
    rep = evals.run(airline, ROOT / "specialists" / "airline_chat", [ROOT / "receipts"])
    rep["receipts"] = ["receipts"]
    same(masked(rep), msgspec.json.decode((FIXTURES / "bundled_test.json").read_bytes()))
    rep = evals.report([ROOT / "receipts"], airline, Rule(), split="all", decisions=True)
    rep["receipts"] = ["receipts"]
    rep["decisions_sha256"] = hashlib.sha256(msgspec.json.encode(rep.pop("decisions"))).hexdigest()
    same(masked(rep), msgspec.json.decode((FIXTURES / "rule_all.json").read_bytes()))


class Toy:
    """The toy policy's teacher as a specialist, sure except in the middle phase."""

    name = "toy"
    manifest = NS(name="toy", model=NS(kind="logistic"), policy_sha256="", policy_name="toy",
                  threshold=NS(tau=0.5, target_precision=0.9), gate=NS(promoted=False),
                  splits=NS(train=NS(tasks=("old",)), calibration=NS(tasks=()), test=NS(tasks=("t0",))))

    def decide(self, state, legal, candidates=None):
        want = teacher(state)
        pick = want if want in legal else legal[0]
        return Raw(pick if state["phase"] != "middle" else None, 0.9 if state["phase"] != "middle" else 0.3,
                   pick)


def toy_receipts(path: Path, n: int, seed: int = 0) -> Path:
    """`n` receipts of five tasks taking turns (the fifth trained on), each a random toy state with the
    teacher's action."""
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        s = rng.choice(STATES)
        task = ("t0", "t1", "t2", "t3", "old")[i % 5]
        rows.append(Receipt(id=f"r{i}", task=task, state=s, tier="remote", action=teacher(s),
                            gold=teacher(s) if i % 7 else None, ts=float(i)))
    write_file(path, rows)
    return path


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    d = tmp_path_factory.mktemp("stream")
    return d, zcompile.compile_text(POLICY, "toy.zc")


def traced_peak(fn) -> int:
    """Peak bytes Python allocated while `fn` ran (tracemalloc: deterministic, unlike RSS)."""
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_memory_does_not_grow_with_the_receipts(toy):
    """Eight times the receipts, at most 1 KB more a decision: only the judge's few values per decision
    (its action, arguments and place in its conversation: the judge needs what each conversation did
    next) and the noise floor's groups are held (the sample of timings and confidences is bounded,
    here at 64). Holding the decisions, as eval once did, cost about 1 KB each on these small states
    and 25 KB on the bundled ones."""
    d, policy = toy
    small, big = toy_receipts(d / "small.jsonl", 500), toy_receipts(d / "big.jsonl", 4000)
    evals.report([big], policy, Toy(), sample=64)  # imports, caches and CPython's free lists filled first
    reps = {}
    peaks = {p.name: traced_peak(lambda p=p: reps.setdefault(p.name,
                                                             evals.report([p], policy, Toy(), sample=64)))
             for p in (small, big)}
    assert reps["big.jsonl"]["n"] == 3200 and reps["small.jsonl"]["n"] == 400  # the task `old` is sealed out
    assert peaks["big.jsonl"] - peaks["small.jsonl"] < (4000 - 500) * 1024, peaks


def test_counts_exact_beyond_the_sample(toy):
    """With a sample smaller than the decisions, every count is the unsampled report's; the latencies
    and the curve are from a sample of that size, and the report says so."""
    d, policy = toy
    path = toy_receipts(d / "mid.jsonl", 600)
    full = evals.report([path], policy, Toy())
    part = evals.report([path], policy, Toy(), sample=50)
    assert "sampled" not in full and "sample" not in full["risk_coverage"]
    assert part["sampled"] == {"size": 50, "decisions": 480, "asked": full["risk_coverage"]["n"]}
    rc, rc_full = part["risk_coverage"], full["risk_coverage"]
    assert rc["sample"] == 50 and rc["n"] == rc_full["n"] and rc["at_tau"] == rc_full["at_tau"]
    assert sum(p["answered"] == 50 for p in rc["points"]) == 1  # the curve's last point covers the sample
    for key in ("n", "counts", "calls", "cost", "remote", "power"):
        assert part[key] == full[key], key
    for name, t in full["tiers"].items():
        assert masked(part["tiers"][name]) == masked(t), name
        assert part["tiers"][name]["timed"] == t["timed"]
    o = part["overall"]
    assert o["timed"] == 480 and 0 < o["p50_us"] <= o["p99_us"]


def test_sample_is_exact_then_uniform():
    s = Sample(1, size=100)
    for i in range(100):
        s.add(float(i))
    assert not s.sampled and list(s.column(0)) == [float(i) for i in range(100)]  # every row, in order
    for i in range(100, 10_000):
        s.add(float(i))
    kept = s.column(0)
    assert s.sampled and s.seen == 10_000 and len(kept) == 100 == len(set(kept))
    assert 35 <= int((kept >= 5000).sum()) <= 65  # as many from the second half as from the first (seeded)
    again = Sample(1, size=100)
    for i in range(10_000):
        again.add(float(i))
    assert list(again.column(0)) == list(kept)  # seeded: the same sample every run


def test_refusal_replays_nothing_after_a_trained_task(toy):
    """--split all meets a trained-on task: the same refusal as before, and nothing after it is replayed
    (only the 4 decisions before it, each asked twice: warm-up, then timed)."""
    d, policy = toy
    path = toy_receipts(d / "refuse.jsonl", 50)  # the fifth receipt belongs to the trained task `old`
    asked = []

    class Counting(Toy):
        def decide(self, state, legal, candidates=None):
            asked.append(state)
            return super().decide(state, legal, candidates)

    with pytest.raises(zcompile.ZcError, match=r"receipts of 1 task the specialist was trained on \(e\.g\. "
                                               r"`old`\)"):
        evals.report([path], policy, Counting(), split="all")
    assert len(asked) <= 8


def test_cli_reports_progress_on_stderr(airline, tmp_path):
    from zcompile.receipts import read

    path = tmp_path / "some.jsonl"
    write_file(path, [r for _, r in zip(range(40), read(ROOT / "receipts"))])
    res = CliRunner().invoke(main, ["eval", "--policy", str(ROOT / "policies" / "airline_chat.zc"),
                                    "--specialists", str(ROOT / "specialists" / "airline_chat"),
                                    "--receipts", str(path), "--split", "all", "--allow-trained"])
    assert res.exit_code == 0, res.output
    assert "  replaying receipts: 40/40 done in " in res.output and "NOT held-out" in res.output


def test_counting_rows_for_progress_leaves_bad_files_to_the_reader(tmp_path):
    """The progress bar's row count never decides what is read: a truncated gzip stream is skipped
    under --skip-invalid as before, and a corrupt Parquet file is a clear error, not a traceback."""
    import gzip

    whole = gzip.compress(gzip.decompress((ROOT / "receipts" / "tau-airline-gpt4o.jsonl.gz").read_bytes()))
    (tmp_path / "torn.jsonl.gz").write_bytes(whole[:20_000])  # a gzip stream cut mid-file
    (tmp_path / "bad.parquet").write_bytes(b"PAR1" + b"x" * 64)
    base = ["eval", "--policy", str(ROOT / "policies" / "airline_chat.zc"),
            "--specialists", str(ROOT / "specialists" / "airline_chat"), "--receipts"]
    runner = CliRunner()
    res = runner.invoke(main, [*base, str(tmp_path / "torn.jsonl.gz"), str(ROOT / "receipts"),
                               "--skip-invalid"])
    assert res.exit_code == 0 and "n = 150 decisions" in res.output, res.output
    res = runner.invoke(main, [*base, str(tmp_path / "torn.jsonl.gz"), str(ROOT / "receipts")])
    assert (res.exit_code == 1 and "torn.jsonl.gz:" in res.output
            and "the gzip stream ends early" in res.output)
    res = runner.invoke(main, [*base, str(tmp_path / "bad.parquet")])
    assert res.exit_code == 1 and "bad.parquet: $: not a readable Parquet file" in res.output
    assert "Traceback" not in res.output
