"""Golden legal sets and verdicts: every case of the `zc test` files of the shipped, example and golden
policies."""

from __future__ import annotations

from pathlib import Path

import pytest

from zcompile.driver import compile_file, compile_source, read_source
from zcompile.testing import compile_policy, load_suite, run_case, suite_files

ROOT = Path(__file__).parents[1]
GOLDEN = Path(__file__).parent / "golden" / "ok"
SUITES = [load_suite(f) for f in suite_files([GOLDEN, ROOT / "policies", ROOT / "examples"])]
CASES = [(s, c) for s in SUITES for c in s.cases]
SOURCES = sorted({s.policy for s in SUITES} | set(GOLDEN.glob("*.zc")) | set((ROOT / "policies").glob("*.zc"))
                 | set((ROOT / "examples").rglob("*.zc")))
_COMPILED: dict = {}


@pytest.mark.parametrize(("suite", "case"), CASES,
                         ids=[f"{s.path.name.split('.')[0]}/{c.name}" for s, c in CASES])
def test_golden_case(suite, case):
    compiled = _COMPILED.get(suite.policy) or _COMPILED.setdefault(suite.policy, compile_policy(suite.policy))
    result = run_case(compiled, case)
    assert result.passed, "\n".join(result.diff)


def test_every_policy_has_a_test_file():
    assert {s.policy.resolve() for s in SUITES} == {p.resolve() for p in SOURCES}


def test_no_golden_state_outside_a_test_file():
    """Golden states live in `zc test` files; a loose JSON state (the old layout) would be skipped."""
    assert sorted(GOLDEN.glob("*/*.json")) == []


@pytest.mark.parametrize("source", SOURCES, ids=lambda p: p.name)
def test_shipped_and_golden_policies_compile(source):
    policy, diagnostics = compile_source(read_source(source))
    assert compile_file(source).ir == policy  # without the lints, the same IR as `zc compile` writes
    if source.parent.name == "policies":  # shipped policies are examples users copy: no warnings
        assert [d.render() for d in diagnostics] == []  # airline_chat allows ZC1004 on its feature fields


def test_there_are_golden_cases_for_every_family():
    agent_core = next(s for s in SUITES if s.policy.name == "agent_core.zc")
    families = {c.name.split("_")[0] for c in agent_core.cases}
    assert families >= {"control", "recovery", "security", "routing", "schema", "abstention",
                        "dependencies", "tool", "uncertainty", "parallelism"}
