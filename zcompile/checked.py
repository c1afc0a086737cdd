"""The checked program: a policy whose names are resolved and fields typed, as lint and lower read it."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from . import ast as A
from .errors import Diagnostic

HISTORY = "history"


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
    lowered: dict[int, object] = dataclasses.field(default_factory=dict)  # id(condition) -> its IR,
    # for the conditions the lints lowered (lower.py takes them from here)

    @property
    def name(self) -> str:
        return self.policy.name.text
