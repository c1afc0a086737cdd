"""The shipped specialist is reproducible: distilling the bundled receipts as `make distill` does rebuilds
it, every file byte for byte but for the times it measured; and the comparison itself finds any other
change."""

from __future__ import annotations

import shutil
from pathlib import Path

import msgspec
import pytest

import zcompile
from zcompile.qroute import Settings, distill
from zcompile.qroute.manifest import decode, encode
from zcompile.qroute.reproduce import differences, main

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = ROOT / "specialists" / "airline_chat"


@pytest.mark.slow
def test_make_distill_rebuilds_the_shipped_specialist(tmp_path, monkeypatch):
    # the manifest records the receipts' path as given: `receipts/` as in the Makefile
    monkeypatch.chdir(ROOT)
    policy = zcompile.compile_file(ROOT / "policies" / "airline_chat.zc")
    out = tmp_path / "airline_chat"
    distill(["receipts/"], policy, out, Settings(guarantee="conformal"), name="airline_chat")
    assert differences(out, SHIPPED) == []
    assert (out / "model.onnx").read_bytes() == (SHIPPED / "model.onnx").read_bytes()


def _copy(tmp_path: Path, name: str) -> Path:
    d = tmp_path / name
    shutil.copytree(SHIPPED, d)
    return d


def _reseal(d: Path, **changes) -> None:
    m = decode((d / "manifest.json").read_bytes(), "manifest.json")
    (d / "manifest.json").write_bytes(encode(msgspec.structs.replace(m, **changes)))


def test_only_the_measured_times_may_differ(tmp_path, capsys):
    d = _copy(tmp_path, "timed")
    m = decode((d / "manifest.json").read_bytes(), "manifest.json")
    params = m.model.params | {"train_seconds": 1234.5}
    _reseal(d, model=msgspec.structs.replace(m.model, params=params),
            metrics=m.metrics | {"latency_us": {"n": 1, "p50": 1.0, "p99": 2.0}},
            # -p50 ms, the gate's last key
            gate=msgspec.structs.replace(m.gate, key=(*m.gate.key[:-1], -0.001)))
    assert differences(d, SHIPPED) == []
    assert main([str(d), str(SHIPPED)]) == 0 and "byte for byte" in capsys.readouterr().out

    promoted = _copy(tmp_path, "promoted")  # the gate's verdict is not a measured time
    _reseal(promoted, gate=msgspec.structs.replace(m.gate, promoted=False, reasons=("p50 latency too high",)))
    assert differences(promoted, SHIPPED)[0] == "manifest.json: $.gate.promoted, $.gate.reasons"

    other = _copy(tmp_path, "other")
    _reseal(other, seed=7, metrics=m.metrics | {"coverage": 0.5})
    assert differences(other, SHIPPED) == ["manifest.json: $.metrics.coverage, $.seed",
                                           "report.md: the text differs"]  # it shows the coverage

    model = _copy(tmp_path, "model")
    (model / "model.onnx").write_bytes((SHIPPED / "model.onnx").read_bytes() + b"\0")
    (model / "notes.txt").write_text("mine")
    found = differences(model, SHIPPED)
    assert (found[0].startswith("files: ") and "notes.txt" in found[0]
            and "model.onnx: the bytes differ" in found)

    report = _copy(tmp_path, "report")
    (report / "report.md").write_text("edited\n")
    assert differences(SHIPPED, report) == ["report.md: the text differs"]


def test_a_missing_specialist_is_an_error_not_a_traceback(tmp_path, capsys):
    assert main([str(tmp_path), str(SHIPPED)]) == 1
    assert "manifest.json: cannot read" in capsys.readouterr().err
    assert main([str(SHIPPED)]) == 2
