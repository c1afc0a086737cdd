"""The `zc` command line through click's CliRunner: outputs and exit codes 0/1/2."""

from __future__ import annotations

import json
import re
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
    src.write_text("policy p\nstate {\n  x: int = 0  # zc: allow(ZC1004)\n  y: bool\n}\naction a\nfallback a\n"
                   "rule r: forbid a when z  # zc: allow(ZC0201)\n")
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
    res = subprocess.run([sys.executable, "-m", "zcompile", "check", str(SRC)], capture_output=True, text=True)
    assert res.returncode == 0 and "2 warnings" in res.stderr


def test_progress_without_a_terminal_prints_lines(capsys):
    """In a log (stderr not a terminal) long loops report every tenth and at the end, and pass every item."""
    from zcompile.cli import progress

    assert list(progress(range(25), "fine-tuning", 25)) == list(range(25))
    err = [re.sub(r"\(\d+ s\)$", "(s)", x) for x in capsys.readouterr().err.splitlines()]
    assert err == ["  fine-tuning"] + [f"  fine-tuning: {i}/25 (s)" for i in (2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 25)]
    assert list(progress(iter("abc"), "reading", 0)) == ["a", "b", "c"]
    err = [re.sub(r"\(\d+ s\)$", "(s)", x) for x in capsys.readouterr().err.splitlines()]
    assert err == ["  reading", "  reading: 3 (s)"]
