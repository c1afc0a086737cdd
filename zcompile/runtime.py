"""Runtime: the IR of an artifact to a fast evaluator, state -> LegalSet. No compiler imports.

At load, every rule is specialised per target action (`self` and `cost` become constants),
actions whose residual conditions are equal share a group, and the whole policy becomes one
generated Python function that evaluates each group once, in Kleene logic, and ORs precomputed
action bitmasks. Reasons are assembled lazily from the groups that fired.

Rules that read the proposed call's arguments (`args.*`) are left out of that function: `legal`
cannot know arguments. `check(state, action, args)` judges one proposed call: the argument schema,
the legal set, and those rules, generated into one small function per action.
"""

from __future__ import annotations

import operator
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

from . import ir
from .errors import ZcError, did_you_mean
from .state import Schema, read_path

MAX_SHOWN = 160  # a longer condition is cut in reason messages (its span points at the whole rule)
_OPS = {"==": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le,
        ">": operator.gt, ">=": operator.ge, "+": operator.add, "-": operator.sub,
        "*": operator.mul}


@dataclass(frozen=True, slots=True)
class Reason:
    """Why one action was removed: the rule, its kind and span, the deciding values, a message."""

    rule: str  # rule name, or "intent" for default-deny outside the active intent
    kind: str  # requires | forbid_when | forbid_unless | after | intent
    message: str
    span: ir.SpanDef | None
    values: tuple[tuple[str, Any], ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"rule": self.rule, "kind": self.kind, "message": self.message,
                "span": msgspec.to_builtins(self.span) if self.span else None,
                "values": {k: _show(v) for k, v in self.values}}


@dataclass(frozen=True, slots=True)
class Verdict:
    """The judgement of one proposed call: allowed, or every reason it is not."""

    action: str
    allowed: bool
    reasons: tuple[Reason, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"action": self.action, "allowed": self.allowed,
                "reasons": [r.to_dict() for r in self.reasons]}


class LegalSet:
    """The legal actions for one state, with every reason each other action was removed."""

    __slots__ = ("_policy", "_root", "_fired", "_removed", "_universe", "_intent", "actions",
                 "fallback", "_reasons")

    def __init__(self, policy: Policy, root: Any, fired: int, removed: int, universe: int,
                 intent: str | None, actions: tuple[str, ...], fallback: bool) -> None:
        self._policy, self._root, self._fired = policy, root, fired
        self._removed, self._universe, self._intent = removed, universe, intent
        self.actions = actions
        self.fallback = fallback
        self._reasons: dict[str, tuple[Reason, ...]] | None = None

    def __contains__(self, action: str) -> bool:
        return action in self.actions

    def __iter__(self) -> Iterator[str]:
        return iter(self.actions)

    def __len__(self) -> int:
        return len(self.actions)

    def __repr__(self) -> str:
        return f"LegalSet(actions={self.actions!r}, fallback={self.fallback})"

    @property
    def root(self) -> Any:
        """The validated state this set was computed from (pass it on instead of validating again)."""
        return self._root

    @property
    def removed(self) -> Mapping[str, tuple[Reason, ...]]:
        """Each action not in `actions`, mapped to every reason it was removed (computed once)."""
        if self._reasons is None:
            legal = set(self.actions)
            self._reasons = self._policy._explain(
                self._root, self._fired, self._universe, self._intent,
                [a for a in self._policy.actions if a not in legal])
        return self._reasons

    def to_dict(self) -> dict[str, Any]:
        return {"policy": self._policy.name, "legal": list(self.actions), "fallback": self.fallback,
                "removed": {a: [r.to_dict() for r in rs] for a, rs in self.removed.items()}}


@dataclass(frozen=True, slots=True)
class _Group:
    rule: int  # index into ir.rules
    mask: int  # the actions this group removes when it fires


class Policy:
    """A loaded policy: `legal(state, intent)` answers which actions are legal and why not."""

    def __init__(self, policy: ir.PolicyIR) -> None:
        self.ir = policy
        self.sha256 = ir.identity(policy)
        self.name = policy.name
        self.actions = tuple(a.name for a in policy.actions)
        self._index = {a: i for i, a in enumerate(self.actions)}
        _validate(policy, self._index)
        self._all = (1 << len(self.actions)) - 1
        self._intents = {i.name: self._mask(i.allow) for i in policy.intents}
        self._fallback = policy.fallback
        self._fields = {f.path: f for f in policy.fields}
        self._schemas = {s: Schema(policy.fields, self.actions, s) for s in (False, True)}
        self._chunks = _chunk_table(self.actions)
        self._groups: list[_Group] = []
        self._tests: dict[int, str] = {}  # group -> its generated test (constant groups have none)
        self._action_evals: dict[str, Any] = {}
        self._static = 0
        self._arg_rules = frozenset(i for i, r in enumerate(policy.rules) if r.args)
        self._eval, self._route = self._generate()
        self._params = {a.name: ({p.name: p for p in a.params} if a.params is not None else None)
                        for a in policy.actions}
        self._checks: dict[str, tuple[Any, tuple[int, ...]]] = {}
        self._reads_cost: dict[str, bool] = {}  # rule name -> its condition reads `cost`

    @property
    def intents(self) -> tuple[str, ...]:
        return tuple(self._intents)

    def _mask(self, names) -> int:
        m = 0
        for n in names:
            m |= 1 << self._index[n]
        return m

    # ---- evaluation --------------------------------------------------------------------------
    def legal(self, state: Any, intent: str | None = None, *, strict: bool = False) -> LegalSet:
        """Validate `state` and return its LegalSet; `strict` rejects unknown keys.

        Raises:
            StateError: the state does not match the schema (message starts with its `$.path`).
            ZcError: `intent` is not declared by the policy.
        """
        root = self._schemas[strict].convert(state)
        universe = self._all if intent is None else self._universe(intent)
        fired, removed = self._eval(root)
        removed |= self._static
        legal = universe & ~removed
        if legal:
            return LegalSet(self, root, fired, removed, universe, intent, self._names(legal), False)
        return LegalSet(self, root, fired, removed, universe, intent, (self._fallback,), True)

    def check(self, state: Any, action: str, args: Mapping[str, Any] | None = None,
              intent: str | None = None, *, strict: bool = False) -> Verdict:
        """Judge one proposed call: `action` with `args` in `state` (under `intent`).

        Reasons, in this order: the arguments against the action's signature (kind `schema`:
        missing required, wrong type, unknown argument), why `legal(state, intent)` removed the
        action, and every rule reading `args.*` whose condition goes against the call. An argument
        that is missing or has the wrong type is unknown to the rules, so it never makes a call
        allowed (fail closed). Actions without a signature take any arguments.

        Raises:
            StateError: the state does not match the schema.
            ZcError: `action` or `intent` is not declared by the policy, or `args` is not an object.
        """
        if action not in self._index:
            hint = did_you_mean(action, self.actions) or "not declared by the policy"
            raise ZcError(f"unknown action `{action}` ({hint})")
        if args is None:
            args = {}
        if not isinstance(args, Mapping):
            raise ZcError(f"arguments of `{action}` must be an object, got {_json_type(args)}")
        reasons, values = self._schema(action, args)
        root = self._schemas[strict].convert(state)
        universe = self._all if intent is None else self._universe(intent)
        bit = 1 << self._index[action]
        evaluate, groups = self._action_eval(action)
        fired, removed = evaluate(root)
        if (removed | self._static) & bit or not universe & bit:
            if action == self._fallback:  # legal anyway when every other action is removed too
                fired, removed = self._eval(root)
                if not universe & ~(removed | self._static):
                    fired = None
            if fired is not None:
                reasons.extend(self._explain(root, fired, universe, intent, [action], groups)[action])
        fn, rules = self._check_fn(action)
        if rules:
            fired_args = fn(root, values)
            for j, ri in enumerate(rules):
                if fired_args >> j & 1:
                    reasons.append(self._arg_reason(self.ir.rules[ri], action, root, values))
        return Verdict(action, not reasons, tuple(reasons))

    def _action_eval(self, action: str):
        """(the generated evaluator restricted to the groups that can remove `action`, returning
        (fired, removed) like the whole one; the indices of those groups). Made on first use."""
        got = self._action_evals.get(action)
        if got is None:
            bit = 1 << self._index[action]
            groups = tuple(g for g, group in enumerate(self._groups) if group.mask & bit)
            body = [self._tests[g] for g in groups if g in self._tests]
            src = "def _eval(st):\n" + self._prologue + "    fired = 0\n    removed = 0\n" + \
                "\n".join(body) + "\n    return fired, removed\n"
            got = self._action_evals[action] = (self._exec(src, self._consts, action)["_eval"], groups)
        return got

    def _schema(self, action: str, args: Mapping[str, Any]) -> tuple[list[Reason], dict[str, Any]]:
        """Schema reasons, and the argument values the rules may read (bad ones as unknown)."""
        params = self._params[action]
        if params is None:
            return [], dict(args)
        reasons: list[Reason] = []
        values: dict[str, Any] = {}
        for name, p in params.items():
            v = args.get(name)
            if v is None:
                if not p.optional:
                    reasons.append(_schema_reason(action, name, f"missing required argument `{name}`"))
                continue
            problem = _type_problem(p, v)
            if problem:
                reasons.append(_schema_reason(action, name, problem, v))
            else:
                values[name] = v
        for name in args:
            if name not in params:
                hint = did_you_mean(str(name), params)
                reasons.append(_schema_reason(
                    action, str(name), f"unknown argument `{name}`" + (f" ({hint})" if hint else
                    f" (`{action}` takes " + (", ".join(f"`{p}`" for p in params) or "none") + ")"),
                    args[name]))
        return reasons, values

    def _check_fn(self, action: str):
        """(generated function, rule indices) judging the argument rules that target `action`."""
        got = self._checks.get(action)
        if got is None:
            rules = tuple(ri for ri in sorted(self._arg_rules) if action in self.ir.rules[ri].targets)
            gen = _Gen(self._fields, self._schemas[False].attrs)
            adef = self.ir.actions[self._index[action]]
            body = []
            for j, ri in enumerate(rules):
                rule = self.ir.rules[ri]
                code, maybe = gen.expr(rule.cond, adef)
                keep_if = rule.kind != "forbid_when"
                test = f"{code} is not {keep_if}" if maybe else (f"not {code}" if keep_if else code)
                body.append(f"    if {test}:\n        fired |= {1 << j}")
            src = ("def _check(st, args):\n" + gen.prologue() + "    fired = 0\n" + "\n".join(body)
                   + "\n    return fired\n")
            got = self._checks[action] = (self._exec(src, gen.consts, action)["_check"], rules)
        return got

    def _arg_reason(self, rule: ir.RuleDef, action: str, root: Any, args: dict[str, Any]) -> Reason:
        values = tuple((p, read_path(self._schemas[False], root, p)) for p in rule.reads)
        values += tuple((f"args.{n}", args.get(n)) for n in rule.args)
        return self._reason(rule, action, values)

    def route(self, state: Any, *, strict: bool = False) -> ir.RouteDef | None:
        """The first route whose `when` definitely holds (routes without `when` always hold)."""
        return self._route_root(self._schemas[strict].convert(state))

    def route_of(self, legal: LegalSet) -> ir.RouteDef | None:
        """`route` for the state a LegalSet was computed from (validated once, not twice)."""
        return self._route_root(legal._root)

    def _route_root(self, root: Any) -> ir.RouteDef | None:
        index = self._route(root)
        return None if index < 0 else self.ir.routes[index]

    def _universe(self, intent: str) -> int:
        try:
            return self._intents[intent]
        except KeyError:
            hint = did_you_mean(intent, self._intents) or (
                f"declared intents: {', '.join(self._intents)}" if self._intents else
                "this policy declares no intents")
            raise ZcError(f"unknown intent `{intent}` ({hint})") from None

    def _names(self, mask: int) -> tuple[str, ...]:
        if mask == self._all:
            return self.actions
        out: list[str] = []
        chunks = self._chunks
        for i, byte in enumerate(mask.to_bytes(len(chunks), "little")):
            if byte:
                out.extend(chunks[i][byte])
        return tuple(out)

    # ---- reasons -------------------------------------------------------------------------------
    def _explain(self, root: Any, fired: int, universe: int, intent: str | None,
                 removed: list[str], groups=None) -> dict[str, tuple[Reason, ...]]:
        """Every reason each action of `removed` was removed; `fired`: the groups that fired;
        `groups`: the indices of the groups to look at (default: all)."""
        reasons: dict[str, list[Reason]] = {a: [] for a in removed}
        if not reasons:
            return {}
        if intent is not None:
            for a in reasons:
                if not universe >> self._index[a] & 1:
                    reasons[a].append(Reason("intent", "intent",
                                             f"not allowed by intent `{intent}`", None))
        fired_rules: dict[int, int] = {}
        want = self._mask(reasons)
        for g in range(len(self._groups)) if groups is None else groups:
            group = self._groups[g]
            if group.mask & want and (fired >> g & 1 or group.rule < 0):
                fired_rules[abs(group.rule)] = fired_rules.get(abs(group.rule), 0) | group.mask
        for ri, mask in sorted(fired_rules.items()):
            rule = self.ir.rules[ri - 1]
            values = tuple((p, read_path(self._schemas[False], root, p)) for p in rule.reads)
            for a in self.actions:
                if a in reasons and mask >> self._index[a] & 1:
                    reasons[a].append(self._reason(rule, a, values))
        return {a: tuple(rs) for a, rs in reasons.items()}

    def _reason(self, rule: ir.RuleDef, action: str, values) -> Reason:
        cost = self.ir.actions[self._index[action]].cost
        reads_cost = self._reads_cost.get(rule.name)
        if reads_cost is None:
            reads_cost = self._reads_cost[rule.name] = rule.cond is not None and _reads_cost(rule.cond)
        if reads_cost:
            values = values + (("cost", cost),)
        shown = ", ".join(f"{k} = {_show(v)}" for k, v in values)
        if rule.kind == "after":
            history = dict(values).get("history") or frozenset()
            missing = [a for a in rule.after if a not in history]
            msg = f"`{action}` must come after {', '.join(f'`{m}`' for m in missing)}"
            values = (("history", history),)
        else:
            verb = {"requires": "requires", "forbid_when": "is forbidden when",
                    "forbid_unless": "is forbidden unless"}[rule.kind]
            text = rule.text if len(rule.text) <= MAX_SHOWN else rule.text[:MAX_SHOWN - 1] + "…"
            msg = f"`{action}` {verb} `{text}`" + (f" ({shown})" if shown else "")
        return Reason(rule.name, rule.kind, msg, rule.span, values)

    # ---- code generation -------------------------------------------------------------------------
    def _generate(self):
        gen = _Gen(self._fields, self._schemas[False].attrs)
        body: list[str] = []
        for ri, rule in enumerate(self.ir.rules, start=1):
            if ri - 1 in self._arg_rules:
                continue  # reads arguments: judged by `check` only
            by_code: dict[str, int] = {}
            for name in rule.targets:
                gen.reads = 0
                if rule.kind == "after":
                    code = " and ".join(f"({c!r} in {gen.var('history')})" for c in rule.after)
                    code, maybe, reads = f"({code})", False, 1
                    keep_if = "true"
                else:
                    action = self.ir.actions[self._index[name]]
                    code, maybe = gen.expr(rule.cond, action)
                    reads = gen.reads
                    keep_if = "false" if rule.kind == "forbid_when" else "true"
                key = f"{keep_if}|{maybe}|{bool(reads)}|{code}"
                by_code[key] = by_code.get(key, 0) | 1 << self._index[name]
            for key, mask in by_code.items():
                keep_if, maybe, reads, code = key.split("|", 3)
                constant = gen.constant(code) if reads == "False" else _NOT_CONST
                if constant is not _NOT_CONST:
                    if constant is not (keep_if == "true"):
                        self._static |= mask
                        self._groups.append(_Group(-ri, mask))
                    continue
                g = len(self._groups)
                self._groups.append(_Group(ri, mask))
                if maybe == "True":
                    test = f"{code} is not {keep_if == 'true'}"
                else:
                    test = f"not {code}" if keep_if == "true" else code
                body.append(f"    if {test}:\n        fired |= {1 << g}\n        removed |= {mask}")
                self._tests[g] = body[-1]
        route_body = []
        for i, route in enumerate(self.ir.routes):
            if route.when is None:
                route_body.append(f"    return {i}")
                break
            code, _ = gen.expr(route.when, None)
            route_body.append(f"    if {code} is True:\n        return {i}")
        route_body.append("    return -1")
        src = ("def _eval(st):\n" + gen.prologue() + "    fired = 0\n    removed = 0\n"
               + "\n".join(body) + "\n    return fired, removed\n\n"
               + "def _route(st):\n" + gen.prologue() + "\n".join(route_body) + "\n")
        namespace = self._exec(src, gen.consts)
        self._source = src
        self._prologue, self._consts = gen.prologue(), gen.consts
        return namespace["_eval"], namespace["_route"]

    def _exec(self, src: str, consts: dict[str, Any], action: str | None = None) -> dict[str, Any]:
        """Run generated source (from checked IR) with its constants; returns its namespace."""
        namespace = dict(consts)
        label = f"<zc policy {self.name}" + (f": {action}>" if action else ">")
        exec(compile(src, label, "exec"), namespace)  # noqa: S102 - generated here from checked IR
        return namespace


_NOT_CONST = object()


class _Gen:
    """Python source for IR expressions in Kleene logic (None = unknown)."""

    def __init__(self, fields: dict[str, ir.FieldDef], attrs: dict[str, tuple[str, ...]]) -> None:
        self.fields = fields
        self.attrs = attrs
        self.reads = 0
        self.used: dict[str, str] = {}
        self.consts: dict[str, Any] = {}
        self.tmp = 0

    def var(self, path: str) -> str:
        return self.used.setdefault(path, f"v{len(self.used)}")

    def const(self, value: Any) -> str:
        if isinstance(value, (bool, int, float, str)):
            return repr(value)
        name = f"K{len(self.consts)}"
        self.consts[name] = value
        return name

    def _t(self) -> str:
        self.tmp += 1
        return f"t{self.tmp}"

    def constant(self, code: str):
        """The value of a field-free expression, folded at load."""
        return eval(code, dict(self.consts))  # noqa: S307 - generated here from checked IR

    def prologue(self) -> str:
        lines = []
        for path, var in self.used.items():
            f = self.fields[path]
            chain = self.attrs[path]
            expr = "st"
            guards = []
            for attr in chain[:-1]:
                expr = f"{expr}.{attr}"
                guards.append(expr)
            leaf = f"{expr}.{chain[-1]}"
            read = leaf if not guards else f"({leaf} if {' is not None and '.join(guards)} is not None else None)"
            if f.kind == "set":
                default = self.const(frozenset(f.default or ())) if f.has_default else "None"
                lines.append(f"    {var} = {read}\n    {var} = frozenset({var}) if {var} is not None else {default}")
            elif f.has_default:
                lines.append(f"    {var} = {read}\n    if {var} is None: {var} = {f.default!r}")
            else:
                lines.append(f"    {var} = {read}")
        return "\n".join(lines) + ("\n" if lines else "")

    def expr(self, e: ir.Expr, action: ir.ActionDef | None) -> tuple[str, bool]:
        """(source, may be None) of an expression, with `self`/`cost` bound to `action`."""
        match e:
            case ir.Field(path=p):
                self.reads += 1
                return self.var(p), self.fields[p].may_be_absent
            case ir.Const(value=v):
                return repr(v), False
            case ir.Arg(name=n):
                self.reads += 1
                return f"args.get({n!r})", True
            case ir.Len(operand=o):
                c, n = self.expr(o, action)
                t = self._t()
                return f"(None if ({t} := {c}) is None else len({t}))", True
            case ir.Self():
                return repr(action.name), False
            case ir.Cost():
                return repr(action.cost), False
            case ir.Not(operand=o):
                c, n = self.expr(o, action)
                if not n:
                    return f"(not {c})", False
                t = self._t()
                return f"(None if ({t} := {c}) is None else not {t})", True
            case ir.And(operands=ops) | ir.Or(operands=ops):
                parts = [self.expr(o, action) for o in ops]
                word = "and" if isinstance(e, ir.And) else "or"
                if not any(n for _, n in parts):
                    return "(" + f" {word} ".join(c for c, _ in parts) + ")", False
                dominant = "False" if word == "and" else "True"
                ts = [self._t() for _ in parts]
                hit = " or ".join(f"({t} := {c}) is {dominant}" for t, (c, _) in zip(ts, parts))
                unknown = " or ".join(f"{t} is None" for t in ts)
                other = "True" if word == "and" else "False"
                return f"({dominant} if {hit} else (None if {unknown} else {other}))", True
            case ir.Cmp(op=op, left=l, right=r) | ir.Arith(op=op, left=l, right=r):
                return self._binary(op, self.expr(l, action), self.expr(r, action))
            case ir.InConst(operand=o, values=values, negated=neg):
                c, n = self.expr(o, action)
                k = self.const(frozenset(values))
                word = "not in" if neg else "in"
                if not n:
                    return f"({c} {word} {k})", False
                t = self._t()
                return f"(None if ({t} := {c}) is None else {t} {word} {k})", True
            case ir.InSet(operand=o, path=p, negated=neg):
                word = "not in" if neg else "in"
                return self._binary(word, self.expr(o, action), self.expr(ir.Field(p), action))
            case ir.Neg(operand=o):
                c, n = self.expr(o, action)
                if not n:
                    return f"(-{c})", False
                t = self._t()
                return f"(None if ({t} := {c}) is None else -{t})", True
        raise ZcError(f"corrupt artifact: unknown expression {e!r}")

    def _binary(self, op: str, left: tuple[str, bool], right: tuple[str, bool]) -> tuple[str, bool]:
        (a, an), (b, bn) = left, right
        if not (an or bn):
            return f"({a} {op} {b})", False
        ta, tb = self._t(), self._t()
        unknown = " or ".join(x for x in (f"({ta} := {a}) is None" if an else "",
                                          f"({tb} := {b}) is None" if bn else "") if x)
        la = ta if an else a
        lb = tb if bn else b
        return f"(None if {unknown} else {la} {op} {lb})", True


def _chunk_table(actions: tuple[str, ...]) -> list[list[tuple[str, ...]]]:
    """For byte i of a mask and each byte value, the action names its bits stand for."""
    table = []
    for i in range(0, max(1, (len(actions) + 7) // 8)):
        names = actions[i * 8 : i * 8 + 8]
        table.append([tuple(n for b, n in enumerate(names) if v >> b & 1) for v in range(256)])
    return table


def _reads_cost(e: ir.Expr) -> bool:
    if isinstance(e, ir.Cost):
        return True
    for f in e.__struct_fields__:
        v = getattr(e, f)
        if isinstance(v, tuple):
            if any(isinstance(x, msgspec.Struct) and _reads_cost(x) for x in v):
                return True
        elif isinstance(v, msgspec.Struct) and _reads_cost(v):
            return True
    return False


def _schema_reason(action: str, arg: str, problem: str, value: Any = None) -> Reason:
    msg = f"`{action}`: {problem}" if problem.startswith(("missing", "unknown")) else \
        f"`{action}`: argument `{arg}`: {problem}"
    return Reason("schema", "schema", msg, None,
                  ((f"args.{arg}", value),) if value is not None else ())


def _json_type(v: Any) -> str:
    if isinstance(v, bool):
        return "a boolean"
    if isinstance(v, int):
        return "an integer"
    if isinstance(v, float):
        return "a number"
    if isinstance(v, str):
        return "a string"
    if isinstance(v, (list, tuple)):
        return "an array"
    if isinstance(v, Mapping):
        return "an object"
    return "null" if v is None else type(v).__name__


def _type_problem(p: ir.ParamDef, v: Any) -> str | None:
    """What is wrong with argument value `v` for parameter `p` (None: nothing)."""
    ok = {"bool": isinstance(v, bool),
          "int": isinstance(v, int) and not isinstance(v, bool),
          "float": isinstance(v, (int, float)) and not isinstance(v, bool),
          "text": isinstance(v, str),
          "list": isinstance(v, (list, tuple)),
          "enum": isinstance(v, str) and v in p.members}[p.kind]
    if ok:
        return None
    if p.kind == "enum":
        shown = "|".join(p.members[:12]) + ("|…" if len(p.members) > 12 else "")
        got = msgspec.json.encode(v).decode() if isinstance(v, str) else _json_type(v)
        return f"expected one of {shown}, got {got}"
    want = {"bool": "a boolean", "int": "an integer", "float": "a number", "text": "a string",
            "list": "an array"}[p.kind]
    return f"expected {want}, got {_json_type(v)}"


def _show(v: Any) -> Any:
    if v is None:
        return "absent"
    if isinstance(v, (list, tuple)):
        return f"[{len(v)} item{'' if len(v) == 1 else 's'}]"
    if isinstance(v, frozenset):
        return "{" + ", ".join(sorted(v)) + "}"
    if isinstance(v, bool):
        return "true" if v else "false"
    return v


def _validate(p: ir.PolicyIR, index: dict[str, int]) -> None:
    """Refuse an IR whose names do not resolve (a corrupt or hand-edited artifact)."""
    fields = {f.path for f in p.fields}
    names = [p.fallback, *(a for i in p.intents for a in i.allow),
             *(a for r in p.rules for a in (*r.targets, *r.after))]
    bad = next((n for n in names if n not in index), None)
    if bad is not None:
        raise ZcError(f"corrupt artifact: unknown action `{bad}`")
    for r in p.rules:
        for path in r.reads:
            if path not in fields:
                raise ZcError(f"corrupt artifact: rule `{r.name}` reads unknown field `{path}`")
        if (r.kind == "after") != (r.cond is None):
            raise ZcError(f"corrupt artifact: rule `{r.name}` has a malformed condition")
        for t in r.targets if r.args else ():
            params = next(a.params for a in p.actions if a.name == t) or ()
            missing = set(r.args) - {prm.name for prm in params}
            if missing:
                raise ZcError(f"corrupt artifact: rule `{r.name}` reads argument "
                              f"`{sorted(missing)[0]}` that `{t}` does not declare")


def load(path: str | Path) -> Policy:
    """Load a compiled `.zcp` artifact (hash and version verified).

    Raises:
        ZcError: the file is missing, not an artifact, tampered with, or of a newer format.
    """
    p = Path(path)
    try:
        data = p.read_bytes()
    except OSError as exc:
        raise ZcError(f"{p}: cannot read artifact: {exc.strerror}") from None
    policy, _ = ir.loads(data, str(p))
    return Policy(policy)
