"""Parsing: Lark (LALR) over grammar/zc.lark, then a Transformer to the frozen AST."""

from __future__ import annotations

import functools
import gc
import re
from importlib import resources

import lark
from lark import Token, Transformer, v_args

from . import ast as A
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


@functools.cache
def _parser() -> lark.Lark:
    grammar = resources.files("zcompile.grammar").joinpath("zc.lark").read_text("utf-8")
    return lark.Lark(grammar, parser="lalr", lexer="basic", propagate_positions=True, cache=True,
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
    enabled = gc.isenabled()
    gc.disable()  # the parse allocates millions of small objects and frees none: skip the GC passes
    try:
        return _parse(source)
    finally:
        if enabled:
            gc.enable()


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
    diags: list[Diagnostic] = []
    work = text
    while True:
        try:
            tree = _parser().parse(work)
            break
        except lark.exceptions.UnexpectedInput as exc:
            diag, pos = _syntax_error(source, exc)
            diags.append(diag)
            blanked = _blank_declaration(work, pos) if len(text) <= RECOVER_BYTES else None
            if blanked is None or len(diags) >= MAX_SYNTAX_ERRORS:
                break
            work = blanked
    if diags:
        raise ZcError("syntax error", diags)
    _check_depth(source, tree)
    to_ast = _ToAst(source)
    policy = to_ast.transform(tree)
    if to_ast.diags:
        raise ZcError("syntax error", to_ast.diags)
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


@v_args(inline=True, meta=True)
class _ToAst(Transformer):
    def __init__(self, source: Source) -> None:
        super().__init__(visit_tokens=False)
        self.src = source
        self.diags: list[Diagnostic] = []  # bad literals: reported together after the transform

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

    def _span(self, meta) -> Span:
        return Span(self.src, meta.start_pos, meta.end_pos)

    def _tok(self, tok: Token) -> Span:
        return Span(self.src, tok.start_pos, tok.end_pos)

    def __default__(self, data, children, meta):  # noqa: D105 - guard against leaking trees
        raise AssertionError(f"grammar rule {data!r} has no AST transform")

    # names and literals
    def name(self, meta, tok):
        return A.Ident(text=str(tok), span=self._tok(tok))

    path = name

    def ref(self, meta, ident):
        return A.Name(path=ident.text, span=ident.span)

    def int_(self, meta, tok):
        value = int(tok) if len(tok) <= 20 else MAX_INT + 1  # no 4,300-digit conversion
        return A.LitNum(value=self._number(tok, value), span=self._tok(tok))

    def float_(self, meta, tok):
        return A.LitNum(value=self._number(tok, float(tok)), span=self._tok(tok))

    def true(self, meta, tok=None):
        return A.LitBool(value=True, span=self._span(meta))

    def false(self, meta, tok=None):
        return A.LitBool(value=False, span=self._span(meta))

    def member(self, meta, ident):
        return A.LitMember(name=ident, span=ident.span)

    def string(self, meta, tok):
        return A.LitString(value=self._unquote(tok), span=self._tok(tok))

    def neg(self, meta, operand):
        if isinstance(operand, A.LitNum):
            return A.LitNum(value=-operand.value, span=self._span(meta))
        return A.Neg(operand=_expr(operand), span=self._span(meta))

    def set_lit(self, meta, *items):
        return A.LitSet(items=tuple(i for i in items if i is not None), span=self._span(meta))

    # state
    def start(self, meta, head, *items):
        by = {k: [] for k in ("fields", "actions", "fallbacks", "intents", "rules", "tiers", "routes")}
        for item in items:
            if isinstance(item, tuple):
                by["fields"].extend(item)
            else:
                by[_KIND[type(item)]].append(item)
        return A.Policy(name=head, span=self._span(meta), **{k: tuple(v) for k, v in by.items()})

    def policy_decl(self, meta, ident):
        return ident

    def state_block(self, meta, *fields):
        return tuple(fields)

    def field_decl(self, meta, path, type_ref, *rest):
        optional = any(isinstance(r, Token) for r in rest)
        default = next((r for r in rest if not isinstance(r, Token)), None)
        return A.FieldDecl(path=path, type=type_ref, optional=optional, default=default,
                           span=self._span(meta))

    def default(self, meta, lit):
        return lit

    def enum_type(self, meta, *members):
        return A.EnumType(members=members, span=self._span(meta))

    def scalar_type(self, meta, tok):
        return A.ScalarType(kind=str(tok), span=self._span(meta))

    def set_type(self, meta):
        return A.SetType(span=self._span(meta))

    # actions, fallback, intents
    def action_decl(self, meta, name, *rest):
        tags, cost, desc, params = (), None, None, None
        for r in rest:
            if isinstance(r, _Params):
                params = r.params
            elif isinstance(r, tuple):
                tags = r
            elif isinstance(r, A.LitNum):
                cost = r
            else:
                desc = r.value
        return A.ActionDecl(name=name, params=params, tags=tags, cost=cost, description=desc,
                            span=self._span(meta))

    def params(self, meta, *params):
        return _Params(tuple(p for p in params if p is not None))

    def param_name(self, meta, tok):
        if isinstance(tok, A.Ident):
            return tok
        return A.Ident(text=str(tok), span=self._tok(tok))

    def param(self, meta, name, type_ref, *optional):
        return A.Param(name=name, type=type_ref, optional=bool(optional), span=self._span(meta))

    def list_type(self, meta):
        return A.ListType(span=self._span(meta))

    def tags(self, meta, *names):
        return tuple(names)

    def cost(self, meta, num):
        return num

    def description(self, meta, tok):
        return A.LitString(value=self._unquote(tok), span=self._tok(tok))

    def fallback_decl(self, meta, name):
        return A.FallbackDecl(action=name, span=self._span(meta))

    def intent_decl(self, meta, name, *rest):
        desc = self._unquote(rest[0]) if len(rest) == 2 else None
        return A.IntentDecl(name=name, description=desc, allow=rest[-1], span=self._span(meta))

    def path_list(self, meta, *names):
        return tuple(names)

    name_list = path_list

    # rules
    def rule_decl(self, meta, name, body):
        kind, target, cond, after = body
        return A.RuleDecl(name=name, kind=kind, target=target, cond=cond, after=after,
                          span=self._span(meta))

    def requires(self, meta, target, cond):
        return ("requires", target, _expr(cond), ())

    def forbid_when(self, meta, target, cond):
        return ("forbid_when", target, _expr(cond), ())

    def forbid_unless(self, meta, target, cond):
        return ("forbid_unless", target, _expr(cond), ())

    def after(self, meta, target, names):
        return ("after", target, None, names)

    def target_actions(self, meta, names):
        return A.TargetActions(names=names, span=self._span(meta))

    def target_tags(self, meta, tags):
        return A.TargetTags(tags=tags, span=self._span(meta))

    def target_all(self, meta):
        return A.TargetAll(span=self._span(meta))

    # tiers and routes
    def tier_decl(self, meta, name, *opts):
        values = dict(opts)
        return A.TierDecl(name=name, max_ms=values.get("max_ms"), cost=values.get("cost"),
                          span=self._span(meta))

    def max_ms(self, meta, num):
        return ("max_ms", num)

    def tier_cost(self, meta, num):
        return ("cost", num)

    def route_decl(self, meta, name, *rest):
        when = _expr(rest[0]) if len(rest) == 2 else None
        return A.RouteDecl(name=name, when=when, tiers=rest[-1], span=self._span(meta))

    # expressions
    def or_(self, meta, *operands):
        return A.Or(operands=tuple(map(_expr, operands)), span=self._span(meta))

    def and_(self, meta, *operands):
        return A.And(operands=tuple(map(_expr, operands)), span=self._span(meta))

    def not_(self, meta, operand):
        return A.Not(operand=_expr(operand), span=self._span(meta))

    def compare(self, meta, left, op, right):
        return A.Compare(op=str(op), left=_expr(left), right=_expr(right), span=self._span(meta))

    def in_lit(self, meta, operand, items, negated=False):
        return A.InLit(operand=_expr(operand), items=tuple(map(_expr, items.items)),
                       negated=negated, span=self._span(meta))

    def not_in_lit(self, meta, operand, items):
        return self.in_lit(meta, operand, items, True)

    def in_field(self, meta, operand, path, negated=False):
        return A.InField(operand=_expr(operand), field=A.Name(path=path.text, span=path.span),
                         negated=negated, span=self._span(meta))

    def not_in_field(self, meta, operand, path):
        return self.in_field(meta, operand, path, True)

    def _arith(self, op, meta, left, right):
        return A.Arith(op=op, left=_expr(left), right=_expr(right), span=self._span(meta))

    def add(self, meta, left, right):
        return self._arith("+", meta, left, right)

    def sub(self, meta, left, right):
        return self._arith("-", meta, left, right)

    def mul(self, meta, left, right):
        return self._arith("*", meta, left, right)

    def self_(self, meta):
        return A.SelfRef(span=self._span(meta))

    def cost_ref(self, meta):
        return A.CostRef(span=self._span(meta))

    def call(self, meta, func, operand):
        return A.Call(func=func, operand=_expr(operand), span=self._span(meta))


class _Params:
    """An action's signature on its way into ActionDecl (told apart from the tags tuple)."""

    __slots__ = ("params",)

    def __init__(self, params: tuple[A.Param, ...]) -> None:
        self.params = params


_KIND = {
    A.ActionDecl: "actions", A.FallbackDecl: "fallbacks", A.IntentDecl: "intents",
    A.RuleDecl: "rules", A.TierDecl: "tiers", A.RouteDecl: "routes",
}


def _expr(node):
    """Literals in expression position become expression nodes."""
    if isinstance(node, A.LitNum):
        return A.Num(value=node.value, span=node.span)
    if isinstance(node, A.LitBool):
        return A.Bool(value=node.value, span=node.span)
    if isinstance(node, (A.Ident, A.LitMember)):
        ident = node if isinstance(node, A.Ident) else node.name
        return A.Name(path=ident.text, span=ident.span)
    return node

