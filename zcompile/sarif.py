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


def sarif_report(results: Sequence[tuple[Path, object, Iterable[Diagnostic]]]) -> bytes:
    """A SARIF 2.1.0 log with one run: the rules are the codes that occur, results point at spans.

    Relative paths are relative to the directory `zc check` ran in (`%SRCROOT%`); columns count
    Unicode code points (`columnKind`).
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
                          for code in rules]}},
            "columnKind": "unicodeCodePoints",
            "originalUriBaseIds": {"%SRCROOT%": {"uri": Path.cwd().as_uri() + "/"}},
            "results": out,
        }],
    }
    return msgspec.json.format(msgspec.json.encode(log), indent=2)
