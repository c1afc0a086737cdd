"""The compiler pipeline end to end: read, parse, check, lower, write artifacts."""

from __future__ import annotations

from pathlib import Path

from . import __version__, ir
from .check import check
from .checked import Checked
from .errors import Diagnostic, ZcError
from .inputs import files_under, path_kind, read_file
from .lower import lower
from .parse import MAX_POLICY_BYTES, decode, parse
from .runtime import Policy
from .source import Source
from .verify import verify


def read_source(path: str | Path) -> Source:
    """Read a policy file as a Source (a regular file of UTF-8 text, at most MAX_POLICY_BYTES)."""
    return decode(str(path), read_file(path, "policy", MAX_POLICY_BYTES))


def check_source(source: Source, lints: bool = True) -> Checked:
    """Parse and check; raise ZcError with every diagnostic when the policy has errors (the lints'
    warnings too, unless `lints` is false)."""
    with ir.no_gc():  # the passes allocate many small objects and free few: skip the GC passes
        return check(parse(source), source, lints)


def check_diagnostics(source: Source) -> tuple[Diagnostic, ...]:
    """The warnings of a policy that parses and checks (ZcError otherwise). Its AST is freed before
    the cyclic collector resumes, which would otherwise traverse every node once (and find no
    cycle: an AST holds none), about 7% of checking a 100,000-rule policy."""
    with ir.no_gc():
        return check_source(source).diagnostics


def compile_source(source: Source) -> tuple[ir.PolicyIR, tuple[Diagnostic, ...]]:
    """Compile to IR, returning the warnings alongside; the IR passes the runtime's verification
    (what `zc compile` writes always loads). The AST is freed before the collector resumes."""
    with ir.no_gc():
        checked = check_source(source)
        policy = lower(checked, source)
        verify(policy)
        diagnostics = checked.diagnostics
        del checked
    return policy, diagnostics


def compile_text(text: str, name: str = "<string>") -> Policy:
    """Compile policy source text straight to a runtime Policy (warnings are not looked for: the
    lints run in `zc check`, `zc compile` and the language server, which show them)."""
    return _load(Source(name, text))


def compile_file(path: str | Path) -> Policy:
    """Compile a `.zc` file straight to a runtime Policy (warnings are not looked for)."""
    return _load(read_source(path))


def lower_source(source: Source) -> ir.PolicyIR:
    """Check (without the lints, whose warnings a caller of this does not show) and lower."""
    with ir.no_gc():
        return lower(check_source(source, lints=False), source)


def _load(source: Source) -> Policy:
    """Check, lower and load; the IR just lowered is not verified (`Policy._of_lowered`)."""
    with ir.no_gc():
        return Policy._of_lowered(lower_source(source))


def artifact_bytes(policy: ir.PolicyIR) -> bytes:
    return ir.dumps(policy, f"zcompile {__version__}")


def policy_files(paths: list[str | Path]) -> list[Path]:
    """Expand directories to the `.zc` files inside them (sorted)."""
    out: list[Path] = []
    for raw in paths:
        p = Path(raw)
        kind = path_kind(p)
        if kind == "dir":
            found = files_under(p, lambda name: name.endswith(".zc"))
            if not found:
                raise ZcError(f"{p}: no `.zc` policy files in this directory")
            out.extend(found)  # a FIFO or device among them is refused when it is read
        elif kind == "file":
            out.append(p)
        else:
            raise ZcError(f"{p}: no such file or directory")
    return out
