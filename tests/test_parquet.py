"""Receipts in Parquet: lossless round trips with JSON Lines, the versioned schema, bad rows named by file and row."""

from __future__ import annotations

import gzip
import math
from pathlib import Path

import msgspec
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from zcompile.cli import main
from zcompile.receipts import FORMAT_VERSION, ReadStats, Receipt, ReceiptError, read, write_file
from zcompile.receipts.parquet import METADATA_KEY, columns, schema

pa = pytest.importorskip("pyarrow", reason="the `distill` extra (pyarrow) is not installed")
pq = pytest.importorskip("pyarrow.parquet")

ROOT = Path(__file__).parents[1]
BUNDLED = ROOT / "receipts" / "tau-airline-gpt4o.jsonl.gz"


def test_bundled_receipts_round_trip_byte_for_byte(tmp_path):
    runner = CliRunner()
    res = runner.invoke(main, ["receipts", "convert", str(BUNDLED), "-o", str(tmp_path / "r.parquet")])
    assert res.exit_code == 0, res.output
    assert "converted 1518 receipts" in res.output
    res = runner.invoke(main, ["receipts", "convert", str(tmp_path / "r.parquet"), "-o", str(tmp_path / "r.jsonl.gz")])
    assert res.exit_code == 0, res.output
    # the JSON lines byte for byte; not the gzip stream, whose bytes depend on the zlib that wrote it
    assert gzip.decompress((tmp_path / "r.jsonl.gz").read_bytes()) == gzip.decompress(BUNDLED.read_bytes())
    assert list(read(tmp_path / "r.parquet")) == list(read(BUNDLED))
    meta = pq.ParquetFile(tmp_path / "r.parquet").schema_arrow.metadata
    assert meta[METADATA_KEY] == FORMAT_VERSION.encode()


json_values = st.recursive(st.none() | st.booleans() | st.integers(-2**63, 2**63 - 1)
                           | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=8),
                           lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=5), kids, max_size=3),
                           max_leaves=8)
receipts = st.builds(
    Receipt, id=st.text(min_size=1, max_size=6), task=st.text(max_size=4),
    state=st.dictionaries(st.text(max_size=5), json_values, max_size=4), tier=st.sampled_from(["remote", "small"]),
    ts=st.none() | st.floats(allow_nan=False, allow_infinity=False), policy=st.sampled_from(["", "ab" * 32]),
    intent=st.none() | st.text(max_size=4), legal=st.none() | st.lists(st.text(max_size=4), max_size=3).map(tuple),
    action=st.none() | st.text(max_size=4), arguments=st.none() | st.dictionaries(st.text(max_size=4), json_values, max_size=3),
    confidence=st.none() | st.floats(0, 1), latency_ms=st.floats(0, 1e6), cost=st.sampled_from([0.0, -0.0, 2.5]),
    verified=st.none() | st.booleans(), gold=st.none() | st.text(max_size=4),
    meta=st.dictionaries(st.text(max_size=4), json_values, max_size=3))


@settings(max_examples=40, deadline=None)
@given(st.lists(receipts, max_size=6))
def test_any_receipts_round_trip_losslessly(tmp_path_factory, rs):
    d = tmp_path_factory.mktemp("rt")
    write_file(d / "a.jsonl", rs)
    assert write_file(d / "b.parquet", read(d / "a.jsonl")) == len(rs)
    back = list(read(d / "b.parquet"))
    assert back == list(read(d / "a.jsonl"))
    assert [math.copysign(1.0, r.cost) for r in back] == [math.copysign(1.0, r.cost) for r in rs]
    write_file(d / "c.jsonl", back)
    assert (d / "c.jsonl").read_bytes() == (d / "a.jsonl").read_bytes()


def _table(rows: list[dict], metadata: dict | None = None, drop: tuple[str, ...] = (), extra: dict | None = None):
    sch = schema()
    cols = {c: [r.get(c, {"version": FORMAT_VERSION, "policy": "", "latency_ms": 0.0, "cost": 0.0,
                          "meta": "{}"}.get(c)) for r in rows] for c in columns()}
    t = pa.Table.from_pydict(cols, schema=sch)
    for c in drop:
        t = t.drop_columns([c])
    for name, values in (extra or {}).items():
        t = t.append_column(name, pa.array(values))
    return t.replace_schema_metadata(sch.metadata if metadata is None else metadata)


GOOD = {"id": "r1", "task": "t", "state": '{"a":1}', "tier": "remote", "action": "x"}


def test_a_bad_row_is_named_by_file_row_and_path(tmp_path):
    p = tmp_path / "bad.parquet"
    pq.write_table(_table([GOOD, dict(GOOD, id="r2", state="[1, 2]"), dict(GOOD, id="r3", meta="{nope")]), p)
    with pytest.raises(ReceiptError, match=r"bad\.parquet:row 2: \$\.state: expected `object`, got `array`"):
        list(read(p))
    stats = ReadStats()
    assert [r.id for r in read(p, skip_invalid=True, stats=stats)] == ["r1"]
    assert stats.skipped == 2
    assert stats.problems[1].startswith(f"{p}:row 3: $.meta: invalid JSON")


def test_schema_evolution_and_foreign_files(tmp_path):
    newer = tmp_path / "newer.parquet"  # a newer minor version: an added column is ignored
    pq.write_table(_table([GOOD], extra={"added_in_1_9": ["x"]}), newer)
    assert [r.id for r in read(newer)] == ["r1"]
    older = tmp_path / "older.parquet"  # an older minor version: a missing optional column is absent
    pq.write_table(_table([GOOD], drop=("candidates", "arguments")), older)
    assert list(read(older))[0].candidates is None
    major = tmp_path / "major.parquet"
    pq.write_table(_table([GOOD], metadata={METADATA_KEY: b"2.0"}), major)
    with pytest.raises(ReceiptError, match=r"major\.parquet: \$\.version: receipt format 2\.0 is newer"):
        list(read(major))
    plain = tmp_path / "plain.parquet"
    pq.write_table(pa.table({"id": ["r1"]}), plain)
    with pytest.raises(ReceiptError, match="without `zc.receipts` metadata is not a receipts file"):
        list(read(plain))
    no_state = tmp_path / "no_state.parquet"
    pq.write_table(_table([GOOD], drop=("state",)), no_state)
    with pytest.raises(ReceiptError, match=r"no_state\.parquet: \$\.state: required column is missing"):
        list(read(no_state))
    junk = tmp_path / "junk.parquet"
    junk.write_bytes(b"PAR1 not really")
    with pytest.raises(ReceiptError, match="not a readable Parquet file"):
        list(read(junk))


def test_rows_stream_in_batches_and_directories_include_parquet(tmp_path, monkeypatch):
    from zcompile.receipts import parquet

    rs = [Receipt(id=f"r{i}", task=f"t{i % 3}", state={"i": i}, tier="remote") for i in range(50)]
    write_file(tmp_path / "d" / "a.parquet", rs[:30])
    write_file(tmp_path / "d" / "b.jsonl", rs[30:])
    batches = []
    real = parquet._open

    def spy(path):
        pf = real(path)
        it = pf.iter_batches

        def iter_batches(**kw):
            batches.append(kw["batch_size"])
            return it(**kw)

        pf.iter_batches = iter_batches
        return pf

    monkeypatch.setattr(parquet, "BATCH_ROWS", 7)
    monkeypatch.setattr(parquet, "_open", spy)
    monkeypatch.setattr(parquet.iter_rows, "__defaults__", (7,))
    assert [r.state["i"] for r in read(tmp_path / "d")] == list(range(50))
    assert batches == [7]


def test_convert_refuses_an_unknown_output_and_bad_input_cleanly(tmp_path):
    runner = CliRunner()
    res = runner.invoke(main, ["receipts", "convert", str(BUNDLED), "-o", str(tmp_path / "r.csv")])
    assert res.exit_code == 2 and "name the output .parquet, .jsonl or .jsonl.gz" in res.output
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(msgspec.json.encode(Receipt(id="a", task="t", state={}, tier="x")) + b"\n{\"id\": 3}\n")
    res = runner.invoke(main, ["receipts", "convert", str(bad), "-o", str(tmp_path / "o.parquet")])
    assert res.exit_code == 1 and "bad.jsonl:2: $.id: expected `str`, got `int`" in res.output
    assert not (tmp_path / "o.parquet").exists()
    res = runner.invoke(main, ["receipts", "convert", "--skip-invalid", str(bad), "-o", str(tmp_path / "o.parquet")])
    assert res.exit_code == 0 and "converted 1 receipt from 1 file" in res.output and "skipped 1" in res.output
