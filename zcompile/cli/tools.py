"""`zc tools`: tool schemas imported as `action` declarations, a policy's signatures exported as tools."""

from __future__ import annotations

import os
from pathlib import Path

import click
import msgspec

from ..errors import ZcError
from ..outdir import new_file
from .common import fail, load_policy, main, server_tools, servers_label


@main.group("tools")
def tools_group() -> None:
    """Tool schemas and signatures: import tools as `action` declarations, export signatures as tools."""


@tools_group.command("import")
@click.argument("file", required=False, type=click.Path(dir_okay=False))
@click.option("--server", "servers", multiple=True, metavar="[NAME=]COMMAND|URL",
              help="Read the tools from MCP servers' tools/list instead of FILE (names prefixed as `zc mcp` "
                   "exposes them; repeatable).")
@click.option("-o", "--out", "out", default=None, type=click.Path(dir_okay=False), metavar="FILE",
              help="Write the declarations here (default: stdout).")
@click.option("--force", is_flag=True, help="Replace FILE given to -o when it exists.")
def tools_import_cmd(file: str | None, servers: tuple[str, ...], out: str | None, force: bool) -> None:
    """Write `action` declarations with typed signatures for an OpenAI `tools` array or an MCP
    `tools/list` result (a FILE, or the servers' own); what the signatures cannot state is refused
    with its $.path."""
    from ..tools import import_file, import_tools

    if (file is None) == (not servers):
        raise click.UsageError("give a tools FILE or --server, not both")
    try:
        if servers:
            file = servers_label(servers)
            text, warnings = import_tools(server_tools(servers), file)
        else:
            text, warnings = import_file(file)
        for w in warnings:
            click.echo(f"warning: {file}: {w}", err=True)
        if out is None:
            click.echo(text, nl=False)
            return
        _write_new(Path(out), text.encode(), force)
    except ZcError as exc:
        fail(exc)
    click.echo(f"wrote {text.count(chr(10) + 'action ')} action declarations to {out}", err=True)


@tools_group.command("export")
@click.argument("policy_path", metavar="POLICY", type=click.Path())
def tools_export_cmd(policy_path: str) -> None:
    """Print the policy's signed actions as an OpenAI `tools` array (JSON)."""
    from ..tools import openai_tools

    try:
        policy = load_policy(policy_path)
    except ZcError as exc:
        fail(exc)
    click.echo(msgspec.json.format(msgspec.json.encode(openai_tools(policy)), indent=2).decode())


def _write_new(path: Path, data: bytes, force: bool) -> None:
    """Write `data` to `path` atomically; an existing file is replaced only with `force`."""
    if os.path.lexists(path) and not force:
        raise ZcError(f"{path}: already exists; pass --force to replace it")
    try:
        with new_file(path, replace=force) as tmp:  # without --force, a file appearing meanwhile is kept
            tmp.write_bytes(data)
    except FileExistsError:
        raise ZcError(f"{path}: already exists; pass --force to replace it") from None
    except OSError as exc:
        raise ZcError(f"{path}: cannot write: {exc.strerror or exc}") from None
