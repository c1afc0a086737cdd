"""Code generation: IR expressions to Python source in Kleene logic (None = unknown), for the runtime.

Every generated expression is total: arithmetic that leaves the finite float range (±infinity,
NaN, an integer past the largest float) is unknown, so it never makes an action legal. Deep
expressions are cut into statements (`HOIST`) so that whatever the checker accepts, Python
compiles: the nesting of one generated expression stays far below CPython's parenthesis limit.
Integers too long for a literal (action bitmasks of big policies) become named constants.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from . import ir
from .errors import ZcError
from .kinds import FieldKind, RuleKind

HOIST = 24  # parenthesis nesting past which a sub-expression becomes its own statement
MAX_LITERAL_BITS = 60  # longer integers are passed as named constants, not written out


@dataclass(frozen=True, slots=True)
class Code:
    """One generated Python expression."""

    text: str
    maybe: bool  # may evaluate to None (unknown)
    height: int = 0  # parenthesis nesting of `text`


@dataclass(frozen=True, slots=True)
class Test:
    """A generated condition: statements to run first, then an expression."""

    setup: tuple[str, ...]  # `tN = …` statements (unindented) that the expression reads
    code: Code
    reads: bool  # reads a state field or an argument (False: a constant, folded at load)

    def statements(self, then: str, keep_if: bool | None) -> str:
        """Function-body lines running `then` when the condition is not `keep_if` (None: is True)."""
        c = self.code
        if keep_if is None:
            test = f"{c.text} is True" if c.maybe else c.text
        elif c.maybe:
            test = f"{c.text} is not {keep_if}"
        else:
            test = f"not {c.text}" if keep_if else c.text
        lines = [f"    {s}" for s in self.setup] + [f"    if {test}:"]
        lines += [f"        {t}" for t in then.split("\n")]
        return "\n".join(lines)


@dataclass(slots=True)
class Gen:
    """Python source for IR expressions; one per generated module (shares reads and constants)."""

    fields: dict[str, ir.FieldDef]
    attrs: dict[str, tuple[str, ...]]
    used: dict[str, str] = field(default_factory=dict)  # field path -> local variable
    consts: dict[str, Any] = field(default_factory=dict)  # name -> value passed to the module
    _interned: dict[tuple[type, Any], str] = field(default_factory=dict)
    _tmp: int = 0
    _setup: list[str] = field(default_factory=list)
    _reads: int = 0

    def var(self, path: str) -> str:
        return self.used.setdefault(path, f"v{len(self.used)}")

    def const(self, value: Any) -> str:
        """A literal for `value`, or the name of a constant holding it."""
        if isinstance(value, (bool, str, float)) or (
                isinstance(value, int) and value.bit_length() <= MAX_LITERAL_BITS):
            return repr(value)
        key = (type(value), value)  # equal constants share a name, so equal conditions group
        name = self._interned.get(key)
        if name is None:
            name = self._interned[key] = f"K{len(self.consts)}"
            self.consts[name] = value
        return name

    def test(self, e: ir.Expr, action: ir.ActionDef | None) -> Test:
        """A condition with `self`/`cost` bound to `action`; temporaries restart for each test."""
        self._tmp, self._setup, self._reads = 0, [], 0
        code = self._expr(e, action)
        return Test(tuple(self._setup), code, self._reads > 0)

    def history_test(self, after: tuple[str, ...]) -> Test:
        """The condition of an `after` rule: every named action is in `history`."""
        h = self.var("history")
        text = "(" + " and ".join(f"({self.const(a)} in {h})" for a in after) + ")"
        return Test((), Code(text, False, 2), True)

    def prologue(self) -> str:
        """Lines binding each read field to its local variable (defaults applied)."""
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
            read = leaf if not guards else \
                f"({leaf} if {' is not None and '.join(guards)} is not None else None)"
            if f.kind == FieldKind.SET:
                members = f.default if isinstance(f.default, tuple) else ()
                default = self.const(frozenset(members)) if f.has_default else "None"
                lines.append(f"    {var} = {read}\n"
                             f"    {var} = frozenset({var}) if {var} is not None else {default}")
            elif f.has_default:
                lines.append(f"    {var} = {read}\n    if {var} is None: {var} = {self.const(f.default)}")
            else:
                lines.append(f"    {var} = {read}")
        return "\n".join(lines) + ("\n" if lines else "")

    def fold(self, t: Test) -> Any:
        """The value of a field-free condition, computed at load."""
        namespace = dict(self.consts)
        src = "\n".join(t.setup + (f"_value = {t.code.text}",))
        exec(compile(src, "<zc constant>", "exec"), namespace)  # noqa: S102 - generated from the IR
        return namespace["_value"]

    # ---- expressions ---------------------------------------------------------------------------
    def _t(self) -> str:
        self._tmp += 1
        return f"t{self._tmp}"

    def _out(self, text: str, maybe: bool, height: int) -> Code:
        """A node's code, hoisted into a statement when it nests too deep."""
        if height <= HOIST:
            return Code(text, maybe, height)
        t = self._t()
        self._setup.append(f"{t} = {text}")
        return Code(t, maybe, 0)

    def _expr(self, e: ir.Expr, action: ir.ActionDef | None) -> Code:
        match e:
            case ir.Field(path=p):
                self._reads += 1
                return Code(self.var(p), self.fields[p].may_be_absent)
            case ir.Const(value=v):
                return Code(self.const(v), False)
            case ir.Arg(name=n):
                self._reads += 1
                return Code(f"args.get({n!r})", True, 1)
            case ir.Len(operand=o):
                c = self._expr(o, action)
                t = self._t()
                return self._out(f"(None if ({t} := {c.text}) is None else len({t}))", True,
                                 c.height + 2)
            case ir.Self():
                return Code(self.const(_judged(action).name), False)
            case ir.Cost():
                return Code(self.const(_judged(action).cost), False)
            case ir.Not(operand=o):
                return self._lift(self._expr(o, action), lambda x: f"not {x}")
            case ir.And(operands=ops) | ir.Or(operands=ops):
                return self._kleene("and" if isinstance(e, ir.And) else "or",
                                    [self._expr(o, action) for o in ops])
            case ir.Cmp(op=op, left=l, right=r):
                return self._binary(op, self._expr(l, action), self._expr(r, action))
            case ir.Arith(op=op, left=l, right=r):
                c = self._binary(op, self._expr(l, action), self._expr(r, action))
                t = self._t()  # out of the finite range (inf, NaN, past floats): unknown
                return self._out(f"(None if ({t} := {c.text}) is None or not "
                                 f"{-ir.MAX_FLOAT!r} <= {t} <= {ir.MAX_FLOAT!r} else {t})",
                                 True, c.height + 2)
            case ir.InConst(operand=o, values=values, negated=neg):
                c = self._expr(o, action)
                k = self.const(frozenset(values))
                word = "not in" if neg else "in"
                return self._lift(c, lambda x: f"{x} {word} {k}")
            case ir.InSet(operand=o, path=p, negated=neg):
                return self._binary("not in" if neg else "in", self._expr(o, action),
                                    self._expr(ir.Field(p), action))
            case ir.Neg(operand=o):
                return self._lift(self._expr(o, action), lambda x: f"-{x}")
        raise ZcError(f"corrupt artifact: unknown expression {e!r}")

    def _lift(self, c: Code, apply: Callable[[str], str]) -> Code:
        """`apply` (one operand's text -> an expression) over a value that may be unknown: unknown stays
        unknown."""
        if not c.maybe:
            return self._out(f"({apply(c.text)})", False, c.height + 1)
        t = self._t()
        return self._out(f"(None if ({t} := {c.text}) is None else {apply(t)})", True, c.height + 2)

    def _kleene(self, word: str, parts: list[Code]) -> Code:
        height = max(p.height for p in parts) + 2
        if not any(p.maybe for p in parts):
            return self._out("(" + f" {word} ".join(p.text for p in parts) + ")", False, height)
        dominant = "False" if word == "and" else "True"
        ts = [self._t() for _ in parts]
        hit = " or ".join(f"({t} := {p.text}) is {dominant}" for t, p in zip(ts, parts))
        unknown = " or ".join(f"{t} is None" for t in ts)
        other = "True" if word == "and" else "False"
        return self._out(f"({dominant} if {hit} else (None if {unknown} else {other}))", True,
                         height)

    def _binary(self, op: str, a: Code, b: Code) -> Code:
        height = max(a.height, b.height) + 2
        if not (a.maybe or b.maybe):
            return self._out(f"({a.text} {op} {b.text})", False, height)
        ta, tb = self._t(), self._t()
        unknown = " or ".join(x for x in (f"({ta} := {a.text}) is None" if a.maybe else "",
                                          f"({tb} := {b.text}) is None" if b.maybe else "") if x)
        left = ta if a.maybe else a.text
        right = tb if b.maybe else b.text
        return self._out(f"(None if {unknown} else {left} {op} {right})", True, height)


@dataclass(frozen=True, slots=True)
class Group:
    """Targets of one rule whose specialised conditions are equal: evaluated once, as one test."""

    rule: int  # 1-based index into the rules; negative: folded at load and always removes
    targets: tuple[int, ...]  # indices of the actions this group removes when it fires


@dataclass(frozen=True, slots=True)
class LegalProgram:
    """The generated legal-set evaluator of a policy (`_eval`, `_route`) and what explains it.

    `_eval(st, removed)` appends the index of every group that fires to the list it returns and
    sets `removed[i] = 1` for each action it removes. Groups of any rules whose conditions are
    equal share one test, so work grows with the distinct conditions tested and the actions
    they touch, never with the width of the policy.
    """

    gen: Gen
    groups: tuple[Group, ...]
    conds: dict[int, tuple[bool, Test]]  # group index -> (keep if, its condition); not constants
    static: frozenset[int]  # actions removed whatever the state (constant groups)
    source: str
    by_action: dict[int, list[int]]  # action index -> the groups that can remove it

    def restricted(self, action: int) -> tuple[str, tuple[int, ...]]:
        """(source of an `_eval` over only the groups that can remove action `action`, those group
        indices): what `check` runs for one proposed action."""
        groups = tuple(self.by_action.get(action, ()))
        body = ["    fired = []"] + [_fire(self.gen, self.conds[g], (g,), self.groups[g].targets)
                                     for g in groups if g in self.conds]
        return function("_eval", "st, removed", self.gen, body, "return fired"), groups


def legal_program(p: ir.PolicyIR, gen: Gen, index: dict[str, int],
                  skip: frozenset[int]) -> LegalProgram:
    """Specialise each rule (but those in `skip`) per target, group equal residual conditions,
    fold the constant ones, and generate `_eval(st, removed) -> fired groups` and
    `_route(st) -> index of the first route that holds, or -1`.

    A condition without `self` or `cost` is generated once for all its targets, and equal
    conditions of different rules are tested once in `_eval`: load stays linear in the rules."""
    groups: list[Group] = []
    conds: dict[int, tuple[bool, Test]] = {}
    static: set[int] = set()
    memo: dict[ir.Expr, Test] = {}  # action-free condition -> its test (same Gen, same text)
    # (keep if, setup, text) of a test -> (keep if and test, its groups, the targets they remove)
    shared: dict[tuple[bool, tuple[str, ...], str], tuple[tuple[bool, Test], list[int], dict[int, None]]] = {}
    for ri, rule in enumerate(p.rules, start=1):
        if ri - 1 in skip:
            continue
        by_test: dict[tuple[bool, Test], list[int]] = {}  # (keep if, condition) -> targets
        cond = rule.cond
        if rule.kind == RuleKind.AFTER:
            by_test[(True, gen.history_test(rule.after))] = [index[n] for n in rule.targets]
        elif cond is None:
            raise ValueError(f"rule `{rule.name}`: a `{rule.kind}` rule without a condition")
        elif (test := memo.get(cond)) is not None or not ir.holds(cond, ir.Self, ir.Cost):
            if test is None:
                test = memo[cond] = gen.test(cond, None)
            by_test[(rule.kind != RuleKind.FORBID_WHEN, test)] = [index[n] for n in rule.targets]
        else:
            for name in rule.targets:
                key = (rule.kind != RuleKind.FORBID_WHEN, gen.test(cond, p.actions[index[name]]))
                by_test.setdefault(key, []).append(index[name])
        for key, targets in by_test.items():
            keep_if, test = key
            if not test.reads:
                if gen.fold(test) is not keep_if:  # unknown removes too (fail closed)
                    static.update(targets)
                    groups.append(Group(-ri, tuple(targets)))
                continue
            g = len(groups)
            groups.append(Group(ri, tuple(targets)))
            conds[g] = key
            _, fired, removes = shared.setdefault((keep_if, test.setup, test.code.text),
                                                  (key, [], {}))
            fired.append(g)
            removes.update(dict.fromkeys(targets))
    body = ["    fired = []"] + [_fire(gen, key, tuple(fired), tuple(removes))
                                 for key, fired, removes in shared.values()]
    route_body = []
    for i, route in enumerate(p.routes):
        if route.when is None:
            route_body.append(f"    return {i}")
            break
        route_body.append(gen.test(route.when, None).statements(f"return {i}", None))
    source = (function("_eval", "st, removed", gen, body, "return fired") + "\n"
              + function("_route", "st", gen, route_body, "return -1"))
    by_action: dict[int, list[int]] = {}
    for g, group in enumerate(groups):
        for i in group.targets:
            by_action.setdefault(i, []).append(g)
    return LegalProgram(gen, tuple(groups), conds, frozenset(static), source, by_action)


def _fire(gen: Gen, key: tuple[bool, Test], fired: tuple[int, ...], targets: tuple[int, ...]) -> str:
    """Statements recording `fired` groups and removing `targets` when the condition goes against."""
    keep_if, test = key
    note = f"fired.append({fired[0]})" if len(fired) == 1 else f"fired += {gen.const(fired)}"
    store = f"removed[{targets[0]}] = 1" if len(targets) == 1 else \
        f"for i in {gen.const(targets)}: removed[i] = 1"
    return test.statements(f"{note}\n{store}", keep_if)


def _judged(action: ir.ActionDef | None) -> ir.ActionDef:
    """The action a condition reading `self` or `cost` is judged for (there is one)."""
    if action is None:
        raise ValueError("`self` and `cost` are read only when one action is judged")
    return action


def check_program(p: ir.PolicyIR, gen: Gen, action: ir.ActionDef, rules: tuple[int, ...]) -> str:
    """Source of `_check(st, args) -> bit j set when argument rule rules[j] goes against `action``."""
    body = ["    fired = 0"]
    for j, ri in enumerate(rules):
        rule = p.rules[ri]
        if rule.cond is None:
            raise ValueError(f"rule `{rule.name}`: an argument rule without a condition")
        body.append(gen.test(rule.cond, action).statements(f"fired |= {gen.const(1 << j)}",
                                                           rule.kind != RuleKind.FORBID_WHEN))
    return function("_check", "st, args", gen, body, "return fired")


def function(name: str, params: str, gen: Gen, body: list[str], tail: str) -> str:
    """The source of one generated function: prologue, body lines, final statement."""
    return f"def {name}({params}):\n" + gen.prologue() + "\n".join(body) + \
        ("\n" if body else "") + f"    {tail}\n"


def load(src: str, consts: dict[str, Any], label: str) -> dict[str, Any]:
    """Compile and run generated source (from verified or just-lowered IR) with its constants."""
    namespace = dict(consts)
    exec(compile(src, label, "exec"), namespace)  # noqa: S102 - generated here from the IR
    return namespace

