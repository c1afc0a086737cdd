"""The post-parse transformer: lark's LALR reductions to the frozen AST, spans and literals checked.

A token reaches it as a plain tuple `(text, start, end)` (character offsets): the parser makes one
a token, millions for a large policy, and a tuple is the cheapest object that carries them."""

from __future__ import annotations

import re

from lark import Transformer

from . import ast as A
from .errors import Diagnostic
from .ir import MAX_DEPTH, MAX_FLOAT, MAX_INT
from .kinds import FieldKind, RuleKind
from .source import Source, Span

_ESCAPES = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}
_STRING_PART = re.compile(r'\\u([0-9a-fA-F]{4})|\\(.)|([\x00-\x1f\x7f])', re.S)


class _Part:
    """A value on its way into a node, with the text it came from: a clause, a list, or a
    parenthesised expression (whose parentheses belong to the enclosing node's span, not its own)."""

    __slots__ = ("value", "start", "end")

    def __init__(self, value, start: int, end: int) -> None:
        self.value, self.start, self.end = value, start, end


class _Params(_Part):
    """An action's signature (told apart from the tags tuple)."""

    __slots__ = ()


Tok = tuple  # a token: (text, start, end)
# the nodes made most often, made from their fields in order (`make`: no keyword arguments to match)
_Ident, _Name, _Num = A.maker(A.Ident), A.maker(A.Name), A.maker(A.Num)
_LitNum, _LitMember = A.maker(A.LitNum), A.maker(A.LitMember)
_ActionDecl, _RuleDecl, _TargetActions = A.maker(A.ActionDecl), A.maker(A.RuleDecl), A.maker(A.TargetActions)
_Compare, _InLit = A.maker(A.Compare), A.maker(A.InLit)


def _lo(v) -> int:
    if type(v) is Tok:
        return v[1]
    return v.start if isinstance(v, _Part) else v.span.start


def _hi(v) -> int:
    if type(v) is Tok:
        return v[2]
    return v.end if isinstance(v, _Part) else v.span.end


def _items(children) -> tuple:
    """The values of a list, without its punctuation tokens."""
    return tuple([c for c in children if type(c) is not Tok])


class Builder(Transformer):
    """The AST built as the LALR parser reduces: each method gets a rule's children, every token
    kept, and a node's span runs from its first token to its last. A rule without a method reaches
    `__default__`, which raises: no parse tree ever leaks into the AST."""

    def __init__(self) -> None:
        super().__init__(visit_tokens=False)
        self.reset(None)

    def reset(self, source: Source | None) -> None:
        self.src = source
        self.diags: list[Diagnostic] = []  # bad literals: reported together after the parse
        self.depths: dict[int, tuple[int, object]] = {}  # id(node) -> (operators nested in it, node)
        self.too_deep = False

    def __default__(self, data, children, meta):  # noqa: D105
        raise AssertionError(f"grammar rule {data!r} has no AST transform")  # guard against leaking trees

    def _span(self, c) -> Span:
        return Span(self.src, _lo(c[0]), _hi(c[-1]))

    def _tok(self, tok: Tok) -> Span:
        return Span(self.src, tok[1], tok[2])

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

    def _bad(self, code: str, msg: str, tok: Tok, help: str) -> None:
        self.diags.append(Diagnostic(code, "error", msg, self._tok(tok), help))

    def _number(self, tok: Tok, value):
        if isinstance(value, float) and not -MAX_FLOAT <= value <= MAX_FLOAT:
            self._bad("ZC0008", "number literal is out of range", tok,
                      f"numbers are finite, at most {MAX_FLOAT:.6g} in magnitude")
            return 0
        if isinstance(value, int) and value > MAX_INT:
            self._bad("ZC0008", "integer literal is out of range", tok,
                      f"integers fit in 64 bits (at most {MAX_INT})")
            return 0
        return value

    def _unquote(self, tok: Tok) -> str:
        """The value of a string literal (JSON escapes); ZC0007 for a bad escape or character."""
        body = tok[0][1:-1]
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
        text, start, end = c[0]
        return _Ident(text, Span(self.src, start, end))

    path = name

    def ref(self, c):
        ident = c[0]
        return _Name(ident.text, ident.span)

    def int_(self, c):
        tok = c[0]
        value = int(tok[0]) if len(tok[0]) <= 20 else MAX_INT + 1  # no 4,300-digit conversion
        return _LitNum(self._number(tok, value), self._tok(tok))

    def float_(self, c):
        tok = c[0]
        return A.LitNum(value=self._number(tok, float(tok[0])), span=self._tok(tok))

    def true(self, c):
        return A.LitBool(value=True, span=self._tok(c[0]))

    def false(self, c):
        return A.LitBool(value=False, span=self._tok(c[0]))

    def member(self, c):
        ident = c[0]
        return _LitMember(ident, ident.span)

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
        return _Part(inner, c[0][1], c[2][2])

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
        return _Part(c[1], c[0][1], _hi(c[1]))

    def state_block(self, c):  # "state" "{" field_decl* "}"
        return _Part(tuple(c[2:-1]), c[0][1], c[-1][2])

    def field_decl(self, c):  # path ":" type_ref OPTIONAL? default?
        rest = c[3:]
        optional = any(type(r) is Tok for r in rest)
        default = next((r.value for r in rest if type(r) is not Tok), None)
        return A.FieldDecl(path=c[0], type=c[2], optional=optional, default=default, span=self._span(c))

    def default(self, c):  # "=" literal
        return _Part(c[1], c[0][1], _hi(c[1]))

    def enum_type(self, c):  # "enum" "(" names ")"
        return A.EnumType(members=_items(c[2:-1]), span=self._span(c))

    def scalar_type(self, c):
        return A.ScalarType(kind=FieldKind(c[0][0]), span=self._tok(c[0]))

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
        return _ActionDecl(c[1], params, tags, cost, desc, self._span(c))

    def params(self, c):  # "(" params ")"
        return _Params(_items(c[1:-1]), c[0][1], c[-1][2])

    def param_name(self, c):
        tok = c[0]
        if isinstance(tok, A.Ident):
            return tok
        return A.Ident(text=tok[0], span=self._tok(tok))

    def param(self, c):  # param_name ":" arg_type OPTIONAL?
        return A.Param(name=c[0], type=c[2], optional=len(c) == 4, span=self._span(c))

    def list_type(self, c):
        return A.ListType(span=self._span(c))

    def tags(self, c):  # "tags" "(" names ")"
        return _Part(_items(c[2:-1]), c[0][1], c[-1][2])

    def cost(self, c):  # "cost" number
        return _Part(c[1], c[0][1], _hi(c[1]))

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
        return _RuleDecl(c[1], kind, target, cond, after, self._span(c))

    def requires(self, c):  # target "requires" expr
        return _Part((RuleKind.REQUIRES, c[0], _expr(c[2]), ()), _lo(c[0]), _hi(c[2]))

    def forbid_when(self, c):  # "forbid" target "when" expr
        return _Part((RuleKind.FORBID_WHEN, c[1], _expr(c[3]), ()), c[0][1], _hi(c[3]))

    def forbid_unless(self, c):  # "forbid" target "unless" expr
        return _Part((RuleKind.FORBID_UNLESS, c[1], _expr(c[3]), ()), c[0][1], _hi(c[3]))

    def after(self, c):  # target "after" path_list
        return _Part((RuleKind.AFTER, c[0], None, c[2].value), _lo(c[0]), _hi(c[2]))

    def target_actions(self, c):
        part = c[0]
        return _TargetActions(part.value, Span(self.src, part.start, part.end))

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
        return _Part(("max_ms", c[1]), c[0][1], _hi(c[1]))

    def tier_cost(self, c):
        return _Part(("cost", c[1]), c[0][1], _hi(c[1]))

    def tier_text(self, c):
        return _Part(("text", A.LitBool(value=True, span=self._tok(c[0]))), c[0][1], c[0][2])

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
        node = _Compare(c[1][0], _expr(c[0]), _expr(c[2]), self._span(c))
        return self._depth(node, (c[0], c[2]))

    def in_lit(self, c):  # operand "not"? "in" set_lit
        items = c[-1]
        node = _InLit(_expr(c[0]), tuple(map(_expr, items.items)), len(c) == 4, self._span(c))
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



_KIND = {
    A.ActionDecl: "actions", A.FallbackDecl: "fallbacks", A.IntentDecl: "intents",
    A.RuleDecl: "rules", A.TierDecl: "tiers", A.RouteDecl: "routes",
}


def _expr(node):
    """Literals in expression position become expression nodes; parentheses are dropped."""
    if type(node) is _Part:
        node = node.value
    literal = _LITERAL_EXPR.get(type(node))
    return node if literal is None else literal(node)


_LITERAL_EXPR = {  # the literals (and names) that become expressions; every other node is one already
    A.LitNum: lambda n: _Num(n.value, n.span),
    A.LitBool: lambda n: A.Bool(value=n.value, span=n.span),
    A.Ident: lambda n: _Name(n.text, n.span),
    A.LitMember: lambda n: _Name(n.name.text, n.name.span),
}
