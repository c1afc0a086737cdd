"""State validation: the policy's state schema as msgspec types, errors as `$.path: problem`."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

import msgspec

from . import ir
from .errors import ZcError, did_you_mean, json_problem
from .kinds import FieldKind


class StateError(ZcError):
    """A runtime state that does not match the policy's schema."""

    def __init__(self, message: str, path: str = "$") -> None:
        super().__init__(message)
        self.path = path


_UNSET = object()
MAX_INT, MAX_FLOAT = ir.MAX_INT, ir.MAX_FLOAT  # NaN, ±infinity and integers past 64 bits are refused
INT = Annotated[int, msgspec.Meta(ge=-MAX_INT - 1, le=MAX_INT)]
FLOAT = Annotated[float, msgspec.Meta(ge=-MAX_FLOAT, le=MAX_FLOAT)]


def number_problem(v: Any) -> str | None:
    """Why a number value is refused (not finite, or an integer past 64 bits); None when it is fine."""
    if isinstance(v, bool):
        return None
    if isinstance(v, int) and not -MAX_INT - 1 <= v <= MAX_INT:
        return "integer out of range (integers must fit in 64 bits)"
    if isinstance(v, float) and not -MAX_FLOAT <= v <= MAX_FLOAT:
        return f"expected a finite number, got {v}"
    return None


def _leaf_type(f: ir.FieldDef, actions: tuple[str, ...]) -> Any:
    base: Any
    if f.kind == FieldKind.ENUM:
        base = Literal[f.members]
    elif f.kind == FieldKind.SET:
        # a Literal of the policy's actions, known at run time only
        base = list[Literal[actions]] if actions else list[str]  # type: ignore[valid-type]
    else:
        base = {"bool": bool, "int": INT, "float": FLOAT, "text": str}[f.kind]
    if f.optional or f.has_default:
        return base | None, None
    return base, _UNSET


class Schema:
    """A compiled state schema: `convert(obj)` validates and returns the root Struct."""

    def __init__(self, fields: tuple[ir.FieldDef, ...], actions: tuple[str, ...], strict: bool) -> None:
        self.fields = {f.path: f for f in fields}
        self.actions = actions
        tree: dict[str, Any] = {}
        for f in fields:
            node = tree
            *parents, leaf = f.path.split(".")
            for part in parents:
                node = node.setdefault(part, {})
            node[leaf] = f
        self.attrs: dict[str, tuple[str, ...]] = {}  # field path -> attribute chain on the Struct
        self.type = self._struct("State", tree, (), strict)[0]
        # top-level keys that write a dotted field flat (`"user.role"`, or `"a.b"` holding `{"c": …}`)
        self._flat = frozenset(".".join(parts[:i]) for parts in (f.path.split(".") for f in fields)
                               for i in range(2, len(parts) + 1))

    def _struct(self, name: str, tree: dict[str, Any], prefix: tuple[str, ...],
                strict: bool) -> tuple[Any, bool]:
        specs: list[tuple[Any, ...]] = []
        rename: dict[str, str] = {}
        required = False
        for i, (key, sub) in enumerate(tree.items()):
            attr = f"f{i}"
            rename[attr] = key
            if isinstance(sub, dict):
                t, req = self._struct(f"{name}_{key}", sub, prefix + (attr,), strict)
                default = _UNSET if req else None
                t = t if req else t | None
            else:
                t, default = _leaf_type(sub, self.actions)
                req = default is _UNSET
                self.attrs[sub.path] = prefix + (attr,)
            required = required or req
            specs.append((attr, t) if default is _UNSET else (attr, t, default))
        specs.sort(key=lambda s: len(s) == 3)  # required fields first
        st = msgspec.defstruct(name, specs, rename=rename, forbid_unknown_fields=strict,
                               frozen=True)
        return st, required

    def convert(self, obj: Any) -> Any:
        if self._flat and isinstance(obj, dict) and not self._flat.isdisjoint(obj):
            raise self._flat_key(next(k for k in obj if k in self._flat))
        try:
            return msgspec.convert(obj, self.type, strict=True)
        except msgspec.ValidationError as exc:
            raise self._error(exc) from None
        except RecursionError:  # a Python object nested past the interpreter's limit
            raise StateError("$: state nested too deeply") from None

    @staticmethod
    def _flat_key(key: str) -> StateError:
        """A key written flat is never read (fail closed): refused, with the nesting to write instead."""
        *parents, leaf = key.split(".")
        nested = "".join(f'{{"{p}": ' for p in parents) + f'{{"{leaf}": …}}' + "}" * len(parents)
        path = f"$[{msgspec.json.encode(key).decode()}]"
        return StateError(f"{path}: dotted fields are nested objects: write {nested}, not a key "
                          f"{msgspec.json.encode(key).decode()}", path)

    def _error(self, exc: msgspec.ValidationError) -> StateError:
        p = json_problem(exc)
        path, msg = p.path, p.problem
        if re.match(r"expected `float` [<>]=", msg):
            msg = "expected a finite number (NaN and infinity are refused)"
        elif re.match(r"expected `int` [<>]=", msg):
            msg = "integer out of range (integers must fit in 64 bits)"
        elif msg == "number out of range":
            msg = "number out of range (numbers must be finite; integers must fit in 64 bits)"
        bad = re.match(r"invalid enum value (.*)", msg)
        field = self.fields.get(re.sub(r"\[\d+\]$", "", path)[2:])
        if bad and field is not None:
            allowed = field.members if field.kind == FieldKind.ENUM else self.actions
            shown = "|".join(allowed[:12]) + ("|…" if len(allowed) > 12 else "")
            value = bad.group(1).strip("'")
            hint = did_you_mean(value, allowed)
            msg = (f"expected one of {shown}, got {msgspec.json.encode(value).decode()}"
                   + (f" ({hint})" if hint else ""))
        if p.kind == "unknown":
            msg = "unknown field (the policy's state schema does not declare it)"
        msg = msg.replace(" | null`", "`")
        return StateError(f"{path}: {msg}", path)


def read_path(schema: Schema, root: Any, path: str) -> Any:
    """A field's value from a converted state (its default when absent; None when unknown)."""
    node = root
    for attr in schema.attrs[path]:
        if node is None:
            break
        node = getattr(node, attr)
    f = schema.fields[path]
    if node is None:
        node = f.default if f.has_default else None
    if f.kind == FieldKind.SET and node is not None:
        return frozenset(node)
    return node
