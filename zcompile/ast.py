"""The abstract syntax tree: frozen dataclasses, every node with a span excluded from equality."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, fields
from typing import Any, TypeVar, dataclass_transform

from .kinds import ArithOp, CmpOp, FieldKind, RuleKind
from .source import Span, stored_init

_FIELDS: dict[type, tuple[str, ...]] = {}  # a node class -> its fields but `span`
T = TypeVar("T")


@dataclass_transform(frozen_default=True, kw_only_default=True, field_specifiers=(field,))
def node(cls: type[T]) -> type[T]:
    """An AST node: a frozen, slotted, keyword-only dataclass (built fast: `stored_init`)."""
    made = stored_init(dataclass(frozen=True, slots=True, kw_only=True)(cls))
    dc: Any = made  # a dataclass by now, which type[T] does not say
    _FIELDS[made] = tuple(f.name for f in fields(dc) if f.name != "span")
    return made


def maker(cls: type[T]) -> Callable[..., T]:
    """`cls.make`, set by `stored_init`: a node from every field in order, positionally."""
    make: Callable[..., T] = vars(cls)["make"]
    return make


def _span() -> Span:
    return field(default=None, compare=False, repr=False)  # type: ignore[return-value]


@node
class Ident:
    text: str
    span: Span = _span()


# ---- types and literals of the state schema ----------------------------------
@node
class EnumType:
    members: tuple[Ident, ...]
    span: Span = _span()


@node
class ScalarType:
    kind: FieldKind  # bool | int | float | text
    span: Span = _span()


@node
class SetType:
    span: Span = _span()


@node
class ListType:
    """`list`: an action argument holding a JSON array (rules read its length with `len`)."""

    span: Span = _span()


TypeRef = EnumType | ScalarType | SetType | ListType


@node
class LitNum:
    value: int | float
    span: Span = _span()


@node
class LitBool:
    value: bool
    span: Span = _span()


@node
class LitMember:
    name: Ident
    span: Span = _span()


@node
class LitString:
    value: str
    span: Span = _span()


@node
class LitSet:
    items: tuple[Literal, ...]
    span: Span = _span()


Literal = LitNum | LitBool | LitMember | LitString | LitSet


# ---- expressions ----------------------------------------------------------------
@node
class Name:
    """A dotted name as written; the checker resolves it to one of the three below."""

    path: str
    span: Span = _span()


@node
class FieldRef:
    path: str
    span: Span = _span()


@node
class MemberRef:
    value: str
    span: Span = _span()


@node
class ActionRef:
    name: str
    span: Span = _span()


@node
class ArgRef:
    """`args.NAME`: an argument of the proposed call (resolved by the checker)."""

    name: str
    span: Span = _span()


@node
class Call:
    """`f(x)` as written; the checker turns `len(args.x)` into Len."""

    func: Ident
    operand: Expr
    span: Span = _span()


@node
class Len:
    operand: Expr
    span: Span = _span()


@node
class Num:
    value: int | float
    span: Span = _span()


@node
class Bool:
    value: bool
    span: Span = _span()


@node
class SelfRef:
    span: Span = _span()


@node
class CostRef:
    span: Span = _span()


@node
class Not:
    operand: Expr
    span: Span = _span()


@node
class And:
    operands: tuple[Expr, ...]
    span: Span = _span()


@node
class Or:
    operands: tuple[Expr, ...]
    span: Span = _span()


@node
class Compare:
    op: CmpOp
    left: Expr
    right: Expr
    span: Span = _span()


@node
class InLit:
    operand: Expr
    items: tuple[Expr, ...]
    negated: bool
    span: Span = _span()


@node
class InField:
    operand: Expr
    field: Expr
    negated: bool
    span: Span = _span()


@node
class Arith:
    op: ArithOp
    left: Expr
    right: Expr
    span: Span = _span()


@node
class Neg:
    operand: Expr
    span: Span = _span()


Expr = (Name | FieldRef | MemberRef | ActionRef | ArgRef | Call | Len | Num | Bool | SelfRef | CostRef
        | Not | And | Or | Compare | InLit | InField | Arith | Neg)


# ---- declarations -------------------------------------------------------------------
@node
class FieldDecl:
    path: Ident
    type: TypeRef
    optional: bool
    default: Literal | None
    span: Span = _span()


@node
class Param:
    """One argument of an action's signature: `reason: enum(a, b)`, `note: text?`."""

    name: Ident
    type: TypeRef
    optional: bool
    span: Span = _span()


@node
class ActionDecl:
    name: Ident
    params: tuple[Param, ...] | None  # None: no signature (arguments are not checked)
    tags: tuple[Ident, ...]
    cost: LitNum | None
    description: str | None
    span: Span = _span()


@node
class FallbackDecl:
    action: Ident
    span: Span = _span()


@node
class IntentDecl:
    name: Ident
    description: str | None
    allow: tuple[Ident, ...]
    span: Span = _span()


@node
class TargetActions:
    names: tuple[Ident, ...]
    span: Span = _span()


@node
class TargetTags:
    tags: tuple[Ident, ...]
    span: Span = _span()


@node
class TargetAll:
    span: Span = _span()


Target = TargetActions | TargetTags | TargetAll


@node
class RuleDecl:
    name: Ident
    kind: RuleKind
    target: Target
    cond: Expr | None  # None for `after`
    after: tuple[Ident, ...]  # only for `after`
    span: Span = _span()


@node
class TierDecl:
    name: Ident
    max_ms: LitNum | None
    cost: LitNum | None
    text: LitBool | None = None  # `text`: the policy's text tier (writes the replies handed on)
    span: Span = _span()


@node
class RouteDecl:
    name: Ident
    when: Expr | None
    tiers: tuple[Ident, ...]
    span: Span = _span()


@node
class Policy:
    name: Ident
    fields: tuple[FieldDecl, ...]
    actions: tuple[ActionDecl, ...]
    fallbacks: tuple[FallbackDecl, ...]
    intents: tuple[IntentDecl, ...]
    rules: tuple[RuleDecl, ...]
    tiers: tuple[TierDecl, ...]
    routes: tuple[RouteDecl, ...]
    span: Span = _span()


_NODES = frozenset(_FIELDS) - {Ident}  # the node classes a walk enters


def children(e: object) -> list[Any]:
    """The direct sub-expressions of an AST node (names, strings and spans are not expressions)."""
    out: list[Any] = []
    for name in _FIELDS[type(e)]:
        v = getattr(e, name)
        if type(v) is tuple:
            out += [x for x in v if type(x) in _NODES]
        elif type(v) in _NODES:
            out.append(v)
    return out


def walk(expr: object) -> Iterator[Any]:
    """Every node of an expression, parents first."""
    stack = [expr]
    while stack:
        e = stack.pop()
        yield e
        stack.extend(children(e))
