"""What every benchmark in bench/ shares: machine facts and writing its own section of BENCHMARKS.md."""

from __future__ import annotations

import os
import platform
import re
import shlex
import sys
import time
from importlib import metadata
from pathlib import Path

HEADER = ("# Benchmarks\n\nMeasured figures for the performance targets of docs/design.md. Each section is "
          "written by the script named in it; rerun the command to refresh it (`make bench` reruns all).\n")


def ver(pkg: str) -> str:
    try:
        return metadata.version(pkg)
    except metadata.PackageNotFoundError:
        return "not installed"


def cpu_model() -> str:
    try:
        txt = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.processor() or "unknown"
    m = re.search(r"^model name\s*:(.*)$", txt, re.M)
    cpu = m.group(1).strip() if m else "unknown"
    m = re.search(r"^flags\s*:(.*)$", txt, re.M)
    flags = [f for f in ("avx2", "avx512f") if m and f in m.group(1).split()]
    return cpu + (f" ({', '.join(flags)})" if flags else "")


def machine_facts(packages: list[tuple[str, tuple[str, ...]]]) -> list[tuple[str, str]]:
    """CPU, cores, Python, and the versions of `packages` given as (label, distribution names)."""
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else "?"
    return [
        ("CPU", cpu_model()),
        ("cores (os.cpu_count)", str(os.cpu_count())),
        ("affinity (usable cores)", str(usable)),
        ("Python", f"{platform.python_implementation()} {platform.python_version()} ({platform.platform()})"),
        ("zcompile", ver("zcompile")),
        *((label, " / ".join(ver(p) for p in pkgs)) for label, pkgs in packages),
    ]


def machine_table(packages: list[tuple[str, tuple[str, ...]]]) -> list[str]:
    return ["| machine | |", "|---|---|", *(f"| {k} | {v} |" for k, v in machine_facts(packages))]


def section_head(title: str, script: str, rounds: int, write: Path | None, load: tuple[float, float],
                 packages: list[tuple[str, tuple[str, ...]]], default_rounds: int = 1000) -> list[str]:
    """The first lines of a section: its title, the command that wrote it, the machine and the load
    average at its start and end."""
    cmd = f"python bench/{script}" + (f" --rounds {rounds}" if rounds != default_rounds else "") + \
        (f" --write {shlex.quote(str(write))}" if write else "")
    return [title, "", f"Command: `{cmd}`, run on {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}.", "",
            *machine_table(packages), f"| load average (1 min): start / end | {load[0]:.2f} / {load[1]:.2f} "
                                      "|", ""]


def cpu_times() -> tuple[int, int] | None:
    """(steal, total) CPU ticks of the whole machine since boot (Linux `/proc/stat`), or None."""
    try:
        fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    except (OSError, ValueError):
        return None
    return (fields[7] if len(fields) > 7 else 0), sum(fields[:8])


def steal_share(before: tuple[int, int] | None, after: tuple[int, int] | None) -> str:
    """The share of CPU time the hypervisor gave to other guests between two `cpu_times()` readings."""
    if before is None or after is None or after[1] <= before[1]:
        return "unknown"
    return f"{(after[0] - before[0]) / (after[1] - before[1]):.1%}"


def write_section(path: Path, name: str, section: str) -> None:
    """Create or replace the section between `<!-- name:begin -->` and `<!-- name:end -->`; the rest of
    the file is left as it is. Written to a temporary file and renamed, so a crash loses nothing."""
    begin, end = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
    block = f"{begin}\n{section.rstrip()}\n{end}"
    text = path.read_text() if path.exists() else HEADER
    if begin in text and end in text:
        pre, rest = text.split(begin, 1)
        text = pre + block + rest.split(end, 1)[1]
    else:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    tmp = path.with_name(f".{path.name}.{name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def publish(name: str, section: str, path: Path | str | None) -> None:
    """Print a benchmark's section and, when `path` is given, write it into that file."""
    print(section)
    if path:
        write_section(Path(path), name, section)
        print(f"wrote the {name} section of {path}", file=sys.stderr)
