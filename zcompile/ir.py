"""The compiled artifact: msgspec Structs of the IR inside a versioned, self-hashed envelope."""

from __future__ import annotations

import contextlib
import gc
import hashlib
import os
import sys
from collections.abc import Callable, Iterator
from typing import Any

import msgspec

from .errors import ZcError
from .inputs import too_deep
from .kinds import ArithOp, CmpOp, FieldKind, RuleKind

FORMAT = "zcp"
VERSION = 2  # 2: action signatures (`ActionDef.params`), `Arg` and `Len` expressions, `RuleDef.args`
READS = (1, 2)  # versions this runtime reads (a version-1 artifact is a version 2 without arguments)

# limits shared by the checker (on source) and the runtime (on states and artifacts)
MAX_DEPTH = 200  # most operators nested in one expression
MAX_INT = 2**63 - 1  # integers fit in 64 bits
MAX_FLOAT = sys.float_info.max  # numbers are finite: NaN and ±infinity never enter an evaluation


class SpanDef(msgspec.Struct, frozen=True):
    file: str
    line: int
    col: int
    end_line: int
    end_col: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.col}"


# ---- expressions (tagged union) ---------------------------------------------------------
class Field(msgspec.Struct, frozen=True, tag="field"):
    path: str


class Arg(msgspec.Struct, frozen=True, tag="arg"):
    name: str  # an argument of the proposed call (`args.NAME`)


class Len(msgspec.Struct, frozen=True, tag="len"):
    operand: Expr


class Const(msgspec.Struct, frozen=True, tag="const"):
    value: bool | int | float | str


class Self(msgspec.Struct, frozen=True, tag="self"):
    pass


class Cost(msgspec.Struct, frozen=True, tag="cost"):
    pass


class Not(msgspec.Struct, frozen=True, tag="not"):
    operand: Expr


class And(msgspec.Struct, frozen=True, tag="and"):
    operands: tuple[Expr, ...]


class Or(msgspec.Struct, frozen=True, tag="or"):
    operands: tuple[Expr, ...]


class Cmp(msgspec.Struct, frozen=True, tag="cmp"):
    op: CmpOp
    left: Expr
    right: Expr


class InConst(msgspec.Struct, frozen=True, tag="in_const"):
    operand: Expr
    values: tuple[bool | int | float | str, ...]
    negated: bool


class InSet(msgspec.Struct, frozen=True, tag="in_set"):
    operand: Expr
    path: str
    negated: bool


class Arith(msgspec.Struct, frozen=True, tag="arith"):
    op: ArithOp
    left: Expr
    right: Expr


class Neg(msgspec.Struct, frozen=True, tag="neg"):
    operand: Expr


Expr = Field | Arg | Len | Const | Self | Cost | Not | And | Or | Cmp | InConst | InSet | Arith | Neg
Scalar = bool | int | float | str


def children(e: Expr) -> tuple[Expr, ...]:
    """The direct sub-expressions of an IR expression."""
    get = _CHILDREN.get(type(e))
    return () if get is None else get(e)


def holds(e: Expr, *types: type) -> bool:
    """Whether an expression holds a node of one of `types` (`Self`, `Cost`: it reads the judged
    action, so its value differs per target)."""
    stack = [e]
    while stack:
        node = stack.pop()
        if isinstance(node, types):
            return True
        stack.extend(children(node))
    return False


def _operand(e: Len | Not | Neg | InConst | InSet) -> tuple[Expr]:
    return (e.operand,)


def _sides(e: Cmp | Arith) -> tuple[Expr, Expr]:
    return (e.left, e.right)


def _operands(e: And | Or) -> tuple[Expr, ...]:
    return e.operands


# the expressions with sub-expressions, and where they hold them (the others are leaves)
_CHILDREN: dict[type, Callable[[Any], tuple[Expr, ...]]] = {
    Len: _operand, Not: _operand, Neg: _operand, InConst: _operand, InSet: _operand,
    Cmp: _sides, Arith: _sides, And: _operands, Or: _operands}


# ---- declarations -------------------------------------------------------------------------
class FieldDef(msgspec.Struct, frozen=True):
    path: str
    kind: FieldKind  # not `list`
    members: tuple[str, ...] = ()
    optional: bool = False
    has_default: bool = False
    default: Scalar | tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        if self.kind is FieldKind.LIST:
            raise ValueError("a state field cannot be a `list` (an argument's kind)")

    @property
    def may_be_absent(self) -> bool:
        return self.optional and not self.has_default


class ParamDef(msgspec.Struct, frozen=True):
    name: str
    kind: FieldKind  # not `set`
    members: tuple[str, ...] = ()
    optional: bool = False

    def __post_init__(self) -> None:
        if self.kind is FieldKind.SET:
            raise ValueError("an argument cannot be a `set` (a state field's kind)")


class ActionDef(msgspec.Struct, frozen=True):
    name: str
    tags: tuple[str, ...] = ()
    cost: int | float = 0
    description: str | None = None
    params: tuple[ParamDef, ...] | None = None  # None: no signature, arguments unchecked


class IntentDef(msgspec.Struct, frozen=True):
    name: str
    allow: tuple[str, ...]
    description: str | None = None


class RuleDef(msgspec.Struct, frozen=True):
    name: str
    kind: RuleKind
    targets: tuple[str, ...]
    span: SpanDef
    text: str  # the condition (or the `after` list) as written
    cond: Expr | None = None
    after: tuple[str, ...] = ()
    reads: tuple[str, ...] = ()  # state fields the condition reads
    args: tuple[str, ...] = ()  # arguments the condition reads: judged by `check`, not `legal`


class TierDef(msgspec.Struct, frozen=True, omit_defaults=True):
    """A tier; `text`: the policy's text tier (written only when true, so a policy without one keeps
    the bytes and the identity it had before the option existed: `max_ms` and `cost` are always written)."""

    name: str
    max_ms: int | float | None
    cost: int | float | None
    text: bool = False


class RouteDef(msgspec.Struct, frozen=True):
    name: str
    tiers: tuple[str, ...]
    span: SpanDef
    when: Expr | None = None


class PolicyIR(msgspec.Struct, frozen=True):
    name: str
    source_path: str
    source_sha256: str
    fields: tuple[FieldDef, ...]
    actions: tuple[ActionDef, ...]
    fallback: str
    intents: tuple[IntentDef, ...] = ()
    rules: tuple[RuleDef, ...] = ()
    tiers: tuple[TierDef, ...] = ()
    routes: tuple[RouteDef, ...] = ()


class Envelope(msgspec.Struct, frozen=True):
    format: str
    version: int
    compiler: str
    sha256: str  # of the `policy` bytes exactly as stored
    policy: msgspec.Raw


class _Head(msgspec.Struct):
    format: str
    version: int


def identity(policy: PolicyIR) -> str:
    """The policy's identity: sha256 of its meaning, without source paths, spans or comments.

    Two compilations of the same rules from different places (or with other comments) share it;
    specialists and receipts name the policy they were made for by it.
    """
    blank = SpanDef("", 0, 0, 0, 0)
    plain = msgspec.structs.replace(
        policy, source_path="", source_sha256="",
        rules=tuple(msgspec.structs.replace(r, span=blank) for r in policy.rules),
        routes=tuple(msgspec.structs.replace(r, span=blank) for r in policy.routes))
    data = msgspec.to_builtins(plain)
    # fields added in version 2 are left out at their defaults: a policy without arguments keeps the
    # identity it had in version 1 (specialists and receipts made for it stay valid)
    for a in data["actions"]:
        if a["params"] is None:
            del a["params"]
    for r in data["rules"]:
        if not r["args"]:
            del r["args"]
    return hashlib.sha256(msgspec.json.encode(data)).hexdigest()


def is_artifact(path: str | os.PathLike[str]) -> bool:
    """Whether the file at `path` starts as `dumps` writes an artifact (what `zc compile` may replace)."""
    head = msgspec.json.encode({"format": FORMAT})[:-1] + b","
    with open(path, "rb") as f:
        return f.read(len(head)) == head


def dumps(policy: PolicyIR, compiler: str) -> bytes:
    """Encode a policy into artifact bytes."""
    body = msgspec.json.encode(policy)
    env = Envelope(FORMAT, VERSION, compiler, hashlib.sha256(body).hexdigest(), msgspec.Raw(body))
    return msgspec.json.encode(env)


def loads(data: bytes, path: str = "<artifact>") -> tuple[PolicyIR, str]:
    """Decode and verify artifact bytes; return the policy and its sha256.

    JSON nested past the decoder's recursion limit is refused as corrupt; the IR's own nesting
    is checked exactly by `verify` (MAX_DEPTH operators).
    """
    with too_deep(f"{path}: corrupt artifact"), no_gc():
        return _loads(data, path)


@contextlib.contextmanager
def no_gc() -> Iterator[None]:
    """The cyclic collector paused: decoding and loading allocate many long-lived objects and free
    none, so its passes (most of a big artifact's decode time) would find nothing."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _loads(data: bytes, path: str) -> tuple[PolicyIR, str]:
    try:
        head = msgspec.json.decode(data, type=_Head)
    except (msgspec.DecodeError, msgspec.ValidationError):
        raise ZcError(f"{path}: not a zc artifact (expected a `.zcp` file written by `zc compile`)") from None
    if head.format != FORMAT:
        raise ZcError(f"{path}: not a zc artifact (format `{head.format}`, expected `{FORMAT}`)")
    if head.version > VERSION:
        raise ZcError(f"{path}: artifact format version {head.version} is newer than this zc "
                      f"supports ({VERSION}); upgrade zcompile or recompile the policy")
    if head.version not in READS:
        raise ZcError(f"{path}: artifact format version {head.version} is not supported "
                      f"(this zc reads versions {READS[0]}-{READS[-1]}); recompile the policy")
    try:
        env = msgspec.json.decode(data, type=Envelope)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise ZcError(f"{path}: corrupt artifact: {exc}") from None
    digest = hashlib.sha256(env.policy).hexdigest()
    if digest != env.sha256:
        raise ZcError(f"{path}: artifact content does not match its sha256 (tampered or corrupt); "
                      "recompile the policy with `zc compile`")
    try:
        policy = msgspec.json.decode(env.policy, type=PolicyIR)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise ZcError(f"{path}: corrupt artifact: {exc}") from None
    return policy, digest
