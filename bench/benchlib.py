"""Shared helpers of the benchmarks: machine facts and rewriting one marked section of BENCHMARKS.md."""

from __future__ import annotations

import platform
import re
from pathlib import Path


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def write_section(path: Path, begin: str, end: str, text: str) -> None:
    """Replace the text between `begin` and `end` in `path` (markers included), or append it."""
    old = path.read_text() if path.exists() else "# Benchmarks\n"
    if begin in old:
        new = re.sub(re.escape(begin) + ".*?" + re.escape(end), lambda _: text, old, flags=re.S)
    else:
        new = old.rstrip() + "\n\n" + text + "\n"
    path.write_text(new)


def publish(lines: list[str], path: Path | None) -> None:
    """Print a section (its first and last lines are its markers) and, with `path`, write it there."""
    text = "\n".join(lines)
    print(text)
    if path:
        write_section(path, lines[0], lines[-1], text)
