"""Source text and spans: the positions every diagnostic and reason points at."""

from __future__ import annotations

import bisect
import dataclasses
import re
from dataclasses import dataclass, field
from typing import Any, TypeVar

T = TypeVar("T")


@dataclass(frozen=True, slots=True, eq=False)
class Source:
    """A named source text; line and column are computed on demand."""

    path: str
    text: str = field(repr=False)
    _starts: list[int] = field(default_factory=list, repr=False)

    def __post_init__(self) -> None:
        self._starts.append(0)
        self._starts.extend(m.end() for m in re.finditer("\n", self.text))

    def line_col(self, offset: int) -> tuple[int, int]:
        """1-based (line, column) of a character offset."""
        line = bisect.bisect_right(self._starts, offset) - 1
        return line + 1, offset - self._starts[line] + 1

    def line_text(self, line: int) -> str:
        """The text of a 1-based line, without its newline."""
        start = self._starts[line - 1]
        end = self._starts[line] - 1 if line < len(self._starts) else len(self.text)
        return self.text[start:end]


def stored_init(cls: type[T]) -> type[T]:
    """Give a frozen, slotted dataclass an `__init__` that stores each field through its slot's own
    descriptor: the same signature, defaults and frozen instances as dataclass's, at a third of the
    cost (dataclass's goes through `object.__setattr__`, by name, once a field); and `cls.make`,
    which takes every field in order, positionally (a keyword-only signature costs a call its
    keywords' matching). The parser makes millions of spans and nodes for a large policy."""
    positional: list[str] = []
    keywords: list[str] = []
    body: list[str] = []
    names: dict[str, Any] = {}
    dc: Any = cls  # a dataclass, which type[T] does not say
    for f in dataclasses.fields(dc):
        if f.default_factory is not dataclasses.MISSING or not f.init:
            raise TypeError(f"{cls.__name__}.{f.name}: stored_init takes plain fields only")
        names[f"_set_{f.name}"] = getattr(cls, f.name).__set__
        param = f.name
        if f.default is not dataclasses.MISSING:
            names[f"_default_{f.name}"] = f.default
            param += f"=_default_{f.name}"
        (keywords if f.kw_only else positional).append(param)
        body.append(f"    _set_{f.name}(self, {f.name})\n")
    params = ", ".join(["self", *positional, *(["*", *keywords] if keywords else [])])
    every = ", ".join(f.name for f in dataclasses.fields(dc))
    names.update(_new=object.__new__, _cls=cls)
    exec(f"def __init__({params}):\n{''.join(body) or '    pass'}\n"
         f"def make({every}):\n    self = _new(_cls)\n{''.join(body)}    return self\n", names)
    init = names["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    cls.__init__ = init  # type: ignore[method-assign]  # replacing dataclass's __init__ is the point
    cls.make = staticmethod(names["make"])  # type: ignore[attr-defined]  # read back by ast.maker
    return cls


@stored_init
@dataclass(frozen=True, slots=True)
class Span:
    """A half-open character range [start, end) of a source."""

    source: Source
    start: int
    end: int

    @property
    def text(self) -> str:
        return self.source.text[self.start : self.end]

    @property
    def line(self) -> int:
        return self.source.line_col(self.start)[0]

    @property
    def col(self) -> int:
        return self.source.line_col(self.start)[1]

    def to(self, other: Span) -> Span:
        """The span from the start of this one to the end of another."""
        return Span(self.source, self.start, other.end)

    def location(self) -> str:
        line, col = self.source.line_col(self.start)
        return f"{self.source.path}:{line}:{col}"
