"""The compiler pipeline end to end: read, parse, check, lower, write artifacts."""

from __future__ import annotations

from pathlib import Path

from . import __version__, ir
from .check import Checked, check
from .errors import Diagnostic, ZcError
from .lower import lower
from .parse import decode, parse
from .runtime import Policy
from .source import Source

MAX_BYTES = 64 * 1024 * 1024


def read_source(path: str | Path) -> Source:
    """Read a policy file as a Source (UTF-8 text, not binary)."""
    p = Path(path)
    try:
        if p.stat().st_size > MAX_BYTES:
            raise ZcError(f"{p}: policy file is larger than {MAX_BYTES >> 20} MB")
        data = p.read_bytes()
    except OSError as exc:
        raise ZcError(f"{p}: cannot read policy: {exc.strerror}") from None
    return decode(str(p), data)


def check_source(source: Source) -> Checked:
    """Parse and check; raise ZcError with every diagnostic when the policy has errors."""
    return check(parse(source), source)


def compile_source(source: Source) -> tuple[ir.PolicyIR, tuple[Diagnostic, ...]]:
    """Compile to IR, returning the warnings alongside."""
    checked = check_source(source)
    return lower(checked, source), checked.diagnostics


def compile_text(text: str, name: str = "<string>") -> Policy:
    """Compile policy source text straight to a runtime Policy (warnings are dropped)."""
    policy, _ = compile_source(Source(name, text))
    return Policy(policy)


def compile_file(path: str | Path) -> Policy:
    """Compile a `.zc` file straight to a runtime Policy (warnings are dropped)."""
    policy, _ = compile_source(read_source(path))
    return Policy(policy)


def artifact_bytes(policy: ir.PolicyIR) -> bytes:
    return ir.dumps(policy, f"zcompile {__version__}")


def policy_files(paths: list[str | Path]) -> list[Path]:
    """Expand directories to the `.zc` files inside them (sorted)."""
    out: list[Path] = []
    for raw in paths:
        p = Path(raw)
        if p.is_dir():
            found = sorted(p.rglob("*.zc"))
            if not found:
                raise ZcError(f"{p}: no `.zc` policy files in this directory")
            out.extend(found)
        elif p.exists():
            out.append(p)
        else:
            raise ZcError(f"{p}: no such file or directory")
    return out
