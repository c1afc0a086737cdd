"""The `zc` command line: thin wrappers over the compiler and the runtime."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import click
import msgspec

from .errors import Diagnostic, ZcError


def _fail(err: ZcError) -> None:
    click.echo(err.render(), err=True)
    sys.exit(1)


def _summary(errors: int, warnings: int, files: int) -> str:
    plural = lambda n, w: f"{n} {w}{'' if n == 1 else 's'}"  # noqa: E731
    return f"{plural(errors, 'error')}, {plural(warnings, 'warning')} in {plural(files, 'file')}"


def _check_all(paths: tuple[str, ...]):
    """Check every file; return [(path, IR or None, diagnostics)] having printed nothing."""
    from .driver import compile_source, policy_files, read_source

    results = []
    for path in policy_files(list(paths)):
        try:
            policy, diags = compile_source(read_source(path))
        except ZcError as exc:
            diags = exc.diagnostics or (Diagnostic("ZC0000", "error", str(exc), None, path=str(path)),)
            policy = None
        results.append((path, policy, diags))
    return results


def _report(results, quiet: bool = False) -> tuple[int, int]:
    errors = warnings = 0
    for _, _, diags in results:
        for d in diags:
            errors += d.is_error
            warnings += d.severity == "warning"
            if d.is_error or not quiet:
                click.echo(d.render() + "\n", err=True)
    return errors, warnings


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="zcompile", prog_name="zc")
def main() -> None:
    """zc: compile agent policies to legal-action sets and route decisions cheaply."""


@main.command("check")
@click.argument("paths", nargs=-1, required=True, type=click.Path())
@click.option("--deny-warnings", is_flag=True, help="Exit 1 when there are warnings too.")
def check_cmd(paths: tuple[str, ...], deny_warnings: bool) -> None:
    """Parse and check policies (names, types, cycles, lints); print every diagnostic."""
    try:
        results = _check_all(paths)
    except ZcError as exc:
        _fail(exc)
    errors, warnings = _report(results)
    click.echo(_summary(errors, warnings, len(results)), err=True)
    sys.exit(1 if errors or (deny_warnings and warnings) else 0)


@main.command("compile")
@click.argument("paths", nargs=-1, required=True, type=click.Path())
@click.option("-o", "--out", "out", default="build", show_default=True, type=click.Path(file_okay=False),
              help="Directory for the `.zcp` artifacts.")
@click.option("-q", "--quiet", is_flag=True, help="Do not print warnings.")
def compile_cmd(paths: tuple[str, ...], out: str, quiet: bool) -> None:
    """Compile policies to `OUT/<policy>.zcp` artifacts (nothing is written if any has errors)."""
    from .driver import artifact_bytes

    try:
        results = _check_all(paths)
    except ZcError as exc:
        _fail(exc)
    errors, warnings = _report(results, quiet)
    names: dict[str, Path] = {}
    for path, policy, _ in results:
        if policy is not None and policy.name in names:
            click.echo(f"error: policy `{policy.name}` is defined in both {names[policy.name]} and {path}",
                       err=True)
            errors += 1
        elif policy is not None:
            names[policy.name] = path
    if errors:
        click.echo(_summary(errors, warnings, len(results)) + "; nothing written", err=True)
        sys.exit(1)
    out_dir = Path(out)
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        for path, policy, _ in results:
            target = out_dir / f"{policy.name}.zcp"
            fd, tmp = tempfile.mkstemp(dir=out_dir, prefix=f".{policy.name}.", suffix=".tmp")
            with os.fdopen(fd, "wb") as fh:
                fh.write(artifact_bytes(policy))
            os.replace(tmp, target)
            click.echo(f"compiled {path} -> {target}")
    except OSError as exc:
        _fail(ZcError(f"{out_dir}: cannot write artifacts: {exc.strerror}"))


def _load_policy(path: str):
    from .runtime import load

    if path.endswith(".zc"):
        from .driver import compile_file

        return compile_file(path)
    return load(path)


def _read_json(path: str):
    """Read a JSON document from a file or `-` (stdin), with line:column on syntax errors."""
    name = "<stdin>" if path == "-" else path
    try:
        data = sys.stdin.buffer.read() if path == "-" else Path(path).read_bytes()
    except OSError as exc:
        raise ZcError(f"{name}: cannot read: {exc.strerror}") from None
    if not data.strip():
        raise ZcError(f"{name}: empty input, expected a JSON object")
    try:
        return msgspec.json.decode(data)
    except msgspec.DecodeError as exc:
        text = str(exc)
        if "truncated" in text:
            lines = data.rstrip().split(b"\n")
            raise ZcError(f"{name}:{len(lines)}:{len(lines[-1]) + 1}: invalid JSON: "
                          "the document ends before it is complete") from None
        import re

        m = re.search(r"\(byte (\d+)\)", text)
        if m:
            off = int(m.group(1))
            head = data[:off]
            line = head.count(b"\n") + 1
            col = off - (head.rfind(b"\n") + 1) + 1
            what = text.split(" (byte")[0]
            raise ZcError(f"{name}:{line}:{col}: invalid JSON: {what[0].lower() + what[1:]}") from None
        raise ZcError(f"{name}: invalid JSON: {text}") from None


@main.command("legal")
@click.argument("artifact", type=click.Path())
@click.option("--state", "state_path", required=True, metavar="FILE|-", help="State JSON file, or - for stdin.")
@click.option("--intent", default=None, help="Restrict the universe to this intent's `allow` list.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@click.option("--strict", is_flag=True, help="Reject state keys the schema does not declare.")
def legal_cmd(artifact: str, state_path: str, intent: str | None, as_json: bool, strict: bool) -> None:
    """Print the legal actions for a state, and every reason each other action was removed."""
    try:
        policy = _load_policy(artifact)
        state = _read_json(state_path)
        result = policy.legal(state, intent, strict=strict)
    except ZcError as exc:
        if state_path != "-" and exc.__class__.__name__ == "StateError":
            exc = ZcError(f"{state_path}: {exc}")
        _fail(exc)
    if as_json:
        click.echo(msgspec.json.encode(result.to_dict()).decode())
        return
    n = len(policy.actions)
    click.echo(f"policy {policy.name}: {len(result.actions)} of {n} actions legal"
               + (f" under intent `{intent}`" if intent else ""))
    if result.fallback:
        click.echo(f"fallback: no action is legal; returning the fallback `{result.actions[0]}`")
    click.echo("legal: " + ", ".join(result.actions))
    if result.removed:
        click.echo("removed:")
        for action, reasons in result.removed.items():
            click.echo(f"  {action}")
            for r in reasons:
                where = f" at {r.span}" if r.span else ""
                click.echo(f"    - {r.rule} ({r.kind}){where}: {r.message}")


def run() -> None:
    """Entry point that keeps user errors free of tracebacks."""
    try:
        main(standalone_mode=True)
    except ZcError as exc:  # pragma: no cover - commands catch their own
        _fail(exc)
