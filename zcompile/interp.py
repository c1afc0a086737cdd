"""Reference semantics: a plain Kleene interpreter over the checked AST.

Slow and obvious on purpose. The compiler's lints decide questions with it, and the
differential test holds the fast runtime to it.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping, Sequence

from . import ast as A
from .ir import MAX_FLOAT
from .kinds import FieldKind, RuleKind

Value = object  # True / False / None (unknown), numbers, strings, frozensets of action names

_CMP = {"==": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le,
        ">": operator.gt, ">=": operator.ge}
_ARITH = {"+": operator.add, "-": operator.sub, "*": operator.mul}


def evaluate(expr: A.Expr, state: Mapping[str, Value], action: str | None = None,
             cost: float = 0, args: Mapping[str, Value] | None = None) -> Value:
    """Evaluate an expression; `state` maps field paths to values, None when absent.

    `args` maps the proposed call's argument names to values (None or missing: unknown).
    """
    ev = lambda e: evaluate(e, state, action, cost, args)  # noqa: E731
    match expr:
        case A.FieldRef(path=p):
            return state.get(p)
        case A.ArgRef(name=n):
            return (args or {}).get(n)
        case A.Len(operand=o):
            v = ev(o)
            return None if v is None else len(v)
        case A.MemberRef(value=v):
            return v
        case A.ActionRef(name=n):
            return n
        case A.Num(value=v) | A.Bool(value=v):
            return v
        case A.SelfRef():
            return action
        case A.CostRef():
            return cost
        case A.Not(operand=o):
            v = ev(o)
            return None if v is None else not v
        case A.And(operands=ops):
            vals = [ev(o) for o in ops]
            return False if False in vals else (None if None in vals else True)
        case A.Or(operands=ops):
            vals = [ev(o) for o in ops]
            return True if True in vals else (None if None in vals else False)
        case A.Compare(op=op, left=l, right=r):
            a, b = ev(l), ev(r)
            return None if a is None or b is None else _CMP[op](a, b)
        case A.InLit(operand=o, items=items, negated=neg):
            v = ev(o)
            return None if v is None else (v in [ev(i) for i in items]) != neg
        case A.InField(operand=o, field=f, negated=neg):
            v, s = ev(o), ev(f)
            return None if v is None or s is None else (v in s) != neg
        case A.Arith(op=op, left=l, right=r):
            a, b = ev(l), ev(r)
            return None if a is None or b is None else finite(_ARITH[op](a, b))
        case A.Neg(operand=o):
            v = ev(o)
            return None if v is None else -v
    raise TypeError(f"not a checked expression: {expr!r}")


def finite(v):
    """An arithmetic result, or None (unknown) when it overflowed to ±infinity, NaN or past floats."""
    return v if -MAX_FLOAT <= v <= MAX_FLOAT else None


def keeps(rule: A.RuleDecl, state: Mapping[str, Value], action: str, cost: float,
          args: Mapping[str, Value] | None = None) -> bool:
    """Whether `action` survives `rule` in `state` (fail closed: only a definite yes keeps it)."""
    if rule.kind == RuleKind.AFTER:
        history = state.get("history") or frozenset()
        return all(a.text in history for a in rule.after)
    value = evaluate(rule.cond, state, action, cost, args)
    return value is False if rule.kind == RuleKind.FORBID_WHEN else value is True


def legal(actions: Sequence[tuple[str, float]], targets: Mapping[str, frozenset[str]],
          rules: Sequence[A.RuleDecl], state: Mapping[str, Value], universe: Sequence[str],
          fallback: str) -> tuple[tuple[str, ...], dict[str, list[str]], bool]:
    """The legal set: (legal actions in declaration order, action -> removing rules, fallback?)."""
    allowed = set(universe)
    removed: dict[str, list[str]] = {}
    for name, cost in actions:
        if name not in allowed:
            removed.setdefault(name, []).append("intent")
        for rule in rules:
            if reads_args(rule):
                continue  # arguments are unknown here: judged by `check` only
            if name in targets[rule.name.text] and not keeps(rule, state, name, cost):
                removed.setdefault(name, []).append(rule.name.text)
    legal_names = tuple(n for n, _ in actions if n not in removed)
    if not legal_names:
        removed.pop(fallback, None)
        return (fallback,), removed, True
    return legal_names, removed, False


def reads_args(rule: A.RuleDecl) -> bool:
    """Whether a rule's condition reads `args.*`."""
    return rule.cond is not None and any(isinstance(e, A.ArgRef) for e in A.walk(rule.cond))


_KINDS = {"bool": lambda v: isinstance(v, bool),
          "int": lambda v: isinstance(v, int) and not isinstance(v, bool),
          "float": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
          "text": lambda v: isinstance(v, str),
          "list": lambda v: isinstance(v, list)}


def typed_args(sig: Mapping | None, args: Mapping[str, Value]) -> tuple[dict[str, Value], list[str]]:
    """(the arguments rules may read, one `schema` per signature mismatch); a missing or
    wrong-typed argument is unknown to the rules. Without a signature every argument is read."""
    if sig is None:
        return dict(args), []
    good: dict[str, Value] = {}
    blocked: list[str] = []
    for name, info in sig.items():
        v = args.get(name)
        if v is None:
            if not info.optional:
                blocked.append("schema")
        elif (v in info.members and isinstance(v, str)) if info.kind == FieldKind.ENUM \
                else _KINDS[info.kind](v):
            good[name] = v
        else:
            blocked.append("schema")
    blocked.extend("schema" for name in args if name not in sig)
    return good, blocked


def check(actions: Sequence[tuple[str, float]], targets: Mapping[str, frozenset[str]],
          rules: Sequence[A.RuleDecl], params: Mapping[str, Mapping | None],
          state: Mapping[str, Value], universe: Sequence[str], fallback: str,
          action: str, args: Mapping[str, Value]) -> tuple[bool, list[str]]:
    """A proposed call: (allowed, names of what blocks it: `schema`, legal-set rules, argument rules).

    `params` maps each action to its signature (argument name -> FieldInfo-like with `kind`,
    `members`, `optional`), or None when the action declares none.
    """
    good, blocked = typed_args(params.get(action), args)
    legal_names, removed, _ = legal(actions, targets, rules, state, universe, fallback)
    if action not in legal_names:
        blocked.extend(removed.get(action, []))
    cost = dict(actions)[action]
    for rule in rules:
        if reads_args(rule) and action in targets[rule.name.text] \
                and not keeps(rule, state, action, cost, good):
            blocked.append(rule.name.text)
    return not blocked, blocked
