"""Parsing: Lark (LALR) over grammar/zc.lark, its lexer, syntax errors and recovery (the AST is built by
transform.py)."""

from __future__ import annotations

import functools
import hashlib
import re
import threading
from importlib import resources
from typing import Any

import lark
import lark.grammar
import lark.lexer
import msgspec
from lark import Token
from lark.lexer import Lexer
from lark.parsers.lalr_analysis import Shift

from . import ast as A
from . import ir
from .errors import Diagnostic, ZcError
from .ir import MAX_DEPTH
from .source import Source, Span
from .transform import Builder

TABLES = "zc.tables"  # the parser's LALR tables, made from zc.lark by `tables()`
MAX_SYNTAX_ERRORS = 20
MAX_POLICY_BYTES = 8 * 1024 * 1024  # larger policies are refused (50,000 to 100,000 rules, 20 s to compile)
RECOVER_BYTES = 1 << 20  # larger files report their first syntax error only (each retry re-parses)
_DECL = re.compile(r"^[ \t]*(state(?=\s*\{)|action|fallback|intent|rule|tier|route)\b", re.M)

_TERMINAL_NAMES = {
    "NAME": "a name",
    "INT": "a number",
    "FLOAT": "a number",
    "STRING": "a string",
    "CMP": "a comparison operator",
    "OPTIONAL": "`?`",
    "TRUE": "`true`",
    "FALSE": "`false`",
    "$END": "end of file",
}


def _grammar() -> str:
    return resources.files("zcompile.grammar").joinpath("zc.lark").read_text("utf-8")


def _tables_key() -> str:
    """What the packaged tables were made from: the grammar's text and lark's version."""
    return hashlib.sha256(f"lark {lark.__version__}\n{_grammar()}".encode()).hexdigest()


@functools.cache
def _parser() -> lark.Lark:
    """The parser: `_Loop` runs its tables, calling _BUILDER's methods as it reduces (no parse tree);
    lark's own parser reports syntax errors. Every token is kept, so spans run from a rule's first
    token to its last.

    Its LALR tables come from grammar/zc.tables when that file was made from this grammar by this
    version of lark (`make tables` writes it; a test keeps it current), so a fresh process skips the
    grammar analysis without any cache directory or pickle; otherwise they are built from the grammar.
    """
    try:
        data = msgspec.msgpack.decode(resources.files("zcompile.grammar").joinpath(TABLES).read_bytes())
    except (OSError, msgspec.DecodeError):
        data = None
    if isinstance(data, dict) and data.get("key") == _tables_key():
        data["data"]["options"]["lexer"] = data["data"]["parser"]["lexer_conf"]["lexer_type"] = _Lexer
        return lark.Lark._load_from_dict(data["data"], data["memo"])
    return _build_parser()


def _build_parser() -> lark.Lark:
    return lark.Lark(_grammar(), parser="lalr", lexer=_Lexer, keep_all_tokens=True, maybe_placeholders=False)


def tables() -> bytes:
    """The parser's tables, built from the grammar, as msgpack: the contents of grammar/zc.tables.

    Lark's own serialisation (what its standalone parser generator writes) without the Python
    objects it may hold, the lexer class (set again on load) and a transformer, and without
    the cached widths of regular expressions (recomputed on use; lark marks "unbounded" as 2**64,
    past msgpack's integers)."""
    data, memo = _build_parser().memo_serialize([lark.lexer.TerminalDef, lark.grammar.Rule])
    data["options"] = {k: v for k, v in data["options"].items() if k not in ("lexer", "transformer")}
    del data["parser"]["lexer_conf"]["lexer_type"]
    for m in memo.values():
        if m.get("__type__") == "TerminalDef" and "_width" in m["pattern"]:
            m["pattern"]["_width"] = None
    return msgspec.msgpack.encode({"key": _tables_key(), "data": data, "memo": memo})


class _Lexer(Lexer):
    """Lark's basic lexer in one regular expression match per token: lark's terminals in lark's order
    (a keyword is a NAME whose text is that keyword), with the blanks and comments before a token
    skipped in the same match (atomically: a comment is never cut short for a token to follow), and
    no line counting (spans are offsets)."""

    def __init__(self, conf) -> None:
        terminals = sorted(conf.terminals, key=lambda t: (
            -t.priority, -t.pattern.max_width, -len(t.pattern.value), t.name))  # lark's own order
        assert not any(t.pattern.flags for t in terminals), "terminal flags are not supported"
        regexes = [t for t in terminals if t.pattern.type == "re" and t.name not in conf.ignore]
        self.keywords: dict[str, dict[str, str]] = {}  # regex terminal -> its text -> string terminal
        alternatives = []
        for t in terminals:
            if t.name in conf.ignore:
                continue
            if t.pattern.type == "str":
                value = t.pattern.value
                holder = next((r for r in regexes if r.priority == t.priority and (
                    m := re.match(r.pattern.to_regexp(), value)) and m.group(0) == value), None)
                if holder is not None:
                    self.keywords.setdefault(holder.name, {})[value] = t.name
                    continue
            alternatives.append(f"(?P<{t.name}>{t.pattern.to_regexp()})")
        skip = "(?>" + "|".join(t.pattern.to_regexp() for t in terminals if t.name in conf.ignore) + ")*+"
        self.skip = re.compile(skip)
        self.token = re.compile(skip + "(?:" + "|".join(alternatives) + ")")
        self.allowed = {t.name for t in terminals if t.name not in conf.ignore}

    def lex(self, text: str):
        match, keywords, pos = self.token.match, self.keywords, 0
        while (m := match(text, pos)) is not None:
            kind = m.lastgroup
            start, pos = m.start(kind), m.end()
            value = text[start:pos]
            if kind in keywords:
                kind = keywords[kind].get(value, kind)
            yield Token(kind, value, start, None, None, None, None, pos)
        pos = self.skip.match(text, pos).end()
        if pos < len(text):
            line = text.count("\n", 0, pos) + 1
            raise lark.exceptions.UnexpectedCharacters(text, pos, line, pos - text.rfind("\n", 0, pos),
                                                       allowed=self.allowed)


class _Loop:
    """The parser's LALR tables flattened for one loop that lexes and parses a valid policy together:
    the same tables and lexer as `_parser()`, and lark's tree shaping done in the loop (its `?rule`s
    of one child inlined, its `_rule`s for `*` and `+` spliced into their parent, every token kept),
    so that the builder's methods get exactly the children lark's parse tree would give them, with
    no tree built and no lark call per token. Tokens are `(text, start, end)` tuples."""

    def __init__(self, parser: lark.Lark, builder: Builder) -> None:
        table = parser.parser.parser.parser.parse_table
        self.lexer = _Lexer(parser.lexer_conf)
        rows: dict[int, dict] = {state: {} for state in table.states}
        reductions: dict[object, tuple] = {}
        for state, row in table.states.items():
            out = rows[state]  # symbol -> the next state's row (shift, goto), or the rule to reduce
            for symbol, (action, arg) in row.items():
                if action is Shift:
                    out[symbol] = rows[arg]
                else:
                    if arg not in reductions:
                        reductions[arg] = self._reduction(arg, builder)
                    out[symbol] = reductions[arg]
        self.start, self.end = rows[table.start_states["start"]], rows[table.end_states["start"]]

    @staticmethod
    def _reduction(rule, builder: Builder) -> tuple:
        """(how to reduce, symbols, the rule's name, its reduction, the positions of `_rule` children to
        splice) as lark's tree builder shapes it. How: _UNIT inlines a `?rule`'s one child, _APPEND
        grows a left-recursive `_rule` list by its last item, _CALL (_CALL1: of one symbol) calls the
        reduction on the children, _SHAPE splices `_rule` children first and inlines a `?rule`'s
        single child."""
        splice = tuple(i for i, sym in enumerate(rule.expansion) if not sym.is_term
                       and sym.name.startswith("_"))
        single = bool(rule.options.expand1) and not rule.alias  # a `?rule`: one child is the node
        name, size = rule.origin.name, len(rule.expansion)
        if name.startswith("_"):  # lark's rule for `*` or `+`: its children go to the parent
            reduce = _same
        else:
            callback = rule.alias or rule.options.template_source or name
            reduce = getattr(builder, callback, None) or functools.partial(_unhandled, builder, callback)
        if single and size == 1 and not splice:
            how = _UNIT
        elif reduce is _same and splice == (0,) and size == 2:
            how = _APPEND
        elif splice or single or not size:
            how = _SHAPE
        else:
            how = _CALL1 if size == 1 else _CALL
        return how, size, name, reduce, splice, single

    def parse(self, text: str) -> A.Policy | None:
        """The policy, or None when `text` has a syntax error (lark's parser then reports it)."""
        match, keywords = self.lexer.token.match, self.lexer.keywords
        end_row = self.end
        rows, values, pos, token = [self.start], [], 0, None
        while True:
            m = match(text, pos)
            if m is not None:
                kind = m.lastgroup
                start, pos = m.span(kind)
                token = (text[start:pos], start, pos)
                if kind in keywords:
                    kind = keywords[kind].get(token[0], kind)
            elif self.lexer.skip.match(text, pos).end() < len(text):
                return None
            else:
                kind = "$END"
            while True:
                act = rows[-1].get(kind)
                if act is None:
                    return None
                if type(act) is dict:  # shift
                    rows.append(act)
                    values.append(token)
                    break
                how, size, name, reduce, splice, single = act
                # one symbol reduced to one (its value replaced in place, or kept), or a list grown
                # by its last item: the stacks shrink by what they take and the top state moves on
                if how is _CALL1:
                    values[-1] = reduce(values[-1:])
                elif how is _UNIT:
                    pass
                elif how is _APPEND:
                    item = values.pop()
                    values[-1].append(item)
                    rows.pop()
                else:
                    if how is _CALL:
                        node = reduce(values[-size:])
                        del rows[-size:], values[-size:]
                    else:
                        children = values[-size:] if size else []
                        if size:
                            del rows[-size:], values[-size:]
                        if splice:
                            children = _spliced(children, splice)
                        node = children[0] if single and len(children) == 1 else reduce(children)
                    goto = rows[-1][name]
                    if goto is end_row and kind == "$END":
                        return node
                    rows.append(goto)
                    values.append(node)
                    continue
                goto = rows[-2][name]
                if goto is end_row and kind == "$END":
                    return values[-1]
                rows[-1] = goto


_UNIT, _APPEND, _CALL, _CALL1, _SHAPE = "unit", "append", "call", "call1", "shape"


def _spliced(children: list, splice: tuple[int, ...]) -> list:
    """`children` with the lists at positions `splice` (lark's `_rule`s) spliced in: a left-recursive
    list (`_items: _items item`) grows in place."""
    if splice[0] == 0:
        out = children[0]
        rest = 1
    else:
        out, rest = [], 0
    for i in range(rest, len(children)):
        if i in splice:
            out.extend(children[i])
        else:
            out.append(children[i])
    return out


def _same(children: list) -> list:
    return children


def _unhandled(builder: Builder, name: str, children: list):
    return builder.__default__(name, children, None)


@functools.cache
def _loop(parser: lark.Lark) -> _Loop | None:
    """The loop over `parser`'s tables; None when this lark keeps its tables otherwise (it reads lark's
    internals, checked on the pinned version by tests/test_parse_tables.py): lark then parses alone."""
    try:
        return _Loop(parser, _BUILDER)
    except (AttributeError, KeyError, TypeError):
        return None


def _build(tree: lark.Tree) -> A.Policy:
    """The AST of lark's parse tree (when lark parses alone): the builder's methods called bottom up
    on each node's children, tokens as `(text, start, end)`, without recursion."""
    done: dict[int, object] = {}
    stack = [tree]
    while stack:
        node = stack[-1]
        pending = [c for c in node.children if isinstance(c, lark.Tree) and id(c) not in done]
        if pending:
            stack.extend(reversed(pending))
            continue
        stack.pop()
        children = [done.pop(id(c)) if isinstance(c, lark.Tree) else (str(c), c.start_pos, c.end_pos)
                    for c in node.children]
        method = getattr(_BUILDER, node.data, None)
        done[id(node)] = method(children) if method is not None else _unhandled(_BUILDER, node.data, children)
    return done[id(tree)]


def _describe_terminal(name: str) -> str:
    if name in _TERMINAL_NAMES:
        return _TERMINAL_NAMES[name]
    try:
        pattern = _parser().get_terminal(name).pattern
    except KeyError:
        return name.lower()
    return f"`{pattern.value}`" if pattern.type == "str" else name.lower()


_SOFT = {"`enum`", "`set`", "`bool`", "`int`", "`float`", "`text`", "`list`", "`allow`", "`use`",
         "`max_ms`"}


def _expected(names: set[str]) -> str:
    described = {_describe_terminal(n) for n in names}
    if "a name" in described:  # soft keywords are names there too
        described -= _SOFT
    described = sorted(described)
    if len(described) > 8:
        described = described[:8] + ["…"]
    return ", ".join(described)


def decode(path: str, data: bytes) -> Source:
    """Decode policy bytes as UTF-8 text, refusing binary input with a diagnostic."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        head = data[: exc.start]
        line, col = head.count(b"\n") + 1, exc.start - head.rfind(b"\n")
        raise ZcError(
            "not a policy file",
            [Diagnostic("ZC0005", "error", f"file is not UTF-8 text (invalid byte 0x{data[exc.start]:02x} "
                        f"at line {line}, column {col})", None, "zc policies are UTF-8 text files",
                        path=path)],
        ) from None
    if "\x00" in text:
        raise ZcError(
            "not a policy file",
            [Diagnostic("ZC0005", "error", f"file contains a NUL byte at offset {text.index(chr(0))}",
                        None, "zc policies are text files, this looks like binary data", path=path)],
        )
    return Source(path, text)


def parse(source: Source) -> A.Policy:
    """Parse a source into a Policy AST; raise ZcError with a ZC000x diagnostic on bad syntax."""
    with ir.no_gc():  # the parse allocates millions of small objects and frees none
        return _parse(source)


def _parse(source: Source) -> A.Policy:
    text = source.text
    if len(text) > MAX_POLICY_BYTES:  # characters: a bound on the bytes too, for ASCII text
        raise ZcError(f"{source.path}: policy is larger than the limit of "
                      f"{MAX_POLICY_BYTES >> 20} MB ({len(text) >> 20} MB); split it")
    if not text.strip() or all(
        not line.strip() or line.lstrip().startswith("#") for line in text.splitlines()
    ):
        raise ZcError("empty policy", [Diagnostic(
            "ZC0004", "error", "empty policy file", None,
            "a policy starts with `policy NAME`", path=source.path)])
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:  # only a str handed over by the API can hold one
        raise ZcError("not a policy file", [Diagnostic(
            "ZC0005", "error", f"text holds an unpaired surrogate at offset {exc.start}", None,
            "zc policies are UTF-8 text", path=source.path)]) from None
    with _LOCK:  # _BUILDER holds the state of one parse
        try:
            policy = _parse_locked(source)
            too_deep, literal_diags, operators = _BUILDER.too_deep, _BUILDER.diags, _BUILDER.depths
        finally:
            _BUILDER.reset(None)
    if too_deep:
        _check_depth(policy, operators)
    if literal_diags:
        raise ZcError("syntax error", literal_diags)
    return policy


def _parse_locked(source: Source) -> A.Policy:
    diags: list[Diagnostic] = []
    work = source.text
    while True:
        _BUILDER.reset(source)
        loop = _loop(_parser())
        policy = loop.parse(work) if loop is not None else None
        if policy is not None:
            break
        _BUILDER.reset(source)  # a syntax error: lark's own parser says where and what it expected
        try:
            policy = _build(_parser().parse(work))
            break
        except lark.exceptions.UnexpectedInput as exc:
            diag, pos = _syntax_error(source, exc)
            diags.append(diag)
            blanked = _blank_declaration(work, pos) if len(source.text) <= RECOVER_BYTES else None
            if blanked is None or len(diags) >= MAX_SYNTAX_ERRORS:
                break
            work = blanked
    if diags:
        raise ZcError("syntax error", diags)
    return policy


def _syntax_error(source: Source, exc: lark.exceptions.UnexpectedInput) -> tuple[Diagnostic, int]:
    text = source.text
    if isinstance(exc, lark.exceptions.UnexpectedCharacters):
        pos = exc.pos_in_stream
        accepts = _accepts_before(text, pos)
        op = text[pos : pos + 2] if text[pos : pos + 2] in _OTHER_LANGUAGES else text[pos]
        return Diagnostic(
            "ZC0002", "error", f"unexpected `{op}`" if op in _OTHER_LANGUAGES
            else f"unexpected character `{text[pos]}`", Span(source, pos, pos + len(op)),
            _OTHER_LANGUAGES.get(op) or (f"expected {_expected(accepts)}" if accepts else None)), pos
    tok = getattr(exc, "token", None)
    if isinstance(exc, lark.exceptions.UnexpectedEOF) or tok is None or tok.type == "$END":
        end = len(text.rstrip())
        expected = set(exc.expected) if exc.expected else set()
        return Diagnostic(
            "ZC0003", "error", "unexpected end of file", Span(source, max(0, end - 1), max(end, 1)),
            f"expected {_expected(expected)}" if expected else None), len(text)
    accepts = exc.interactive_parser.accepts() if exc.interactive_parser else exc.expected
    mistake = _OTHER_LANGUAGES["="] if tok.value == "=" and "CMP" in accepts else None
    if tok.type == "STRING" and "INT" in accepts:  # a string where a value is read
        mistake = ("conditions compare numbers, bools and enum members, written bare (`status == pending`); "
                   "rules cannot read `text` fields: text is for specialists")
    return Diagnostic(
        "ZC0001", "error", f"unexpected `{tok.value}`", Span(source, tok.start_pos, tok.end_pos),
        mistake or f"expected {_expected(accepts)}"), tok.start_pos


# operators of other languages, and what zc writes instead
_OTHER_LANGUAGES = {
    "&&": "write `and`", "&": "write `and`", "||": "write `or`", "|": "write `or`",
    "!": "write `not` to negate (`!=` compares)",
    "=": "compare with `==` (`=` gives a state field its default)",
}


def _accepts_before(text: str, pos: int) -> set[str]:
    """The terminals the grammar accepts at `pos`, given the text before it parsed cleanly."""
    try:
        ip = _parser().parse_interactive(text[:pos])
        ip.exhaust_lexer()
        return set(ip.accepts())
    except lark.exceptions.LarkError:
        return set()


def _blank_declaration(text: str, pos: int) -> str | None:
    """Text with the declaration holding a syntax error blanked out (offsets kept), to go on parsing.

    When the error is at the keyword opening a declaration, the broken one is the one before it.
    None when no declaration can be isolated (the error is in the `policy` header).
    """
    starts = [m.start(1) for m in _DECL.finditer(text)]
    before = [s for s in starts if s < pos]
    if not before:
        return None
    start = before[-1]
    after = [s for s in starts if s > start and s >= pos]
    end = after[0] if after else len(text)
    if start == end:
        return None
    return text[:start] + re.sub(r"[^\n]", " ", text[start:end]) + text[end:]


def parse_text(text: str, path: str = "<string>") -> A.Policy:
    return parse(Source(path, text))


def _check_depth(policy: A.Policy, operators: dict[int, Any]) -> None:
    """ZC0006 at the first operator in the source with more than MAX_DEPTH operators around and in it,
    counted from the outside in (parentheses alone are no level); `operators` holds the ids of the
    AST's operator nodes."""
    stack: list[tuple[Any, int]] = [(policy, 0)]
    while stack:
        node, depth = stack.pop()
        depth += id(node) in operators
        if depth > MAX_DEPTH:
            raise ZcError("syntax error", [Diagnostic(
                "ZC0006", "error", f"expression nested more than {MAX_DEPTH} levels deep", node.span,
                "split it into smaller rules")])
        stack.extend((c, depth) for c in reversed(tuple(A.children(node))))  # the first in the source first


_BUILDER = Builder()
_LOCK = threading.Lock()
