"""`zc route` and the embedding example (examples/harness.py)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from click.testing import CliRunner

from zcompile.cli import main
from zcompile.receipts import read

ROOT = Path(__file__).parents[1]
POLICY = """
policy desk
state {
  role:    enum(customer, admin)
  outcome: enum(ok, timeout, error) = ok
}
action lookup   tags(read)
action reply    tags(control)
action escalate tags(control)
fallback escalate
rule only_escalate: forbid lookup, reply when role == admin
tier specialist max_ms 5
tier small      max_ms 200  cost 1
route default: use specialist, small
"""


def _setup(tmp_path, state):
    (tmp_path / "desk.zc").write_text(POLICY)
    (tmp_path / "s.json").write_text(json.dumps(state))
    return str(tmp_path / "desk.zc"), str(tmp_path / "s.json")


def test_route_text_and_receipt(tmp_path):
    policy, state = _setup(tmp_path, {"role": "customer"})
    receipts = tmp_path / "r.jsonl"
    res = CliRunner().invoke(main, ["route", "--policy", policy, "--state", state, "--receipts",
                                    str(receipts)])
    assert res.exit_code == 0, res.output
    assert "action: escalate by fallback" in res.output and "small        skipped" in res.output
    (r,) = read([receipts])
    assert r.action == "escalate" and r.tier == "fallback"


def test_route_json_compiler_answer(tmp_path):
    policy, state = _setup(tmp_path, {"role": "admin"})
    res = CliRunner().invoke(main, ["route", "--policy", policy, "--state", state, "--json"])
    out = json.loads(res.output)
    assert (out["action"], out["tier"], out["confidence"]) == ("escalate", "compiler", 1.0)
    assert (out["kind"], out["arguments"]) == ("name", None)  # `escalate` declares no signature
    assert out["receipt"]["meta"]["rungs"][0]["outcome"] == "answered"


def test_route_bad_state_and_usage(tmp_path):
    policy, state = _setup(tmp_path, {"role": "root"})
    res = CliRunner().invoke(main, ["route", "--policy", policy, "--state", state])
    assert res.exit_code == 1 and "$.role" in res.output and "Traceback" not in res.output
    assert CliRunner().invoke(main, ["route", "--policy", policy]).exit_code == 2


def test_harness_example_runs_the_loop(tmp_path, capsys):
    sys.path.insert(0, str(ROOT / "examples"))
    try:
        import harness
    finally:
        sys.path.pop(0)
    receipts = tmp_path / "h.jsonl"
    assert harness.main(["--receipts", str(receipts)]) == 0
    got = list(read([receipts]))
    assert [r.action for r in got] == ["fs.list", "fs.read", "retry", "fs.read", "stop"]
    assert [r.tier for r in got] == ["small", "small", "large", "small", "compiler"]
    assert "receipts in" in capsys.readouterr().out
