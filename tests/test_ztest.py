"""`zc test`: the test-file format, its validation errors, the runner's output and coverage."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from zcompile.cli import main
from zcompile.errors import ZcError
from zcompile.testing import compile_policy, load_suite, run_case

GOLDEN = Path(__file__).parent / "golden" / "ok"
STATE = "{user: {role: customer, verified: true}, budget: {units: 3}}"
LEGAL = "[get_order, ask_user, continue, stop, escalate]"


@pytest.fixture
def desk(tmp_path):
    """A copy of the support_desk policy in a temporary folder, ready for test files beside it."""
    shutil.copy(GOLDEN / "support_desk.zc", tmp_path / "support_desk.zc")
    return tmp_path


def write(folder: Path, text: str, name: str = "support_desk.test.yaml") -> Path:
    p = folder / name
    p.write_text(text)
    return p


def zc(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def test_passing_file_exits_0_and_finds_the_policy_by_its_stem(desk):
    write(desk, f"version: 1\ncases:\n- name: ok\n  state: {STATE}\n  legal: {LEGAL}\n")
    res = zc("test", desk, "-v")
    assert res.exit_code == 0, res.output
    assert "PASS: ok" in res.output and "PASS: 1/1" in res.output


def test_failure_shows_the_diff_with_reasons_and_exits_1(desk):
    write(desk, f"version: 1\ncases:\n- name: wrong\n  state: {STATE}\n"
                "  legal: [get_order, cancel_order, ask_user, continue, stop]\n")
    res = zc("test", desk)
    assert res.exit_code == 1
    out = res.output
    assert "FAIL: wrong (" in out and "support_desk.test.yaml:3)" in out
    assert "- cancel_order: expected legal, but removed: `pending_only`: `cancel_order` requires " \
           "`order.status == pending` (order.status = absent)" in out
    assert "+ escalate: legal, but expected removed" in out
    assert "FAIL: 1/1" in out


def test_removed_and_fallback_are_compared_exactly_for_the_actions_listed(desk):
    write(desk, f"version: 1\ncases:\n- name: reasons\n  state: {STATE}\n  legal: {LEGAL}\n"
                "  fallback: true\n  removed: {refund: [affordable], get_order: [lookup_first]}\n")
    out = zc("test", desk).output
    assert "fallback: expected true, got false" in out
    assert "removed refund: expected rules [affordable], got [confirm_first] (`confirm_first`: " in out
    assert "removed get_order: expected rules [lookup_first], got []" in out
    assert "deploy" not in out  # not listed: its reasons are not checked


def test_call_cases_judge_allowed_and_reasons(tmp_path):
    shutil.copy(GOLDEN / "shop.zc", tmp_path / "shop.zc")
    write(tmp_path, "version: 1\ncases:\n"
                    "- name: blocked\n  state: {order: {status: pending}}\n"
                    "  call: {name: cancel_pending_order, arguments: {order_id: a, reason: "
                    "no_longer_needed}}\n  allowed: true\n"
                    "- name: why\n  state: {order: {status: pending}}\n"
                    "  call: {name: cancel_pending_order, arguments: {order_id: a, reason: "
                    "no_longer_needed}}\n  allowed: false\n  reasons: [pending_only]\n", "shop.test.yaml")
    out = zc("test", tmp_path).output
    assert "cancel_pending_order: expected allowed, got blocked: `verified_writes`:" in out
    assert "reasons: expected [pending_only], got [verified_writes]" in out
    assert "FAIL: 2/2" in out


def test_yaml_1_2_scalars_keep_enum_members_named_no(tmp_path):
    (tmp_path / "p.zc").write_text("policy p\nstate { answer: enum(yes, no) }\naction a\naction b\n"
                                   "fallback b\nrule only_yes: a requires answer == yes\n")
    write(tmp_path, "version: 1\ncases:\n- name: no\n  state: {answer: no}\n  legal: [b]\n", "p.test.yaml")
    res = zc("test", tmp_path)
    assert res.exit_code == 0, res.output


def test_json_test_files_run_too(desk):
    write(desk, json.dumps({"version": 1, "cases": [
        {"name": "j", "state": {"user": {"role": "customer", "verified": True}, "budget": {"units": 3}},
         "legal": ["get_order", "ask_user", "continue", "stop", "escalate"]}]}), "support_desk.test.json")
    res = zc("test", desk / "support_desk.test.json")
    assert res.exit_code == 0 and "PASS: 1/1" in res.output


@pytest.mark.parametrize(("text", "error"), [
    ("version: 1\ncases:\n- name: a\n  state: {}\n  legal: 3\n",
     ":5:3: $.cases[0].legal: expected `array`, got `int`"),
    ("version: 1\ncases:\n- name: a\n  state: {}\n  legal: []\n  colour: red\n",
     ":6:3: $.cases[0].colour: unknown key (a case takes name, state, intent, legal, fallback, "
     "removed, call, allowed, reasons)"),
    ("version: 1\ncases:\n- name: a\n  stat: {}\n  legal: []\n",
     ":4:3: $.cases[0].stat: unknown key (did you mean `state`?)"),
    ("version: 1\ncases:\n- name: a\n  state: {}\n  call: {name: stop, args: {}}\n  allowed: true\n",
     ":5:22: $.cases[0].call.args: unknown key (did you mean `arguments`?)"),
    ("version: 1\ncase: []\n", ":2:1: $.case: unknown key (did you mean `cases`?)"),
    ("version: 1\ncases:\n- name: a\n  state: {}\n",
     ":3:3: $.cases[0]: a case gives either `legal`"),
    ("version: 1\ncases:\n- name: a\n  state: {}\n  call: {name: stop}\n",
     ":5:3: $.cases[0].call: a call case needs `allowed: true|false`"),
    ("version: 1\ncases:\n- name: a\n  state: {}\n  legal: []\n  reasons: []\n",
     ":6:3: $.cases[0].reasons: `reasons` does not belong in a legal-set case"),
    ("version: 1\ncases:\n- name: a\n  state: {}\n  legal: []\n- name: a\n  state: {}\n  legal: []\n",
     ":6:3: $.cases[1].name: duplicate case name `a`"),
    ("version: 2\ncases: []\n", ":1:1: $.version: unsupported test file version 2"),
    ("version: 1\ncases: [\n", ":3:1: invalid YAML:"),
    ("version: 1\nversion: 1\ncases: []\n", ":2:1: duplicate key `version`"),
    ("version: 1\npolicy: nowhere.zc\ncases: []\n", ":2:1: $.policy: policy `"),
    ("version: 1\npolicy: build/p.zcp\ncases: []\n",
     ":2:1: $.policy: `build/p.zcp` is not a policy source: name the `.zc` file"),
    ("", ": empty test file"),
    ("version: 1\ncases:\n- name: a\n  state: {}\n  legal: []\n  removed: {[a]: [b]}\n",
     ":6:13: invalid YAML: found unhashable key"),
])
def test_invalid_files_name_file_line_and_path(desk, text, error):
    p = write(desk, text)
    with pytest.raises(ZcError) as exc:
        load_suite(p)
    assert f"{p}{error}" in str(exc.value)
    res = zc("test", p)
    assert res.exit_code == 1 and "ERROR" in res.output and "Traceback" not in res.output


def test_every_character_yaml_refuses_is_named_at_its_line_and_column(desk):
    """Seeded: a control character (C0, DEL, C1) or a BOM-like one inserted anywhere in a valid
    file is an error at file:line:column, or the file still loads; never a traceback."""
    import random

    rng = random.Random(7)
    good = "version: 1\ncases:\n- name: a\n  state: {}\n  legal: []\n"
    bad = [c for c in map(chr, [*range(0x20), 0x7F, *range(0x80, 0xA0)]) if c not in "\t\n\r\x85"]
    for _ in range(60):
        i, c = rng.randrange(len(good) + 1), rng.choice(bad)
        text = good[:i] + c + good[i:]
        p = write(desk, text)
        with pytest.raises(ZcError) as exc:
            load_suite(p)
        line = text.count("\n", 0, i) + 1
        col = i - (text.rfind("\n", 0, i) + 1) + 1
        assert (f"{p}:{line}:{col}: invalid YAML: the character U+{ord(c):04X} is not "
                "allowed") in str(exc.value)
    res = zc("test", p)
    assert res.exit_code == 1 and "Traceback" not in res.output


def test_aliases_and_deep_nesting_are_refused_not_expanded(desk):
    p = write(desk, "version: 1\ncases:\n- name: a\n  state: {x: &a [1, 1], y: [*a, *a]}\n  legal: []\n")
    with pytest.raises(ZcError, match=r":4:14: YAML anchors and aliases .* are not supported"):
        load_suite(p)
    deep = "[" * 20000 + "]" * 20000
    p = write(desk, f"version: 1\ncases:\n- name: a\n  state: {{x: {deep}}}\n  legal: []\n")
    with pytest.raises(ZcError, match="nested too deeply"):
        load_suite(p)
    p = write(desk, f'{{"version": 1, "cases": [{{"name": "a", "state": {{"x": {deep}}}, "legal": []}}]}}',
              "support_desk.test.json")
    with pytest.raises(ZcError, match="nested too deeply"):
        load_suite(p)


def test_duplicate_keys_in_json_are_refused_too(desk):
    p = write(desk, '{"version": 1,\n "cases": [],\n "cases": []}', "support_desk.test.json")
    with pytest.raises(ZcError, match=r"support_desk\.test\.json:3:2: duplicate key `cases`"):
        load_suite(p)


def test_invalid_json_file_names_line_and_column(desk):
    p = write(desk, '{"version": 1,\n "cases": [}', "support_desk.test.json")
    with pytest.raises(ZcError, match=r"support_desk\.test\.json:2:12: invalid JSON"):
        load_suite(p)


def test_case_errors_fail_the_case_not_the_run(desk):
    write(desk, "version: 1\ncases:\n"
                "- name: bad_state\n  state: {user: {role: root}}\n  legal: []\n"
                "- name: typo\n  state: {}\n  legal: [get_ordr]\n"
                f"- name: bad_intent\n  intent: nope\n  state: {STATE}\n  legal: []\n")
    out = zc("test", desk).output
    # each at the value that is wrong: file:line:column and its `$.path` in the test file
    assert "FAIL: bad_state (support_desk.test.yaml:4:18)" in out.replace(str(desk) + "/", "")
    assert 'error: $.cases[0].state.user.role: expected one of customer|agent|admin, got "root"' in out
    assert "(support_desk.test.yaml:8:11)" in out.replace(str(desk) + "/", "")
    assert "error: $.cases[1].legal[0]: unknown action `get_ordr` (did you mean `get_order`?)" in out
    assert "error: $.cases[2].intent: unknown intent `nope`" in out
    assert "FAIL: 3/3" in out


def test_unknown_rules_in_expectations_are_named_with_did_you_mean(desk):
    write(desk, "version: 1\ncases:\n"
                f"- name: removed\n  state: {STATE}\n  legal: {LEGAL}\n"
                "  removed: {refund: [confirm_firs], deploy: [intent]}\n"
                f"- name: reasons\n  state: {STATE}\n  call: {{name: refund}}\n  allowed: false\n"
                "  reasons: [confirm_first, schema, nope]\n"
                f"- name: history\n  state: {{{STATE[1:-1]}, history: [get_ordr]}}\n  legal: {LEGAL}\n")
    out = zc("test", desk).output
    assert "error: $.cases[0].removed.refund[0]: unknown rule `confirm_firs` (did you mean " \
           "`confirm_first`?)" in out
    assert "$.cases[0].removed.deploy" not in out  # `intent` names the intent's allow list
    assert "error: $.cases[1].reasons[2]: unknown rule `nope`" in out and "reasons[1]" not in out
    assert "error: $.cases[2].state.history[0]: expected one of get_order|" in out
    assert "(did you mean `get_order`?)" in out.split("history[0]")[1]
    assert "FAIL: 3/3" in out


def test_a_path_that_is_not_a_regular_file_is_refused_not_read(desk):
    fifo = desk / "support_desk.test.yaml"
    os.mkfifo(fifo)
    res = zc("test", fifo)  # reading a FIFO would block: refused before it is opened
    assert res.exit_code == 1 and "not a regular file" in res.output
    with pytest.raises(ZcError, match="cannot read test file: not a regular file"):
        load_suite(fifo)  # the API refuses it too, on the opened descriptor


def test_a_flat_dotted_state_key_is_explained(desk):
    write(desk, "version: 1\ncases:\n- name: flat\n"
                "  state: {user.role: admin, user: {verified: true}, budget: {units: 3}}\n  legal: []\n")
    out = zc("test", desk).output
    assert 'error: $.cases[0].state["user.role"]: state key `user.role` is written flat: dotted ' \
           "fields are nested objects (`user: {role: …}`)" in out
    assert "(support_desk.test.yaml:4:11)" in out.replace(str(desk) + "/", "")


def test_a_policy_with_errors_is_one_error(tmp_path):
    (tmp_path / "p.zc").write_text("policy p\naction a\nfallback b\n")
    write(tmp_path, "version: 1\ncases: []\n", "p.test.yaml")
    res = zc("test", tmp_path)
    assert res.exit_code == 1 and "error[ZC" in res.output


def test_a_policy_path_runs_the_tests_beside_it(desk):
    write(desk, f"version: 1\ncases:\n- name: ok\n  state: {STATE}\n  legal: {LEGAL}\n")
    res = zc("test", desk / "support_desk.zc")
    assert res.exit_code == 0 and "PASS: 1/1" in res.output
    (desk / "other.zc").write_text("policy other\naction a\nfallback a\n")
    res = zc("test", desk / "other.zc")
    assert res.exit_code == 1 and "no test file beside this policy (`other.test.yaml`)" in res.output


def test_a_run_without_cases_fails(desk):
    write(desk, "version: 1\ncases: []\n")
    res = zc("test", desk)
    assert res.exit_code == 1 and "no test cases: nothing was tested" in res.output


def test_usage_errors(tmp_path):
    assert zc("test").exit_code == 2
    res = zc("test", tmp_path)
    assert res.exit_code == 1 and "no test files" in res.output


def test_coverage_names_rules_and_condition_outcomes_never_exercised(desk):
    write(desk, f"version: 1\ncases:\n- name: ok\n  state: {STATE}\n  legal: {LEGAL}\n")
    res = zc("test", desk, "--coverage")
    assert res.exit_code == 0
    out = res.output
    assert "coverage: " in out and "support_desk.zc: " in out
    # one customer state: the budget rule never fires for cheap actions, never keeps deploy
    assert "rule `affordable` never" not in out  # it both removed deploy and kept the others
    assert "`user.role == admin` in rule `admins_destroy` was never true" in out
    assert "`retries < 3` in rule `transient_retry` was never false" in out
    assert "rule `fault_stops` never removed an action" in out


def test_a_condition_on_an_optional_field_must_be_seen_unknown_too(desk):
    """`order.status` may be absent, so `order.status == pending` has three outcomes (unknown never
    makes an action legal: a case should show it); `user.role` has a value always, so two."""
    state = "{user: {role: customer, verified: true}, budget: {units: 3}, order: {status: pending}}"
    write(desk, f"version: 1\ncases:\n- name: ok\n  state: {state}\n  legal: [get_order, ask_user, "
                "continue, stop, escalate]\n")
    res = zc("test", desk, "--coverage")
    out = res.output
    assert res.exit_code == 0 and "PASS: 1/1" in out, out
    assert "`order.status == pending` in rule `pending_only` was never false or unknown" in out
    assert "`user.role == admin` in rule `admins_destroy` was never true\n" in out


def test_min_coverage_fails_a_run_below_it(desk):
    write(desk, f"version: 1\ncases:\n- name: ok\n  state: {STATE}\n  legal: {LEGAL}\n")
    res = zc("test", desk, "--min-coverage", "90")
    assert res.exit_code == 1 and "below --min-coverage 90%" in res.output and "PASS: 1/1" in res.output
    assert zc("test", GOLDEN / "support_desk.test.yaml", "--min-coverage", "100").exit_code == 0


def test_coverage_is_complete_for_the_golden_suite():
    res = zc("test", GOLDEN / "support_desk.test.yaml", "--coverage")
    assert res.exit_code == 0
    # `order.status == pending` is unknown too
    assert "31/31 rule and condition outcomes (100.0%)" in res.output


def test_run_case_api():
    suite = load_suite(GOLDEN / "support_desk.test.yaml")
    compiled = compile_policy(suite.policy)
    results = [run_case(compiled, c) for c in suite.cases]
    assert results and all(r.passed for r in results)
    assert [r.name for r in results] == [c.name for c in suite.cases]


def test_the_example_in_the_docs_passes(desk):
    doc = (Path(__file__).parents[1] / "docs" / "authoring.md").read_text()
    block = doc.split("```yaml\n# support_desk.test.yaml", 1)[1].split("\n", 1)[1].split("```", 1)[0]
    write(desk, block)
    res = zc("test", desk, "-v")
    assert res.exit_code == 0, res.output
    assert "PASS: 3/3" in res.output
