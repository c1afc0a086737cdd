"""Commands for policy authors: check, compile, legal, test, fmt, lsp."""

from __future__ import annotations

import sys
from pathlib import Path

import click
import msgspec

from .. import ir
from ..errors import ZcError
from ..outdir import new_file, refuse_foreign_file
from ..state import StateError
from .common import (
    check_all,
    fail,
    load_policy,
    main,
    parse_call,
    read_json,
    report_diagnostics,
    server_tools,
    servers_label,
    summary,
)


@main.command("check")
@click.argument("paths", nargs=-1, required=True, type=click.Path())
@click.option("--deny-warnings", is_flag=True, help="Exit 1 when there are warnings too.")
@click.option("--format", "out_format", type=click.Choice(["text", "json", "sarif"]), default="text",
              show_default=True, help="json or sarif (2.1.0): the diagnostics on stdout, for tools.")
@click.option("--tools", "tools_path", default=None, type=click.Path(dir_okay=False), metavar="FILE",
              help="Also report where the signatures drift from these tools (OpenAI tools or MCP "
                   "tools/list).")
@click.option("--tools-server", "tools_servers", multiple=True, metavar="[NAME=]COMMAND|URL",
              help="Also report drift from these MCP servers' tools/list (as `zc mcp` exposes them; "
                   "repeatable).")
def check_cmd(paths: tuple[str, ...], deny_warnings: bool, out_format: str, tools_path: str | None,
              tools_servers: tuple[str, ...]) -> None:
    """Parse and check policies (names, types, cycles, lints); print every diagnostic."""
    if tools_path is not None and tools_servers:
        raise click.UsageError("give --tools or --tools-server, not both")
    try:
        # the drift check reads the IR
        results = check_all(paths, lower=tools_path is not None or bool(tools_servers))
        if tools_path is not None or tools_servers:
            from ..tools import check_tools

            data = server_tools(tools_servers) if tools_servers else None
            label = servers_label(tools_servers) if tools_servers else tools_path
            results = check_tools(results, label, data)
    except ZcError as exc:
        if out_format == "sarif":  # a code-scanning upload still gets a log, saying the run failed
            from ..sarif import sarif_report

            click.echo(sarif_report([], failure=str(exc)).decode())
        fail(exc)
    if out_format != "text":
        from ..sarif import json_report, sarif_report

        click.echo((json_report if out_format == "json" else sarif_report)(results).decode())
        errors = sum(d.is_error for _, _, ds in results for d in ds)
        warnings = sum(d.severity == "warning" for _, _, ds in results for d in ds)
        sys.exit(1 if errors or (deny_warnings and warnings) else 0)
    errors, warnings = report_diagnostics(results)
    click.echo(summary(errors, warnings, len(results)), err=True)
    sys.exit(1 if errors or (deny_warnings and warnings) else 0)


@main.command("compile")
@click.argument("paths", nargs=-1, required=True, type=click.Path())
@click.option("-o", "--out", "out", default="build", show_default=True, type=click.Path(file_okay=False),
              help="Directory for the `.zcp` artifacts.")
@click.option("-q", "--quiet", is_flag=True, help="Do not print warnings.")
def compile_cmd(paths: tuple[str, ...], out: str, quiet: bool) -> None:
    """Compile policies to `OUT/<policy>.zcp` artifacts (nothing is written if any has errors)."""
    from ..driver import artifact_bytes

    try:
        results = check_all(paths)
    except ZcError as exc:
        fail(exc)
    errors, warnings = report_diagnostics(results, quiet)
    names: dict[str, Path] = {}
    for path, policy, _ in results:
        if policy is not None and policy.name in names:
            click.echo(f"error: policy `{policy.name}` is defined in both {names[policy.name]} and {path}",
                       err=True)
            errors += 1
        elif policy is not None:
            names[policy.name] = path
    if errors:
        click.echo(summary(errors, warnings, len(results)) + "; nothing written", err=True)
        sys.exit(1)
    out_dir = Path(out)
    try:
        for _, policy, _ in results:  # every target checked before any is written
            refuse_foreign_file(out_dir / f"{policy.name}.zcp", "zc artifact", ir.is_artifact)
        out_dir.mkdir(parents=True, exist_ok=True)
        for path, policy, _ in results:
            target = out_dir / f"{policy.name}.zcp"
            with new_file(target) as tmp:  # an artifact is meant to be shared: 0644
                tmp.write_bytes(artifact_bytes(policy))
            click.echo(f"compiled {path} -> {target}")
    except ZcError as exc:
        fail(exc)
    except OSError as exc:
        fail(ZcError(f"{out_dir}: cannot write artifacts: {exc.strerror}"))


@main.command("legal")
@click.argument("artifact", type=click.Path())
@click.option("--state", "state_path", required=True, metavar="FILE|-",
              help="State JSON file, or - for stdin.")
@click.option("--intent", default=None, help="Restrict the universe to this intent's `allow` list.")
@click.option("--call", "call_json", default=None, metavar="JSON",
              help='Judge one proposed call instead: \'{"name": …, "arguments": {…}}\'.')
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@click.option("--strict", is_flag=True, help="Reject state keys the schema does not declare.")
def legal_cmd(artifact: str, state_path: str, intent: str | None, call_json: str | None,
              as_json: bool, strict: bool) -> None:
    """Print the legal actions for a state, and every reason each other action was removed.

    With --call, judge one proposed call instead: allowed, or every reason it is not (its
    arguments against the action's signature, the legal set, and the rules reading `args.*`).
    """
    try:
        policy = load_policy(artifact)
        call = parse_call(call_json, policy.actions) if call_json is not None else None
        state = read_json(state_path)
        if call is not None:
            verdict = policy.check(state, call[0], call[1], intent, strict=strict)
        else:
            result = policy.legal(state, intent, strict=strict)
    except ZcError as exc:
        if state_path != "-" and isinstance(exc, StateError):
            exc = ZcError(f"{state_path}: {exc}")
        fail(exc)
    if call is not None:
        _print_verdict(policy, call, verdict, as_json)
        return
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
        lines = ["removed:"]  # written at once: a big policy removes tens of thousands
        for action, reasons in result.removed.items():
            lines.append(f"  {action}")
            lines.extend(f"    - {r.rule} ({r.kind}){f' at {r.span}' if r.span else ''}: {r.message}"
                         for r in reasons)
        click.echo("\n".join(lines))


def _print_verdict(policy, call, verdict, as_json: bool) -> None:
    if as_json:
        out = {"policy": policy.name, "call": {"name": call[0], "arguments": call[1]},
               **verdict.to_dict()}
        click.echo(msgspec.json.encode(out).decode())
        return
    click.echo(f"policy {policy.name}: call `{call[0]}` "
               + ("allowed" if verdict.allowed else f"blocked ({len(verdict.reasons)} "
                  f"reason{'' if len(verdict.reasons) == 1 else 's'})"))
    for r in verdict.reasons:
        where = f" at {r.span}" if r.span else ""
        click.echo(f"  - {r.rule} ({r.kind}){where}: {r.message}")


@main.command("test")
@click.argument("paths", nargs=-1, required=True, type=click.Path())
@click.option("--coverage", is_flag=True, help="Report rules and condition outcomes no case exercised.")
@click.option("--min-coverage", type=click.FloatRange(0, 100), default=None, metavar="PCT",
              help="With --coverage: exit 1 when a policy's coverage is below PCT percent.")
@click.option("-v", "--verbose", is_flag=True, help="Print passing cases too.")
def test_cmd(paths: tuple[str, ...], coverage: bool, min_coverage: float | None, verbose: bool) -> None:
    """Run policy unit tests (`*.test.yaml`, `*.test.json`); exit 1 when a case fails."""
    from ..testing import run_suites, suite_files

    coverage = coverage or min_coverage is not None
    try:
        runs = run_suites(suite_files(paths), coverage)
    except ZcError as exc:
        fail(exc)
    passed = failed = 0
    for run in runs:
        if run.error is not None:
            failed += 1
            click.echo(f"{run.path}:\n  ERROR\n" + "\n".join("    " + line for line in
                                                            run.error.render().splitlines()))
            continue
        shown = [(r, line) for r, line in zip(run.results, run.lines) if verbose or not r.passed]
        passed += sum(r.passed for r in run.results)
        failed += sum(not r.passed for r in run.results)
        if shown:
            click.echo(f"{run.path}:")
        for r, line in shown:
            where = "" if r.passed else f" ({run.suite.where(r.at)})" if r.at else \
                f" ({run.path}:{line})" if line else ""
            click.echo(f"  {'PASS' if r.passed else 'FAIL'}: {r.name}{where} ({r.seconds * 1e3:.2f} ms)")
            for d in r.diff:
                click.echo(f"    {d}")
    low = 0  # policies whose coverage is below --min-coverage
    if coverage:
        seen = set()
        for run in runs:
            cov = run.coverage
            if cov is None or id(cov) in seen:
                continue
            seen.add(id(cov))
            have, total = cov.totals()
            pct = 100.0 * have / total if total else 100.0
            click.echo(f"coverage: {cov.compiled.path}: {have}/{total} rule and condition outcomes "
                       f"({pct:.1f}%)")
            for gap in cov.gaps():
                click.echo(f"  {gap}")
            if min_coverage is not None and pct < min_coverage:
                click.echo(f"  below --min-coverage {min_coverage:g}%")
                low += 1
    click.echo("-" * 80)
    if passed:
        click.echo(f"PASS: {passed}/{passed + failed}")
    if failed:
        click.echo(f"FAIL: {failed}/{passed + failed}")
    if not passed + failed:  # fail closed: a run that tested nothing is not a pass
        click.echo("no test cases: nothing was tested")
    sys.exit(1 if failed or low or not passed + failed else 0)


@main.command("fmt")
@click.argument("paths", nargs=-1, required=True, type=click.Path())
@click.option("--check", "check_only", is_flag=True, help="Write nothing; exit 1 if a file is not formatted.")
@click.option("--diff", "show_diff", is_flag=True, help="Write nothing; print what would change as a diff.")
def fmt_cmd(paths: tuple[str, ...], check_only: bool, show_diff: bool) -> None:
    """Format policies in place (or `-`: stdin to stdout), keeping comments and meaning."""
    import difflib

    from ..driver import policy_files, read_source
    from ..fmt import format_source
    from ..parse import decode

    if paths == ("-",):
        try:
            click.echo(format_source(decode("<stdin>", sys.stdin.buffer.read())), nl=False)
        except ZcError as exc:
            fail(exc)
        return
    try:
        files = policy_files(list(paths))
    except ZcError as exc:
        fail(exc)
    errors = changed = 0
    for path in files:
        try:
            source = read_source(path)
            new = format_source(source)
        except ZcError as exc:
            click.echo(exc.render() + "\n", err=True)
            errors += 1
            continue
        if new == source.text:
            continue
        changed += 1
        if show_diff:
            click.echo("".join(difflib.unified_diff(source.text.splitlines(True), new.splitlines(True),
                                                    f"{path}", f"{path} (formatted)")), nl=False)
        if check_only or show_diff:
            click.echo(f"would reformat {path}", err=True)
            continue
        try:
            _replace_policy(path, source.text, new)
        except ZcError as exc:
            click.echo(exc.render(), err=True)
            errors += 1
            continue
        click.echo(f"formatted {path}", err=True)
    verb = "would be reformatted" if check_only or show_diff else "reformatted"
    click.echo(f"{changed} of {len(files)} file{'s' if len(files) != 1 else ''} {verb}"
               + (f", {errors} with errors" if errors else ""), err=True)
    sys.exit(1 if errors or (check_only and changed) else 0)


def _replace_policy(path: Path, old: str, new: str) -> None:
    """Write `new` over the policy file that held `old`, atomically: through a symlink to its target
    (the link stays), refused unless it is still a writable regular file holding `old`."""
    import os
    import stat

    from ..driver import read_source

    target = path.resolve()
    try:
        mode = target.stat().st_mode
        if not stat.S_ISREG(mode):
            raise ZcError(f"{path}: not a regular file any more; not written")
        if not os.access(target, os.W_OK):  # replacing it would get round its protection
            raise ZcError(f"{path}: the file is read-only; not written")
        with new_file(target, mode & 0o7777) as tmp:
            tmp.write_bytes(new.encode("utf-8"))
            if read_source(target).text != old:  # edited meanwhile: the edit wins
                raise ZcError(f"{path}: changed while it was being formatted; not written")
    except OSError as exc:
        raise ZcError(f"{path}: cannot write: {exc.strerror}") from None


@main.command("lsp")
def lsp_cmd() -> None:
    """Run the language server on stdio (for editors; needs `pip install 'zcompile[lsp]'`)."""
    try:
        from ..lsp.server import main as serve
    except ImportError:
        fail(ZcError("the language server needs pygls, which is not installed: "
                      "pip install 'zcompile[lsp]'"))
    serve()
