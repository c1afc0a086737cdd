"""Checking: names, types and `after` cycles (lints in lint.py); every diagnostic of a file at once."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from . import ast as A
from . import interp
from .ast import walk
from .checked import HISTORY, Checked, FieldInfo
from .errors import Diagnostic, ZcError, did_you_mean
from .ir import MAX_FLOAT
from .kinds import FieldKind, RuleKind
from .lint import allowed, lint
from .source import Source, Span

# Expression types. Enums carry their member tuple; "name" is a bare name awaiting context.
T_BOOL, T_NUM, T_ACTION, T_SET, T_TEXT, T_ERR = "bool", "number", "action", "set[action]", "text", "?"
T_LIST = "list"
ARGS = "args"  # `args.NAME` reads an argument of the proposed call
FUNCTIONS = ("len",)


@dataclass(frozen=True, slots=True)
class TEnum:
    members: tuple[str, ...]
    member_set: frozenset[str] = dataclasses.field(default=frozenset(), compare=False, repr=False)

    def __str__(self) -> str:
        return f"enum({', '.join(self.members)})"


@dataclass(frozen=True, slots=True)
class TName:
    path: str


def check(policy: A.Policy, source: Source, lints: bool = True) -> Checked:
    """Check a parsed policy; raise ZcError carrying all diagnostics if any is an error. Without
    `lints` the ZC1000-ZC1004 warnings are not looked for (they never make an error)."""
    checker = _Checker(policy, source)
    checked = checker.run(lints)
    kept = (d for d in checker.diags if not allowed(d))  # a `# zc: allow(CODE)` comment on the line
    diags = tuple(sorted(kept, key=lambda d: (d.span.start if d.span else -1)))
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
        self.order: dict[str, int] = {}
        self._types: dict[int, object] = {}  # id(FieldInfo) -> its expression type (made once)

    def err(self, code: str, msg: str, span: Span | None, help: str | None = None) -> None:
        self.diags.append(Diagnostic(code, "error", msg, span, help, path=self.src.path))

    def warn(self, code: str, msg: str, span: Span | None, help: str | None = None) -> None:
        self.diags.append(Diagnostic(code, "warning", msg, span, help, path=self.src.path))

    # ---- declarations -------------------------------------------------------------
    def run(self, lints: bool) -> Checked:
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
        self.order = {name: i for i, name in enumerate(self.actions)}  # declaration order
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
            rules.append(rule if cond is rule.cond else A.RuleDecl(
                name=rule.name, kind=rule.kind, target=rule.target, cond=cond, after=rule.after,
                span=rule.span))
        self._unique("ZC0105", "tier", p.tiers)
        self._text_tier(p.tiers)
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
        if lints and not any(d.is_error for d in self.diags):
            self.diags.extend(lint(checked, self.reads, self.src.path))
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

    def _text_tier(self, tiers) -> None:
        """At most one tier is `text` (the policy's text tier), and `specialist` is not it."""
        text = [t for t in tiers if t.text is not None]
        for t in text:
            if t.name.text == "specialist":
                self.err("ZC0115", "`specialist` cannot be the text tier", t.text.span,
                         "the specialists' rung never writes text: mark another tier `text`")
        for extra in text[1:]:
            self.err("ZC0114", f"more than one text tier: `{extra.name.text}`", extra.text.span,
                     f"`{text[0].name.text}` on line {text[0].span.line} is already the text tier")
        # tools.REPLY_TAG
        if text and not any(t.text == "reply" for a in self.actions.values() for t in a.tags):
            self.warn("ZC1006", f"text tier `{text[0].name.text}` is never asked: no action is tagged "
                                "`reply`",
                      text[0].text.span, "tag the reply action (`action respond tags(control, reply)`), or "
                                         "drop `text`")

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
                params[name] = FieldInfo(name, FieldKind.LIST, (), prm.optional)
            elif isinstance(prm.type, A.SetType):  # the grammar never builds it; kept total
                params[name] = FieldInfo(name, FieldKind.SET, (), prm.optional)
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
        self.fields[HISTORY] = FieldInfo(HISTORY, FieldKind.SET, default=frozenset(), has_default=True)

    def _field_info(self, f: A.FieldDecl) -> FieldInfo:
        t = f.type
        if isinstance(t, A.EnumType):
            members: dict[str, None] = {}  # in order
            for m in t.members:
                if m.text in members:
                    self.err("ZC0110", f"enum member `{m.text}` is listed twice", m.span)
                else:
                    members[m.text] = None
            kind = FieldKind.ENUM
        else:
            members, kind = [], (FieldKind.SET if isinstance(t, A.SetType) else t.kind)
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
        if info.kind == FieldKind.ENUM:
            if d.name.text not in info.members:
                self.err("ZC0202", f"`{d.name.text}` is not a member of `{info.path}`", d.span,
                         did_you_mean(d.name.text, info.members)
                         or f"members: {', '.join(info.members)}")
                return None
            return d.name.text
        if info.kind == FieldKind.FLOAT:
            return float(d.value)
        if info.kind == FieldKind.SET:
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
        after = {r.name.text for r in self.p.rules if r.kind == RuleKind.AFTER}
        targets = {r.name.text: self._target_quiet(r.target) for r in self.p.rules if r.name.text in after}
        for rule in self.p.rules:
            if rule.kind == RuleKind.AFTER:
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
            if name in want.member_set:
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
                if info.kind == FieldKind.TEXT:
                    self.err("ZC0305", f"rules cannot read text field `{path}`", e.span,
                             "text fields are features for specialists, not for rules")
                    return ref, T_ERR
                return ref, self._type(info)
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
                return A.Not(operand=new, span=e.span), T_BOOL
            case A.And(operands=ops) | A.Or(operands=ops):
                news = tuple(self._bool(o, in_rule)[0] for o in ops)
                return type(e)(operands=news, span=e.span), T_BOOL
            case A.Compare(op=op, left=l, right=r):
                return self._compare(e, op, l, r, in_rule)
            case A.InLit(operand=o, items=items):
                new, t = self._operand(o, in_rule)
                if t == T_ERR or not (isinstance(t, TEnum) or t in (T_NUM, T_ACTION)):
                    if t != T_ERR:
                        self.err("ZC0301", f"`in {{…}}` needs an enum, number or action, found `{t}`",
                                 o.span)
                    return A.InLit(operand=new, items=items, negated=e.negated, span=e.span), T_BOOL
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
                return A.InLit(operand=new, items=tuple(news), negated=e.negated, span=e.span), T_BOOL
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
                return A.InField(operand=new, field=nf, negated=e.negated, span=e.span), T_BOOL
            case A.Arith(left=l, right=r):
                nl = self._num(l, in_rule)
                nr = self._num(r, in_rule)
                new = A.Arith(op=e.op, left=nl, right=nr, span=e.span)
                if _constant(nl) and _constant(nr) and interp.evaluate(new, {}) is None \
                        and None not in (interp.evaluate(nl, {}), interp.evaluate(nr, {})):
                    self.err("ZC0313", "arithmetic on constants overflows", e.span,
                             f"numbers are finite, at most {MAX_FLOAT:.6g} in magnitude")
                return new, T_NUM
            case A.Neg(operand=o):
                return A.Neg(operand=self._num(o, in_rule), span=e.span), T_NUM
        raise AssertionError(f"unchecked expression {e!r}")

    def _arg(self, e: A.Name, name: str, in_rule: bool) -> tuple[A.Expr, object]:
        """Resolve `args.NAME` against the signatures of every action the rule targets."""
        if not in_rule:
            self.err("ZC0310", f"`{e.path}` is only defined inside a rule", e.span,
                     "a route is chosen before any call is proposed")
            return e, T_ERR
        self.reads_args = True
        targets = sorted(self.rule_targets, key=self.order.__getitem__)
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
        types = {t: self._type(i) for t, i in zip(targets, infos)}
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

    def _type(self, info: FieldInfo):
        """The expression type of a field or argument, one object per FieldInfo."""
        t = self._types.get(id(info))
        if t is None:
            t = self._types[id(info)] = _field_type(info)
        return t

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

    def _compare(self, e, op, left, right, in_rule):
        nl, lt = self._expr(left, in_rule)
        nr, rt = self._expr(right, in_rule)
        context = lambda t: t if isinstance(t, TEnum) or t in (T_ACTION, T_ERR) else None  # noqa: E731
        if isinstance(lt, TName) and isinstance(rt, TName):
            nl, lt = self._bare(nl, None)  # report the left one; the right is then moot
            nr, rt = self._bare(nr, T_ERR)
        elif isinstance(lt, TName):
            nl, lt = self._bare(nl, context(rt))
        elif isinstance(rt, TName):
            nr, rt = self._bare(nr, context(lt))
        new = A.Compare(op=op, left=nl, right=nr, span=e.span)
        if T_ERR in (lt, rt):
            return new, T_BOOL
        if op in ("<", "<=", ">", ">="):
            bad = next(((side, t) for side, t in ((left, lt), (right, rt)) if t != T_NUM), None)
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


_SCALAR_TYPES = {"bool": T_BOOL, "int": T_NUM, "float": T_NUM, "text": T_TEXT, "set": T_SET, "list": T_LIST}


def _field_type(info: FieldInfo):
    if info.kind == FieldKind.ENUM:
        return TEnum(info.members, frozenset(info.members))
    return _SCALAR_TYPES[info.kind]
