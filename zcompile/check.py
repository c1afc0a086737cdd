"""Checking: names, types, `after` cycles and lints; every diagnostic of a file at once."""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterator
from dataclasses import dataclass

from . import ast as A
from . import interp
from .errors import Diagnostic, ZcError, did_you_mean
from .ir import MAX_FLOAT
from .source import Source, Span

RISKY_TAGS = ("destructive", "publish", "money", "credential")
HISTORY = "history"
LINT_BUDGET = 1 << 16  # most states enumerated to decide one lint; beyond it the lint stays silent
LINT_WORK = 5_000_000  # most rule evaluations for all lints of a file; beyond it they stay silent


@dataclass(frozen=True, slots=True)
class FieldInfo:
    """A state field as the runtime sees it."""

    path: str
    kind: str  # enum | bool | int | float | text | set
    members: tuple[str, ...] = ()
    optional: bool = False
    default: object = None  # python value; frozenset for sets
    has_default: bool = False

    @property
    def may_be_absent(self) -> bool:
        return self.optional and not self.has_default


@dataclass(frozen=True, slots=True)
class Checked:
    """A policy that passed checking: names resolved, fields typed, diagnostics (warnings) kept."""

    policy: A.Policy
    fields: dict[str, FieldInfo]  # declaration order; `history` last
    actions: tuple[A.ActionDecl, ...]
    costs: dict[str, float]
    targets: dict[str, frozenset[str]]  # rule name -> target action names
    fallback: str
    diagnostics: tuple[Diagnostic, ...]
    params: dict[str, dict[str, FieldInfo] | None] = dataclasses.field(default_factory=dict)
    arg_rules: frozenset[str] = frozenset()  # rules whose condition reads `args.*`

    @property
    def name(self) -> str:
        return self.policy.name.text


# Expression types. Enums carry their member tuple; "name" is a bare name awaiting context.
T_BOOL, T_NUM, T_ACTION, T_SET, T_TEXT, T_ERR = "bool", "number", "action", "set[action]", "text", "?"
T_LIST = "list"
ARGS = "args"  # `args.NAME` reads an argument of the proposed call
FUNCTIONS = ("len",)


@dataclass(frozen=True, slots=True)
class TEnum:
    members: tuple[str, ...]

    def __str__(self) -> str:
        return f"enum({', '.join(self.members)})"


@dataclass(frozen=True, slots=True)
class TName:
    path: str


def check(policy: A.Policy, source: Source) -> Checked:
    """Check a parsed policy; raise ZcError carrying all diagnostics if any is an error."""
    checker = _Checker(policy, source)
    checked = checker.run()
    diags = tuple(sorted(checker.diags, key=lambda d: (d.span.start if d.span else -1)))
    if any(d.is_error for d in diags):
        raise ZcError(f"{source.path}: policy has errors", diags)
    return dataclasses.replace(checked, diagnostics=diags)


class _Checker:
    def __init__(self, policy: A.Policy, source: Source) -> None:
        self.p = policy
        self.src = source
        self.diags: list[Diagnostic] = []
        self.fields: dict[str, FieldInfo] = {}
        self.actions: dict[str, A.ActionDecl] = {}
        self.tags: dict[str, list[str]] = {}
        self.reads: set[str] = set()
        self.params: dict[str, dict[str, FieldInfo] | None] = {}
        self.rule_targets: frozenset[str] = frozenset()
        self.reads_args = False
        self.arg_rules: set[str] = set()

    def err(self, code: str, msg: str, span: Span | None, help: str | None = None) -> None:
        self.diags.append(Diagnostic(code, "error", msg, span, help, path=self.src.path))

    def warn(self, code: str, msg: str, span: Span | None, help: str | None = None) -> None:
        self.diags.append(Diagnostic(code, "warning", msg, span, help, path=self.src.path))

    # ---- declarations -------------------------------------------------------------
    def run(self) -> Checked:
        p = self.p
        for a in p.actions:
            if a.name.text in self.actions:
                self.err("ZC0102", f"action `{a.name.text}` is declared twice", a.name.span,
                         f"the first declaration is on line {self.actions[a.name.text].span.line}")
                continue
            self.actions[a.name.text] = a
            self.params[a.name.text] = self._params(a)
            seen_tags = set()
            for t in a.tags:
                if t.text not in seen_tags:
                    seen_tags.add(t.text)
                    self.tags.setdefault(t.text, []).append(a.name.text)
        self._fields()
        fallback = self._fallback()
        self._unique("ZC0103", "intent", p.intents)
        for intent in p.intents:
            for name in intent.allow:
                self._action(name)
        self._unique("ZC0104", "rule", p.rules)
        targets: dict[str, frozenset[str]] = {}
        rules = []
        for rule in p.rules:
            targets.setdefault(rule.name.text, self._target(rule.target))
            self.rule_targets, self.reads_args = targets[rule.name.text], False
            for name in rule.after:
                self._action(name)
            cond = None
            if rule.cond is not None:
                cond = self._condition(rule.cond, in_rule=True)
                if self.reads_args:
                    self.arg_rules.add(rule.name.text)
            rules.append(dataclasses.replace(rule, cond=cond))
        self._unique("ZC0105", "tier", p.tiers)
        self._unique("ZC0106", "route", p.routes)
        tier_names = [t.name.text for t in p.tiers]
        routes = []
        for route in p.routes:
            for t in route.tiers:
                if t.text not in tier_names:
                    self.err("ZC0205", f"unknown tier `{t.text}`", t.span,
                             did_you_mean(t.text, tier_names) or "declare it with `tier NAME`")
            when = self._condition(route.when, in_rule=False) if route.when is not None else None
            routes.append(dataclasses.replace(route, when=when))
        for first, later in zip(p.routes, p.routes[1:]):
            if first.when is None:
                self.warn("ZC1005", f"route `{later.name.text}` is never used", later.name.span,
                          f"route `{first.name.text}` has no `when` and always holds before it")
                break
        self._cycles()
        policy = dataclasses.replace(p, rules=tuple(rules), routes=tuple(routes))
        checked = Checked(
            policy=policy, fields=self.fields, actions=tuple(self.actions.values()),
            costs={n: (a.cost.value if a.cost else 0) for n, a in self.actions.items()},
            targets=targets, fallback=fallback, diagnostics=(), params=self.params,
            arg_rules=frozenset(self.arg_rules))
        if not any(d.is_error for d in self.diags):
            _Linter(self, checked).run()
        return checked

    def _unique(self, code: str, what: str, decls) -> None:
        seen: dict[str, Span] = {}
        for d in decls:
            if d.name.text in seen:
                self.err(code, f"{what} `{d.name.text}` is declared twice", d.name.span,
                         f"the first declaration is on line {seen[d.name.text].line}")
            else:
                seen[d.name.text] = d.name.span

    def _action(self, ident: A.Ident) -> bool:
        if ident.text in self.actions:
            return True
        self.err("ZC0203", f"unknown action `{ident.text}`", ident.span,
                 did_you_mean(ident.text, self.actions) or "declare it with `action NAME`")
        return False

    def _fallback(self) -> str:
        fbs = self.p.fallbacks
        if not fbs:
            self.err("ZC0108", f"policy `{self.p.name.text}` has no `fallback`", self.p.name.span,
                     "add `fallback ACTION`: it is returned when nothing else is legal")
            return ""
        for extra in fbs[1:]:
            self.err("ZC0107", "more than one `fallback`", extra.span,
                     f"the first is on line {fbs[0].span.line}")
        self._action(fbs[0].action)
        return fbs[0].action.text

    def _params(self, a: A.ActionDecl) -> dict[str, FieldInfo] | None:
        if a.params is None:
            return None
        params: dict[str, FieldInfo] = {}
        for prm in a.params:
            name = prm.name.text
            if name in params:
                self.err("ZC0111", f"argument `{name}` of action `{a.name.text}` is declared twice",
                         prm.name.span)
                continue
            if isinstance(prm.type, A.ListType):
                params[name] = FieldInfo(name, "list", (), prm.optional)
            elif isinstance(prm.type, A.SetType):  # the grammar never builds it; kept total
                params[name] = FieldInfo(name, "set", (), prm.optional)
            else:
                params[name] = self._field_info(
                    A.FieldDecl(path=prm.name, type=prm.type, optional=prm.optional, default=None,
                                span=prm.span))
        return params

    def _fields(self) -> None:
        decls: dict[str, A.FieldDecl] = {}
        for f in self.p.fields:
            path = f.path.text
            if path == HISTORY:
                self.err("ZC0101", "field `history` is built in", f.path.span,
                         "`history: set[action]` holds the actions already executed")
                continue
            if path in decls:
                self.err("ZC0101", f"field `{path}` is declared twice", f.path.span,
                         f"the first declaration is on line {decls[path].span.line}")
                continue
            if path == ARGS or path.startswith(ARGS + "."):
                self.err("ZC0113", f"field `{path}`: `args` is reserved for action arguments",
                         f.path.span, "rules read the proposed call's arguments as `args.NAME`; "
                         "rename the field")
                continue
            clash = next((o for o in decls if o.startswith(path + ".") or path.startswith(o + ".")),
                         None)
            if clash:
                self.err("ZC0109", f"field `{path}` clashes with field `{clash}`", f.path.span,
                         "a path cannot be both a value and an object holding other fields")
            decls[path] = f
            self.fields[path] = self._field_info(f)
        self.fields[HISTORY] = FieldInfo(HISTORY, "set", default=frozenset(), has_default=True)

    def _field_info(self, f: A.FieldDecl) -> FieldInfo:
        t = f.type
        if isinstance(t, A.EnumType):
            members: list[str] = []
            for m in t.members:
                if m.text in members:
                    self.err("ZC0110", f"enum member `{m.text}` is listed twice", m.span)
                else:
                    members.append(m.text)
            kind = "enum"
        else:
            members, kind = [], ("set" if isinstance(t, A.SetType) else t.kind)
        info = FieldInfo(f.path.text, kind, tuple(members), f.optional)
        if f.default is None:
            return info
        value = self._default(f, info)
        return dataclasses.replace(info, default=value, has_default=value is not None)

    def _default(self, f: A.FieldDecl, info: FieldInfo):
        d = f.default
        ok = {
            "enum": isinstance(d, A.LitMember),
            "bool": isinstance(d, A.LitBool),
            "int": isinstance(d, A.LitNum) and isinstance(d.value, int),
            "float": isinstance(d, A.LitNum),
            "text": isinstance(d, A.LitString),
            "set": isinstance(d, A.LitSet),
        }[info.kind]
        if not ok:
            self.err("ZC0307", f"default of `{info.path}` must have type `{info.kind}`", d.span)
            return None
        if info.kind == "enum":
            if d.name.text not in info.members:
                self.err("ZC0202", f"`{d.name.text}` is not a member of `{info.path}`", d.span,
                         did_you_mean(d.name.text, info.members)
                         or f"members: {', '.join(info.members)}")
                return None
            return d.name.text
        if info.kind == "float":
            return float(d.value)
        if info.kind == "set":
            names = []
            for item in d.items:
                if not isinstance(item, A.LitMember):
                    self.err("ZC0307", "a `set[action]` holds action names", item.span)
                elif self._action(item.name):
                    names.append(item.name.text)
            return frozenset(names)
        return d.value

    def _target(self, target: A.Target) -> frozenset[str]:
        if isinstance(target, A.TargetAll):
            return frozenset(self.actions)
        if isinstance(target, A.TargetActions):
            return frozenset(n.text for n in target.names if self._action(n))
        names: set[str] = set()
        for t in target.tags:
            if t.text in self.tags:
                names.update(self.tags[t.text])
            else:
                self.err("ZC0204", f"no action has tag `{t.text}`", t.span,
                         did_you_mean(t.text, self.tags) or None)
        return frozenset(names)

    def _cycles(self) -> None:
        graph: dict[str, list[tuple[str, A.RuleDecl]]] = {}
        targets = {r.name.text: self._target_quiet(r.target) for r in self.p.rules}
        for rule in self.p.rules:
            if rule.kind == "after":
                for t in sorted(targets[rule.name.text]):
                    for a in rule.after:
                        graph.setdefault(t, []).append((a.text, rule))
        colour: dict[str, int] = {}  # 1: on the current path, 2: done
        reported: set[frozenset[str]] = set()
        for root in list(graph):
            if root in colour:
                continue
            colour[root] = 1
            trail = [root]
            stack = [iter(graph.get(root, ()))]
            while stack:
                step = next(stack[-1], None)
                if step is None:
                    colour[trail.pop()] = 2
                    stack.pop()
                    continue
                nxt, rule = step
                if colour.get(nxt) == 1:
                    cycle = trail[trail.index(nxt):] + [nxt]
                    if frozenset(cycle) not in reported:
                        reported.add(frozenset(cycle))
                        self.err("ZC0401", "`after` rules form a cycle: "
                                 + " → ".join(f"`{c}`" for c in cycle), rule.span,
                                 "no action on the cycle can ever be legal")
                elif nxt not in colour:
                    colour[nxt] = 1
                    trail.append(nxt)
                    stack.append(iter(graph.get(nxt, ())))

    def _target_quiet(self, target: A.Target) -> frozenset[str]:
        if isinstance(target, A.TargetAll):
            return frozenset(self.actions)
        if isinstance(target, A.TargetActions):
            return frozenset(n.text for n in target.names if n.text in self.actions)
        return frozenset(a for t in target.tags for a in self.tags.get(t.text, ()))

    # ---- expressions ------------------------------------------------------------------
    def _condition(self, expr: A.Expr, in_rule: bool) -> A.Expr:
        new, t = self._expr(expr, in_rule)
        if isinstance(t, TName):
            new, t = self._bare(new, None)
        if t not in (T_BOOL, T_ERR):
            self.err("ZC0304", f"expected a condition, found a `{t}` expression", expr.span,
                     "compare it with something, e.g. `== …`")
        return new

    def _bare(self, expr: A.Expr, want) -> tuple[A.Expr, object]:
        """Resolve a bare name against what the other side of an operator wants."""
        name = expr.path
        if want == T_ERR:  # the other side already has an error: say nothing more
            return expr, T_ERR
        if want == T_NUM:
            if name in self.fields:
                self.err("ZC0309", f"`{{…}}` holds constants, and `{name}` is a field", expr.span,
                         f"compare one by one: `… == {name} or …`")
            else:
                self.err("ZC0309", f"`{name}` is not a number", expr.span)
            return expr, T_ERR
        if isinstance(want, TEnum):
            if name in want.members:
                return A.MemberRef(value=name, span=expr.span), want
            self.err("ZC0202", f"`{name}` is not a member of `{want}`", expr.span,
                     did_you_mean(name, want.members) or f"members: {', '.join(want.members)}")
            return expr, T_ERR
        if want == T_ACTION:
            if name in self.actions:
                return A.ActionRef(name=name, span=expr.span), T_ACTION
            self.err("ZC0203", f"unknown action `{name}`", expr.span,
                     did_you_mean(name, self.actions) or "declare it with `action NAME`")
            return expr, T_ERR
        self.err("ZC0201", f"unknown field `{name}`", expr.span,
                 did_you_mean(name, self.fields) or "declare it in the `state` block")
        return expr, T_ERR

    def _operand(self, expr: A.Expr, in_rule: bool, want=None) -> tuple[A.Expr, object]:
        new, t = self._expr(expr, in_rule)
        if isinstance(t, TName):
            return self._bare(new, want)
        return new, t

    def _expr(self, e: A.Expr, in_rule: bool) -> tuple[A.Expr, object]:
        rp = dataclasses.replace
        match e:
            case A.Name(path=path) if path.startswith(ARGS + "."):
                return self._arg(e, path[len(ARGS) + 1:], in_rule)
            case A.Call(func=func, operand=o):
                return self._call(e, func, o, in_rule)
            case A.Name(path=path):
                info = self.fields.get(path)
                if info is None:
                    return e, TName(path)
                self.reads.add(path)
                ref = A.FieldRef(path=path, span=e.span)
                if info.kind == "text":
                    self.err("ZC0305", f"rules cannot read text field `{path}`", e.span,
                             "text fields are features for specialists, not for rules")
                    return ref, T_ERR
                return ref, _field_type(info)
            case A.Num():
                return e, T_NUM
            case A.Bool():
                return e, T_BOOL
            case A.SelfRef() | A.CostRef():
                if not in_rule:
                    word = "self" if isinstance(e, A.SelfRef) else "cost"
                    self.err("ZC0308", f"`{word}` is only defined inside a rule", e.span,
                             "a route is chosen before any action is judged")
                    return e, T_ERR
                return e, (T_ACTION if isinstance(e, A.SelfRef) else T_NUM)
            case A.Not(operand=o):
                new, t = self._bool(o, in_rule)
                return rp(e, operand=new), T_BOOL
            case A.And(operands=ops) | A.Or(operands=ops):
                news = tuple(self._bool(o, in_rule)[0] for o in ops)
                return rp(e, operands=news), T_BOOL
            case A.Compare(op=op, left=l, right=r):
                return self._compare(e, op, l, r, in_rule)
            case A.InLit(operand=o, items=items):
                new, t = self._operand(o, in_rule)
                if t == T_ERR:
                    return rp(e, operand=new), T_BOOL
                if not (isinstance(t, TEnum) or t in (T_NUM, T_ACTION)):
                    self.err("ZC0301", f"`in {{…}}` needs an enum, number or action, found `{t}`",
                             o.span)
                    return rp(e, operand=new), T_BOOL
                news = []
                for item in items:
                    if isinstance(item, A.Name):
                        ni, it = self._bare(item, t)
                    else:
                        ni, it = item, T_NUM
                    if it != T_ERR and it != t:
                        self.err("ZC0309", f"`{item.span.text}` has type `{it}`, expected `{t}`",
                                 item.span)
                    news.append(ni)
                return rp(e, operand=new, items=tuple(news)), T_BOOL
            case A.InField(operand=o, field=f):
                new, t = self._operand(o, in_rule, want=T_ACTION)
                nf, ft = self._operand(f, in_rule)
                if ft != T_ERR and ft != T_SET:
                    self.err("ZC0306", f"`{f.span.text}` is not a `set[action]` field", f.span,
                             "`x in FIELD` tests membership in a set of actions; "
                             "for a list of values write `x in {a, b}`")
                if t not in (T_ERR, T_ACTION):
                    self.err("ZC0301", f"only actions can be members of `{f.span.text}`, found `{t}`",
                             o.span)
                return rp(e, operand=new, field=nf), T_BOOL
            case A.Arith(left=l, right=r):
                nl = self._num(l, in_rule)
                nr = self._num(r, in_rule)
                new = rp(e, left=nl, right=nr)
                if _constant(nl) and _constant(nr) and interp.evaluate(new, {}) is None \
                        and None not in (interp.evaluate(nl, {}), interp.evaluate(nr, {})):
                    self.err("ZC0313", "arithmetic on constants overflows", e.span,
                             f"numbers are finite, at most {MAX_FLOAT:.6g} in magnitude")
                return new, T_NUM
            case A.Neg(operand=o):
                return rp(e, operand=self._num(o, in_rule)), T_NUM
        raise AssertionError(f"unchecked expression {e!r}")

    def _arg(self, e: A.Name, name: str, in_rule: bool) -> tuple[A.Expr, object]:
        """Resolve `args.NAME` against the signatures of every action the rule targets."""
        if not in_rule:
            self.err("ZC0310", f"`{e.path}` is only defined inside a rule", e.span,
                     "a route is chosen before any call is proposed")
            return e, T_ERR
        self.reads_args = True
        order = list(self.actions)
        targets = sorted(self.rule_targets, key=order.index)
        missing = [t for t in targets if name not in (self.params.get(t) or {})]
        if missing:
            first = missing[0]
            params = self.params.get(first)
            who = (f"action `{first}`" if len(missing) == 1 else
                   "actions " + ", ".join(f"`{m}`" for m in missing[:3])
                   + (f" and {len(missing) - 3} more" if len(missing) > 3 else ""))
            if params is None:
                hint = (f"`{first}` declares no arguments; declare them: "
                        f"`action {first}({name}: TYPE)`")
            else:
                hint = did_you_mean(name, params) or (
                    f"`{first}` takes " + (", ".join(f"`{p}`" for p in params) or "no arguments"))
            self.err("ZC0206", f"unknown argument `{name}`: {who} has no argument `{name}`"
                     if len(missing) == 1 else
                     f"unknown argument `{name}`: {who} have no argument `{name}`", e.span, hint)
            return e, T_ERR
        if not targets:
            return e, T_ERR
        infos = [self.params[t][name] for t in targets]
        types = {t: _field_type(i) for t, i in zip(targets, infos)}
        if len({str(t) for t in types.values()}) > 1:
            shown = ", ".join(f"`{t}` in `{a}`" for a, t in list(types.items())[:3])
            self.err("ZC0311", f"argument `{name}` has different types in this rule's targets: "
                     f"{shown}", e.span, "split the rule, one per signature")
            return e, T_ERR
        t = types[targets[0]]
        ref = A.ArgRef(name=name, span=e.span)
        if t == T_TEXT:
            self.err("ZC0305", f"rules cannot read text argument `{e.path}`", e.span,
                     "text arguments are checked against the signature only; derive what a rule "
                     "needs into the state")
            return ref, T_ERR
        return ref, t

    def _call(self, e: A.Call, func: A.Ident, operand: A.Expr, in_rule: bool):
        if func.text not in FUNCTIONS:
            self.err("ZC0207", f"unknown function `{func.text}`", func.span,
                     did_you_mean(func.text, FUNCTIONS) or "the only function is `len(args.NAME)`")
            return e, T_ERR
        new, t = self._operand(operand, in_rule)
        if t not in (T_LIST, T_ERR):
            self.err("ZC0312", f"`len` needs a `list` argument, found `{t}`", operand.span,
                     "declare the argument as `NAME: list`")
            return e, T_ERR
        return A.Len(operand=new, span=e.span), T_NUM

    def _bool(self, e: A.Expr, in_rule: bool) -> tuple[A.Expr, object]:
        new, t = self._operand(e, in_rule)
        if t not in (T_BOOL, T_ERR):
            self.err("ZC0304", f"expected a condition, found a `{t}` expression", e.span)
        return new, T_BOOL

    def _num(self, e: A.Expr, in_rule: bool) -> A.Expr:
        new, t = self._operand(e, in_rule)
        if t not in (T_NUM, T_ERR):
            self.err("ZC0303", f"arithmetic needs numbers, found `{t}`", e.span)
        return new

    def _compare(self, e, op, l, r, in_rule):
        nl, lt = self._expr(l, in_rule)
        nr, rt = self._expr(r, in_rule)
        context = lambda t: t if isinstance(t, TEnum) or t in (T_ACTION, T_ERR) else None  # noqa: E731
        if isinstance(lt, TName) and isinstance(rt, TName):
            nl, lt = self._bare(nl, None)  # report the left one; the right is then moot
            nr, rt = self._bare(nr, T_ERR)
        elif isinstance(lt, TName):
            nl, lt = self._bare(nl, context(rt))
        elif isinstance(rt, TName):
            nr, rt = self._bare(nr, context(lt))
        new = dataclasses.replace(e, left=nl, right=nr)
        if T_ERR in (lt, rt):
            return new, T_BOOL
        if op in ("<", "<=", ">", ">="):
            bad = next(((side, t) for side, t in ((l, lt), (r, rt)) if t != T_NUM), None)
            if bad:
                self.err("ZC0302", f"`{op}` compares numbers, found `{bad[1]}`", bad[0].span)
            return new, T_BOOL
        if lt != rt and not (isinstance(lt, TEnum) and isinstance(rt, TEnum)
                             and set(lt.members) == set(rt.members)):
            self.err("ZC0301", f"cannot compare `{lt}` with `{rt}`", e.span)
        elif lt in (T_SET, T_LIST):
            self.err("ZC0301", f"cannot compare `{lt}` values with `{op}`", e.span,
                     "test membership with `ACTION in FIELD`")
        return new, T_BOOL


def _constant(e: A.Expr) -> bool:
    """Whether an expression is arithmetic on number literals only."""
    return all(isinstance(x, (A.Num, A.Arith, A.Neg)) for x in walk(e))


def _field_type(info: FieldInfo):
    return {"enum": TEnum(info.members), "bool": T_BOOL, "int": T_NUM, "float": T_NUM,
            "text": T_TEXT, "set": T_SET, "list": T_LIST}[info.kind]


# ---- lints -------------------------------------------------------------------------------
def walk(expr: A.Expr) -> Iterator[A.Expr]:
    """Every node of an expression, parents first."""
    stack = [expr]
    while stack:
        e = stack.pop()
        yield e
        for f in getattr(e, "__dataclass_fields__", ()):
            v = getattr(e, f)
            if isinstance(v, tuple):
                stack.extend(x for x in v if not isinstance(x, (str, A.Ident)))
            elif f not in ("span",) and hasattr(v, "__dataclass_fields__"):
                stack.append(v)


def substitute(expr: A.Expr, action: str, cost: float) -> A.Expr:
    """Replace `self` and `cost` by the action's name and cost."""
    match expr:
        case A.SelfRef():
            return A.ActionRef(name=action, span=expr.span)
        case A.CostRef():
            return A.Num(value=cost, span=expr.span)
        case A.Not(operand=o) | A.Neg(operand=o):
            return dataclasses.replace(expr, operand=substitute(o, action, cost))
        case A.And(operands=ops) | A.Or(operands=ops):
            return dataclasses.replace(expr, operands=tuple(substitute(o, action, cost) for o in ops))
        case A.Compare(left=l, right=r) | A.Arith(left=l, right=r):
            return dataclasses.replace(expr, left=substitute(l, action, cost),
                                       right=substitute(r, action, cost))
        case A.InLit(operand=o, items=items):
            return dataclasses.replace(expr, operand=substitute(o, action, cost),
                                       items=tuple(substitute(i, action, cost) for i in items))
        case A.InField(operand=o):
            return dataclasses.replace(expr, operand=substitute(o, action, cost))
    return expr


class _Linter:
    """Decides lints by enumerating every distinct case of the fields a question reads."""

    def __init__(self, checker: _Checker, checked: Checked) -> None:
        self.c = checker
        self.k = checked
        self._uses: dict[int, tuple[bool, bool]] = {}
        self._cache: dict[tuple, bool | None] = {}
        self._facts_cache: dict[tuple, tuple | None] = {}
        self.work = 0
        self.exhausted = False

    def run(self) -> None:
        k = self.k
        rules = k.policy.rules
        by_action: dict[str, list[A.RuleDecl]] = {a.name.text: [] for a in k.actions}
        for r in rules:
            for t in k.targets[r.name.text]:
                by_action[t].append(r)
        for a in k.actions:
            name = a.name.text
            cases = [(r, name) for r in by_action[name]]
            verdict = self._exists(cases, want_keep=True) if cases else True
            if verdict is None:  # decide on the rules that can be decided: fewer rules, more states
                decidable = [c for c in cases if self._exists([c], want_keep=True) is not None]
                if decidable:
                    verdict = self._exists(decidable, want_keep=True)
                    cases = decidable if verdict is False else cases
            if verdict is False:
                for case in list(cases):  # name a minimal set of rules that conflict
                    rest = [c for c in cases if c is not case]
                    if rest and self._exists(rest, want_keep=True) is False:
                        cases = rest
                self.c.warn("ZC1001", f"action `{name}` can never be legal", a.name.span,
                            "no state satisfies "
                            + ", ".join(f"`{r.name.text}`" for r, _ in cases)
                            + (" together" if len(cases) > 1 else ""))
        for r in rules:
            cases = [(r, t) for t in sorted(k.targets[r.name.text])]
            if not cases or all(self._exists([c], want_keep=False) is False for c in cases):
                self.c.warn("ZC1002", f"rule `{r.name.text}` can never remove an action",
                            r.name.span, "its condition never goes against any of its targets"
                            if cases else "it has no targets")
        for a in k.actions:
            risky = [t.text for t in a.tags if t.text in RISKY_TAGS]
            if risky and not any(self._guards(r) for r in by_action[a.name.text]):
                self.c.warn("ZC1003", f"risky action `{a.name.text}` ({', '.join(risky)}) "
                            "is not guarded", a.name.span,
                            "add a rule that checks authority or confirmation, "
                            f"e.g. `rule confirm: {a.name.text} requires self in confirmed`")
        if self.exhausted:
            self.c.diags.append(Diagnostic(
                "ZC1000", "note", "some ZC1001/ZC1002 lints were left undecided", k.policy.name.span,
                f"the policy is too large to enumerate within {LINT_WORK:,} rule evaluations",
                path=self.c.src.path))
        for f in k.policy.fields:
            path = f.path.text
            if path in k.fields and k.fields[path].kind != "text" and path not in self.c.reads:
                self.c.warn("ZC1004", f"state field `{path}` is never read", f.path.span,
                            "remove it, or use it in a rule or route")

    def _guards(self, rule: A.RuleDecl) -> bool:
        if rule.cond is None:
            return False
        for e in walk(rule.cond):
            if isinstance(e, A.FieldRef) and self.k.fields[e.path].kind in ("enum", "bool", "set"):
                return True
        return False

    def _key(self, rule: A.RuleDecl, action: str) -> tuple:
        """What a (rule, action) question depends on: the action only through `self` / `cost`."""
        uses = self._uses.get(id(rule))
        if uses is None:
            nodes = list(walk(rule.cond)) if rule.cond is not None else []
            uses = self._uses[id(rule)] = (any(isinstance(e, A.SelfRef) for e in nodes),
                                          any(isinstance(e, A.CostRef) for e in nodes))
        return (id(rule), action if uses[0] else None, self.k.costs[action] if uses[1] else None)

    def _exists(self, cases: list[tuple[A.RuleDecl, str]], want_keep: bool) -> bool | None:
        """Is there a state where every case keeps (want_keep) / one case removes its action?

        None when undecided (arithmetic between fields, or too many combinations).
        """
        if self.exhausted:
            return None
        key = (want_keep, frozenset(self._key(r, a) for r, a in cases))
        if key not in self._cache:
            self._cache[key] = self._decide(cases, want_keep)
        return self._cache[key]

    def _decide(self, cases: list[tuple[A.RuleDecl, str]], want_keep: bool) -> bool | None:
        k = self.k
        consts: dict[str, set] = {}
        members: dict[str, set[str]] = {}
        for rule, action in cases:
            facts = self._facts(rule, action)
            if facts is None:
                return None
            for path, values in facts[0].items():
                consts.setdefault(path, set()).update(values)
            for path, names in facts[1].items():
                members.setdefault(path, set()).update(names)
        domains = self._domains(consts, members)
        if domains is None:
            return None
        paths = list(domains)
        total = 1
        for p in paths:
            total *= len(domains[p])
            if total > LINT_BUDGET:
                return None
        self.work += total * len(cases)
        if self.work > LINT_WORK:
            self.exhausted = True
            return None
        for combo in itertools.product(*(domains[p] for p in paths)):
            state = dict(zip(paths, combo))
            outcomes = (interp.keeps(rule, state, action, k.costs[action]) for rule, action in cases)
            if (all(outcomes) if want_keep else not all(outcomes)):
                return True
        return False

    def _facts(self, rule: A.RuleDecl, action: str):
        """(constants per field, action names per set field) one case mentions; None if undecidable."""
        key = self._key(rule, action)
        if key in self._facts_cache:
            return self._facts_cache[key]
        if rule.name.text in self.k.arg_rules:
            facts = None  # reads the proposed call's arguments: no state decides it
        elif rule.kind == "after":
            facts = ({"history": set()}, {"history": {a.text for a in rule.after}})
        else:
            expr = substitute(rule.cond, action, self.k.costs[action])
            facts = self._expr_facts(expr)
            self.work += len(rule.cond.span.text)  # rough cost of walking it
        if self.work > LINT_WORK:
            self.exhausted = True
        self._facts_cache[key] = facts
        return facts

    def _expr_facts(self, expr: A.Expr):
        k = self.k
        consts: dict[str, set] = {}
        members: dict[str, set[str]] = {}
        for e in walk(expr):
            if isinstance(e, A.Arith) or (isinstance(e, A.Compare) and all(
                    isinstance(x, A.FieldRef) and k.fields[x.path].kind in ("int", "float")
                    for x in (e.left, e.right))):
                if any(isinstance(x, A.FieldRef) for x in walk(e)):
                    return None  # not decided by interval reasoning
            if isinstance(e, A.FieldRef):
                consts.setdefault(e.path, set())
            if isinstance(e, (A.Compare, A.InLit)):
                sides = (e.left, e.right) if isinstance(e, A.Compare) else (e.operand, *e.items)
                fields = [s.path for s in sides if isinstance(s, A.FieldRef)]
                nums = [interp.evaluate(s, {}) for s in sides
                        if not any(isinstance(x, (A.FieldRef, A.ActionRef, A.MemberRef, A.Bool))
                                   for x in walk(s))]
                for f in fields:
                    consts.setdefault(f, set()).update(n for n in nums if n is not None)
            if isinstance(e, A.InField) and isinstance(e.operand, A.ActionRef):
                members.setdefault(e.field.path, set()).add(e.operand.name)
        return consts, members

    def _domains(self, consts: dict[str, set], members: dict[str, set[str]]) -> dict[str, list] | None:
        k = self.k
        domains: dict[str, list] = {}
        for path in consts:
            info = k.fields[path]
            if info.kind == "enum":
                values: list = list(info.members)
            elif info.kind == "bool":
                values = [False, True]
            elif info.kind in ("int", "float"):
                values = _numeric_points(sorted(consts[path]), info.kind == "int")
            elif info.kind == "set":
                names = sorted(members.get(path, ()))
                values = [frozenset(c for c, bit in zip(names, bits) if bit)
                          for bits in itertools.product((0, 1), repeat=len(names))]
            else:
                return None
            if info.may_be_absent:
                values.append(None)
            domains[path] = values
        return domains


def _numeric_points(consts: list, integral: bool) -> list:
    """One representative of every interval the constants cut the number line into."""
    if not consts:
        return [0]
    points = set(consts)
    points.add(consts[0] - 1)
    points.add(consts[-1] + 1)
    for a, b in zip(consts, consts[1:]):
        if integral:
            points.update(x for x in (a + 1, b - 1) if a < x < b)
        else:
            points.add((a + b) / 2)
    if integral:
        points = {int(p) if float(p).is_integer() else p for p in points}
        # a non-integer constant splits integers at floor and ceil
        extra = set()
        for c in consts:
            if not float(c).is_integer():
                extra.update((int(c // 1), int(c // 1) + 1))
        points = {p for p in points if float(p).is_integer()} | extra
    return sorted(points)
