"""Machine-readable diagnostics for `zc check --format json|sarif` (SARIF 2.1.0 for CI and review tools)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from urllib.parse import quote

import msgspec

from . import __version__
from .errors import Diagnostic

JSON_VERSION = 1
SARIF_SCHEMA = "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"
_LEVEL = {"error": "error", "warning": "warning", "note": "note"}

# Every diagnostic code, with the one-line description SARIF readers show as the rule's name
# (tests/test_sarif.py checks that every code the compiler emits is here).
CODES = {
    "ZC0000": "the file cannot be read",
    "ZC0001": "syntax: unexpected token",
    "ZC0002": "syntax: unexpected character",
    "ZC0003": "syntax: unexpected end of file",
    "ZC0004": "empty policy file",
    "ZC0005": "not UTF-8 text",
    "ZC0006": "expression nested too deeply",
    "ZC0007": "invalid string literal",
    "ZC0008": "number literal out of range",
    "ZC0101": "duplicate state field",
    "ZC0102": "duplicate action",
    "ZC0103": "duplicate intent",
    "ZC0104": "duplicate rule",
    "ZC0105": "duplicate tier",
    "ZC0106": "duplicate route",
    "ZC0107": "more than one fallback",
    "ZC0108": "no fallback",
    "ZC0109": "field path clash",
    "ZC0110": "duplicate enum member",
    "ZC0111": "argument declared twice",
    "ZC0113": "state field named `args`",
    "ZC0114": "more than one text tier",
    "ZC0115": "`specialist` as the text tier",
    "ZC0201": "unknown field",
    "ZC0202": "unknown enum member",
    "ZC0203": "unknown action",
    "ZC0204": "unknown tag",
    "ZC0205": "unknown tier",
    "ZC0206": "unknown argument",
    "ZC0207": "unknown function",
    "ZC0301": "mismatched comparison",
    "ZC0302": "ordering of non-numbers",
    "ZC0303": "arithmetic on non-numbers",
    "ZC0304": "non-boolean condition",
    "ZC0305": "a rule reads a text field",
    "ZC0306": "`in` on a field that is not a set",
    "ZC0307": "bad default",
    "ZC0308": "`self` or `cost` in a route",
    "ZC0309": "set literal of the wrong type",
    "ZC0310": "`args` in a route",
    "ZC0311": "argument types differ across a rule's targets",
    "ZC0312": "`len` of something that is not a list argument",
    "ZC0313": "constant arithmetic overflows",
    "ZC0401": "`after` rules form a cycle",
    "ZC0500": "a tool no signature can state",
    "ZC0501": "a tool without an action",
    "ZC0502": "an action without the tool's signature",
    "ZC0503": "an action lacks a tool's argument",
    "ZC0504": "an action has an argument the tool does not",
    "ZC0505": "an argument's type differs from the tool's",
    "ZC0506": "an argument's optionality differs from the tool's",
    "ZC0507": "an action with a signature that no tool has",
    "ZC1000": "lint budget exhausted: some questions undecided",
    "ZC1001": "an action no state can make legal",
    "ZC1002": "a rule that can never remove an action",
    "ZC1003": "an unguarded risky action",
    "ZC1004": "a state field no rule or route reads",
    "ZC1005": "a route that is never used",
    "ZC1006": "a text tier no reply reaches",
}


class Location(msgspec.Struct, frozen=True):
    """1-based line and column of the first character; `end_column` is one past the last."""

    line: int
    column: int
    end_line: int
    end_column: int


class JsonDiagnostic(msgspec.Struct, frozen=True):
    file: str
    severity: str  # error | warning | note
    code: str
    message: str
    location: Location | None = None  # None: the whole file (unreadable, empty, ...)
    help: str | None = None


class JsonReport(msgspec.Struct, frozen=True):
    """`zc check --format json`: every diagnostic of every file, with the counts."""

    version: int
    files: int
    errors: int
    warnings: int
    diagnostics: tuple[JsonDiagnostic, ...]


def _location(d: Diagnostic) -> Location | None:
    if d.span is None:
        return None
    src = d.span.source
    line, col = src.line_col(d.span.start)
    end_line, end_col = src.line_col(max(d.span.end, d.span.start + 1))
    return Location(line, col, end_line, end_col)


def _file(path, d: Diagnostic) -> str:
    return d.span.source.path if d.span is not None else (d.path or str(path))


def json_report(results: Sequence[tuple[Path, object, Iterable[Diagnostic]]]) -> bytes:
    """The JSON report of `[(path, IR or None, diagnostics)]` (what `zc check` collects)."""
    diags = [JsonDiagnostic(_file(p, d), d.severity, d.code, d.message, _location(d), d.help)
             for p, _, ds in results for d in ds]
    report = JsonReport(JSON_VERSION, len(results), sum(d.severity == "error" for d in diags),
                        sum(d.severity == "warning" for d in diags), tuple(diags))
    return msgspec.json.format(msgspec.json.encode(report), indent=2)


def _uri(path: str) -> str:
    p = Path(path)
    return quote(p.as_posix()) if not p.is_absolute() else p.as_uri()


def sarif_report(results: Sequence[tuple[Path, object, Iterable[Diagnostic]]], failure: str
                 | None = None) -> bytes:
    """A SARIF 2.1.0 log with one run: the rules are the codes that occur, results point at spans.

    Relative paths are relative to the directory `zc check` ran in (`%SRCROOT%`); columns count
    Unicode code points (`columnKind`). `failure`: why the check could not run (a path that does not
    exist, …): the run's invocation is then unsuccessful, with that notification, and has no results.
    """
    rules: dict[str, int] = {}
    out = []
    for path, _, diags in results:
        for d in diags:
            index = rules.setdefault(d.code, len(rules))
            text = d.message + (f" (help: {d.help})" if d.help else "")
            uri = _uri(_file(path, d))
            artifact = {"uri": uri} | ({"uriBaseId": "%SRCROOT%"} if not uri.startswith("file:") else {})
            physical: dict = {"artifactLocation": artifact}
            loc = _location(d)
            if loc is not None:
                physical["region"] = {"startLine": loc.line, "startColumn": loc.column,
                                      "endLine": loc.end_line, "endColumn": loc.end_column}
            out.append({"ruleId": d.code, "ruleIndex": index, "level": _LEVEL.get(d.severity, "note"),
                        "message": {"text": text}, "locations": [{"physicalLocation": physical}]})
    levels = {}
    for _, _, diags in results:
        for d in diags:
            levels.setdefault(d.code, _LEVEL.get(d.severity, "note"))
    log = {
        "$schema": SARIF_SCHEMA,
        "version": "2.1.0",
        "runs": [{
            "tool": {"driver": {
                "name": "zc", "version": __version__, "semanticVersion": __version__,
                "rules": [{"id": code, "defaultConfiguration": {"level": levels[code]}}
                          | ({"shortDescription": {"text": CODES[code]}} if code in CODES else {})
                          for code in rules]}},
            "invocations": [{"executionSuccessful": failure is None} | (
                {"toolExecutionNotifications": [{"level": "error", "message": {"text": failure}}]} if failure
                else {})],
            "columnKind": "unicodeCodePoints",
            "originalUriBaseIds": {"%SRCROOT%": {"uri": Path.cwd().as_uri() + "/"}},
            "results": out,
        }],
    }
    return msgspec.json.format(msgspec.json.encode(log), indent=2)
