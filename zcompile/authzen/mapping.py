"""The mapping of `zc pdp`: from an AuthZEN request (subject, action, resource, context) to the
policy's action, state, intent and arguments; a small YAML or JSON file, validated with msgspec."""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

from ..errors import ZcError, did_you_mean
from ..inputs import read_file
from ..kinds import FieldKind
from ..yamldoc import compose, locate

VERSION = 1
ROOTS = ("subject", "resource", "action", "context")
Props = dict[str, Any]


class Derived(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A value computed from the request: exactly one of `const` (a literal), `equals` (two paths:
    true when both are present and equal), `contains` (a path to an array and a literal: true when
    the array holds it) or `join` (paths whose values, as text, are joined by `sep`). A path that
    is absent makes the value absent (unknown to the rules)."""

    const: Any = msgspec.UNSET
    equals: list[str] | None = None
    contains: list[Any] | None = None
    join: list[str] | None = None
    sep: str = " "


Source = str | Derived  # a dotted path (`subject.properties.role`), or a computed value


class MCP(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """The AuthZEN MCP profile's default mappings: `tools/call` on a resource of type `tool` whose
    id is the tool's name judges that tool as the policy's action; the methods in `allow` are
    permitted on the MCP server (`mcp_server`) itself, every other method denied (fail closed)."""

    call_action: str = "tools/call"
    tool_type: str = "tool"
    server_type: str = "mcp_server"
    allow: tuple[str, ...] = ("initialize", "tools/list", "ping")


class MappingFile(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A mapping file (docs/authzen.md, "The mapping")."""

    version: int = VERSION
    base: str | None = "context"  # the state starts as a copy of this object (None: empty)
    action: Source = "action.name"  # the name looked up in `actions` (an MCP tool: its name)
    state: dict[str, Source] = {}  # policy field -> where its value comes from
    intent: Source | None = None
    arguments: str | None = "action.properties"  # the call's arguments (`Policy.check`)
    actions: list[str] | dict[str, str] | None = None  # AuthZEN action names (-> policy actions)
    subjects: dict[str, Any] = {}  # a directory: type -> id -> properties (checked by Mapping)
    resources: dict[str, Any] = {}
    mcp: MCP | None = MCP()


class Unknown(Exception):
    """A name the mapping does not know (an action, or an entity missing from its directory): the
    request is well formed, and it is denied (fail closed)."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind, self.message = kind, message


@dataclass(frozen=True, slots=True)
class Mapped:
    """One request as the policy sees it; `where` maps a state field to the request `$.path` it
    came from; `doc` is the request with its entities' directory properties."""

    state: dict[str, Any]
    intent: str | None
    arguments: Any
    where: dict[str, str]
    doc: dict[str, Any]


class _Bad(Exception):
    """A value of the mapping file that is wrong: its `$.path` and the problem."""

    def __init__(self, at: str, problem: str) -> None:
        super().__init__(f"{at}: {problem}")
        self.at, self.problem = at, problem


def _split(path: Any, at: str) -> tuple[str, ...]:
    if not isinstance(path, str):
        raise _Bad(at, "expected a dotted path (e.g. `subject.properties.role`)")
    parts = tuple(path.split("."))
    if not path or not all(parts):
        raise _Bad(at, f"`{path}` is not a dotted path (e.g. `subject.properties.role`)")
    if parts[0] not in ROOTS:
        hint = did_you_mean(parts[0], ROOTS) or f"a path starts with {', '.join(ROOTS)}"
        raise _Bad(at, f"`{path}` starts with `{parts[0]}` ({hint})")
    return parts


_ABSENT = object()


def _read(doc: dict[str, Any], parts: tuple[str, ...]) -> Any:
    node: Any = doc
    for p in parts:
        if not isinstance(node, dict) or node.get(p) is None:
            return _ABSENT
        node = node[p]
    return node


class Mapping:
    """A validated mapping, bound to one policy.

    Args:
        spec: the mapping file's content (`MappingFile()` is the default mapping).
        policy: the loaded policy whose fields, actions and intents the mapping names.
        name: where the mapping came from (for messages).
        node: the YAML node tree of the file, to place problems at their line and column.
    """

    def __init__(self, spec: MappingFile, policy: Any, name: str = "<default mapping>",
                 node: Any = None) -> None:
        self.spec, self.policy, self.name = spec, policy, name

        def bad(at: str, problem: str) -> ZcError:
            spot = locate(node, at) if node is not None else None
            return ZcError(f"{name}{f':{spot[0]}:{spot[1]}' if spot else ''}: {at}: {problem}")

        if spec.version != VERSION:
            raise bad("$.version", f"unsupported mapping version {spec.version} (this zc reads version "
                                   f"{VERSION})")
        try:
            self._base = _split(spec.base, "$.base") if spec.base is not None else None
            fields = {f.path for f in policy.ir.fields}
            self._state: list[tuple[str, Any, str]] = []  # (field, compiled source, request path)
            for field, src in spec.state.items():
                at = f"$.state[{msgspec.json.encode(field).decode()}]"
                if field not in fields:
                    hint = did_you_mean(field, fields) or "the policy's state does not declare it"
                    raise bad(at, f"unknown field `{field}` ({hint})")
                self._state.append((field, *self._compile(src, at)))
            self._action = self._compile(spec.action, "$.action")[0]
            self._intent = self._compile(spec.intent, "$.intent") if spec.intent is not None else None
            const = self._intent[0] if self._intent is not None and self._intent[0][0] == "const" else None
            if const is not None and const[1] not in policy.intents:
                hint = did_you_mean(str(self._intent[0][1]), policy.intents) or "not declared by the policy"
                raise _Bad("$.intent.const", f"unknown intent `{self._intent[0][1]}` ({hint})")
            self._arguments = _split(spec.arguments, "$.arguments") if spec.arguments is not None else None
        except _Bad as exc:
            raise bad(exc.at, exc.problem) from None
        self.subjects = self._directory(spec.subjects, "$.subjects", bad)
        self.resources = self._directory(spec.resources, "$.resources", bad)
        names = spec.actions if spec.actions is not None else list(policy.actions)
        pairs = list(names.items()) if isinstance(names, dict) else [(n, n) for n in names]
        for key, target in pairs:
            if target not in policy.actions:
                at = f"$.actions.{key}" if isinstance(names, dict) else f"$.actions[{names.index(key)}]"
                hint = did_you_mean(target, policy.actions) or "not declared by the policy"
                raise bad(at, f"unknown action `{target}` ({hint})")
        self.actions: dict[str, str] = dict(pairs)  # AuthZEN name -> policy action
        self.names: dict[str, str] = {}  # policy action -> its (first) AuthZEN name
        for key, target in pairs:
            self.names.setdefault(target, key)
        # the sets of actions (`history`, `set[action]` fields) a PEP fills with its own names
        self._renamed = {k: v for k, v in self.actions.items() if k != v}
        self._sets = ([f.path.split(".") for f in policy.ir.fields if f.kind == FieldKind.SET]
                      if self._renamed else [])

    @staticmethod
    def _directory(types: dict[str, Any], at: str, bad) -> dict[str, dict[str, Props]]:
        """type -> id -> properties, every id a string (an AuthZEN id is one) and every entry an object."""
        for typ, entries in types.items():
            where = f"{at}.{typ}"
            if not isinstance(entries, dict):
                raise bad(where, "expected an object of entities by id")
            for key, props in entries.items():
                if not isinstance(key, str):
                    raise bad(where, f"the id {key!r} is not a string: quote it (`\"{key}\": …`)")
                if not isinstance(props, dict):
                    raise bad(f"{where}.{key}", "expected an object of the entity's properties")
        return types

    @staticmethod
    def _compile(src: Source, at: str) -> tuple[tuple, str]:
        """(the source ready to read, where a wrong value of it is to be found: the request's
        `$.path` it reads, or the mapping's own `$.path` for a constant)."""
        if isinstance(src, str):
            return ("path", _split(src, at)), src
        given = [k for k in ("const", "equals", "contains", "join")
                 if getattr(src, k) not in (None, msgspec.UNSET)]
        if len(given) != 1:
            raise _Bad(at, "a computed value has exactly one of `const`, `equals`, `contains`, `join`")
        if given[0] == "const":
            return ("const", src.const), f"the mapping's {at}"
        if given[0] == "join":
            if not src.join:
                raise _Bad(f"{at}.join", "expected one path or more")
            return ("join", tuple(_split(p, f"{at}.join[{i}]") for i, p in enumerate(src.join)),
                    src.sep), src.join[0]
        args = getattr(src, given[0])
        if len(args) != 2:
            raise _Bad(f"{at}.{given[0]}", f"expected two items, got {len(args)}")
        if given[0] == "equals":
            return ("equals", _split(args[0], f"{at}.equals[0]"), _split(args[1], f"{at}.equals[1]")), args[0]
        return ("contains", _split(args[0], f"{at}.contains[0]"), args[1]), args[0]

    # ---- one request -------------------------------------------------------------------------
    def action_name(self, doc: dict[str, Any]) -> str | None:
        """The AuthZEN action name of a request, as the mapping's `action` reads it (None: absent)."""
        got = self._value(doc, self._action)
        return got if isinstance(got, str) else None

    def action_of(self, name: str | None) -> str:
        """The policy action an AuthZEN action (or MCP tool) name stands for; Unknown otherwise."""
        target = self.actions.get(name) if name is not None else None
        if target is None:
            hint = did_you_mean(name, self.actions)
            raise Unknown("unknown_action", f"`{name}` is not an action of policy `{self.policy.name}`"
                                            + (f" ({hint})" if hint else ""))
        return target

    def entity(self, role: str, ent: dict[str, Any]) -> dict[str, Any]:
        """The subject or resource with its directory's properties over the request's (a directory
        is the authority on its entities); Unknown when its type has a directory without its id."""
        directory = (self.subjects if role == "subject" else self.resources).get(ent["type"])
        if directory is None:
            return ent
        props = directory.get(ent.get("id"))
        if props is None:
            raise Unknown(f"unknown_{role}", f"{role} `{ent.get('id')}` of type `{ent['type']}` is not in "
                                             f"the mapping's directory")
        return {**ent, "properties": {**(ent.get("properties") or {}), **props}}

    def map(self, doc: dict[str, Any], where: dict[str, str]) -> Mapped:
        """The state, intent and arguments of one request `doc` ({subject, action, resource,
        context}, entities already from `entity`); `where` gives each root's `$.path` in the body."""
        def place(source: str) -> str:  # a request path `subject.x` -> `$.evaluations[0].subject.x`
            if source.startswith("the mapping's "):
                return source
            root, _, rest = source.partition(".")
            return where.get(root, "$." + root) + ("." + rest if rest else "")

        state: dict[str, Any] = {}
        provenance: dict[str, str] = {}
        if self._base is not None:
            base = _read(doc, self._base)
            if isinstance(base, dict):
                state = copy.deepcopy(base)
            provenance[""] = place(".".join(self._base))
        for field, compiled, at in self._state:
            value = self._value(doc, compiled)
            provenance[field] = place(at)
            node = state
            *parents, leaf = field.split(".")
            for p in parents:
                nxt = node.get(p)
                if not isinstance(nxt, dict):
                    nxt = node[p] = {}
                node = nxt
            if value is _ABSENT:
                node.pop(leaf, None)
            else:
                node[leaf] = value
        for parts in self._sets:  # AuthZEN names (MCP tools) in sets of actions -> the policy's names
            node = state
            for p in parts[:-1]:
                node = node.get(p) if isinstance(node, dict) else None
            if isinstance(node, dict) and isinstance(node.get(parts[-1]), list):
                node[parts[-1]] = [self._renamed.get(a, a) if isinstance(a, str) else a
                                   for a in node[parts[-1]]]
        intent = None
        if self._intent is not None:
            got = self._value(doc, self._intent[0])
            intent = None if got is _ABSENT else got
            provenance["#intent"] = place(self._intent[1])
        arguments: Any = {}
        if self._arguments is not None:
            got = _read(doc, self._arguments)
            arguments = {} if got is _ABSENT else got
            provenance["#arguments"] = place(".".join(self._arguments))
        return Mapped(state, intent, arguments, provenance, doc)

    @staticmethod
    def _value(doc: dict[str, Any], compiled: tuple) -> Any:
        kind = compiled[0]
        if kind == "path":
            return _read(doc, compiled[1])
        if kind == "const":
            return _ABSENT if compiled[1] is None else compiled[1]
        if kind == "equals":
            a, b = (_read(doc, p) for p in compiled[1:])
            return _ABSENT if a is _ABSENT or b is _ABSENT else a == b
        if kind == "join":
            parts = [_read(doc, p) for p in compiled[1]]
            if any(v is _ABSENT or not isinstance(v, (str, int, float)) for v in parts):
                return _ABSENT
            return compiled[2].join(str(v) for v in parts)
        items = _read(doc, compiled[1])
        return items if items is _ABSENT else isinstance(items, list) and compiled[2] in items

    def place(self, mapped: Mapped, state_path: str) -> str:
        """The request `$.path` a state `$.path` (from a StateError) came from: the longest mapped
        field it is in, else the base object."""
        field = state_path[2:]
        while field:
            if field in mapped.where:
                return mapped.where[field] + state_path[2 + len(field):]
            field = re.sub(r"(\.[^.\[]+|\[\d+\]|^[^.\[]+)$", "", field)
        base = mapped.where.get("")
        return (base + state_path[1:]) if base else state_path


def load_mapping(path: str | Path | None, policy: Any) -> Mapping:
    """The mapping file at `path` (YAML or JSON), bound to `policy`; the default mapping when None.

    Raises:
        ZcError: the file cannot be read, is not valid YAML, or a value is wrong (file:line:column
            and its `$.path`).
    """
    if path is None:
        return Mapping(MappingFile(), policy)
    p = Path(path)
    try:
        text = read_file(p, "mapping file", 16 * 1024 * 1024).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ZcError(f"{p}: mapping file is not UTF-8 text (byte {exc.start})") from None
    data, node = compose(text, str(p), "mapping file", "a mapping (e.g. `version: 1` and `state:`)")
    try:
        spec = msgspec.convert(data, MappingFile)
    except msgspec.ValidationError as exc:
        from ..errors import json_problem

        problem = json_problem(exc)
        at, msg = problem.path, problem.problem
        if problem.kind == "unknown":
            known = MappingFile.__struct_fields__ if at.count(".") == 1 else ()
            hint = did_you_mean(problem.field or "", known) if known else None
            msg = "unknown key" + (f" ({hint})" if hint else "")
        spot = locate(node, at)
        raise ZcError(f"{p}:{spot[0]}:{spot[1]}: {at}: {msg}") from None
    return Mapping(spec, policy, str(p), node)
