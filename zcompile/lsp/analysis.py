"""What the language server knows of one policy text: diagnostics and its declared symbols.

Plain data, no protocol: the server (server.py) turns it into LSP messages.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from .. import ast as A
from ..errors import Diagnostic, ZcError
from ..source import Source, Span

_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*")
KEYWORDS = ("policy", "state", "action", "fallback", "intent", "allow", "rule", "requires", "forbid",
            "when", "unless", "after", "tags", "cost", "tier", "max_ms", "route", "use", "and", "or",
            "not", "in", "self", "true", "false", "enum", "set", "bool", "int", "float", "text", "list")
HISTORY = "history: set[action] = {}  (built in: the actions already executed in this task)"


@dataclass(frozen=True, slots=True)
class Symbol:
    """A declared name: what it is, where it is declared, and what hover says of it."""

    kind: str  # field | action | argument | rule | intent | tier | tag
    name: str
    span: Span | None  # None: built in (`history`)
    detail: str


@dataclass(slots=True)
class Analysis:
    diagnostics: tuple[Diagnostic, ...] = ()
    symbols: dict[str, list[Symbol]] = field(default_factory=dict)  # name -> its declarations
    keys: tuple[tuple[int, int, str], ...] = ()  # a test file's nested state keys: (start, end, field)
    test_file: bool = False


def analyse(path: str, text: str, previous: Analysis | None = None) -> Analysis:
    """Parse and check a text. Symbols come from the syntax tree; when the text does not parse,
    the previous analysis's symbols are kept so hover and completion keep working while typing."""
    from ..driver import check_source
    from ..parse import parse

    source = Source(path, text)
    try:
        tree = parse(source)
    except ZcError as exc:
        return Analysis(exc.diagnostics or (_whole_file(path, str(exc)),),
                        previous.symbols if previous else {})
    try:
        diagnostics = check_source(source).diagnostics
    except ZcError as exc:
        diagnostics = exc.diagnostics or (_whole_file(path, str(exc)),)
    return Analysis(tuple(diagnostics), _symbols(tree))


def analyse_suite(path: str, text: str, previous: Analysis | None = None) -> Analysis:
    """A `zc test` file being edited: its validation error, or one diagnostic per failing case
    (at the case, with the differences), run against the policy as saved on disk. Its symbols are
    the policy's, so hover, definitions and completion name the policy's actions and fields."""
    from ..testing import load_suite, run_case

    source = Source(path, text)
    kept = previous.symbols if previous else {}
    try:
        suite = load_suite(path, text)
        compiled = _compiled(suite.policy)
    except ZcError as exc:
        m = re.match(re.escape(path) + r":(\d+):(\d+): (.*)", str(exc), re.S)
        if m is None:
            return Analysis((_whole_file(path, exc.render().removeprefix("error: ")),), kept, test_file=True)
        start = _offset(source, int(m.group(1)), int(m.group(2)))
        return Analysis((Diagnostic("test-file", "error", m.group(3), Span(source, start, start + 1)),),
                        kept, test_file=True)
    out = []
    for i, (case, line) in enumerate(zip(suite.cases, suite.lines)):
        result = run_case(compiled, case, f"$.cases[{i}]")
        if not result.passed:  # at the wrong value when the case itself is wrong, else at the case
            m = re.search(r":(\d+):(\d+)$", suite.where(result.at)) if result.at else None
            start = _offset(source, int(m.group(1)), int(m.group(2))) if m else _offset(source, line or 1, 1)
            end = text.find("\n", start)
            out.append(Diagnostic("test", "error", f"case `{case.name}` fails:\n" + "\n".join(result.diff),
                                  Span(source, start, len(text) if end < 0 else end)))
    return Analysis(tuple(out), _symbols(compiled.checked.policy),
                    _state_keys(suite.node, set(compiled.checked.fields)), test_file=True)


_COMPILED: dict = {}  # policy path -> (its stat, compiled): compiled again only when saved again


def _compiled(path):
    """The policy a test file tests, compiled once per saved version (not once per keystroke)."""
    from ..testing import compile_policy

    try:
        st = os.stat(path)
        stamp = (st.st_mtime_ns, st.st_size, st.st_ino)
    except OSError:
        stamp = None
    key = str(Path(path).resolve())
    hit = _COMPILED.get(key)
    if stamp is not None and hit is not None and hit[0] == stamp:
        return hit[1]
    compiled = compile_policy(path)  # a ZcError (policy with errors, unreadable) is not cached
    if stamp is not None:
        _COMPILED[key] = (stamp, compiled)
    return compiled


def _state_keys(node, fields: set[str]) -> tuple[tuple[int, int, str], ...]:
    """Where each case's state names a field by its nested keys (`user: {role: …}` is `user.role`)."""
    import yaml

    out = []
    cases = next((v for k, v in getattr(node, "value", ()) if getattr(k, "value", None) == "cases"), None)
    stack = [(v, "") for case in getattr(cases, "value", ()) if isinstance(case, yaml.MappingNode)
             for k, v in case.value if k.value == "state"]
    while stack:
        n, prefix = stack.pop()
        if not isinstance(n, yaml.MappingNode):
            continue
        for k, v in n.value:
            if not isinstance(k, yaml.ScalarNode):
                continue
            path = prefix + str(k.value)
            if path in fields:
                out.append((k.start_mark.index, k.end_mark.index, path))
            stack.append((v, path + "."))
    return tuple(sorted(out))


def _offset(source: Source, line: int, col: int) -> int:
    starts = [0] + [i + 1 for i, ch in enumerate(source.text) if ch == "\n"]
    return min(starts[min(line, len(starts)) - 1] + col - 1, len(source.text))


def _whole_file(path: str, message: str) -> Diagnostic:
    return Diagnostic("ZC0000", "error", message, None, path=path)


def _one_line(span: Span | None) -> str:
    text = span.text if span else ""
    return " ".join(re.sub(r"#[^\n]*", "", text).split())


def _symbols(tree: A.Policy) -> dict[str, list[Symbol]]:
    out: dict[str, list[Symbol]] = {}

    def add(kind: str, name: str, span: Span | None, detail: str) -> None:
        out.setdefault(name, []).append(Symbol(kind, name, span, detail))

    for f in tree.fields:
        add("field", f.path.text, f.path.span, "state field: " + _one_line(f.span))
    add("field", "history", None, HISTORY)
    tags: dict[str, list[str]] = {}
    for a in tree.actions:
        add("action", a.name.text, a.name.span, _one_line(a.span))
        for param in a.params or ():  # `args.NAME` in a rule reads this argument of the call
            add("argument", f"args.{param.name.text}", param.name.span,
                f"argument of `{a.name.text}`: {_one_line(param.span)}")
        for t in a.tags:
            tags.setdefault(t.text, []).append(a.name.text)
    for tag, actions in tags.items():
        first = next(t for a in tree.actions for t in a.tags if t.text == tag)
        add("tag", tag, first.span, f"tag `{tag}`: " + ", ".join(f"`{a}`" for a in actions))
    for i in tree.intents:
        add("intent", i.name.text, i.name.span, _one_line(i.span))
    for r in tree.rules:
        add("rule", r.name.text, r.name.span, _one_line(r.span))
    for t in tree.tiers:
        add("tier", t.name.text, t.name.span, _one_line(t.span))
    return out


def word_at(text: str, offset: int) -> tuple[str, int, int] | None:
    """The dotted name under (or just before) a character offset: (word, start, end)."""
    line_start = text.rfind("\n", 0, offset) + 1
    line_end = text.find("\n", offset)
    line = text[line_start : len(text) if line_end < 0 else line_end]
    if "#" in line[: offset - line_start]:
        return None  # inside a comment
    for m in _WORD.finditer(line):
        if m.start() <= offset - line_start <= m.end():
            return m.group(), line_start + m.start(), line_start + m.end()
    return None


def lookup(analysis: Analysis, text: str, offset: int) -> list[Symbol]:
    """The declarations of the name under the cursor (in a test file, of the field a nested state
    key stands for)."""
    for start, end, path in analysis.keys:
        if start <= offset <= end:
            return analysis.symbols.get(path, [])
    hit = word_at(text, offset)
    return analysis.symbols.get(hit[0], []) if hit else []
