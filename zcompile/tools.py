"""Tool schemas both ways: signatures as JSON schema, and tools files read back as `action` declarations.

No numpy or onnxruntime here (the router imports it), and the compiler only inside the functions that
read tools files, so a compiler-only router stays light.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import ir
from .errors import Diagnostic, ZcError, did_you_mean
from .inputs import json_type
from .kinds import FieldKind


def tool_schemas(tools: Any) -> dict[str, Mapping[str, Any]]:
    """Offered tools by name, from a list of schemas `{name, description, parameters}` or a dict of
    them by name (None: none). Anything else is refused with the `$.path` of the first bad entry."""
    if tools is None:
        return {}
    if isinstance(tools, Mapping):
        entries = [(f"$.tools.{k}", k, t) for k, t in tools.items()]
    elif isinstance(tools, Sequence) and not isinstance(tools, (str, bytes)):
        entries = [(f"$.tools[{i}]", t.get("name") if isinstance(t, Mapping) else None, t)
                   for i, t in enumerate(tools)]
    else:
        raise ZcError(f"$.tools: expected a list of tool schemas {{name, description, parameters}} or a dict "
                      f"of them by name, got {type(tools).__name__}")
    out: dict[str, Mapping[str, Any]] = {}
    for path, name, t in entries:
        if not isinstance(t, Mapping):
            raise ZcError(f"{path}: expected a tool schema {{name, description, parameters}}, got "
                          f"{type(t).__name__}")
        if not isinstance(name, str):
            raise ZcError(f"{path}: a tool schema needs a string `name`")
        out[name] = t
    return out


def policy_tools(policy: Any) -> dict[str, dict[str, str]]:
    """The policy's action descriptions as tool schemas by name: what describes an action when a
    decision offers no tools, in training and at decision time (an action without a description is
    left out: it reads as its name)."""
    return {a.name: {"name": a.name, "description": a.description} for a in policy.ir.actions
            if a.description}


REPLY_TAG = "reply"  # an action tagged `reply` is a text reply: only a rung that writes text answers it
_JSON_TYPE = {"bool": "boolean", "int": "integer", "float": "number", "text": "string", "list": "array",
              "enum": "string"}


def signature_schema(params: Sequence[Any]) -> dict[str, Any]:
    """The JSON schema of a declared signature (`ir.ParamDef`s): a closed object whose required
    properties are the non-optional parameters (no `required` key for an empty signature)."""
    props = {p.name: ({"type": "string", "enum": list(p.members)} if p.kind == FieldKind.ENUM
                      else {"type": _JSON_TYPE[p.kind]})
             for p in params}
    required = [p.name for p in params if not p.optional]
    return {"type": "object", "properties": props, **({"required": required} if params else {}),
            "additionalProperties": False}


# --- the inverse: tool schemas -> `action` declarations (`zc tools import`, `zc check --tools`) ----------
#
# One table serves both directions: `signature_schema` writes `_JSON_TYPE[kind]`, `_KIND` (its
# inverse) reads it back. JSON schema that a signature cannot state is an error at its `$.path`; a constraint
# that a signature drops (an array's `items`, `minimum`, `pattern`, ...) is a warning at its `$.path`.

# enum: `string` + `enum`
_KIND = {jt: kind for kind, jt in _JSON_TYPE.items() if kind != FieldKind.ENUM}
_ALIASES = {"dict": "object", "float": "number", "tuple": "array", "bool": "boolean", "int": "integer",
            "str": "string", "list": "array"}  # BFCL's Python-flavoured type names
_ANNOTATIONS = frozenset({"description", "title", "default", "examples", "deprecated", "readOnly",
                          "writeOnly", "$comment", "optional", "nullable"})
_DROPPED = frozenset({"items", "prefixItems", "contains", "minItems", "maxItems", "uniqueItems", "minimum",
                      "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf", "minLength",
                      "maxLength", "pattern", "format", "contentEncoding", "contentMediaType"})
_UNIONS = ("anyOf", "oneOf")
_REFUSED = ("$ref", "allOf", "not", "if", "then", "else", "dependentSchemas", "patternProperties")
# words the grammar reserves where an action or enum member is named (`path` / `name` admit the others)
RESERVED = frozenset({"policy", "state", "action", "fallback", "intent", "rule", "requires", "forbid", "when",
                      "unless", "after", "tags", "cost", "tier", "route", "and", "or", "not", "in", "self",
                      "true", "false"})
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_ACTION = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")


@dataclass(frozen=True, slots=True)
class Problem:
    """What a tools file says that a signature cannot (error) or states only in part (warning)."""

    path: str  # `$.path` in the tools file
    message: str
    severity: str = "error"  # error | warning

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


@dataclass(frozen=True, slots=True)
class ImportedTool:
    """One tool read back as an action: its name, description, signature and MCP-hinted tags."""

    name: str
    path: str  # `$.path` of the tool in its file
    description: str | None
    params: tuple[ir.ParamDef, ...] | None  # None: the tool could not be read as a signature
    tags: tuple[str, ...] = ()


def openai_tools(policy: Any) -> list[dict[str, Any]]:
    """The policy's signed actions as an OpenAI `tools` array (`zc tools export`): the exact input of
    `import_tools`, so `import_tools(openai_tools(p))` restates `p`'s signatures."""
    out = []
    for a in policy.ir.actions:
        if a.params is None:
            continue
        fn: dict[str, Any] = {"name": a.name}
        if a.description:
            fn["description"] = a.description
        fn["parameters"] = signature_schema(a.params)
        out.append({"type": "function", "function": fn})
    return out


def read_tools(data: Any) -> tuple[list[ImportedTool], list[Problem]]:
    """Tools from decoded JSON: an OpenAI `tools` array (`{type, function: {name, description,
    parameters}}` or bare `{name, description, parameters}` entries), an MCP `tools/list` result
    (`{"tools": [{name, description, inputSchema, annotations}]}`), or that result inside a JSON-RPC
    response (`{"result": {...}}`). Never raises: every problem is returned with its `$.path`."""
    problems: list[Problem] = []
    base = "$"
    if isinstance(data, dict) and "result" in data and "tools" not in data:
        data, base = data["result"], "$.result"
    if isinstance(data, dict):
        if "tools" not in data:
            return [], [Problem(base, "expected an OpenAI `tools` array or an MCP `tools/list` result "
                                      '`{"tools": [...]}`' + (f", found keys {_keys(data)}" if data else ""))]
        data, base = data["tools"], f"{base}.tools"
    if not isinstance(data, list):
        return [], [Problem(base, f"expected an array of tools, found {json_type(data)}")]
    tools: list[ImportedTool] = []
    seen: dict[str, str] = {}
    for i, entry in enumerate(data):
        tool = _read_tool(entry, f"{base}[{i}]", problems)
        if tool is None:
            continue
        if tool.name in seen:
            problems.append(Problem(f"{tool.path}.name", f"tool `{tool.name}` is listed twice "
                                                          f"(first at {seen[tool.name]})"))
            continue
        seen[tool.name] = tool.path
        tools.append(tool)
    return tools, problems


def _read_tool(entry: Any, path: str, problems: list[Problem]) -> ImportedTool | None:
    if not isinstance(entry, dict):
        problems.append(Problem(path, f"expected a tool object, found {json_type(entry)}"))
        return None
    if "function" in entry:  # OpenAI: {type: function, function: {...}}
        if entry.get("type", "function") != "function":
            problems.append(Problem(f"{path}.type", "expected `function`, found "
                                                    f"{_shown(entry.get('type'))}"))
            return None
        entry, path = entry["function"], f"{path}.function"
        if not isinstance(entry, dict):
            problems.append(Problem(path, f"expected a function object, found {json_type(entry)}"))
            return None
    name = entry.get("name")
    if not isinstance(name, str):
        problems.append(Problem(f"{path}.name", "a tool needs a string `name`" if name is None else
                                f"expected a string, found {json_type(name)}"))
        return None
    named = bool(_ACTION.fullmatch(name)) and not any(part in RESERVED for part in name.split("."))
    if not named:
        problems.append(Problem(f"{path}.name", f"tool name {_shown(name)} is not a zc action name (letters, "
                                                "digits, `_` and `.`, not starting with a digit, no reserved "
                                                "word); rename the tool"))
    desc = entry.get("description")
    if desc is not None and not isinstance(desc, str):
        problems.append(Problem(f"{path}.description", f"expected a string, found {json_type(desc)}"))
        desc = None
    key = "inputSchema" if "inputSchema" in entry else "parameters"
    schema = entry.get(key)
    params = () if schema is None else params_from_schema(schema, f"{path}.{key}", problems)
    tags: list[str] = []
    hints = entry.get("annotations")
    if isinstance(hints, dict):  # MCP tool annotations: only explicit hints become tags
        if hints.get("readOnlyHint") is True:
            tags.append("read")
        elif hints.get("destructiveHint") is True:
            tags.append("destructive")
    if not named:
        return None
    return ImportedTool(name, path, desc or None, params, tuple(tags))


def params_from_schema(schema: Any, path: str, problems: list[Problem]) -> tuple[ir.ParamDef, ...] | None:
    """The signature a tool's `parameters` (or `inputSchema`) states: the inverse of `signature_schema`.
    None (with errors in `problems`) when it states something a signature cannot."""
    n = len(problems)
    if not isinstance(schema, dict):
        problems.append(Problem(path, f"expected a JSON schema object, found {json_type(schema)}"))
        return None
    kind = _ALIASES.get(schema.get("type"), schema.get("type")) if isinstance(schema.get("type"), str) \
        else schema.get("type")
    if kind not in (None, "object"):
        problems.append(Problem(f"{path}.type", "a tool's arguments are an object, found type "
                                                f"{_shown(kind)}"))
        return None
    props = schema.get("properties", {})
    if not isinstance(props, dict):
        problems.append(Problem(f"{path}.properties", f"expected an object, found {json_type(props)}"))
        return None
    required = schema.get("required", [])
    if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
        problems.append(Problem(f"{path}.required", "expected an array of argument names"))
        required = []
    for j, r in enumerate(required):
        if r not in props:
            problems.append(Problem(f"{path}.required[{j}]", f"`{r}` is required but not among the "
                                                             "properties"))
    extra = schema.get("additionalProperties")
    if extra not in (None, False):
        problems.append(Problem(f"{path}.additionalProperties", "the tool accepts undeclared arguments; a zc "
                                "signature refuses them", "warning"))
    for key in _REFUSED:
        if key in schema:
            problems.append(Problem(f"{path}.{key}", f"`{key}` is not expressible in a zc signature"))
    params = []
    for name, prop in props.items():
        ppath = _member(f"{path}.properties", name)
        if not _WORD.fullmatch(name):
            problems.append(Problem(ppath, f"argument name {_shown(name)} is not a zc argument name "
                                           "(letters, digits and `_`, not starting with a digit)"))
            continue
        got = _param_kind(prop, ppath, problems)
        if got is not None:
            kind, members, nullable = got
            params.append(ir.ParamDef(name=name, kind=kind, members=members,
                                      optional=nullable or name not in required))
    if any(p.severity == "error" for p in problems[n:]):
        return None
    return tuple(params)


def _param_kind(prop: Any, path: str, problems: list[Problem]) -> tuple[str, tuple[str, ...], bool] | None:
    """(kind, enum members, nullable) of one argument's schema, or None with an error."""
    if prop is True or prop == {}:
        problems.append(Problem(path, "an argument of any type is not expressible in a zc signature"))
        return None
    if not isinstance(prop, dict):
        problems.append(Problem(path, f"expected a JSON schema object, found {json_type(prop)}"))
        return None
    for key in _UNIONS:  # pydantic's Optional[T]: anyOf [T, {type: null}]
        if key in prop:
            branches = prop[key]
            if not isinstance(branches, list):
                problems.append(Problem(f"{path}.{key}", "expected an array of schemas"))
                return None
            others = [(i, b) for i, b in enumerate(branches) if not (isinstance(b, dict) and b.get(
                "type") == "null")]
            if len(others) != 1:
                problems.append(Problem(f"{path}.{key}", f"a union of {len(others)} types is not expressible "
                                                         "in a zc signature (only one type, or one type or "
                                                         "null)"))
                return None
            i, branch = others[0]
            if not isinstance(branch, dict):
                problems.append(Problem(f"{path}.{key}[{i}]", f"expected a JSON schema object, found "
                                                              f"{json_type(branch)}"))
                return None
            rest = {k: v for k, v in prop.items() if k != key}
            clash = next((k for k in branch if k in rest and rest[k] != branch[k]), None)
            if clash is not None:
                problems.append(Problem(f"{path}.{key}[{i}].{clash}", f"`{clash}` differs from the `{clash}` "
                                                                      "beside it: not expressible in a zc "
                                                                      "signature"))
                return None
            got = _param_kind({**rest, **branch}, f"{path}.{key}[{i}]", problems)
            return None if got is None else (got[0], got[1], got[2] or len(branches) > 1)
    for key in _REFUSED:
        if key in prop:
            problems.append(Problem(f"{path}.{key}", f"`{key}` is not expressible in a zc signature"))
            return None
    raw = prop.get("type")
    nullable = prop.get("nullable") is True
    if isinstance(raw, list):
        types = [t for t in raw if t != "null"]
        nullable = nullable or len(types) < len(raw)
        if len(types) != 1:
            problems.append(Problem(f"{path}.type", f"a union of types {_shown(raw)} is not expressible in a "
                                                    "zc signature (only one type, or one type or null)"))
            return None
        raw = types[0]
    enum = prop.get("enum", [prop["const"]] if "const" in prop else None)
    if raw is None and isinstance(enum, list) and enum and all(isinstance(v, str) for v in enum):
        raw = "string"
    if raw is None:
        problems.append(Problem(path, "an argument without a `type` is not expressible in a zc signature"))
        return None
    if not isinstance(raw, str):
        problems.append(Problem(f"{path}.type", f"expected a type name, found {json_type(raw)}"))
        return None
    typ = _ALIASES.get(raw, raw)
    if typ == "object":
        problems.append(Problem(path, "an object argument is not expressible in a zc signature (arguments "
                                      "are bool, int, float, text, enum or list)"))
        return None
    if typ not in _KIND:
        problems.append(Problem(f"{path}.type", f"unknown JSON schema type {_shown(raw)}"))
        return None
    kind, members = _KIND[typ], ()
    ekey = "enum" if "enum" in prop else "const"
    if enum is not None:
        if typ != "string":
            problems.append(Problem(f"{path}.{ekey}", f"the allowed values of a `{typ}` argument are not "
                                                      f"checked by a zc signature (imported as `{kind}`)",
                                    "warning"))
        elif (not isinstance(enum, list) or not enum or not all(isinstance(v, str) for v in enum)
              or len(set(enum)) != len(enum)):
            problems.append(Problem(f"{path}.{ekey}", "expected distinct strings"))
            return None
        elif all(_WORD.fullmatch(v) and v not in RESERVED for v in enum):
            kind, members = FieldKind.ENUM, tuple(enum)
        else:
            bad = next(v for v in enum if not _WORD.fullmatch(v) or v in RESERVED)
            problems.append(Problem(f"{path}.{ekey}", f"member {_shown(bad)} is not a zc name: imported as "
                                                      "`text`, its values are not checked", "warning"))
    dropped = sorted(k for k in prop if k in _DROPPED)
    unknown = sorted(k for k in prop if k not in _DROPPED and k not in _ANNOTATIONS
                     and k not in ("type", "enum", "const"))
    if dropped:
        problems.append(Problem(path, "not checked by a zc signature: "
                                      f"{', '.join(f'`{k}`' for k in dropped)}",
                                "warning"))
    if unknown:
        problems.append(Problem(path, f"ignored: {', '.join(f'`{k}`' for k in unknown)}", "warning"))
    return kind, members, nullable


def _shown(v: Any) -> str:
    return json.dumps(v)[:80]


def _keys(d: dict) -> str:
    return ", ".join(_shown(k) for k in list(d)[:5])


def _member(path: str, key: str) -> str:
    """`path.key`, or `path["key"]` for a key that is not a plain word."""
    return f"{path}.{key}" if _WORD.fullmatch(key) else f"{path}[{json.dumps(key)}]"


def _type_text(p: ir.ParamDef) -> str:
    return ((f"enum({', '.join(p.members)})" if p.kind == FieldKind.ENUM else p.kind)
            + ("?" if p.optional else ""))


def signature_text(params: Sequence[ir.ParamDef]) -> str:
    """A signature as the policy language writes it: `(a: text, b: enum(x, y)?)`."""
    return "(" + ", ".join(f"{p.name}: {_type_text(p)}" for p in params) + ")"


def _string(s: str) -> str:
    """A policy string literal (JSON escapes, which is what the parser reads)."""
    try:
        s.encode("utf-8")
        out = json.dumps(s, ensure_ascii=False)
    except UnicodeEncodeError:  # an unpaired surrogate: written as its escape
        out = json.dumps(s)
    return out.replace("\x7f", "\\u007f")


WIDTH = 100  # a declaration wider than this wraps its arguments, then puts tags and description below


def declaration(tool: ImportedTool) -> str:
    """The `action` declaration of an imported tool."""
    head = f"action {tool.name}("
    args = [f"{p.name}: {_type_text(p)}" for p in tool.params or ()]
    tail = " ".join(([f"tags({', '.join(tool.tags)})"] if tool.tags else [])
                    + ([_string(tool.description)] if tool.description else []))
    one = head + ", ".join(args) + ")"
    if len(one) + len(tail) + 1 <= WIDTH:
        return f"{one} {tail}".rstrip()
    lines, line = [], head
    for i, arg in enumerate(args):
        piece = arg + ("," if i < len(args) - 1 else ")")
        if line != head and line.strip() and len(line) + 1 + len(piece) > WIDTH:
            lines.append(line.rstrip())
            line = " " * len(head)
        line += ("" if line.endswith("(") or not line.strip() else " ") + piece
    lines.append(line if args else head + ")")
    if tail:
        lines.append("    " + tail)
    return "\n".join(lines)


def import_tools(data: Any, file: str = "<tools>") -> tuple[str, list[Problem]]:
    """The `action` declarations of a tools file's decoded JSON, and the warnings (what the
    signatures do not check). Raises ZcError listing every error with its `$.path`."""
    tools, problems = read_tools(data)
    errors = [p for p in problems if p.severity == "error"]
    if errors:
        raise ZcError(f"{file}: cannot import these tools:\n" + "\n".join(f"  {p}" for p in errors))
    warned: dict[str, list[Problem]] = {}
    for p in problems:
        owner = next((t.name for t in tools if p.path == t.path or p.path.startswith(t.path + ".")), "")
        warned.setdefault(owner, []).append(p)
    lines = [f"# imported from {Path(file).name} by `zc tools import`: {len(tools)} "
             f"action{'s' if len(tools) != 1 else ''}"]
    for p in warned.get("", []):
        lines.append(f"# warning: {p}")
    for t in tools:
        lines += [f"# warning: {p}" for p in warned.get(t.name, [])]
        lines.append(declaration(t))
    text = "\n".join(lines) + "\n"
    _verify(text, tools)
    return text, [p for p in problems if p.severity == "warning"]


def _verify(text: str, tools: Sequence[ImportedTool]) -> None:
    """What was written parses back to exactly the signatures read (else a bug, named as one)."""
    from .parse import parse
    from .source import Source

    decls = parse(Source("<tools import>", "policy imported\n" + text)).actions
    back = [(d.name.text, tuple(_param_def(p) for p in d.params or ()), d.description,
             tuple(t.text for t in d.tags))
            for d in decls]
    want = [(t.name, t.params, t.description, t.tags) for t in tools]
    if back != want:
        raise ZcError("zc tools import wrote declarations that do not parse back to the tools (please report "
                      "it)")


def _param_def(p: Any) -> ir.ParamDef:
    """An AST parameter as the IR states it (the lowering, without a checker)."""
    from . import ast as A

    t = p.type
    if isinstance(t, A.EnumType):
        return ir.ParamDef(name=p.name.text, kind=FieldKind.ENUM, members=tuple(m.text for m in t.members),
                           optional=p.optional)
    kind = FieldKind.LIST if isinstance(t, A.ListType) else t.kind
    return ir.ParamDef(name=p.name.text, kind=kind, optional=p.optional)


def _decode_file(path: str | Path) -> Any:
    """A tools file's JSON: a regular file, nested at most `MAX_JSON_DEPTH` levels (else ZcError)."""
    import msgspec

    from .inputs import decode_json, read_file

    try:
        return decode_json(read_file(path, "tools file"), what=str(path))
    except msgspec.DecodeError as exc:
        raise ZcError(f"{path}: not valid JSON: {exc}") from None


def load_tools_file(path: str | Path) -> tuple[list[ImportedTool], list[Problem]]:
    """`read_tools` on a file."""
    return read_tools(_decode_file(path))


def import_file(path: str | Path) -> tuple[str, list[Problem]]:
    """`import_tools` on a file."""
    return import_tools(_decode_file(path), str(path))


# --- drift: a policy's signatures against the tools ------------------------------------------------------

def drift(policy: ir.PolicyIR, tree: Any, tools: Sequence[ImportedTool], file: str) -> list[Diagnostic]:
    """Diagnostics where `policy`'s signatures differ from `tools` (read from `file`), placed on the
    policy's source (`tree`, its AST): a tool without an action (ZC0501), an action without a signature
    (ZC0502), a missing or extra argument (ZC0503, ZC0504), another type (ZC0505), optional against
    required (ZC0506); an action with a signature that no tool has is a warning (ZC0507)."""
    decls = {}
    for d in tree.actions:
        decls.setdefault(d.name.text, d)
    actions = {a.name: a for a in policy.actions}
    out: list[Diagnostic] = []

    def err(code: str, msg: str, span: Any, help: str | None = None, severity: str = "error") -> None:
        out.append(Diagnostic(code, severity, msg, span, help))

    for tool in tools:
        action, decl = actions.get(tool.name), decls.get(tool.name)
        where = f"tool `{tool.name}` ({file} {tool.path})"
        if action is None or decl is None:
            hint = did_you_mean(tool.name, actions)
            if hint is None:
                hint = ("no signature states its schema (ZC0500 on the tools file)" if tool.params is None
                        else
                        f"declare `action {tool.name}{signature_text(tool.params)}` (`zc tools import` "
                        "writes it)")
            err("ZC0501", f"{where} has no action in policy `{policy.name}`", tree.name.span, hint)
            continue
        if tool.params is None:
            continue  # its schema is refused (reported on the tools file)
        if action.params is None:
            err("ZC0502", f"action `{tool.name}` has no signature, but {where} takes "
                          f"`{signature_text(tool.params)}`", decl.name.span,
                f"write `action {tool.name}{signature_text(tool.params)}`")
            continue
        theirs = {p.name: p for p in tool.params}
        ours = {p.name: p for p in action.params}
        spans = {p.name.text: p for p in decl.params or ()}
        for name, p in theirs.items():
            if name not in ours:
                err("ZC0503", f"action `{tool.name}` lacks argument `{name}: {_type_text(p)}` of {where}",
                    decl.name.span)
        for name, p in ours.items():
            node = spans.get(name)
            span = node.span if node is not None else decl.name.span
            t = theirs.get(name)
            if t is None:
                hint = did_you_mean(name, [n for n in theirs if n not in ours])
                err("ZC0504", f"argument `{name}` of action `{tool.name}` is not an argument of {where}",
                    node.name.span if node is not None else span, hint)
            elif (p.kind, frozenset(p.members)) != (t.kind, frozenset(t.members)):
                err("ZC0505", f"argument `{name}` of action `{tool.name}` is `{_type_text(p).rstrip('?')}`, "
                              f"but {where} says `{_type_text(t).rstrip('?')}`",
                    node.type.span if node is not None else span)
            elif p.optional != t.optional:
                err("ZC0506", f"argument `{name}` of action `{tool.name}` is "
                              + ("optional, but " + where + " requires it" if p.optional else
                                 "required, but " + where + " has it optional"),
                    span, "remove the `?`" if p.optional else "write `?` after its type")
    named = {t.name for t in tools}
    for a in policy.actions:
        if a.params is not None and a.name not in named and REPLY_TAG not in a.tags and a.name in decls:
            err("ZC0507", f"action `{a.name}` has a signature but {file} has no tool `{a.name}`",
                decls[a.name].name.span, did_you_mean(a.name, named - set(actions)), "warning")
    return out


def tools_file_diagnostics(problems: Sequence[Problem], file: str) -> list[Diagnostic]:
    """The errors of a tools file as diagnostics on that file (ZC0500)."""
    return [Diagnostic("ZC0500", "error", str(p), None, path=file) for p in problems if p.severity == "error"]


def check_tools(results: list[tuple[Any, Any, Sequence[Any]]], path: str | Path,
                data: Any = None) -> list[tuple[Any, Any, Sequence[Any]]]:
    """`zc check --tools`: each checked policy's results with its drift from the tools of `path`
    added, then the tools file's own errors as a result of its own when it has any. `data`: the
    tools already decoded (`zc check --tools-server`: the servers' tools/list), `path` naming them."""
    from .driver import read_source
    from .parse import parse

    tools, problems = load_tools_file(path) if data is None else read_tools(data)
    out = []
    for src_path, policy, diags in results:
        if policy is not None:
            diags = (*diags, *drift(policy, parse(read_source(src_path)), tools, str(path)))
        out.append((src_path, policy, diags))
    errors = tools_file_diagnostics(problems, str(path))
    return out + [(Path(path), None, tuple(errors))] if errors else out
