"""Parsing: Lark (LALR) over grammar/zc.lark, building the frozen AST as it reduces."""

from __future__ import annotations

import functools
import re
import threading
from importlib import resources

import lark
from lark import Token, Transformer
from lark.lexer import Lexer

from . import ast as A
from . import ir
from .errors import Diagnostic, ZcError
from .ir import MAX_DEPTH, MAX_FLOAT, MAX_INT
from .source import Source, Span

MAX_SYNTAX_ERRORS = 20
MAX_POLICY_BYTES = 8 * 1024 * 1024  # larger policies are refused (about 50,000 rules, a minute to compile)
RECOVER_BYTES = 1 << 20  # larger files report their first syntax error only (each retry re-parses)
_DECL = re.compile(r"^[ \t]*(state(?=\s*\{)|action|fallback|intent|rule|tier|route)\b", re.M)
# the grammar's expression operators: each is one level of nesting (MAX_DEPTH, ZC0006)
_OPERATORS = frozenset({"or_", "and_", "not_", "compare", "in_lit", "not_in_lit", "in_field",
                        "not_in_field", "add", "sub", "mul", "neg", "call"})
_ESCAPES = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}
_STRING_PART = re.compile(r'\\u([0-9a-fA-F]{4})|\\(.)|([\x00-\x1f\x7f])', re.S)

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


@functools.cache
def _parser() -> lark.Lark:
    """The parser: its reductions call _BUILDER, which makes the AST nodes (no parse tree); every token
    is kept for them, so spans run from a rule's first token to its last."""
    return lark.Lark(_grammar(), parser="lalr", lexer=_Lexer, keep_all_tokens=True, cache=True,
                     maybe_placeholders=False, transformer=_BUILDER)


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


@functools.cache
def _tree_parser() -> lark.Lark:
    """The same grammar building lark's parse tree: only to locate a ZC0006 nesting error."""
    return lark.Lark(_grammar(), parser="lalr", lexer="basic", propagate_positions=True, cache=True,
                     maybe_placeholders=False)


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
            too_deep, literal_diags = _BUILDER.too_deep, _BUILDER.diags
        finally:
            _BUILDER.reset(None)
    if too_deep:
        _check_depth(source, _tree_parser().parse(text))
    if literal_diags:
        raise ZcError("syntax error", literal_diags)
    return policy


def _parse_locked(source: Source) -> A.Policy:
    diags: list[Diagnostic] = []
    work = source.text
    while True:
        _BUILDER.reset(source)
        try:
            policy = _parser().parse(work)
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


def _check_depth(source: Source, tree: lark.Tree) -> None:
    """ZC0006 when more than MAX_DEPTH operators nest (parentheses alone are no level)."""
    stack = [(tree, 0)]
    while stack:
        node, depth = stack.pop()
        depth += node.data in _OPERATORS
        if depth > MAX_DEPTH:
            meta = node.meta
            raise ZcError("syntax error", [Diagnostic(
                "ZC0006", "error", f"expression nested more than {MAX_DEPTH} levels deep",
                Span(source, meta.start_pos, meta.end_pos), "split it into smaller rules")])
        stack.extend((c, depth) for c in node.children if isinstance(c, lark.Tree))


class _Part:
    """A value on its way into a node, with the text it came from: a clause, a list, or a
    parenthesised expression (whose parentheses belong to the enclosing node's span, not its own)."""

    __slots__ = ("value", "start", "end")

    def __init__(self, value, start: int, end: int) -> None:
        self.value, self.start, self.end = value, start, end


class _Params(_Part):
    """An action's signature (told apart from the tags tuple)."""

    __slots__ = ()


def _lo(v) -> int:
    if type(v) is Token:
        return v.start_pos
    return v.start if isinstance(v, _Part) else v.span.start


def _hi(v) -> int:
    if type(v) is Token:
        return v.end_pos
    return v.end if isinstance(v, _Part) else v.span.end


def _items(children) -> tuple:
    """The values of a list, without its punctuation tokens."""
    return tuple(c for c in children if type(c) is not Token)


class _Builder(Transformer):
    """The AST built as the LALR parser reduces (lark's `transformer=`): each method gets a rule's
    children, every token kept, and a node's span runs from its first token to its last."""

    def __init__(self) -> None:
        super().__init__(visit_tokens=False)
        self.reset(None)

    def reset(self, source: Source | None) -> None:
        self.src = source
        self.diags: list[Diagnostic] = []  # bad literals: reported together after the parse
        self.depths: dict[int, tuple[int, object]] = {}  # id(node) -> (operators nested in it, node)
        self.too_deep = False

    def __default__(self, data, children, meta):  # noqa: D105
        if data.startswith("_"):  # lark's own rules for `*` and `+`, spliced into their parent
            return lark.Tree(data, children)
        raise AssertionError(f"grammar rule {data!r} has no AST transform")  # guard against leaking trees

    def _span(self, c) -> Span:
        return Span(self.src, _lo(c[0]), _hi(c[-1]))

    def _tok(self, tok: Token) -> Span:
        return Span(self.src, tok.start_pos, tok.end_pos)

    def _depth(self, node, operands):
        """Record how many operators nest in `node` (an operator): ZC0006 past MAX_DEPTH."""
        depths = self.depths
        most = 0
        for o in operands:
            if type(o) is _Part:
                o = o.value
            d = depths.get(id(o))
            if d is not None and d[0] > most:
                most = d[0]
        depths[id(node)] = (most + 1, node)  # the node is kept alive so its id stays its own
        if most >= MAX_DEPTH:
            self.too_deep = True
        return node

    def _bad(self, code: str, msg: str, tok: Token, help: str) -> None:
        self.diags.append(Diagnostic(code, "error", msg, self._tok(tok), help))

    def _number(self, tok: Token, value):
        if isinstance(value, float) and not -MAX_FLOAT <= value <= MAX_FLOAT:
            self._bad("ZC0008", "number literal is out of range", tok,
                      f"numbers are finite, at most {MAX_FLOAT:.6g} in magnitude")
            return 0
        if isinstance(value, int) and value > MAX_INT:
            self._bad("ZC0008", "integer literal is out of range", tok,
                      f"integers fit in 64 bits (at most {MAX_INT})")
            return 0
        return value

    def _unquote(self, tok: Token) -> str:
        """The value of a string literal (JSON escapes); ZC0007 for a bad escape or character."""
        body = str(tok)[1:-1]
        out: list[str] = []
        pos = 0
        for m in _STRING_PART.finditer(body):
            out.append(body[pos:m.start()])
            pos = m.end()
            hexa, esc, raw = m.groups()
            if hexa is not None:
                out.append(chr(int(hexa, 16)))
            elif esc is not None and esc in _ESCAPES:
                out.append(_ESCAPES[esc])
            else:
                shown = f"\\{esc}" if esc is not None else f"U+{ord(raw):04X}"
                what = "escape" if esc is not None else "control character"
                self._bad("ZC0007", f"invalid {what} `{shown}` in a string", tok,
                          "escapes are \\\" \\\\ \\/ \\b \\f \\n \\r \\t and \\uXXXX; "
                          "write control characters as \\uXXXX")
                return ""
        out.append(body[pos:])
        try:  # joins escaped surrogate pairs; refuses an unpaired one
            return "".join(out).encode("utf-16", "surrogatepass").decode("utf-16")
        except UnicodeDecodeError:
            self._bad("ZC0007", "unpaired surrogate escape in a string", tok,
                      "a `\\uD800`-`\\uDBFF` escape must be followed by a `\\uDC00`-`\\uDFFF` one")
            return ""

    # names and literals
    def name(self, c):  # a NAME, or a soft keyword used as one
        tok = c[0]
        return A.Ident(text=str(tok), span=Span(self.src, tok.start_pos, tok.end_pos))

    path = name

    def ref(self, c):
        ident = c[0]
        return A.Name(path=ident.text, span=ident.span)

    def int_(self, c):
        tok = c[0]
        value = int(tok) if len(tok) <= 20 else MAX_INT + 1  # no 4,300-digit conversion
        return A.LitNum(value=self._number(tok, value), span=self._tok(tok))

    def float_(self, c):
        tok = c[0]
        return A.LitNum(value=self._number(tok, float(tok)), span=self._tok(tok))

    def true(self, c):
        return A.LitBool(value=True, span=self._tok(c[0]))

    def false(self, c):
        return A.LitBool(value=False, span=self._tok(c[0]))

    def member(self, c):
        ident = c[0]
        return A.LitMember(name=ident, span=ident.span)

    def string(self, c):
        return A.LitString(value=self._unquote(c[0]), span=self._tok(c[0]))

    def neg(self, c):  # "-" operand
        operand = c[1].value if type(c[1]) is _Part else c[1]
        if isinstance(operand, A.LitNum):
            node = A.LitNum(value=-operand.value, span=self._span(c))
        else:
            node = A.Neg(operand=_expr(operand), span=self._span(c))
        return self._depth(node, (operand,))

    def set_lit(self, c):  # "{" items "}"
        node = A.LitSet(items=_items(c[1:-1]), span=self._span(c))
        if any(id(i) in self.depths for i in node.items):  # a negated number: one operator deep
            self.depths[id(node)] = (1, node)
        return node

    def atom(self, c):  # "(" expr ")": parentheses are no node
        inner = c[1].value if type(c[1]) is _Part else c[1]
        return _Part(inner, c[0].start_pos, c[2].end_pos)

    # state
    def start(self, c):  # policy_decl item*
        by = {k: [] for k in ("fields", "actions", "fallbacks", "intents", "rules", "tiers", "routes")}
        for item in c[1:]:
            if type(item) is _Part:  # a state block
                by["fields"].extend(item.value)
            else:
                by[_KIND[type(item)]].append(item)
        return A.Policy(name=c[0].value, span=self._span(c), **{k: tuple(v) for k, v in by.items()})

    def policy_decl(self, c):
        return _Part(c[1], c[0].start_pos, _hi(c[1]))

    def state_block(self, c):  # "state" "{" field_decl* "}"
        return _Part(tuple(c[2:-1]), c[0].start_pos, c[-1].end_pos)

    def field_decl(self, c):  # path ":" type_ref OPTIONAL? default?
        rest = c[3:]
        optional = any(type(r) is Token for r in rest)
        default = next((r.value for r in rest if type(r) is not Token), None)
        return A.FieldDecl(path=c[0], type=c[2], optional=optional, default=default, span=self._span(c))

    def default(self, c):  # "=" literal
        return _Part(c[1], c[0].start_pos, _hi(c[1]))

    def enum_type(self, c):  # "enum" "(" names ")"
        return A.EnumType(members=_items(c[2:-1]), span=self._span(c))

    def scalar_type(self, c):
        return A.ScalarType(kind=str(c[0]), span=self._tok(c[0]))

    def set_type(self, c):
        return A.SetType(span=self._span(c))

    # actions, fallback, intents
    def action_decl(self, c):  # "action" path params? tags? cost? description?
        tags, cost, desc, params = (), None, None, None
        for r in c[2:]:
            if type(r) is _Params:
                params = r.value
            elif type(r) is A.LitString:
                desc = r.value
            elif type(r.value) is tuple:
                tags = r.value
            else:
                cost = r.value
        return A.ActionDecl(name=c[1], params=params, tags=tags, cost=cost, description=desc,
                            span=self._span(c))

    def params(self, c):  # "(" params ")"
        return _Params(_items(c[1:-1]), c[0].start_pos, c[-1].end_pos)

    def param_name(self, c):
        tok = c[0]
        if isinstance(tok, A.Ident):
            return tok
        return A.Ident(text=str(tok), span=self._tok(tok))

    def param(self, c):  # param_name ":" arg_type OPTIONAL?
        return A.Param(name=c[0], type=c[2], optional=len(c) == 4, span=self._span(c))

    def list_type(self, c):
        return A.ListType(span=self._span(c))

    def tags(self, c):  # "tags" "(" names ")"
        return _Part(_items(c[2:-1]), c[0].start_pos, c[-1].end_pos)

    def cost(self, c):  # "cost" number
        return _Part(c[1], c[0].start_pos, _hi(c[1]))

    def description(self, c):
        return A.LitString(value=self._unquote(c[0]), span=self._tok(c[0]))

    def fallback_decl(self, c):
        return A.FallbackDecl(action=c[1], span=self._span(c))

    def intent_decl(self, c):  # "intent" name STRING? "{" "allow" path_list "}"
        desc = self._unquote(c[2]) if len(c) == 7 else None
        return A.IntentDecl(name=c[1], description=desc, allow=c[-2].value, span=self._span(c))

    def path_list(self, c):
        return _Part(_items(c), _lo(c[0]), _hi(c[-1]))

    name_list = path_list

    # rules
    def rule_decl(self, c):  # "rule" name ":" rule_body
        kind, target, cond, after = c[3].value
        return A.RuleDecl(name=c[1], kind=kind, target=target, cond=cond, after=after,
                          span=self._span(c))

    def requires(self, c):  # target "requires" expr
        return _Part(("requires", c[0], _expr(c[2]), ()), _lo(c[0]), _hi(c[2]))

    def forbid_when(self, c):  # "forbid" target "when" expr
        return _Part(("forbid_when", c[1], _expr(c[3]), ()), c[0].start_pos, _hi(c[3]))

    def forbid_unless(self, c):  # "forbid" target "unless" expr
        return _Part(("forbid_unless", c[1], _expr(c[3]), ()), c[0].start_pos, _hi(c[3]))

    def after(self, c):  # target "after" path_list
        return _Part(("after", c[0], None, c[2].value), _lo(c[0]), _hi(c[2]))

    def target_actions(self, c):
        part = c[0]
        return A.TargetActions(names=part.value, span=Span(self.src, part.start, part.end))

    def target_tags(self, c):
        part = c[0]
        return A.TargetTags(tags=part.value, span=Span(self.src, part.start, part.end))

    def target_all(self, c):
        return A.TargetAll(span=self._tok(c[0]))

    # tiers and routes
    def tier_decl(self, c):  # "tier" name tier_opt*
        values = dict(opt.value for opt in c[2:])
        return A.TierDecl(name=c[1], max_ms=values.get("max_ms"), cost=values.get("cost"),
                          text=values.get("text"), span=self._span(c))

    def max_ms(self, c):
        return _Part(("max_ms", c[1]), c[0].start_pos, _hi(c[1]))

    def tier_cost(self, c):
        return _Part(("cost", c[1]), c[0].start_pos, _hi(c[1]))

    def tier_text(self, c):
        return _Part(("text", A.LitBool(value=True, span=self._tok(c[0]))), c[0].start_pos, c[0].end_pos)

    def route_decl(self, c):  # "route" name ":" ("when" expr)? "use" name_list
        when = _expr(c[4]) if len(c) == 7 else None
        return A.RouteDecl(name=c[1], when=when, tiers=c[-1].value, span=self._span(c))

    # expressions
    def or_(self, c):  # operand ("or" operand)+
        operands = c[::2]
        return self._depth(A.Or(operands=tuple(map(_expr, operands)), span=self._span(c)), operands)

    def and_(self, c):
        operands = c[::2]
        return self._depth(A.And(operands=tuple(map(_expr, operands)), span=self._span(c)), operands)

    def not_(self, c):
        return self._depth(A.Not(operand=_expr(c[1]), span=self._span(c)), c[1:])

    def compare(self, c):  # left CMP right
        node = A.Compare(op=str(c[1]), left=_expr(c[0]), right=_expr(c[2]), span=self._span(c))
        return self._depth(node, (c[0], c[2]))

    def in_lit(self, c):  # operand "not"? "in" set_lit
        items = c[-1]
        node = A.InLit(operand=_expr(c[0]), items=tuple(map(_expr, items.items)),
                       negated=len(c) == 4, span=self._span(c))
        return self._depth(node, (c[0], items))

    not_in_lit = in_lit

    def in_field(self, c):  # operand "not"? "in" path
        path = c[-1]
        node = A.InField(operand=_expr(c[0]), field=A.Name(path=path.text, span=path.span),
                         negated=len(c) == 4, span=self._span(c))
        return self._depth(node, (c[0],))

    not_in_field = in_field

    def _arith(self, op, c):
        node = A.Arith(op=op, left=_expr(c[0]), right=_expr(c[2]), span=self._span(c))
        return self._depth(node, (c[0], c[2]))

    def add(self, c):
        return self._arith("+", c)

    def sub(self, c):
        return self._arith("-", c)

    def mul(self, c):
        return self._arith("*", c)

    def self_(self, c):
        return A.SelfRef(span=self._tok(c[0]))

    def cost_ref(self, c):
        return A.CostRef(span=self._tok(c[0]))

    def call(self, c):  # path "(" expr ")"
        return self._depth(A.Call(func=c[0], operand=_expr(c[2]), span=self._span(c)), (c[2],))


_BUILDER = _Builder()
_LOCK = threading.Lock()

_KIND = {
    A.ActionDecl: "actions", A.FallbackDecl: "fallbacks", A.IntentDecl: "intents",
    A.RuleDecl: "rules", A.TierDecl: "tiers", A.RouteDecl: "routes",
}


def _expr(node):
    """Literals in expression position become expression nodes; parentheses are dropped."""
    if type(node) is _Part:
        node = node.value
    if isinstance(node, A.LitNum):
        return A.Num(value=node.value, span=node.span)
    if isinstance(node, A.LitBool):
        return A.Bool(value=node.value, span=node.span)
    if isinstance(node, (A.Ident, A.LitMember)):
        ident = node if isinstance(node, A.Ident) else node.name
        return A.Name(path=ident.text, span=ident.span)
    return node
