"""Text rendering: one documented, versioned function from a state to the text a transformer specialist reads.

Shared by training and decision time (numpy-free, torch-free). Version 1, for each state field of
the policy in declaration order (`history` last), the structured fields first, then the text fields:
- the field's name is its path with `.` and `_` read as spaces (`last.tool_error` -> `last tool error`);
- enum: the member, `_` as spaces; bool: `yes` / `no`; int, float: the number (`repr` of an int,
  `%g` of a float);
- set[action] and `history`: the actions in the policy's declaration order, `_` as spaces,
  separated by `, `, or `none` when empty;
- text: whitespace collapsed, its first `TEXT_CHARS` characters;
- an absent optional field: `absent`;
each field renders as `name: value`, joined with ` | `. The legal set is not rendered: scores are
masked to it afterwards. The tokenizer then keeps the first `max_length` tokens (recorded in the
manifest), so the structured fields are never cut before the texts.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .. import ir
from ..state import Schema, read_path

VERSION = 1
TEXT_CHARS = 160


def _words(name: str) -> str:
    return name.replace(".", " ").replace("_", " ")


class Renderer:
    """Renders validated states of one policy's schema as text (see the module docstring)."""

    def __init__(self, fields: Sequence[ir.FieldDef], actions: Sequence[str], version: int = VERSION) -> None:
        from ..errors import ZcError

        if version != VERSION:
            raise ZcError(f"text rendering of version {version} is not computed by this zc (version "
                          f"{VERSION}); distil the specialist again")
        self.fields = tuple(fields)
        self.actions = tuple(actions)
        self.schema = Schema(self.fields, self.actions, strict=False)
        self._order = {a: i for i, a in enumerate(self.actions)}
        self._structured = [f for f in self.fields if f.kind != "text"]
        self._texts = [f for f in self.fields if f.kind == "text"]
        self._names = {f.path: _words(f.path) for f in self.fields}

    def one(self, state: Any) -> str:
        """The text of one state (a dict, validated here)."""
        return self.root(self.schema.convert(state))

    def root(self, root: Any) -> str:
        parts = []
        for f in self._structured + self._texts:
            v = read_path(self.schema, root, f.path)
            parts.append(f"{self._names[f.path]}: {self._value(f, v)}")
        return " | ".join(parts)

    def _value(self, f: ir.FieldDef, v: Any) -> str:
        if v is None:
            return "absent"
        if f.kind == "enum":
            return _words(v)
        if f.kind == "bool":
            return "yes" if v else "no"
        if f.kind == "int":
            return repr(int(v))
        if f.kind == "float":
            return f"{float(v):g}"
        if f.kind == "set":
            names = sorted(set(v), key=self._order.__getitem__)
            return ", ".join(_words(a) for a in names) if names else "none"
        if f.kind == "text":
            return " ".join(v.split())[:TEXT_CHARS]
        return str(v)
