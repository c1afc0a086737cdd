"""Source text and spans: the positions every diagnostic and reason points at."""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass, field


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
