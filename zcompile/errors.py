"""Diagnostics: codes, spans, rustc-style rendering, and the error users see."""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from dataclasses import dataclass

from .source import Span


@dataclass(frozen=True, slots=True)
class Diagnostic:
    """One finding about a source file."""

    code: str
    severity: str  # "error" | "warning" | "note"
    message: str
    span: Span | None
    help: str | None = None
    path: str | None = None  # for diagnostics without a span

    @property
    def is_error(self) -> bool:
        return self.severity == "error"

    def render(self) -> str:
        """Render like rustc: location, header, the source line, carets, help."""
        head = f"{self.severity}[{self.code}]: {self.message}"
        if self.span is None:
            lines = [f"{self.path}: {head}" if self.path else head]
        else:
            src = self.span.source
            line, col = src.line_col(self.span.start)
            end_line, end_col = src.line_col(max(self.span.start, self.span.end - 1))
            text = src.line_text(line).expandtabs(1)
            width = (end_col - col + 1) if end_line == line else len(text) - col + 1
            gutter = " " * len(str(line))
            lines = [
                f"{src.path}:{line}:{col}: {head}",
                f"{gutter} |",
                f"{line} | {text}",
                f"{gutter} | {' ' * (col - 1)}{'^' * max(1, width)}",
            ]
        if self.help:
            pad = " " * (len(str(self.span.line)) if self.span else 0)
            lines.append(f"{pad} = help: {self.help}" if self.span else f"  = help: {self.help}")
        return "\n".join(lines)


class ZcError(Exception):
    """An error caused by user input (policy, state, artifact, receipt); never a bug."""

    def __init__(self, message: str, diagnostics: Iterable[Diagnostic] = ()) -> None:
        super().__init__(message)
        self.diagnostics = tuple(diagnostics)

    def render(self) -> str:
        if self.diagnostics:
            return "\n\n".join(d.render() for d in self.diagnostics)
        return f"error: {self}"


def did_you_mean(name: str, candidates: Iterable[str]) -> str | None:
    """A help text proposing the closest candidate, if any is close."""
    match = difflib.get_close_matches(name, list(candidates), n=1, cutoff=0.6)
    return f"did you mean `{match[0]}`?" if match else None


@dataclass(frozen=True, slots=True)
class JsonProblem:
    """A msgspec error as `$.path: problem`: the one translation every decoder uses.

    `kind` is "missing" or "unknown" (a required or an undeclared field; `field` names it and
    `path` ends with it), "json" (not valid JSON), "truncated" (the input ends mid-value), "depth"
    (nested deeper than the decoder's recursion limit) or "invalid" (any other validation failure).
    """

    path: str
    problem: str
    kind: str
    field: str | None = None

    def __str__(self) -> str:
        return f"{self.path}: {self.problem}"


def member(path: str, key: str) -> str:
    """`path.key`, or `path["key"]` when the key is not a plain name (`note.x`, `a b`, ""), so a
    flat key never reads as a nested one."""
    import json
    import re

    return (f"{path}.{key}" if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key)
            else f"{path}[{json.dumps(key, ensure_ascii=False)}]")


def json_problem(exc: Exception) -> JsonProblem:
    """Translate a msgspec DecodeError or ValidationError (message `Problem - at `$.path``), or
    the RecursionError msgspec raises for JSON nested about 1,000 levels deep."""
    import re

    import msgspec

    text = str(exc)
    if isinstance(exc, RecursionError):
        return JsonProblem("$", "invalid JSON: nested too deeply (arrays and objects inside each other "
                           "beyond the decoder's limit of about 1,000 levels)", "depth")
    if not isinstance(exc, msgspec.ValidationError):
        if "truncated" in text:
            return JsonProblem("$", "invalid JSON: the input ends before the JSON value is complete",
                               "truncated")
        return JsonProblem("$", f"invalid JSON: {text.removeprefix('JSON is malformed: ')}", "json")
    msg, sep, where = text.rpartition(" - at `")
    path = where.rstrip("`") if sep else "$"
    msg = msg if sep else text
    if m := re.fullmatch(r"key` in `(.*)", path):  # a non-string key of an object
        return JsonProblem(m.group(1), "object keys must be strings", "invalid")
    if m := re.fullmatch(r"Object missing required field `(.*)`", msg):
        return JsonProblem(member(path, m.group(1)), "required field is missing", "missing", m.group(1))
    if m := re.fullmatch(r"Object contains unknown field `(.*)`", msg):
        return JsonProblem(member(path, m.group(1)), "unknown field", "unknown", m.group(1))
    return JsonProblem(path, (msg[:1].lower() + msg[1:]) or "invalid value", "invalid")
