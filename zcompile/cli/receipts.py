"""`zc receipts`: check and import logged decisions."""

from __future__ import annotations

import sys

import click

from ..errors import ZcError
from .common import fail, load_policy, main


@main.group("receipts")
def receipts_group() -> None:
    """Check, import and convert receipts (one logged decision per JSON line or Parquet row)."""


def _count_line(title: str, counter, top: int | None = None) -> str:
    items = counter.most_common(top)
    shown = ", ".join(f"{k} {v}" for k, v in items) or "-"
    more = len(counter) - len(items)
    return f"{title}: {shown}" + (f" (+{more} more)" if more > 0 else "")


@receipts_group.command("check")
@click.argument("paths", nargs=-1, required=True, type=click.Path())
@click.option("--policy", "policy_path", default=None, metavar="ARTIFACT",
              help="Also check states, actions and legal sets against this policy (.zcp or .zc).")
@click.option("--skip-invalid", is_flag=True,
              help="Exit 0 despite invalid lines, unless no receipt at all is valid.")
def receipts_check_cmd(paths: tuple[str, ...], policy_path: str | None, skip_invalid: bool) -> None:
    """Validate receipt files (.jsonl or .jsonl.gz, or directories of them); print counts and problems."""
    from collections import Counter

    from ..receipts import PROBLEMS_KEPT, ReadStats, read

    stats = ReadStats()
    tiers: Counter = Counter()
    actions: Counter = Counter()
    verified: Counter = Counter()
    tasks: set[str] = set()
    try:
        policy = load_policy(policy_path) if policy_path else None
        for r in read(paths, skip_invalid=True, policy=policy, stats=stats):
            tiers[r.tier] += 1
            actions["(abstained)" if r.action is None else r.action] += 1
            verified[{True: "true", False: "false", None: "none"}[r.verified]] += 1
            tasks.add(r.task)
    except ZcError as exc:
        fail(exc)
    for problem in stats.problems:
        click.echo(problem, err=True)
    foreign = sum(stats.foreign.values())
    listed = stats.skipped - foreign + len(stats.foreign)  # a foreign policy's receipts are listed once
    if listed > len(stats.problems):
        click.echo(f"... and {listed - len(stats.problems)} more problems "
                   f"(the first {PROBLEMS_KEPT} are shown)", err=True)
    if foreign:
        click.echo(f"{foreign} receipt{'' if foreign == 1 else 's'} written for another policy "
                   f"({len(stats.foreign)} identit{'y' if len(stats.foreign) == 1 else 'ies'}) do not match "
                   f"`{policy.name}`: check them against the policy they were written for", err=True)
    click.echo(f"files: {stats.files}")
    click.echo(f"receipts: {stats.read} (valid {stats.valid}, skipped {stats.skipped})")
    click.echo(_count_line("tiers", tiers))
    click.echo(_count_line("actions (top 10)", actions, 10))
    click.echo(f"verified: true {verified['true']}, false {verified['false']}, none {verified['none']}")
    click.echo(f"tasks: {len(tasks)}")
    if stats.skipped and (not skip_invalid or not stats.valid):
        sys.exit(1)


@receipts_group.command("import")
@click.argument("src", type=click.Path())
@click.option("--format", "fmt", required=True, type=click.Choice(["chat", "bfcl"]),
              help="Input format: `chat` is the OpenAI chat format, one conversation per line; `bfcl` is "
              "function-calling questions with offered functions (Berkeley Function Calling Leaderboard).")
@click.option("--answers", "answers", default=None, metavar="FILE|none",
              help="bfcl: the answers file (default: possible_answer/<same name> beside SRC); `none`: no "
              "offered function fits any question (irrelevance), so the right answer is to abstain.")
@click.option("-o", "--out", "out", required=True, type=click.Path(dir_okay=False),
              help="Receipts file to write (.jsonl, or .jsonl.gz to compress).")
@click.option("--policy", "policy_path", default=None, metavar="ARTIFACT",
              help="Validate states and actions against this policy and record legal sets (.zcp or .zc).")
@click.option("--extract", "extract_spec", default=None, metavar="MODULE:FUNCTION",
              help="State extractor to use instead of zcompile.receipts.default_extract (docs/receipts.md).")
def receipts_import_cmd(src: str, fmt: str, answers: str | None, out: str, policy_path: str | None,
                        extract_spec: str | None) -> None:
    """Convert a chat log into receipts, one per assistant message, or function-calling questions,
    one per question (nothing written on errors)."""
    from collections import Counter

    if fmt == "bfcl":
        _import_bfcl(src, answers, out, policy_path, extract_spec)
        return
    if answers is not None:
        click.echo("error: --answers only applies to --format bfcl", err=True)
        sys.exit(2)

    from ..receipts import default_extract, import_chat, load_extractor

    actions: Counter = Counter()
    removed: Counter = Counter()  # rule -> logged actions it removes
    outside = 0  # logged actions outside the legal set
    calls = malformed = misfit = 0  # tool calls; with arguments kept as unknown; refused by the signature
    conversations: set[str] = set()
    try:
        policy = load_policy(policy_path) if policy_path else None
        extract = load_extractor(extract_spec) if extract_spec else default_extract
    except ZcError as exc:
        fail(exc)

    def counted():
        nonlocal outside, calls, malformed, misfit
        for r in import_chat(src, extract=extract, policy=policy):
            actions[r.action] += 1
            conversations.add(r.meta.get("conversation", r.task))
            if r.legal is not None and r.action not in r.legal:
                for reason in policy.legal(r.state, r.intent).removed.get(r.action, ()):
                    removed[reason.rule] += 1
                outside += 1
            if r.arguments is not None or "arguments_error" in r.meta:
                calls += 1
                malformed += "arguments_error" in r.meta
                if policy is not None and r.arguments is not None:
                    verdict = policy.check(r.state, r.action, r.arguments, r.intent)
                    misfit += any(x.kind == "schema" for x in verdict.reasons)
            yield r

    n = _write_receipts(out, counted())
    c = len(conversations)
    click.echo(f"imported {c} conversation{'' if c == 1 else 's'} from {src} -> "
               f"{n} receipt{'' if n == 1 else 's'} in {out}")
    click.echo(_count_line("actions", actions))
    if malformed:
        click.echo(f"tool calls with malformed arguments: {malformed} of {calls} (kept without arguments; "
                   "meta.arguments_error says why)")
    if policy is not None:
        line = f"policy {policy.name}: {outside} of {n} logged actions are outside the legal set"
        click.echo(line + (" (" + ", ".join(f"{k} {v}" for k, v in removed.most_common()) + ")"
                           if removed else ""))
        if misfit:
            click.echo(f"policy {policy.name}: the arguments of {misfit} of {calls} tool calls do not fit "
                       "the action's signature")


@receipts_group.command("convert")
@click.argument("sources", nargs=-1, required=True, type=click.Path())
@click.option("-o", "--out", "out", required=True, type=click.Path(dir_okay=False),
              help="The file to write: .parquet, .jsonl or .jsonl.gz (the format follows the name).")
@click.option("--skip-invalid", is_flag=True, help="Skip invalid receipts (counted) instead of refusing.")
def receipts_convert_cmd(sources: tuple[str, ...], out: str, skip_invalid: bool) -> None:
    """Convert receipts between JSON Lines (.jsonl, .jsonl.gz) and Parquet (.parquet), streaming;
    every receipt is validated on the way (docs/scale.md: the Parquet schema)."""
    from ..receipts import ReadStats, read
    from ..receipts.io import SUFFIXES

    if not out.endswith(SUFFIXES):
        click.echo(f"error: -o {out}: name the output .parquet, .jsonl or .jsonl.gz", err=True)
        sys.exit(2)
    stats = ReadStats()
    n = _write_receipts(out, read(list(sources), skip_invalid=skip_invalid, stats=stats))
    for problem in stats.problems:
        click.echo(problem, err=True)
    click.echo(f"converted {n} receipt{'' if n == 1 else 's'} from {stats.files} "
               f"file{'' if stats.files == 1 else 's'} -> {out}"
               + (f" (skipped {stats.skipped} invalid)" if stats.skipped else ""))


def _import_bfcl(src: str, answers: str | None, out: str, policy_path: str | None,
                 extract_spec: str | None) -> None:
    from collections import Counter

    from ..receipts import bfcl_answers_path, import_bfcl

    if policy_path or extract_spec:
        click.echo("error: --policy and --extract do not apply to --format bfcl (the offered functions are "
                   "the legal set)", err=True)
        sys.exit(2)
    if answers is None:
        guess = bfcl_answers_path(src)
        if not guess.exists():
            fail(ZcError(f"{src}: no answers at {guess}: pass --answers FILE, or --answers none when no "
                          "offered function fits any question"))
        answers = str(guess)
    actions: Counter = Counter()

    def counted():
        for r in import_bfcl(src, None if answers == "none" else answers):
            actions[r.action or "(abstain: none fits)"] += 1
            yield r

    n = _write_receipts(out, counted())
    click.echo(f"imported {n} question{'' if n == 1 else 's'} from {src} -> {out}")
    click.echo(_count_line("actions (top 10)", actions, 10))


def _write_receipts(out: str, receipts) -> int:
    """`write_file`, with import and I/O errors (naming the file they concern) as clean exits."""
    from ..receipts import write_file

    try:
        return write_file(out, receipts)
    except ZcError as exc:
        fail(exc)
    except OSError as exc:
        fail(ZcError(f"{exc.filename or out}: {exc.strerror}"))
