"""Lints: the ZC1xxx warnings, decided by enumerating the cases of the fields a question reads.

Each (rule, action) question is answered by the runtime's own code generator (codegen.py): its
keep-predicate is generated once, all of them compiled as one module, and mapped over the
columns of the enumerated states (C-level iteration, no tree walking). The reference
interpreter (interp.py) only folds the constants a condition mentions.
"""

from __future__ import annotations

import ast
import dataclasses
import itertools
import math
import re

from . import ast as A
from . import codegen, interp, ir
from .ast import walk
from .checked import Checked
from .errors import Diagnostic
from .lower import expr as lower_expr
from .source import Span


RISKY_TAGS = ("destructive", "publish", "money", "credential")
LINT_BUDGET = 1 << 16  # most states enumerated to decide one lint; beyond it the lint stays silent
LINT_WORK = 5_000_000  # most rule evaluations for all lints of a file; beyond it they stay silent
PREFETCH = 256  # questions whose predicates are compiled ahead, with those of the one being asked
ALLOW = re.compile(r"#.*?\bzc:\s*allow\(([^)]*)\)")  # `# zc: allow(ZC1004, …)` on a warning's line
# in a generated predicate: a literal (string, number), a named constant, a variable (a field read)
_CONSTANT = re.compile(r"""(?P<lit>'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*"|(?<![\w.])\d+(?:\.\d*)?(?:[eE][+-]?\d+)?)"""
                       r"|(?P<const>\bK\d+\b)|(?P<var>\bv\d+\b)")
_MISSING = object()
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
        self._upcoming: list[tuple[A.RuleDecl, str]] = []  # (rule, action) in the order run() asks
        self._ahead = 0  # how far into _upcoming predicates were compiled ahead
        self.work = 0
        self.exhausted = False
        self._keeps: dict[tuple, tuple] | None = None  # question key -> (predicate, fields it reads)
        self._namespace: dict[str, object] = {}  # the compiled predicate factories by name
        self._factories: dict[str, str] = {}  # a predicate's shape (constants taken out) -> its factory
        self._literals: dict[str, object] = {}  # a constant's text in generated code -> its value
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
        self._upcoming = [(r, a.name.text) for a in k.actions for r in by_action[a.name.text]] + [
            (r, t) for r in rules for t in sorted(k.targets[r.name.text])]
        for a in k.actions:
            name = a.name.text
            cases = [(r, name) for r in by_action[name]]
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
                            + ", ".join(f"`{r.name.text}`" for r, _ in cases)
                            + (" together" if len(cases) > 1 else ""))
        for r in rules:
            cases = [(r, t) for t in sorted(k.targets[r.name.text])]
            if not cases or all(self._exists([c], want_keep=False) is False for c in cases):
                self.warn("ZC1002", f"rule `{r.name.text}` can never remove an action",
                            r.name.span, "its condition never goes against any of its targets"
                            if cases else "it has no targets")
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
            if path in k.fields and k.fields[path].kind != "text" and path not in self.reads:
                self.warn("ZC1004", f"state field `{path}` is never read", f.path.span,
                            "remove it, or use it in a rule or route (or, for a field only "
                            "specialists read, end its line with `# zc: allow(ZC1004)`)")
        return self.diags

    def _guards(self, rule: A.RuleDecl) -> bool:
        guards = self._guarding.get(id(rule))
        if guards is None:
            guards = self._guarding[id(rule)] = rule.cond is not None and any(
                isinstance(e, A.FieldRef) and self.k.fields[e.path].kind in ("enum", "bool", "set")
                for e in walk(rule.cond))
        return guards

    def _case(self, rule: A.RuleDecl, action: str) -> tuple:
        """(rule, action, key), the case of a question about them, its key made once: what the
        question depends on, the action only through `self` / `cost`."""
        uses = self._uses.get(id(rule))
        if uses is None:
            nodes = list(walk(rule.cond)) if rule.cond is not None else []
            uses = self._uses[id(rule)] = (any(isinstance(e, A.SelfRef) for e in nodes),
                                          any(isinstance(e, A.CostRef) for e in nodes))
        return rule, action, (id(rule), action if uses[0] else None,
                              self.k.costs[action] if uses[1] else None)

    def _exists(self, pairs: list[tuple[A.RuleDecl, str]], want_keep: bool) -> bool | None:
        """Is there a state where every (rule, action) keeps (want_keep) / one removes its action?

        None when undecided (arithmetic between fields, or too many combinations).
        """
        if self.exhausted:
            return None
        cases = [self._case(r, a) for r, a in pairs]
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
        consts: dict[str, set] = {}
        members: dict[str, set[str]] = {}
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
        of each case; the questions not asked before are compiled together, as one module."""
        if self._keeps is None:
            self._keeps, self._gen, self._lowered = {}, codegen.Gen(self.k.fields, {}), {}
        keeps = self._keeps
        new = {}
        for case in cases:
            if case[2] not in keeps and case[2] not in new:
                new[case[2]] = self._source(case)
        if new:  # compile the next questions' predicates with these: one compile() for many
            ahead = self._upcoming[self._ahead:self._ahead + PREFETCH]
            self._ahead += len(ahead)
            for case in (self._case(r, a) for r, a in ahead):
                if case[2] not in keeps and case[2] not in new and self._case_facts(case) is not None:
                    new[case[2]] = self._source(case)
            made, fresh = {}, {}
            for key, (text, reads) in new.items():  # predicates of one shape share one factory
                shape, values = self._shape(text)
                if shape not in self._factories:
                    fresh[shape] = self._factories[shape] = f"_k{len(self._factories)}"
                made[key] = (self._factories[shape], values, reads)
            if fresh:
                src = "".join(f"def {name}{shape}" for shape, name in fresh.items())
                self._namespace.update(codegen.load(src, {}, f"<zc lints {self.k.name}>"))
            for key, (name, values, reads) in made.items():
                self._keeps[key] = (self._namespace[name](*values), reads)
        return [keeps[c[2]] for c in cases]

    def _shape(self, text: str) -> tuple[str, list]:
        """A predicate's source (`(v3, v4):` and its body) as a factory's: the constants it reads
        (literals and named constants) become the factory's parameters and its variables are named
        by position, so that predicates differing only in those (`plan == p90 and step > 7`, `plan
        == p53 and step > 3`) are compiled once, as one factory that makes each."""
        values: list = []
        names: dict[str, str] = {}

        def take(m: re.Match) -> str:
            token = m.group(0)
            if m.lastgroup == "var":
                return names.setdefault(token, f"a{len(names)}")
            value = self._literals.get(token, _MISSING)
            if value is _MISSING:
                value = self._literals[token] = (self._gen.consts[token] if m.lastgroup == "const"
                                                 else _literal(token))
            values.append(value)
            return f"c{len(values) - 1}"

        params, body = _CONSTANT.sub(take, text).split(":\n", 1)
        inner = "".join(f"    {line}\n" for line in body.splitlines())
        args = ", ".join(f"c{i}" for i in range(len(values)))
        return f"({args}):\n    def keep{params}:\n{inner}    return keep\n", values

    def _source(self, case: tuple) -> tuple[str, tuple[str, ...]]:
        """The keep-predicate of one question as a function's parameters and body, written by the
        runtime's code generator, and the field paths it reads."""
        gen = self._gen
        rule, action, _ = case
        if rule.kind == "after":
            test = gen.history_test(tuple(a.text for a in rule.after))
            reads: tuple[str, ...] = ("history",)
            text = f"{gen.var('history')} is not None and {test.code.text}"
        else:
            cond = self._lowered.get(id(rule))
            if cond is None:
                cond = self._lowered[id(rule)] = lower_expr(rule.cond)
            test = gen.test(cond, ir.ActionDef(action, cost=self.k.costs[action]))
            facts = self._case_facts(case)
            reads = tuple(sorted(facts[0]))  # every field it reads has an entry
            keep = "False" if rule.kind == "forbid_when" else "True"
            text = f"({test.code.text}) is {keep}"
        body = "".join(f"    {line}\n" for line in test.setup) + f"    return {text}\n"
        return f"({', '.join(gen.var(p) for p in reads)}):\n{body}", reads

    def _facts(self, case: tuple):
        """(constants per field, action names per set field) one case mentions; None if undecidable.
        The first question about a case charges the work of walking its condition."""
        rule, _, key = case
        if key not in self._charged:
            self._charged.add(key)
            if rule.name.text not in self.k.arg_rules and rule.kind != "after":
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
        elif rule.kind == "after":
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
                    type(x) is A.FieldRef and k.fields[x.path].kind in ("int", "float")
                    for x in (e.left, e.right))):
                if any(type(x) is A.FieldRef for x in walk(e)):
                    return None  # not decided by interval reasoning
            if t is A.FieldRef:
                consts.setdefault(e.path, set())
            elif t is A.Compare or t is A.InLit:
                sides = (e.left, e.right) if t is A.Compare else (e.operand, *e.items)
                fields = [s.path for s in sides if type(s) is A.FieldRef]
                nums = [s.value if type(s) is A.Num else interp.evaluate(s, {}) for s in sides
                        if type(s) is A.Num or not any(type(x) in _NOT_NUMBERS for x in walk(s))]
                named = [s.value for s in sides if type(s) is A.MemberRef]
                for f in fields:
                    consts.setdefault(f, set()).update(n for n in nums if n is not None)
                    if k.fields[f].kind == "enum":  # the members named beside it (all: beside a field)
                        consts[f].update(k.fields[f].members if len(fields) > 1 else named)
            elif t is A.InField and type(e.operand) is A.ActionRef:
                members.setdefault(e.field.path, set()).add(e.operand.name)
        return consts, members

    def _member_index(self, path: str) -> dict[str, int]:
        """An enum field's members by their place in its declaration."""
        index = self._indexes.get(path)
        if index is None:
            index = self._indexes[path] = {m: i for i, m in enumerate(self.k.fields[path].members)}
        return index

    def _domains(self, consts: dict[str, set], members: dict[str, set[str]]
                 ) -> tuple[dict[str, list], dict[str, int]] | None:
        """The values to enumerate of each field a question reads, and how many its whole domain has.

        An enum's members that no condition of the question names all behave as one (conditions
        compare an enum field with named members, or with another field, which names them all), so
        one of them stands for the others: the answer is that of the whole domain."""
        k = self.k
        domains: dict[str, list] = {}
        sizes: dict[str, int] = {}
        for path in consts:
            info = k.fields[path]
            if info.kind == "enum":
                index = self._member_index(path)
                named = {m for m in consts[path] if m in index}
                other = next((m for m in info.members if m not in named), None)
                values: list = sorted(named if other is None else named | {other}, key=index.__getitem__)
                sizes[path] = len(info.members) + info.may_be_absent
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
            sizes.setdefault(path, len(values))
        return domains, sizes


def _literal(token: str):
    """The value of a string or number literal as the code generator writes them (`repr`)."""
    if token[0] in "'\"":
        return token[1:-1] if "\\" not in token else ast.literal_eval(token)
    return int(token) if token.isdigit() else float(token)


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
