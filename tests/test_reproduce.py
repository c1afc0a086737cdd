"""The shipped specialist is reproducible on any machine: distilling the bundled receipts as `make distill`
does rebuilds it (the model byte for byte, the manifest's floats within `REL_TOL`, the same decision on every
receipt of the test split) under another BLAS kernel than the one that made it (a subprocess with another
OpenBLAS kernel and one thread: the CPU of a user's machine); two runs on one machine are equal byte for
byte; and the comparison itself finds any other change."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import msgspec
import pytest

import zcompile
from zcompile.qroute import Settings, distill
from zcompile.qroute.manifest import decode, encode
from zcompile.qroute.report import render
from zcompile.qroute.reproduce import REL_TOL, differences, main, same_decisions

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = ROOT / "specialists" / "airline_chat"
POLICY = ROOT / "policies" / "airline_chat.zc"
BLAS = "from threadpoolctl import threadpool_info; import numpy; print(threadpool_info()[0]['architecture'])"


# `make distill`'s options (the Makefile is checked to say them)
FLAGS = ["--guarantee", "conformal", "--call-precision", "0.9"]
SETTINGS = Settings(guarantee="conformal", call_precision=0.9)


@pytest.fixture(scope="module")
def policy():
    return zcompile.compile_file(POLICY)


def test_the_makefile_distils_with_these_options():
    assert " ".join(FLAGS) in (ROOT / "Makefile").read_text()


def _other_kernel() -> str:
    """An OpenBLAS kernel that every x86-64 machine here runs (AVX at most) and this process does not use."""
    here = subprocess.run([sys.executable, "-c", BLAS], capture_output=True, text=True,
                          check=True).stdout.strip()
    return "Nehalem" if here.lower() == "sandybridge" else "Sandybridge"


@pytest.mark.slow
def test_make_distill_on_another_cpu_rebuilds_the_shipped_specialist(tmp_path):
    """What a user's machine with another CPU does: `make distill` under another OpenBLAS kernel than the one
    that made the shipped specialist, at one BLAS thread, in a subprocess; then the comparison `make distill`
    runs against the shipped specialist (files, the model byte for byte, floats within REL_TOL, the same
    decision on every receipt of the test split). One rebuild serves both claims: on this machine's own
    kernel the sums could only agree more closely."""
    kernel = _other_kernel()
    env = {**os.environ, "OPENBLAS_CORETYPE": kernel, "OPENBLAS_NUM_THREADS": "1"}
    used = subprocess.run([sys.executable, "-c", BLAS], env=env, capture_output=True, text=True, check=True)
    # the kernel was taken: this run adds in another order
    assert used.stdout.strip().lower() == kernel.lower()
    zc = [sys.executable, "-m", "zcompile"]
    built = tmp_path / "build"
    run = subprocess.run([*zc, "compile", "-q", str(POLICY), "-o", str(built)], env=env, cwd=ROOT,
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    out = built / "specialists" / "airline_chat"
    run = subprocess.run([*zc, "distill", "--from", "receipts/", "--policy", str(built / "airline_chat.zcp"),
                          *FLAGS, "-o", str(out)], env=env, cwd=ROOT, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-3000:]
    assert differences(out, SHIPPED) == []
    assert (out / "model.onnx").read_bytes() == (SHIPPED / "model.onnx").read_bytes()
    check = subprocess.run([sys.executable, "-m", "zcompile.qroute.reproduce", str(out), str(SHIPPED),
                            "--receipts", "receipts/", "--policy", str(built / "airline_chat.zcp")],
                           env=env, cwd=ROOT, capture_output=True, text=True)
    assert check.returncode == 0, check.stderr
    assert "the same decision on every receipt of the test split" in check.stdout


def test_two_runs_on_one_machine_are_equal_byte_for_byte(policy, tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    small = Settings(model="logistic", guarantee="conformal", max_decisions=300)
    for name in ("a", "b"):
        distill(["receipts/"], policy, tmp_path / name / "airline_chat", small, name="airline_chat")
    assert differences(tmp_path / "a" / "airline_chat", tmp_path / "b" / "airline_chat", exact=True) == []


def _copy(tmp_path: Path, name: str) -> Path:
    d = tmp_path / name
    shutil.copytree(SHIPPED, d)
    return d


def _reseal(d: Path, **changes) -> None:
    """The manifest of `d` changed, sealed again, and its report rendered from it (as a distillation
    writes)."""
    m = msgspec.structs.replace(decode((d / "manifest.json").read_bytes(), "manifest.json"), **changes)
    (d / "manifest.json").write_bytes(encode(m))
    (d / "report.md").write_text(render(m))


def test_only_the_measured_times_may_differ(tmp_path, capsys):
    d = _copy(tmp_path, "timed")
    m = decode((d / "manifest.json").read_bytes(), "manifest.json")
    params = m.model.params | {"train_seconds": 1234.5}
    _reseal(d, model=msgspec.structs.replace(m.model, params=params),
            metrics=m.metrics | {"latency_us": {"n": 1, "p50": 1.0, "p99": 2.0}},
            # -p50 ms, the gate's last key
            gate=msgspec.structs.replace(m.gate, key=(*m.gate.key[:-1], -0.001)))
    assert differences(d, SHIPPED) == [] and differences(d, SHIPPED, exact=True) == []
    assert main([str(d), str(SHIPPED), "--exact"]) == 0
    assert "the manifest byte for byte" in capsys.readouterr().out

    promoted = _copy(tmp_path, "promoted")  # the gate's verdict is not a measured time
    _reseal(promoted, gate=msgspec.structs.replace(m.gate, promoted=False, reasons=("p50 latency too high",)))
    assert differences(promoted, SHIPPED)[0] == "manifest.json: $.gate.promoted, $.gate.reasons"

    other = _copy(tmp_path, "other")
    _reseal(other, seed=7, metrics=m.metrics | {"coverage": 0.5})
    assert differences(other, SHIPPED) == ["manifest.json: $.metrics.coverage, $.seed"]
    assert differences(other, SHIPPED, exact=True) == ["manifest.json: $.metrics.coverage, $.seed",
                                                       "report.md: the text differs"]  # it shows the coverage

    model = _copy(tmp_path, "model")
    (model / "model.onnx").write_bytes((SHIPPED / "model.onnx").read_bytes() + b"\0")
    (model / "notes.txt").write_text("mine")
    found = differences(model, SHIPPED)
    assert found[0].startswith("files: ") and "notes.txt" in found[0]
    assert "model.onnx: the bytes differ" in found

    report = _copy(tmp_path, "report")
    (report / "report.md").write_text("edited\n")
    assert differences(SHIPPED, report) == [f"{report / 'report.md'}: not the rendering of its manifest"]


@pytest.mark.parametrize(("scale", "tolerated"), [(REL_TOL / 100, True), (REL_TOL * 100, False)])
def test_floats_are_equal_within_the_stated_tolerance_and_no_further(tmp_path, scale, tolerated):
    d = _copy(tmp_path, "moved")
    m = decode((d / "manifest.json").read_bytes(), "manifest.json")
    tau = m.threshold.tau * (1 + scale)  # what another CPU's sums could do to it, and far more
    _reseal(d, threshold=msgspec.structs.replace(m.threshold, tau=tau))
    assert differences(d, SHIPPED) == ([] if tolerated else ["manifest.json: $.threshold.tau"])
    assert differences(d, SHIPPED, exact=True)[0] == "manifest.json: $.threshold.tau"  # one machine: no slack


def test_a_different_decision_is_found(policy, tmp_path):
    """The decisions compared are the router's: a specialist that answers where the shipped one abstains
    (its τ moved down far beyond the float tolerance) decides some test-split receipt otherwise."""
    d = _copy(tmp_path, "eager")
    m = decode((d / "manifest.json").read_bytes(), "manifest.json")
    replies = msgspec.structs.replace(m.calls.reply_threshold, tau=0.0)
    _reseal(d, calls=msgspec.structs.replace(m.calls, reply_threshold=replies))
    found = same_decisions(d, SHIPPED, [str(ROOT / "receipts")], policy)
    assert found and all(f.startswith("decision ") and " against " in f for f in found)


def test_a_missing_specialist_is_an_error_not_a_traceback(tmp_path, capsys):
    assert main([str(tmp_path), str(SHIPPED)]) == 1
    assert "manifest.json: cannot read" in capsys.readouterr().err
    assert main([str(SHIPPED)]) == 2
