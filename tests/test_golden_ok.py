"""Golden legal sets: every state under tests/golden/ok/<policy>/ against its expected result."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import zcompile
from zcompile.driver import compile_source, read_source

ROOT = Path(__file__).parents[1]
GOLDEN = Path(__file__).parent / "golden" / "ok"


def _source(policy: str) -> Path:
    for candidate in (GOLDEN / f"{policy}.zc", ROOT / "policies" / f"{policy}.zc"):
        if candidate.exists():
            return candidate
    raise FileNotFoundError(policy)


CASES = sorted(GOLDEN.glob("*/*.json"))
SOURCES = sorted({_source(c.parent.name) for c in CASES} | set((ROOT / "policies").glob("*.zc")))


@pytest.mark.parametrize("case", CASES, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_golden_legal_set(case):
    want = json.loads(case.read_text())
    policy = zcompile.compile_file(_source(case.parent.name))
    if "call" in want:  # a golden verdict: one proposed call, allowed or every rule that blocks it
        v = policy.check(want["state"], want["call"]["name"], want["call"]["arguments"],
                         want.get("intent"))
        assert v.allowed == want["allowed"]
        assert sorted(r.rule for r in v.reasons) == sorted(want["reasons"])
        return
    got = policy.legal(want["state"], want.get("intent"))
    assert list(got.actions) == want["legal"]
    assert got.fallback == want["fallback"]
    assert {a: sorted(r.rule for r in rs) for a, rs in got.removed.items()} == \
        {a: sorted(rs) for a, rs in want["removed"].items()}


@pytest.mark.parametrize("source", SOURCES, ids=lambda p: p.name)
def test_shipped_and_golden_policies_compile(source):
    _, diagnostics = compile_source(read_source(source))
    if source.parent.name == "policies":  # shipped policies are examples users copy: no warnings
        assert [d.render() for d in diagnostics if not _specialist_feature(source, d)] == []


# airline_chat.zc declares the chat extractor's version-2 structure for its specialists to learn
# from; no rule reads it, and ZC1004 cannot tell such a feature from a dead field
_FEATURES = ("last.result", "recent.", "mentioned.", "reused.")


def _specialist_feature(source: Path, d) -> bool:
    return (source.name == "airline_chat.zc" and d.code == "ZC1004"
            and d.message.removeprefix("state field `").startswith(_FEATURES))


def test_there_are_golden_cases_for_every_family():
    families = {c.stem.split("_")[0] for c in GOLDEN.glob("agent_core/*.json")}
    assert families >= {"control", "recovery", "security", "routing", "schema", "abstention",
                        "dependencies", "tool", "uncertainty", "parallelism"}
