"""Lints: the ZC1xxx warnings, decided by enumerating the cases of the fields a question reads.

Each (rule, action) question is answered by the runtime's own code generator (codegen.py): a
rule's keep-predicate is written once, its constants as parameters, rules of one shape share one
compiled factory, and each predicate is mapped over the columns of the enumerated states (C-level
iteration, no tree walking). The reference interpreter (interp.py) only folds the constants a
condition mentions.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import re

from . import ast as A
from . import codegen, interp, ir
from .ast import walk
from .checked import Checked
from .errors import Diagnostic
from .kinds import NUMBERS, FieldKind, RuleKind
from .lower import expr as lower_expr
from .source import Span

RISKY_TAGS = ("destructive", "publish", "money", "credential")
LINT_BUDGET = 1 << 16  # most states enumerated to decide one lint; beyond it the lint stays silent
LINT_WORK = 5_000_000  # most rule evaluations for all lints of a file; beyond it they stay silent
PREFETCH = 256  # rules whose predicates are written ahead, compiled with those of a question
ALLOW = re.compile(r"#.*?\bzc:\s*allow\(([^)]*)\)")  # `# zc: allow(ZC1004, …)` on a warning's line
_MISSING = object()
_SELF, _COST = object(), object()  # in a rule's constants: the asked action's name and cost
_MARKED = ir.ActionDef(_SELF, cost=_COST)  # the action a rule's predicate is written for
_NOT_NUMBERS = frozenset({A.FieldRef, A.ActionRef, A.MemberRef, A.Bool})  # no constant number below


def lint(checked: Checked, reads: set[str], path: str) -> list[Diagnostic]:
    """The ZC1000-ZC1004 diagnostics of a policy that checked without errors."""
    return Linter(checked, reads, path).run()


def allowed(d: Diagnostic) -> bool:
    """Whether a warning's first line carries a `# zc: allow(…)` comment naming its code (the
    checker drops such warnings; errors are never allowed)."""
    if d.severity != "warning" or d.span is None:
        return False
    line = d.span.source.line_text(d.span.source.line_col(d.span.start)[0])
    return any(d.code in (c.strip() for c in m.group(1).split(",")) for m in ALLOW.finditer(line))


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


class _Parameters(codegen.Gen):
    """A code generator that writes each constant as the next parameter (`c0`, `c1`, …), keeping
    its value in `consts`: conditions that differ only in constants get the same source."""

    __slots__ = ()

    def const(self, value: object) -> str:
        name = f"c{len(self.consts)}"
        self.consts[name] = value
        return name


class Linter:
    """Decides lints by enumerating every distinct case of the fields a question reads."""

    def __init__(self, checked: Checked, reads: set[str], path: str) -> None:
        self.k = checked
        self.reads = reads  # the state fields some rule or route reads
        self.path = path
        self.diags: list[Diagnostic] = []
        self._uses: dict[int, tuple[bool, bool]] = {}
        self._guarding: dict[int, bool] = {}  # id(rule) -> it reads an enum, bool or set field
        self._cache: dict[tuple, bool | None] = {}
        self._facts_cache: dict[tuple, tuple | None] = {}
        self._enumerated: dict[frozenset, tuple | None] = {}  # question keys -> `_states`
        self._charged: set[tuple] = set()  # cases whose facts' work was counted
        self._upcoming: list[tuple[A.RuleDecl, str]] = []  # each rule in the order run() first asks
        # about it, with that question's action
        self._ahead = 0  # how far into _upcoming predicates were written ahead
        self.work = 0
        self.exhausted = False
        self._keeps: dict[tuple, tuple] = {}  # question key -> (predicate, fields it reads)
        self._templates: dict[int, tuple] = {}  # id(rule) -> (its factory, constants, fields read)
        self._namespace: dict[str, object] = {}  # the compiled predicate factories by name
        self._factories: dict[str, str] = {}  # a factory's source (but its name) -> its name
        self._domain_cache: dict[tuple, tuple | None] = {}  # (field, its constants) -> `_domain`
        self._indexes: dict[str, dict[str, int]] = {}  # enum field -> its members' places

    def warn(self, code: str, msg: str, span: Span | None, help: str | None = None) -> None:
        self.diags.append(Diagnostic(code, "warning", msg, span, help, path=self.path))

    def run(self) -> list[Diagnostic]:
        """Every lint of the policy (warnings, and a ZC1000 note when the budget ran out)."""
        k = self.k
        rules = k.policy.rules
        by_action: dict[str, list[A.RuleDecl]] = {a.name.text: [] for a in k.actions}
        for r in rules:
            for t in k.targets[r.name.text]:
                by_action[t].append(r)
        first: dict[int, tuple[A.RuleDecl, str]] = {}
        for a in k.actions:
            for r in by_action[a.name.text]:
                first.setdefault(id(r), (r, a.name.text))
        self._upcoming = list(first.values())
        for a in k.actions:
            if self.exhausted:  # past the budget every question is undecided: no rule is walked
                break
            name = a.name.text
            cases = [self._case(r, name) for r in by_action[name]]
            verdict = self._exists(cases, want_keep=True) if cases else True
            if verdict is None and not self.exhausted:  # decide on the rules that can be: fewer
                # rules, more states (past the budget, every question is undecided)
                decidable = [c for c in cases if self._exists([c], want_keep=True) is not None]
                if decidable:
                    verdict = self._exists(decidable, want_keep=True)
                    cases = decidable if verdict is False else cases
            if verdict is False:
                for case in list(cases):  # name a minimal set of rules that conflict
                    rest = [c for c in cases if c is not case]
                    if rest and self._exists(rest, want_keep=True) is False:
                        cases = rest
                self.warn("ZC1001", f"action `{name}` can never be legal", a.name.span,
                            "no state satisfies "
                            + ", ".join(f"`{r.name.text}`" for r, _, _ in cases)
                            + (" together" if len(cases) > 1 else ""))
        for r in rules:
            targets = sorted(k.targets[r.name.text])
            if not targets or not self.exhausted and all(
                    self._exists([self._case(r, t)], want_keep=False) is False for t in targets):
                self.warn("ZC1002", f"rule `{r.name.text}` can never remove an action",
                            r.name.span, "its condition never goes against any of its targets"
                            if targets else "it has no targets")
        for a in k.actions:
            risky = [t.text for t in a.tags if t.text in RISKY_TAGS]
            if risky and not any(self._guards(r) for r in by_action[a.name.text]):
                self.warn("ZC1003", f"risky action `{a.name.text}` ({', '.join(risky)}) "
                            "is not guarded", a.name.span,
                            "add a rule that checks authority or confirmation, "
                            f"e.g. `rule confirm: {a.name.text} requires self in confirmed`")
        if self.exhausted:
            self.diags.append(Diagnostic(
                "ZC1000", "note", "some ZC1001/ZC1002 lints were left undecided", k.policy.name.span,
                f"the policy is too large to enumerate within {LINT_WORK:,} rule evaluations",
                path=self.path))
        for f in k.policy.fields:
            path = f.path.text
            if path in k.fields and k.fields[path].kind != FieldKind.TEXT and path not in self.reads:
                self.warn("ZC1004", f"state field `{path}` is never read", f.path.span,
                            "remove it, or use it in a rule or route (or, for a field only "
                            "specialists read, end its line with `# zc: allow(ZC1004)`)")
        return self.diags

    def _guards(self, rule: A.RuleDecl) -> bool:
        guards = self._guarding.get(id(rule))
        if guards is None:
            guards = self._guarding[id(rule)] = rule.cond is not None and any(
                isinstance(e, A.FieldRef) and self.k.fields[e.path].kind in (
                    FieldKind.ENUM, FieldKind.BOOL, FieldKind.SET)
                for e in walk(rule.cond))
        return guards

    def _case(self, rule: A.RuleDecl, action: str) -> tuple:
        """(rule, action, key), the case of a question about them, its key made once: what the
        question depends on, the action only through `self` / `cost`."""
        uses = self._uses.get(id(rule))
        if uses is None:
            kinds = {type(e) for e in walk(rule.cond)} if rule.cond is not None else set()
            uses = self._uses[id(rule)] = (A.SelfRef in kinds, A.CostRef in kinds)
        return rule, action, (id(rule), action if uses[0] else None,
                              self.k.costs[action] if uses[1] else None)

    def _exists(self, cases: list[tuple], want_keep: bool) -> bool | None:
        """Is there a state where every case (`_case`) keeps (want_keep) / one removes its action?

        None when undecided (arithmetic between fields, or too many combinations).
        """
        if self.exhausted:
            return None
        keys = frozenset([c[2] for c in cases])
        key = (want_keep, keys)
        if key not in self._cache:
            self._cache[key] = self._decide(cases, want_keep, keys)
        return self._cache[key]

    def _decide(self, cases: list[tuple], want_keep: bool, keys: frozenset) -> bool | None:
        every = []
        for case in cases:  # each case charged (the first time) in order, up to an undecidable one
            facts = self._facts(case)
            if facts is None:
                return None
            every.append(facts)
        found = self._enumerated.get(keys, _MISSING)
        if found is _MISSING:  # the same cases asked the other way round enumerate the same states
            found = self._enumerated[keys] = self._states(every)
        if found is None:
            return None
        domains, total = found
        self.work += total * len(cases)
        if self.work > LINT_WORK:
            self.exhausted = True
            return None
        return _witness(self._keeps_of(cases), domains, want_keep)

    def _states(self, every: list[tuple]) -> tuple[dict[str, list], int] | None:
        """The values to enumerate of each field the cases' facts read and how many states their
        whole domains hold; None when undecidable or past LINT_BUDGET."""
        if len(every) == 1:
            consts, members = every[0]
        else:
            consts, members = {}, {}
            for facts in every:
                for path, values in facts[0].items():
                    consts.setdefault(path, set()).update(values)
                for path, names in facts[1].items():
                    members.setdefault(path, set()).update(names)
        found = self._domains(consts, members)
        if found is None:
            return None
        domains, sizes = found
        total = 1
        for p in domains:
            total *= sizes[p]  # the states of the whole domains, as many as before they were narrowed
            if total > LINT_BUDGET:
                return None
        return domains, total

    def _keeps_of(self, cases: list[tuple]) -> list[tuple]:
        """(generated predicate: does the action survive the rule, the field paths it takes in order)
        of each case, made by its rule's factory; the factories not compiled yet are compiled
        together with those of the next rules asked about, as one module."""
        keeps = self._keeps
        new = {c[2]: c for c in cases if c[2] not in keeps}
        if new:
            fresh: dict[str, str] = {}
            for case in new.values():
                self._template(case, fresh)
            if fresh:  # with the next rules' sources: one compile() for many
                ahead = self._upcoming[self._ahead:self._ahead + PREFETCH]
                self._ahead += len(ahead)
                for r, a in ahead:
                    if id(r) not in self._templates:
                        case = self._case(r, a)
                        if self._case_facts(case) is not None:
                            self._template(case, fresh)
                src = "".join(f"def {name}{shape}" for shape, name in fresh.items())
                self._namespace.update(codegen.load(src, {}, f"<zc lints {self.k.name}>"))
            for key, (rule, action, _) in new.items():
                name, values, reads = self._templates[id(rule)]
                if self._uses[id(rule)] != (False, False):
                    cost = self.k.costs[action]
                    values = [action if v is _SELF else cost if v is _COST else v for v in values]
                keeps[key] = (self._namespace[name](*values), reads)
        return [keeps[c[2]] for c in cases]

    def _template(self, case: tuple, fresh: dict[str, str]) -> None:
        """The keep-predicate of a rule's questions, written once by the runtime's code generator
        with its constants as parameters (`self` and `cost` among them, as markers): a factory that
        makes each predicate from the constants. Rules of one shape (`plan == p90 and step > 7`,
        `plan == p53 and step > 3`) share one factory; `fresh` gets those not compiled yet."""
        rule = case[0]
        if id(rule) in self._templates:
            return
        gen = _Parameters(self.k.fields, {})
        if rule.kind == RuleKind.AFTER:
            reads: tuple[str, ...] = ("history",)
            test = gen.history_test(tuple(a.text for a in rule.after))
            text = f"{gen.var('history')} is not None and {test.code.text}"
        else:
            reads = tuple(sorted(self._case_facts(case)[0]))  # every field it reads has an entry
            for p in reads:
                gen.var(p)  # the parameters, in order
            cond = self.k.lowered.put(rule.cond, lower_expr(rule.cond))
            test = gen.test(cond, _MARKED)
            keep = "False" if rule.kind == RuleKind.FORBID_WHEN else "True"
            text = f"({test.code.text}) is {keep}"
        body = "".join(f"        {line}\n" for line in test.setup) + f"        return {text}\n"
        shape = (f"({', '.join(gen.consts)}):\n    def keep({', '.join(gen.var(p) for p in reads)}):\n"
                 f"{body}    return keep\n")
        name = self._factories.get(shape)
        if name is None:
            name = fresh[shape] = self._factories[shape] = f"_k{len(self._factories)}"
        self._templates[id(rule)] = (name, list(gen.consts.values()), reads)

    def _facts(self, case: tuple):
        """(constants per field, action names per set field) one case mentions; None if undecidable.
        The first question about a case charges the work of walking its condition."""
        rule, _, key = case
        if key not in self._charged:
            self._charged.add(key)
            if rule.name.text not in self.k.arg_rules and rule.kind != RuleKind.AFTER:
                self.work += len(rule.cond.span.text)  # rough cost of walking it
            if self.work > LINT_WORK:
                self.exhausted = True
        return self._case_facts(case)

    def _case_facts(self, case: tuple):
        """`_facts` without charging any work (for predicates compiled ahead of their question)."""
        rule, action, key = case
        if key in self._facts_cache:
            return self._facts_cache[key]
        if rule.name.text in self.k.arg_rules:
            facts = None  # reads the proposed call's arguments: no state decides it
        elif rule.kind == RuleKind.AFTER:
            facts = ({"history": set()}, {"history": {a.text for a in rule.after}})
        else:
            expr = rule.cond if self._uses[id(rule)] == (False, False) \
                else substitute(rule.cond, action, self.k.costs[action])
            facts = self._expr_facts(expr)
        self._facts_cache[key] = facts
        return facts

    def _expr_facts(self, expr: A.Expr):
        k = self.k
        consts: dict[str, set] = {}
        members: dict[str, set[str]] = {}
        for e in walk(expr):
            t = type(e)
            if t is A.Arith or (t is A.Compare and all(
                    type(x) is A.FieldRef and k.fields[x.path].kind in NUMBERS
                    for x in (e.left, e.right))):
                if any(type(x) is A.FieldRef for x in walk(e)):
                    return None  # not decided by interval reasoning
            if t is A.FieldRef:
                consts.setdefault(e.path, set())
            elif t is A.Compare or t is A.InLit:
                sides = (e.left, e.right) if t is A.Compare else (e.operand, *e.items)
                fields = [s.path for s in sides if type(s) is A.FieldRef]
                nums = [s.value if type(s) is A.Num else interp.evaluate(s, {}) for s in sides
                        if type(s) is A.Num or type(s) not in _NOT_NUMBERS
                        and not any(type(x) in _NOT_NUMBERS for x in walk(s))]
                named = [s.value for s in sides if type(s) is A.MemberRef]
                for f in fields:
                    consts.setdefault(f, set()).update(n for n in nums if n is not None)
                    # the members named beside it (all: beside a field)
                    if k.fields[f].kind == FieldKind.ENUM:
                        consts[f].update(k.fields[f].members if len(fields) > 1 else named)
            elif t is A.InField and type(e.operand) is A.ActionRef:
                members.setdefault(e.field.path, set()).add(e.operand.name)
        return consts, members

    def _domains(self, consts: dict[str, set], members: dict[str, set[str]]
                 ) -> tuple[dict[str, list], dict[str, int]] | None:
        """The values to enumerate of each field a question reads, and how many its whole domain has
        (each field's made once for the constants, or set members, it is asked with)."""
        domains: dict[str, list] = {}
        sizes: dict[str, int] = {}
        for path, values in consts.items():
            kind = self.k.fields[path].kind
            if kind == FieldKind.SET:
                values = members.get(path, ())
            # equal numbers of two types (7, 7.0) may make different points
            key = (path, frozenset([(v, type(v)) for v in values] if kind in NUMBERS else values))
            found = self._domain_cache.get(key, _MISSING)
            if found is _MISSING:
                found = self._domain_cache[key] = self._domain(path, values)
            if found is None:
                return None
            domains[path], sizes[path] = found
        return domains, sizes

    def _domain(self, path: str, consts: set) -> tuple[list, int] | None:
        """The values to enumerate of one field (`consts`: the constants, or for a set the action
        names, it is asked with) and how many its whole domain has; None for a text field.

        An enum's members that no condition of the question names all behave as one (conditions
        compare an enum field with named members, or with another field, which names them all), so
        one of them stands for the others: the answer is that of the whole domain."""
        info = self.k.fields[path]
        if info.kind == FieldKind.ENUM:
            index = self._indexes.get(path)
            if index is None:
                index = self._indexes[path] = {m: i for i, m in enumerate(info.members)}
            named = {m for m in consts if m in index}
            other = next((m for m in info.members if m not in named), None)
            values: list = sorted(named if other is None else named | {other}, key=index.__getitem__)
            size = len(info.members) + info.may_be_absent
        elif info.kind == FieldKind.BOOL:
            values = [False, True]
        elif info.kind in NUMBERS:
            values = _numeric_points(sorted(consts), info.kind == FieldKind.INT)
        elif info.kind == FieldKind.SET:
            values = [frozenset()]  # every subset, in the order of product((0, 1), repeat=n)
            for name in sorted(consts, reverse=True):
                values += [v | {name} for v in values]
        else:
            return None
        if info.may_be_absent:
            values.append(None)
        return values, size if info.kind == FieldKind.ENUM else len(values)


def _witness(preds: list[tuple], domains: dict[str, list], want_keep: bool) -> bool:
    """Is there a state in the product of `domains` that every predicate keeps (want_keep) / that
    some predicate removes? Exactly the answer of enumerating the product, found without it: a
    removal is looked for predicate by predicate over the fields each reads; a state every predicate
    keeps is searched for depth first (most have one, found in a few calls), and past a budget of
    calls the rows each predicate keeps are joined predicate by predicate, carrying only the fields
    that later predicates read."""
    if not want_keep:
        return any(False in itertools.starmap(keep, itertools.product(*(domains[p] for p in reads)))
                   for keep, reads in preds)
    if len(preds) == 1:  # one predicate: any row it keeps
        keep, reads = preds[0]
        return True in itertools.starmap(keep, itertools.product(*(domains[p] for p in reads)))
    budget = sum(math.prod(len(domains[p]) for p in reads) for _, reads in preds)
    found = _search(preds, domains, budget)
    return found if found is not None else _join(preds, domains)


def _search(preds: list[tuple], domains: dict[str, list], budget: int) -> bool | None:
    """Depth first, one field at a time, each predicate called as soon as the fields it reads are
    set: is there a state every predicate keeps? None after `budget` calls without an answer."""
    order: dict[str, int] = {}
    for _, reads in sorted(preds, key=lambda pred: len(pred[1])):  # small predicates prune first
        for p in reads:
            order.setdefault(p, len(order))
    if len(order) > 100:  # deeper than the recursion should go
        return None
    tests: list[list[tuple]] = [[] for _ in order]  # tests[i]: the predicates complete at field i
    for keep, reads in preds:
        if not reads:
            if not keep():
                return False
            continue
        at = tuple(order[p] for p in reads)
        tests[max(at)].append((keep, at))
    columns = [domains[p] for p in order]
    values: list = [None] * len(order)
    calls = 0

    def extend(i: int) -> bool | None:
        nonlocal calls
        if i == len(columns):
            return True
        for v in columns[i]:
            values[i] = v
            for keep, at in tests[i]:
                calls += 1
                if not keep(*[values[j] for j in at]):
                    break
            else:
                found = extend(i + 1)
                if found is not False:
                    return found
            if calls > budget:
                return None
        return False

    return extend(0)


def _join(preds: list[tuple], domains: dict[str, list]) -> bool:
    """Is there a state every predicate keeps? The kept rows joined predicate by predicate."""
    carried: tuple[str, ...] = ()
    partial: set[tuple] = {()}  # values of `carried` that every predicate so far keeps
    later: list[set[str]] = [set()]  # later[-1 - i]: the fields read after predicate i
    for _, reads in reversed(preds[1:]):
        later.append(later[-1].union(reads))
    for keep, reads in preds:
        rows = list(itertools.product(*(domains[p] for p in reads)))
        good = [row for row, kept in zip(rows, itertools.starmap(keep, rows)) if kept]
        if not good:
            return False
        after = later.pop()
        merged = tuple(dict.fromkeys(carried + reads))
        keep_at = [j for j, p in enumerate(merged) if p in after]
        new = [j for j, p in enumerate(reads) if p not in carried]
        shared = [(carried.index(p), j) for j, p in enumerate(reads) if p in carried]
        if not shared:  # independent of what came before: any kept row extends any partial one
            tails = {tuple(row[j] for j in new) for row in good}
            joined = {tuple((values + tail)[j] for j in keep_at)
                      for values in partial for tail in tails}
        else:
            by_shared: dict[tuple, set[tuple]] = {}
            for row in good:
                by_shared.setdefault(tuple(row[j] for _, j in shared), set()).add(
                    tuple(row[j] for j in new))
            joined = {tuple((values + tail)[j] for j in keep_at)
                      for values in partial
                      for tail in by_shared.get(tuple(values[i] for i, _ in shared), ())}
        if not joined:
            return False
        carried, partial = tuple(merged[j] for j in keep_at), joined
    return True


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
