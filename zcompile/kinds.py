"""The kinds of rules and of state fields and arguments: one name each, shared by the AST, the checker
and the IR (msgspec writes a member as its string, so an artifact's bytes do not change)."""

from enum import StrEnum
from typing import Literal

CmpOp = Literal["==", "!=", "<", "<=", ">", ">="]
ArithOp = Literal["+", "-", "*"]


class RuleKind(StrEnum):
    """How a rule judges its targets."""

    REQUIRES = "requires"  # keeps them only when its condition is true
    FORBID_WHEN = "forbid_when"  # removes them when it is true
    FORBID_UNLESS = "forbid_unless"  # removes them unless it is true
    AFTER = "after"  # keeps them only once the named actions are in history


class FieldKind(StrEnum):
    """The type of a state field (`set`: a set of actions) or of an action's argument (`list`)."""

    ENUM = "enum"
    BOOL = "bool"
    INT = "int"
    FLOAT = "float"
    TEXT = "text"
    SET = "set"
    LIST = "list"


NUMBERS = frozenset({FieldKind.INT, FieldKind.FLOAT})
