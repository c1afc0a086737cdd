"""The `zc` command line through click's CliRunner: outputs and exit codes 0/1/2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from zcompile.cli import main

SRC = Path(__file__).parent / "golden" / "ok" / "support_desk.zc"
STATE = {"user": {"role": "customer", "verified": True}, "budget": {"units": 3}}


@pytest.fixture
def runner():
    return CliRunner()


@pytest.fixture
def built(runner, tmp_path):
    res = runner.invoke(main, ["compile", str(SRC), "-o", str(tmp_path / "build")])
    assert res.exit_code == 0, res.output
    state = tmp_path / "state.json"
    state.write_text(json.dumps(STATE))
    return tmp_path / "build" / "support_desk.zcp", state


def test_check_ok_with_warnings_exits_0(runner):
    res = runner.invoke(main, ["check", str(SRC)])
    assert res.exit_code == 0
    assert "warning[ZC1004]" in res.output and "0 errors, 2 warnings in 1 file" in res.output


def test_check_deny_warnings_exits_1(runner):
    assert runner.invoke(main, ["check", "--deny-warnings", str(SRC)]).exit_code == 1


def test_an_allow_comment_silences_its_warning_never_an_error(runner, tmp_path):
    src = tmp_path / "p.zc"
    src.write_text("policy p\nstate {\n  x: int = 0  # zc: allow(ZC1004)\n  y: bool\n}\naction a\nfallback "
                   "a\nrule r: forbid a when z  # zc: allow(ZC0201)\n")
    res = runner.invoke(main, ["check", str(src)])
    assert res.exit_code == 1 and "error[ZC0201]" in res.output  # an error is never allowed
    src.write_text(src.read_text().replace("when z", "when y"))
    res = runner.invoke(main, ["check", "--deny-warnings", str(src)])
    assert res.exit_code == 0 and "0 errors, 0 warnings" in res.output, res.output


def test_check_errors_exit_1_and_reports_all(runner, tmp_path):
    bad = tmp_path / "bad.zc"
    bad.write_text("policy p\naction a\nfallback a\nrule r1: b requires x == 1\nrule r2: forbid c when y\n")
    res = runner.invoke(main, ["check", str(bad)])
    assert res.exit_code == 1
    assert res.output.count("error[") == 4
    assert "Traceback" not in res.output


def test_compile_writes_artifact(built):
    artifact, _ = built
    assert artifact.exists() and json.loads(artifact.read_bytes())["format"] == "zcp"


def test_compile_with_errors_writes_nothing(runner, tmp_path):
    bad = tmp_path / "bad.zc"
    bad.write_text("policy p\naction a\n")
    res = runner.invoke(main, ["compile", str(bad), "-o", str(tmp_path / "out")])
    assert res.exit_code == 1 and "nothing written" in res.output
    assert not (tmp_path / "out").exists()


def test_legal_text(runner, built):
    artifact, state = built
    res = runner.invoke(main, ["legal", str(artifact), "--state", str(state)])
    assert res.exit_code == 0
    assert "legal: get_order, ask_user, continue, stop, escalate" in res.output
    assert "pending_only (requires)" in res.output


def test_legal_json_shape(runner, built):
    artifact, state = built
    res = runner.invoke(main, ["legal", str(artifact), "--state", str(state), "--intent", "cancel", "--json"])
    assert res.exit_code == 0
    out = json.loads(res.output)
    assert set(out) == {"policy", "legal", "fallback", "removed"}
    assert out["policy"] == "support_desk" and out["legal"] == ["get_order", "ask_user", "stop", "escalate"]
    reason = out["removed"]["refund"][0]
    assert {"rule", "kind", "message", "span"} <= set(reason)
    assert reason == {**reason, "rule": "intent", "kind": "intent"}


def test_legal_state_from_stdin(runner, built):
    artifact, _ = built
    res = runner.invoke(main, ["legal", str(artifact), "--state", "-", "--json"], input=json.dumps(STATE))
    assert res.exit_code == 0 and json.loads(res.output)["fallback"] is False


def test_legal_bad_state_exits_1(runner, built):
    artifact, state = built
    state.write_text('{"user": {"role": "root"}, "budget": {"units": 1}}')
    res = runner.invoke(main, ["legal", str(artifact), "--state", str(state)])
    assert res.exit_code == 1
    assert '$.user.role: expected one of customer|agent|admin, got "root"' in res.output


def test_usage_errors_exit_2(runner, built):
    artifact, _ = built
    assert runner.invoke(main, ["legal", str(artifact)]).exit_code == 2
    assert runner.invoke(main, ["nope"]).exit_code == 2
    assert runner.invoke(main, ["check"]).exit_code == 2


def test_python_dash_m(tmp_path):
    res = subprocess.run([sys.executable, "-m", "zcompile", "check", str(SRC)], capture_output=True,
                         text=True)
    assert res.returncode == 0 and "2 warnings" in res.stderr


def test_progress_without_a_terminal_prints_lines(capsys, monkeypatch):
    """In a log (stderr not a terminal) a long loop says what it does as it starts, how far it is
    with an estimate of the time left every `every_s` seconds, and what it took at the end; every
    item is passed through."""
    from zcompile.cli import common

    clock = iter(range(0, 1000, 4))  # each reading of the clock is 4 s after the last
    monkeypatch.setattr(common.time, "monotonic", lambda: float(next(clock)))
    assert list(common.progress(range(5), "fine-tuning", 5, every_s=10)) == list(range(5))
    assert capsys.readouterr().err.splitlines() == [
        "  fine-tuning: 0/5",
        "  fine-tuning: 3/5 (60%), 12 s, about 8.0 s left",  # 12 s for 3: 4 s each, 2 to go
        "  fine-tuning: 5/5 done in 24 s"]
    assert list(common.progress(iter("abc"), "reading", 0, every_s=6)) == ["a", "b", "c"]
    assert capsys.readouterr().err.splitlines() == ["  reading", "  reading: 2 so far, 8.0 s",
                                                    "  reading: 3 done in 16 s"]


def test_durations_read_as_a_person_reads_them():
    from zcompile.cli.common import how_far, seconds

    assert [seconds(s) for s in (0.04, 9.96, 12.4, 59.4, 61, 3599)] == [
        "0.0 s", "10.0 s", "12 s", "59 s", "1 min 01 s", "59 min 59 s"]
    assert how_far(1, 4, 30.0) == "1/4 (25%), 30 s, about 1 min 30 s left"
    assert how_far(4, 4, 2.0) == "4/4 (100%), 2.0 s"
