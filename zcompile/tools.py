"""Tool schemas offered to pairwise specialists: checked here, without numpy or onnxruntime, so a
compiler-only router stays light."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .errors import ZcError


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
            raise ZcError(f"{path}: expected a tool schema {{name, description, parameters}}, got {type(t).__name__}")
        if not isinstance(name, str):
            raise ZcError(f"{path}: a tool schema needs a string `name`")
        out[name] = t
    return out


def policy_tools(policy: Any) -> dict[str, dict[str, str]]:
    """The policy's action descriptions as tool schemas by name: what describes an action when a
    decision offers no tools, in training and at decision time (an action without a description is
    left out: it reads as its name)."""
    return {a.name: {"name": a.name, "description": a.description} for a in policy.ir.actions if a.description}


REPLY_TAG = "reply"  # an action tagged `reply` is a text reply: only a rung that writes text answers it
_JSON_TYPE = {"bool": "boolean", "int": "integer", "float": "number", "text": "string", "list": "array",
              "enum": "string"}


def signature_schema(params: Sequence[Any]) -> dict[str, Any]:
    """The JSON schema of a declared signature (`ir.ParamDef`s): a closed object whose required
    properties are the non-optional parameters (no `required` key for an empty signature)."""
    props = {p.name: ({"type": "string", "enum": list(p.members)} if p.kind == "enum" else {"type": _JSON_TYPE[p.kind]})
             for p in params}
    required = [p.name for p in params if not p.optional]
    return {"type": "object", "properties": props, **({"required": required} if params else {}),
            "additionalProperties": False}
