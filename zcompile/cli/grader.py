"""`zc grader`: the reply grader's checks, validated against flaws planted into teacher replies."""

from __future__ import annotations

import click

from ..errors import ZcError
from .common import fail, main


@main.group("grader")
def grader_group() -> None:
    """The reply grader: program checks a reply from a cheaper tier passes before it reaches the user."""


@grader_group.command("validate")
@click.option("--grader", "grader_path", default=None, type=click.Path(dir_okay=False), metavar="FILE",
              help="A grader file (default: every check, no promises).")
@click.option("--receipts", "sources", multiple=True, required=True, type=click.Path(), metavar="PATH",
              help="Receipts files or directories with teacher replies (repeat for more).")
@click.option("--reply-action", default="respond", show_default=True,
              help="The reply action whose text the next decision's `last.assistant_text` holds.")
@click.option("--seed", default=0, show_default=True, type=int, help="Seed of the planted flaws.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def grader_validate_cmd(grader_path, sources, reply_action, seed, as_json) -> None:
    """Check the grader against ground truth: plant each flaw into the teacher replies of the receipts
    (labels known) and report recall per flaw, false alarms on the replies as written, the restated-note
    trap and agreement, each with n and a Wilson 95% interval."""
    import msgspec

    from ..evals.grading import render_markdown, replies, validate
    from ..router.grader import Grader, load_grader

    try:
        grader = load_grader(grader_path) if grader_path else Grader()
        rep = validate(grader, replies(list(sources), reply_action), seed)
    except ZcError as exc:
        fail(exc)
    click.echo(msgspec.json.format(msgspec.json.encode(rep), indent=2).decode() if as_json
               else render_markdown(rep))
