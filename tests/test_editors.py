"""The TextMate grammar (editors/zc.tmLanguage.json): valid, and it scopes the tokens of a policy."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
GRAMMAR = json.loads((ROOT / "editors" / "zc.tmLanguage.json").read_text())
POLICIES = sorted((ROOT / "policies").glob("*.zc")) + sorted((ROOT / "tests" / "golden" / "ok").glob("*.zc"))


def flat(patterns: list[dict]) -> list[dict]:
    """Top-level patterns with includes and nested `patterns` resolved, in order."""
    out = []
    for p in patterns:
        if "include" in p:
            out.extend(flat([GRAMMAR["repository"][p["include"].lstrip("#")]]))
        elif "patterns" in p:
            out.extend(flat(p["patterns"]))
        else:
            out.append(p)
    return out


PATTERNS = [(re.compile(p["match"]), p) for p in flat(GRAMMAR["patterns"])]


def scopes(line: str) -> list[tuple[str, str]]:
    """(text, scope) of each token, the way a TextMate engine picks patterns: earliest match first,
    ties to the pattern listed first."""
    out, pos = [], 0
    while pos < len(line):
        best = None
        for rx, p in PATTERNS:
            m = rx.search(line, pos)
            if m and m.end() > m.start() and (best is None or m.start() < best[0].start()):
                best = (m, p)
        if best is None:
            break
        m, p = best
        if "captures" in p:
            out.extend((m.group(int(k)), c["name"]) for k, c in p["captures"].items() if m.group(int(k)))
        else:
            out.append((m.group(), p["name"]))
        pos = m.end()
    return out


def test_grammar_is_complete():
    assert GRAMMAR["scopeName"] == "source.zc" and GRAMMAR["fileTypes"] == ["zc"]
    for p in flat(GRAMMAR["patterns"]):
        assert "match" in p and ("name" in p or "captures" in p), p
    package = json.loads((ROOT / "editors" / "package.json").read_text())
    for contribution in package["contributes"]["grammars"] + package["contributes"]["languages"]:
        path = contribution.get("path") or contribution["configuration"]
        assert (ROOT / "editors" / path).exists()


@pytest.mark.parametrize(("line", "want"), [
    ("policy support_desk  # one", [("policy", "keyword.declaration.policy.zc"),
                                     ("support_desk", "entity.name.type.policy.zc"),
                                     ("# one", "comment.line.number-sign.zc")]),
    ("action get_order tags(read) cost 1", [("action", "keyword.declaration.action.zc"),
                                             ("get_order", "entity.name.function.action.zc"),
                                             ("tags", "keyword.control.zc"), ("read", "variable.other.zc"),
                                             ("cost", "keyword.control.zc"), ("1", "constant.numeric.zc")]),
    ("  order.status: enum(pending)?", [("order.status", "variable.other.property.field.zc"),
                                        (":", "punctuation.separator.zc"), ("enum", "support.type.zc"),
                                        ("pending", "variable.other.zc"),
                                        ("?", "keyword.operator.optional.zc")]),
    ('intent cancel "a # b" {', [("intent", "keyword.declaration.zc"), ("cancel", "entity.name.section.zc"),
                                 ('"a # b"', "string.quoted.double.zc")]),
    ("rule r: forbid * when cost > budget.units and not self in confirmed",
     [("rule", "keyword.declaration.rule.zc"), ("r", "entity.name.tag.rule.zc"),
      (":", "punctuation.separator.zc"), ("forbid", "keyword.control.zc"),
      ("*", "keyword.operator.arithmetic.zc"), ("when", "keyword.control.zc"), ("cost", "keyword.control.zc"),
      (">", "keyword.operator.comparison.zc"), ("budget.units", "variable.other.zc"),
      ("and", "keyword.operator.logical.zc"), ("not", "keyword.operator.logical.zc"),
      ("self", "variable.language.self.zc"), ("in", "keyword.operator.logical.zc"),
      ("confirmed", "variable.other.zc")]),
    ("rule s: add_bags requires len(args.item_ids) >= 1 and get_order in history",
     [("rule", "keyword.declaration.rule.zc"), ("s", "entity.name.tag.rule.zc"),
      (":", "punctuation.separator.zc"), ("add_bags", "variable.other.zc"),
      ("requires", "keyword.control.zc"), ("len", "support.function.builtin.zc"),
      ("args.item_ids", "variable.parameter.argument.zc"), (">=", "keyword.operator.comparison.zc"),
      ("1", "constant.numeric.zc"), ("and", "keyword.operator.logical.zc"),
      ("get_order", "variable.other.zc"), ("in", "keyword.operator.logical.zc"),
      ("history", "variable.language.history.zc")]),
])
def test_lines_are_scoped(line, want):
    assert scopes(line) == want


@pytest.mark.parametrize("path", POLICIES, ids=lambda p: p.name)
def test_every_token_of_the_shipped_policies_gets_a_scope(path):
    """No stretch of a shipped policy is left unscoped except whitespace and punctuation."""
    for line in path.read_text().splitlines():
        covered = "".join(text for text, _ in scopes(line))
        rest = re.sub(r"[\s{}(),\[\]:]", "", line)
        assert len(re.sub(r"[\s{}(),\[\]:]", "", covered)) == len(rest), line
