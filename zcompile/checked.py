"""The checked program: a policy whose names are resolved and fields typed, as lint and lower read it."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from . import ast as A
from . import ir
from .errors import Diagnostic
from .kinds import FieldKind

HISTORY = "history"


@dataclass(frozen=True, slots=True)
class FieldInfo:
    """A state field as the runtime sees it."""

    path: str
    kind: FieldKind
    members: tuple[str, ...] = ()
    optional: bool = False
    default: ir.Scalar | frozenset[str] | None = None  # frozenset for sets
    has_default: bool = False

    @property
    def may_be_absent(self) -> bool:
        return self.optional and not self.has_default


class LoweredConditions:
    """The IR of the rule conditions the lints have lowered, by the condition's identity, for lower.py
    to reuse. It holds each condition beside its IR, so no id is reused while its entry lives."""

    __slots__ = ("_by_id",)

    def __init__(self) -> None:
        self._by_id: dict[int, tuple[A.Expr, ir.Expr]] = {}

    def get(self, cond: A.Expr) -> ir.Expr | None:
        got = self._by_id.get(id(cond))
        return got[1] if got is not None and got[0] is cond else None

    def put(self, cond: A.Expr, lowered: ir.Expr) -> ir.Expr:
        self._by_id[id(cond)] = (cond, lowered)
        return lowered


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
    lowered: LoweredConditions = dataclasses.field(default_factory=LoweredConditions)

    @property
    def name(self) -> str:
        return self.policy.name.text
