"""Artifact verification: the IR read from a `.zcp` is checked as strictly as the checker checks source.

An artifact whose hash was recomputed after a hand edit is still refused when its names do not
resolve, its types do not agree, its numbers are not finite or its nesting is past the limit, so
the generated evaluator only ever runs on IR the compiler could have written.
"""

from __future__ import annotations

import re

from . import ir
from .errors import ZcError
from .kinds import FieldKind, RuleKind

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_KINDS = {"bool": "bool", "int": "num", "float": "num", "set": "set", "list": "list"}
_ORDER = ("<", "<=", ">", ">=")


def verify(p: ir.PolicyIR) -> None:
    """Raise ZcError (`corrupt artifact: …`) for IR the checker would not have produced."""
    _Verifier(p).run()


def _bad(msg: str) -> ZcError:
    return ZcError(f"corrupt artifact: {msg}")


def _number(v: object) -> bool:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return False
    return -ir.MAX_INT - 1 <= v <= ir.MAX_INT if isinstance(v, int) else -ir.MAX_FLOAT <= v <= ir.MAX_FLOAT


def _unique(what: str, names) -> None:
    seen: set[str] = set()
    for n in names:
        if n in seen:
            raise _bad(f"{what} `{n}` is declared twice")
        seen.add(n)


class _Verifier:
    def __init__(self, p: ir.PolicyIR) -> None:
        self.p = p
        self.fields = {f.path: f for f in p.fields}
        self.actions = {a.name: a for a in p.actions}
        self.rule: ir.RuleDef | None = None
        # argument-free condition -> the fields it reads, entered once it typed as boolean (which
        # no rule can change): equal conditions of many rules are checked once
        self._typed: dict[ir.Expr, tuple[str, ...]] = {}

    def run(self) -> None:
        p = self.p
        if not p.actions:
            raise _bad("the policy declares no action")
        _unique("action", (a.name for a in p.actions))
        _unique("field", (f.path for f in p.fields))
        _unique("intent", (i.name for i in p.intents))
        _unique("rule", (r.name for r in p.rules))
        _unique("tier", (t.name for t in p.tiers))
        _unique("route", (r.name for r in p.routes))
        for f in p.fields:
            self._field(f)
        self._clashes()
        for a in p.actions:
            self._action(a)
        self._known(p.fallback, "the fallback")
        for i in p.intents:
            for name in i.allow:
                self._known(name, f"intent `{i.name}`")
        for r in p.rules:
            self._rule(r)
        tiers = {t.name for t in p.tiers}
        for t in p.tiers:
            for what, v in (("max_ms", t.max_ms), ("cost", t.cost)):
                if v is not None and not (_number(v) and v >= 0):
                    raise _bad(f"tier `{t.name}` has {what} {v!r} (a finite number >= 0)")
        text = [t.name for t in p.tiers if t.text]
        if len(text) > 1 or "specialist" in text:
            raise _bad(f"text tiers {', '.join(f'`{n}`' for n in text)} (at most one, and not `specialist`)")
        for route in p.routes:
            for t in route.tiers:
                if t not in tiers:
                    raise _bad(f"route `{route.name}` uses unknown tier `{t}`")
            if route.when is not None:
                self.rule = None
                self._scan(route.when, f"route `{route.name}`")
                self._typed_bool(route.when, f"route `{route.name}`")

    # ---- declarations --------------------------------------------------------------------------
    def _known(self, action: str, where: str) -> None:
        if action not in self.actions:
            raise _bad(f"{where} names unknown action `{action}`")

    def _field(self, f: ir.FieldDef) -> None:
        if not all(_NAME.fullmatch(part) for part in f.path.split(".")):
            raise _bad(f"field path `{f.path}` is not a dotted name")
        if f.kind == FieldKind.ENUM:
            if not f.members:
                raise _bad(f"enum field `{f.path}` has no members")
            _unique(f"member of `{f.path}`", f.members)
        elif f.members:
            raise _bad(f"{f.kind} field `{f.path}` lists enum members")
        if f.path == "history" and f.kind != FieldKind.SET:
            raise _bad("field `history` is not a set of actions")
        if not f.has_default:
            if f.default is not None:
                raise _bad(f"field `{f.path}` has a default but says it has none")
            return
        d = f.default
        ok = {"enum": isinstance(d, str) and d in f.members, "bool": isinstance(d, bool),
              "int": _number(d) and isinstance(d, int), "float": _number(d),
              "text": isinstance(d, str),
              "set": isinstance(d, tuple) and all(x in self.actions for x in d)}[f.kind]
        if not ok:
            raise _bad(f"default of `{f.path}` is not a {f.kind} value")

    def _clashes(self) -> None:
        paths = set(self.fields)
        for path in paths:
            parts = path.split(".")
            for i in range(1, len(parts)):
                if ".".join(parts[:i]) in paths:
                    raise _bad(f"field `{'.'.join(parts[:i])}` clashes with field `{path}`")

    def _action(self, a: ir.ActionDef) -> None:
        if not _number(a.cost):
            raise _bad(f"action `{a.name}` has cost {a.cost!r} (a finite number)")
        if a.params is None:
            return
        _unique(f"argument of `{a.name}`", (prm.name for prm in a.params))
        for prm in a.params:
            if (prm.kind == FieldKind.ENUM) != bool(prm.members):
                raise _bad(f"argument `{prm.name}` of `{a.name}` has malformed members")
            if prm.kind == FieldKind.ENUM:
                _unique(f"member of argument `{prm.name}`", prm.members)

    def _rule(self, r: ir.RuleDef) -> None:
        self.rule = r
        where = f"rule `{r.name}`"
        if not r.targets:
            raise _bad(f"{where} has no target")
        if not self.actions.keys() >= {*r.targets, *r.after}:
            for t in (*r.targets, *r.after):
                self._known(t, where)
        if (r.kind == RuleKind.AFTER) != (r.cond is None) or (r.kind == RuleKind.AFTER) != bool(r.after):
            raise _bad(f"{where} has a malformed condition")
        if r.kind == RuleKind.AFTER:
            if "history" not in self.fields:
                raise _bad(f"{where} reads `history`, which the state does not declare")
            if r.reads != ("history",) or r.args:
                raise _bad(f"{where} reads {list(r.reads)}, expected ['history']")
            return
        reads = self._typed.get(r.cond)
        args: tuple[str, ...] = ()
        if reads is None:
            fields, used = self._scan(r.cond, where)
            for name in sorted(used):
                kinds = set()
                for t in r.targets:
                    params = {prm.name: prm for prm in self.actions[t].params or ()}
                    if name not in params:
                        raise _bad(f"{where} reads argument `{name}` that `{t}` does not declare")
                    kinds.add((params[name].kind, params[name].members))
                if len(kinds) > 1:
                    raise _bad(f"{where}: argument `{name}` has different types in its targets")
            self._typed_bool(r.cond, where)
            reads, args = tuple(sorted(fields)), tuple(sorted(used))
            if not args:
                self._typed[r.cond] = reads
        if reads != r.reads:
            raise _bad(f"{where} reads {list(reads)} but lists {list(r.reads)}")
        if args != r.args:
            raise _bad(f"{where} reads arguments {list(args)} but lists {list(r.args)}")

    # ---- expressions: a type per node ----------------------------------------------------------
    def _scan(self, e: ir.Expr, where: str) -> tuple[set[str], set[str]]:
        """(fields read, arguments read) by an expression; refuses nesting past MAX_DEPTH first."""
        fields: set[str] = set()
        args: set[str] = set()
        stack = [(e, 0)]
        while stack:
            node, depth = stack.pop()
            kids = list(ir.children(node))
            if kids or isinstance(node, ir.InConst):
                depth += 1  # an operator (leaves are no level)
                if depth > ir.MAX_DEPTH:
                    raise _bad(f"{where}: expression nested more than {ir.MAX_DEPTH} levels deep")
            if isinstance(node, (ir.Field, ir.InSet)):
                fields.add(node.path)
            elif isinstance(node, ir.Arg):
                args.add(node.name)
            stack.extend((k, depth) for k in kids)
        return fields, args

    def _typed_bool(self, e: ir.Expr, where: str) -> None:
        """Refuse a condition whose types do not agree, or that is not boolean (after `_scan`)."""
        if self._type(e, where) != "bool":
            raise _bad(f"{where}: the condition is not boolean")

    def _type(self, e: ir.Expr, where: str):
        """"bool", "num", "action", "set", "list", ("enum", members) or ("name", text)."""
        t = self._type
        match e:
            case ir.Field(path=path):
                f = self.fields.get(path)
                if f is None:
                    raise _bad(f"{where} reads unknown field `{path}`")
                if f.kind == FieldKind.TEXT:
                    raise _bad(f"{where} reads text field `{path}`")
                return ("enum", frozenset(f.members)) if f.kind == FieldKind.ENUM else _KINDS[f.kind]
            case ir.Arg(name=name):
                if self.rule is None:
                    raise _bad(f"{where} reads `args.{name}` outside a rule")
                prm = next(prm for prm in self.actions[self.rule.targets[0]].params or ()
                           if prm.name == name)
                if prm.kind == FieldKind.TEXT:
                    raise _bad(f"{where} reads text argument `{name}`")
                return ("enum", frozenset(prm.members)) if prm.kind == FieldKind.ENUM else _KINDS[prm.kind]
            case ir.Const(value=v):
                if isinstance(v, bool):
                    return "bool"
                if isinstance(v, str):
                    return ("name", v)
                if not _number(v):
                    raise _bad(f"{where}: number {v!r} is out of range")
                return "num"
            case ir.Self() | ir.Cost():
                if self.rule is None:
                    raise _bad(f"{where} reads `self` or `cost` outside a rule")
                return "action" if isinstance(e, ir.Self) else "num"
            case ir.Len(operand=o):
                self._want(t(o, where), "list", where, "len")
                return "num"
            case ir.Not(operand=o):
                self._want(t(o, where), "bool", where, "not")
                return "bool"
            case ir.And(operands=ops) | ir.Or(operands=ops):
                if not ops:
                    raise _bad(f"{where}: `and`/`or` without operands")
                for o in ops:
                    self._want(t(o, where), "bool", where, "and/or")
                return "bool"
            case ir.Arith(left=l, right=r):
                self._want(t(l, where), "num", where, "arithmetic")
                self._want(t(r, where), "num", where, "arithmetic")
                return "num"
            case ir.Neg(operand=o):
                self._want(t(o, where), "num", where, "negation")
                return "num"
            case ir.Cmp(op=op, left=l, right=r):
                a, b = t(l, where), t(r, where)
                if op in _ORDER:
                    self._want(a, "num", where, op)
                    self._want(b, "num", where, op)
                elif not self._comparable(a, b):
                    raise _bad(f"{where}: `{op}` compares {_show(a)} with {_show(b)}")
                return "bool"
            case ir.InConst(operand=o, values=values):
                a = t(o, where)
                if a == "bool" or a in ("set", "list") or isinstance(a, tuple) and a[0] == "name":
                    raise _bad(f"{where}: `in {{…}}` on {_show(a)}")
                for v in values:
                    b = "bool" if isinstance(v, bool) else ("name", v) if isinstance(v, str) else \
                        ("num" if _number(v) else None)
                    if b is None or not self._comparable(a, b):
                        raise _bad(f"{where}: `in {{…}}` of {_show(a)} holds {v!r}")
                return "bool"
            case ir.InSet(operand=o, path=path):
                if t(ir.Field(path), where) != "set":
                    raise _bad(f"{where}: `in {path}` where `{path}` is not a set of actions")
                self._want(t(o, where), "action", where, "in")
                return "bool"
        raise _bad(f"{where}: unknown expression {type(e).__name__}")

    def _want(self, got, want: str, where: str, op: str) -> None:
        if got == want or (want == "action" and self._comparable(got, "action")):
            return
        raise _bad(f"{where}: `{op}` needs {want}, found {_show(got)}")

    def _comparable(self, a, b) -> bool:
        if isinstance(b, tuple) and b[0] == "name" and not (isinstance(a, tuple) and a[0] == "name"):
            a, b = b, a
        if isinstance(a, tuple) and a[0] == "name":  # a bare name: an enum member or an action
            if isinstance(b, tuple) and b[0] == "enum":
                return a[1] in b[1]
            if b == "action":
                return a[1] in self.actions
            return False
        if isinstance(a, tuple) and isinstance(b, tuple):  # two enums with the same members
            return a == b
        return a == b and a in ("bool", "num", "action")


def _show(t) -> str:
    if isinstance(t, tuple):
        return f"enum({', '.join(sorted(t[1]))})" if t[0] == "enum" else f"`{t[1]}`"
    return t

