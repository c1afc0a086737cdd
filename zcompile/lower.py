"""Lowering: a checked AST to the IR of the compiled artifact."""

from __future__ import annotations

import hashlib
import re

from . import ast as A
from . import ir
from .ast import walk
from .checked import Checked, FieldInfo
from .kinds import RuleKind
from .source import Source, Span


def lower(checked: Checked, source: Source) -> ir.PolicyIR:
    """Translate a checked policy into its IR."""
    p = checked.policy
    fields = tuple(
        ir.FieldDef(path=f.path, kind=f.kind, members=f.members, optional=f.optional,
                    has_default=f.has_default,
                    default=tuple(sorted(f.default)) if isinstance(f.default, frozenset) else f.default)
        for f in checked.fields.values())
    actions = tuple(
        ir.ActionDef(name=a.name.text, tags=tuple(dict.fromkeys(t.text for t in a.tags)),
                     cost=checked.costs[a.name.text], description=a.description,
                     params=_params(checked.params.get(a.name.text)))
        for a in checked.actions)
    order = {a.name: i for i, a in enumerate(actions)}
    rules = tuple(
        ir.RuleDef(
            name=r.name.text, kind=r.kind,
            targets=tuple(sorted(checked.targets[r.name.text], key=order.__getitem__)),
            span=span_def(r.span),
            text=_one_line(r.cond.span.text) if r.cond is not None else ", ".join(a.text for a in r.after),
            cond=(checked.lowered.get(r.cond) or expr(r.cond)) if r.cond is not None else None,
            after=tuple(a.text for a in r.after),
            reads=reads + (("history",) if r.kind == RuleKind.AFTER else ()),
            args=args)
        for r in p.rules for reads, args in [_reads_args(r.cond)])
    return ir.PolicyIR(
        name=p.name.text,
        source_path=source.path,
        source_sha256=hashlib.sha256(source.text.encode("utf-8")).hexdigest(),
        fields=fields,
        actions=actions,
        fallback=checked.fallback,
        intents=tuple(ir.IntentDef(name=i.name.text, allow=tuple(dict.fromkeys(a.text for a in i.allow)),
                                   description=i.description) for i in p.intents),
        rules=rules,
        tiers=tuple(ir.TierDef(name=t.name.text, max_ms=t.max_ms.value if t.max_ms else None,
                               cost=t.cost.value if t.cost else None, text=t.text is not None)
                    for t in p.tiers),
        routes=tuple(ir.RouteDef(name=r.name.text, tiers=tuple(t.text for t in r.tiers),
                                 span=span_def(r.span),
                                 when=expr(r.when) if r.when is not None else None)
                     for r in p.routes),
    )


def span_def(span: Span) -> ir.SpanDef:
    line, col = span.source.line_col(span.start)
    end_line, end_col = span.source.line_col(max(span.start, span.end))
    return ir.SpanDef(span.source.path, line, col, end_line, end_col)


def _one_line(text: str) -> str:
    """A condition written over several lines, as one line (for reasons); a CRLF line break is a
    line break, so a policy's identity does not depend on its line endings."""
    return re.sub(r"[ \t\r]*(#[^\n]*)?\n\s*", " ", text)


def _params(params: dict[str, FieldInfo] | None) -> tuple[ir.ParamDef, ...] | None:
    if params is None:
        return None
    return tuple(ir.ParamDef(name=p.path, kind=p.kind, members=p.members, optional=p.optional)
                 for p in params.values())


def _reads_args(cond: A.Expr | None) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The state fields and the call's arguments a condition reads, each sorted."""
    reads: set[str] = set()
    args: set[str] = set()
    for e in walk(cond) if cond is not None else ():
        if isinstance(e, A.FieldRef):
            reads.add(e.path)
        elif isinstance(e, A.ArgRef):
            args.add(e.name)
    return tuple(sorted(reads)), tuple(sorted(args))


def expr(e: A.Expr) -> ir.Expr:
    """Lower one checked expression."""
    match e:
        case A.FieldRef(path=p):
            return ir.Field(p)
        case A.MemberRef(value=v) | A.ActionRef(name=v) | A.Num(value=v) | A.Bool(value=v):
            return ir.Const(v)
        case A.ArgRef(name=n):
            return ir.Arg(n)
        case A.Len(operand=o):
            return ir.Len(expr(o))
        case A.SelfRef():
            return ir.Self()
        case A.CostRef():
            return ir.Cost()
        case A.Not(operand=o):
            return ir.Not(expr(o))
        case A.And(operands=ops):
            return ir.And(tuple(map(expr, ops)))
        case A.Or(operands=ops):
            return ir.Or(tuple(map(expr, ops)))
        case A.Compare(op=op, left=l, right=r):
            return ir.Cmp(op, expr(l), expr(r))
        case A.InLit(operand=o, items=items, negated=neg):
            values = []
            for i in items:
                c = expr(i)
                assert isinstance(c, ir.Const), "checked set literals hold constants"
                values.append(c.value)
            return ir.InConst(expr(o), tuple(values), neg)
        case A.InField(operand=o, field=A.FieldRef(path=path), negated=neg):  # checked: a field
            return ir.InSet(expr(o), path, neg)
        case A.Arith(op=op, left=l, right=r):
            return ir.Arith(op, expr(l), expr(r))
        case A.Neg(operand=o):
            return ir.Neg(expr(o))
    raise AssertionError(f"unlowered expression {e!r}")
