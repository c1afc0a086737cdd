"""The `zc` group and what its commands share: error exits, policy and JSON loading, progress."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import click
import msgspec

from ..errors import Diagnostic, ZcError


def fail(err: ZcError) -> None:
    click.echo(err.render(), err=True)
    sys.exit(1)


def summary(errors: int, warnings: int, files: int) -> str:
    plural = lambda n, w: f"{n} {w}{'' if n == 1 else 's'}"  # noqa: E731
    return f"{plural(errors, 'error')}, {plural(warnings, 'warning')} in {plural(files, 'file')}"


def check_all(paths: tuple[str, ...], lower: bool = True):
    """Check every file; return [(path, IR or None, diagnostics)] having printed nothing. Without
    `lower`, only parse and check (the IR is None): the diagnostics are the same."""
    from ..driver import check_diagnostics, compile_source, policy_files, read_source

    results = []
    for path in policy_files(list(paths)):
        try:
            if lower:
                policy, diags = compile_source(read_source(path))
            else:
                policy, diags = None, check_diagnostics(read_source(path))
        except ZcError as exc:
            diags = exc.diagnostics or (Diagnostic("ZC0000", "error", str(exc), None, path=str(path)),)
            policy = None
        results.append((path, policy, diags))
    return results


def report_diagnostics(results, quiet: bool = False) -> tuple[int, int]:
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


def load_policy(path: str):
    from ..runtime import load

    if path.endswith(".zc"):
        from ..driver import compile_file

        return compile_file(path)
    return load(path)


def new_file(path: str) -> Path:
    """`path` for a file a command is about to write; ZcError when something is there already (a command
    never replaces what it did not write)."""
    out = Path(path)
    if out.exists():
        raise ZcError(f"{out}: already exists: give a new file")
    return out


def read_json(path: str):
    """Read a JSON document from a file or `-` (stdin), with line:column on syntax errors."""
    from ..inputs import decode_json, read_file

    name = "<stdin>" if path == "-" else path
    try:
        data = sys.stdin.buffer.read() if path == "-" else read_file(path)
    except OSError as exc:
        raise ZcError(f"{name}: cannot read: {exc.strerror}") from None
    if not data.strip():
        raise ZcError(f"{name}: empty input, expected a JSON object")
    try:
        return decode_json(data, what=name)
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


def parse_call(text: str, actions: tuple[str, ...], where: str = "--call") -> tuple[str, dict]:
    """A proposed call `{"name": …, "arguments": {…}}` (arguments may be a JSON-encoded string,
    as OpenAI tool calls carry them) -> (name, arguments); ZcError naming `$.path` otherwise."""
    from ..errors import did_you_mean
    from ..inputs import decode_json

    def bad(path: str, problem: str) -> ZcError:
        return ZcError(f"{where}: {path}: {problem}")

    try:
        call = decode_json(text, what=where)
    except msgspec.DecodeError as exc:
        raise ZcError(f"{where}: invalid JSON: {str(exc)[0].lower() + str(exc)[1:]}") from None
    if not isinstance(call, dict):
        raise bad("$", 'expected an object `{"name": …, "arguments": {…}}`')
    unknown = sorted(set(call) - {"name", "arguments"})
    if unknown:
        raise bad(f"$.{unknown[0]}", "unknown key (a call has `name` and `arguments`)")
    name = call.get("name")
    if name is None:
        raise bad("$.name", "required key is missing")
    if not isinstance(name, str):
        raise bad("$.name", f"expected a string, got {msgspec.json.encode(name).decode()}")
    if name not in actions:
        hint = did_you_mean(name, actions) or "not declared by the policy"
        raise bad("$.name", f"unknown action `{name}` ({hint})")
    args = call.get("arguments", {})
    if args is None:
        args = {}
    if isinstance(args, str):
        try:
            args = decode_json(args, what=f"{where}: $.arguments") if args.strip() else {}
        except msgspec.DecodeError as exc:
            raise bad("$.arguments", f"the arguments string is not valid JSON: {exc}") from None
    if not isinstance(args, dict):
        raise bad("$.arguments", "expected an object of arguments")
    return name, args


def seconds(s: float) -> str:
    """A duration as a person reads it: 0.4 s, 12 s, 3 min 05 s."""
    if s < 10:
        return f"{s:.1f} s"
    if s < 60:
        return f"{s:.0f} s"
    return f"{int(s // 60)} min {int(s % 60):02d} s"


def how_far(i: int, length: int, elapsed: float) -> str:
    """`i` of `length` items after `elapsed` seconds: the share, the time so far and, from the rate
    so far, an estimate of the time left (without a length: the count and the time)."""
    if not length:
        return f"{i} so far, {seconds(elapsed)}"
    left = elapsed / i * (length - i) if i else float("nan")
    estimate = f", about {seconds(left)} left" if i and i < length else ""
    return f"{i}/{length} ({i / length:.0%}), {seconds(elapsed)}{estimate}"


def timed_steps():
    """A `Progress.step` for long commands: each stage's line on stderr after the time since the first
    one (`[1:05] 4/10 training gbt …`), so a log says where the time went."""
    started = time.monotonic()

    def step(text: str) -> None:
        e = int(time.monotonic() - started)
        click.echo(f"[{e // 60}:{e % 60:02d}] {text}", err=True)

    return step


def progress(iterable, label: str, length: int, every_s: float = 10.0):
    """Progress of a long loop on stderr: a bar with the position and an estimate of the time left on
    a terminal; otherwise (a log, CI) a plain line as it starts, one every `every_s` seconds with how
    far it is and the estimate, and one at the end with what it took."""
    if sys.stderr.isatty():
        with click.progressbar(iterable, length=length or None, label=f"  {label}", file=sys.stderr,
                               show_pos=True, show_eta=True) as it:
            yield from it
        return
    started = last = time.monotonic()
    click.echo(f"  {label}" + (f": 0/{length}" if length else ""), err=True)
    i = 0
    for i, x in enumerate(iterable, 1):
        yield x
        if (now := time.monotonic()) - last >= every_s:
            last = now
            click.echo(f"  {label}: {how_far(i, length, now - started)}", err=True)
    total = f"{i}/{length}" if length else f"{i}"
    click.echo(f"  {label}: {total} done in {seconds(time.monotonic() - started)}", err=True)


def server_tools(servers: tuple[str, ...]):
    """MCP servers' tools/list as one result, names prefixed as `zc mcp` exposes them (for
    `--server` / `--tools-server`; ZcError without the `mcp` extra or when a server fails)."""
    try:
        from ..mcp.upstream import fetch_tools_sync
    except ImportError as exc:
        raise ZcError(f"reading MCP servers needs the `mcp` extra ({exc.name} is not installed): "
                      "pip install 'zcompile[mcp]'") from None
    return fetch_tools_sync(list(servers))


def servers_label(servers: tuple[str, ...]) -> str:
    """How diagnostics and imported files name the servers' tools (no path separator in it)."""
    names = [s.partition("=")[0] if "=" in s.split()[0] else f"#{i + 1}" for i, s in enumerate(servers)]
    return f"MCP server{'s' if len(servers) > 1 else ''} {', '.join(names)}"
