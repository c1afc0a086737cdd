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


@grader_group.command("replies")
@click.option("--policy", "policy_path", required=True, type=click.Path(), metavar="ARTIFACT",
              help="The policy the replies are written for.")
@click.option("--receipts", "sources", multiple=True, required=True, type=click.Path(), metavar="PATH",
              help="Receipts files or directories (repeat for more).")
@click.option("--tiers", "tiers_path", required=True, type=click.Path(dir_okay=False), metavar="F",
              help="tiers.toml binding the tier that writes the replies.")
@click.option("--tier", "tier_name", required=True, metavar="NAME", help="The tier that writes the replies.")
@click.option("--grader", "grader_path", default=None, type=click.Path(dir_okay=False), metavar="FILE",
              help="A grader file (default: every check, no promises).")
@click.option("--per-half", default=22, show_default=True, type=click.IntRange(min=1),
              help="Replies after a tool fault, and as many after none (spread over the receipts).")
@click.option("--runs", default=3, show_default=True, type=click.IntRange(min=1),
              help="Times each reply is written (seed = the run): their spread is the noise floor.")
@click.option("--out", "out_path", default=None, type=click.Path(dir_okay=False), metavar="FILE",
              help="Write each reply decision's receipt (a new JSON Lines file): the text written, the "
                   "grader's reasons, the run and the half, to read what the pass rates count.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def grader_replies_cmd(policy_path, sources, tiers_path, tier_name, grader_path, per_half, runs, out_path,
                       as_json) -> None:
    """Have a tier write the replies of teacher reply decisions and grade them: the pass rate after a tool
    fault and after none, per run, with Wilson 95% intervals."""
    import msgspec

    from ..evals.grading import halves, replies, written
    from ..qroute.dataset import Progress
    from ..router import Router
    from ..router.grader import Grader, load_grader
    from ..tiers import load_tiers
    from .common import load_policy, new_file, progress

    tiers, router = {}, None
    try:
        policy = load_policy(policy_path)
        grader = load_grader(grader_path) if grader_path else Grader()
        grader = Grader(msgspec.structs.replace(grader.config, graded=[tier_name]))
        tiers = load_tiers(tiers_path)
        if tier_name not in tiers:
            raise ZcError(f"{tiers_path}: no [tiers.{tier_name}] table")
        pairs = halves(replies(list(sources)), per_half)
        if out_path is not None:
            new_file(out_path)
        router = Router(policy, tiers={tier_name: tiers[tier_name]}, ladder=(tier_name,), grader=grader,
                        budgets=False, receipts=out_path)
        rep = written(router, tier_name, policy, pairs, runs, Progress(bar=progress))
    except ZcError as exc:
        fail(exc)
    finally:
        if router is not None:
            router.close()
        for t in tiers.values():
            t.close()
    if as_json:
        click.echo(msgspec.json.format(msgspec.json.encode(rep), indent=2).decode())
        return
    for half in ("fault", "no_fault"):
        cells = ", ".join(f"{r['k']}/{r['n']}" for r in rep[half])
        click.echo(f"{half.replace('_', ' ')}: passed {cells} (runs {rep['runs']})")
    click.echo(f"gap (no fault − fault) by run: {', '.join(f'{g:+.3f}' for g in rep['gap_by_run'])}")
    click.echo(f"failures: {rep['failures']}")
