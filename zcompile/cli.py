"""The `zc` command line: thin wrappers over the compiler and the runtime."""

from __future__ import annotations

import os
import sys
import tempfile
import time
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
@click.option("--format", "out_format", type=click.Choice(["text", "json", "sarif"]), default="text",
              show_default=True, help="json or sarif (2.1.0): the diagnostics on stdout, for tools.")
def check_cmd(paths: tuple[str, ...], deny_warnings: bool, out_format: str) -> None:
    """Parse and check policies (names, types, cycles, lints); print every diagnostic."""
    try:
        results = _check_all(paths)
    except ZcError as exc:
        _fail(exc)
    if out_format != "text":
        from .sarif import json_report, sarif_report

        click.echo((json_report if out_format == "json" else sarif_report)(results).decode())
        errors = sum(d.is_error for _, _, ds in results for d in ds)
        warnings = sum(d.severity == "warning" for _, _, ds in results for d in ds)
        sys.exit(1 if errors or (deny_warnings and warnings) else 0)
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
            os.chmod(tmp, 0o644)  # mkstemp makes 0600; an artifact is meant to be shared
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
    from .inputs import decode_json, read_file

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
    from .errors import did_you_mean
    from .inputs import decode_json

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


@main.command("legal")
@click.argument("artifact", type=click.Path())
@click.option("--state", "state_path", required=True, metavar="FILE|-", help="State JSON file, or - for stdin.")
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
        policy = _load_policy(artifact)
        call = parse_call(call_json, policy.actions) if call_json is not None else None
        state = _read_json(state_path)
        if call is not None:
            verdict = policy.check(state, call[0], call[1], intent, strict=strict)
        else:
            result = policy.legal(state, intent, strict=strict)
    except ZcError as exc:
        if state_path != "-" and exc.__class__.__name__ == "StateError":
            exc = ZcError(f"{state_path}: {exc}")
        _fail(exc)
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
        click.echo("removed:")
        for action, reasons in result.removed.items():
            click.echo(f"  {action}")
            for r in reasons:
                where = f" at {r.span}" if r.span else ""
                click.echo(f"    - {r.rule} ({r.kind}){where}: {r.message}")


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


@main.command("distill")
@click.option("--from", "sources", multiple=True, required=True, type=click.Path(),
              help="Receipts files or directories (.jsonl, .jsonl.gz, .parquet); repeat for several.")
@click.option("--policy", "policy_path", default=None, type=click.Path(),
              help="The compiled policy (.zcp) the receipts are masked with (optional for pairwise: "
              "without it the receipts' own legal sets are used).")
@click.option("-o", "--out", "out", required=True, type=click.Path(file_okay=False),
              help="The specialist directory to write: created, or replaced only if it holds a specialist "
              "(anything else is refused). Written beside it first and swapped in whole.")
@click.option("--model", type=click.Choice(["auto", "logistic", "mlp", "gbt", "transformer", "pairwise"]),
              default="auto", show_default=True,
              help="auto trains logistic, mlp and gbt and keeps the one the out-of-fold evidence ranks first; "
              "transformer fine-tunes MiniLM-L6 (needs the `transformer` extra); pairwise fine-tunes it to "
              "score (request, action description) pairs, for open action sets.")
@click.option("--guarantee", type=click.Choice(["ltt", "conformal"]), default="ltt", show_default=True,
              help="ltt: precision ≥ target with 95% confidence (Learn-then-Test); conformal: expected "
              "false-discovery rate ≤ 1 - target (conformal selection; needs fewer decisions, a weaker claim).")
@click.option("--folds", type=click.IntRange(2), default=5, show_default=True,
              help="Task-grouped folds of cross-fitting (tabular models): every train and calibration decision "
              "gets an out-of-fold score, τ is chosen on all of them.")
@click.option("--negatives", type=click.IntRange(0), default=3, show_default=True,
              help="pairwise: descriptions of other decisions' actions added per training decision as not "
              "fitting, half at random and half the most similar to the right one.")
@click.option("--target-precision", type=click.FloatRange(0, 1, min_open=True, max_open=True), default=0.95,
              show_default=True, help="Precision the abstention threshold must guarantee.")
@click.option("--target-abstention", type=click.FloatRange(0, 1, max_open=True), default=None,
              help="pairwise: share of the decisions where no offered action fits on which the specialist must "
              "abstain (95% lower bound; 0 turns the bound off) [default: 0.85].")
@click.option("--min-coverage", type=click.FloatRange(0, 1), default=0.0, show_default=True,
              help="Coverage the gate requires on the test split.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--skip-invalid", is_flag=True, help="Skip invalid receipt lines (counted) instead of refusing.")
@click.option("--epochs", type=click.FloatRange(0, min_open=True), default=None,
              help="transformer: passes over the training split [default: 3].")
@click.option("--max-steps", type=click.IntRange(1), default=None,
              help="transformer: optimiser steps in all (overrides --epochs).")
@click.option("--max-length", type=click.IntRange(8, 512), default=None,
              help="transformer: tokens read per state [default: 128].")
@click.option("--batch-size", type=click.IntRange(1), default=None,
              help="transformer: decisions per step [default: 16].")
@click.option("--ensemble", type=click.IntRange(1), default=None,
              help="transformer: fine-tune this many models (seeds seed, seed+1, …) and decide by the mean of "
              "their logits, one ONNX graph; N times the training and decision time [default: 1].")
@click.option("--quantization", type=click.Choice(["auto", "int8", "float32"]), default=None,
              help="transformer: the export. int8 fails the distillation when int8 decides unlike the trained "
              "model on more than 0.5% of the test split; auto [default] then ships float32 instead.")
@click.option("--engine", type=click.Choice(["local", "ray"]), default="local", show_default=True,
              help="Featurisation: local, or ray (Ray Data over Parquet shards, on the cluster RAY_ADDRESS names or a "
              "local instance; needs the `ray` extra; docs/scale.md).")
@click.option("--max-decisions", type=click.IntRange(3), default=50_000, show_default=True,
              help="Decisions held in memory; beyond it a seeded task-stratified sample of each split is used "
              "(the split and its seal still cover every task; the report says so).")
def distill_cmd(sources, policy_path, out, model, guarantee, folds, negatives, target_precision, target_abstention,
                min_coverage, seed, skip_invalid, epochs, max_steps, max_length, batch_size, ensemble,
                quantization, engine, max_decisions) -> None:
    """Distil receipts into an ONNX specialist that answers with a certified confidence or abstains."""
    from .qroute import Report, Settings, distill

    options = {k: v for k, v in (("epochs", epochs), ("max_steps", max_steps), ("max_length", max_length),
                                 ("batch_size", batch_size), ("ensemble", ensemble), ("quantization", quantization))
               if v is not None}
    if options and model not in ("transformer", "pairwise"):
        flags = ", ".join("--" + k.replace("_", "-") for k in options)
        click.echo(f"error: {flags} only apply to --model transformer or pairwise", err=True)
        sys.exit(2)
    if target_abstention is not None and model != "pairwise":
        click.echo("error: --target-abstention only applies to --model pairwise", err=True)
        sys.exit(2)
    if policy_path is None and model != "pairwise":
        click.echo("error: --policy is required (except for --model pairwise)", err=True)
        sys.exit(2)
    settings = Settings(model=model, target_precision=target_precision, guarantee=guarantee,
                        target_abstention=target_abstention, min_coverage=min_coverage, seed=seed, folds=folds,
                        negatives=negatives, skip_invalid=skip_invalid, options=options, engine=engine,
                        max_decisions=max_decisions)
    report = Report(step=lambda text: click.echo(text, err=True), bar=progress)
    try:
        policy = _load_policy(policy_path) if policy_path else None
        result = distill(list(sources), policy, out, settings, report=report, name=Path(out).name)
    except ZcError as exc:
        _fail(exc)
    m = result.manifest
    click.echo(result.report_text)
    extra = "".join(f", {f}" for f in m.model.files)
    click.echo(f"wrote {out}/ (model.onnx{extra}, manifest.json, report.md); {m.model.kind}; "
               + ("promoted" if m.gate.promoted else "NOT promoted: " + "; ".join(m.gate.reasons)))


@main.group("receipts")
def receipts_group() -> None:
    """Check and import receipts (one logged decision per JSON line)."""


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

    from .receipts import PROBLEMS_KEPT, ReadStats, read

    stats = ReadStats()
    tiers: Counter = Counter()
    actions: Counter = Counter()
    verified: Counter = Counter()
    tasks: set[str] = set()
    try:
        policy = _load_policy(policy_path) if policy_path else None
        for r in read(paths, skip_invalid=True, policy=policy, stats=stats):
            tiers[r.tier] += 1
            actions["(abstained)" if r.action is None else r.action] += 1
            verified[{True: "true", False: "false", None: "none"}[r.verified]] += 1
            tasks.add(r.task)
    except ZcError as exc:
        _fail(exc)
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

    from .receipts import default_extract, import_chat, load_extractor

    actions: Counter = Counter()
    removed: Counter = Counter()  # rule -> logged actions it removes
    outside = 0  # logged actions outside the legal set
    calls = malformed = misfit = 0  # tool calls; with arguments kept as unknown; refused by the signature
    conversations: set[str] = set()
    try:
        policy = _load_policy(policy_path) if policy_path else None
        extract = load_extractor(extract_spec) if extract_spec else default_extract
    except ZcError as exc:
        _fail(exc)

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
    from .receipts import ReadStats, read
    from .receipts.io import SUFFIXES

    if not out.endswith(SUFFIXES):
        click.echo(f"error: -o {out}: name the output .parquet, .jsonl or .jsonl.gz", err=True)
        sys.exit(2)
    stats = ReadStats()
    n = _write_receipts(out, read(list(sources), skip_invalid=skip_invalid, stats=stats))
    for problem in stats.problems:
        click.echo(problem, err=True)
    click.echo(f"converted {n} receipt{'' if n == 1 else 's'} from {stats.files} file{'' if stats.files == 1 else 's'}"
               f" -> {out}" + (f" (skipped {stats.skipped} invalid)" if stats.skipped else ""))


def _import_bfcl(src: str, answers: str | None, out: str, policy_path: str | None,
                 extract_spec: str | None) -> None:
    from collections import Counter

    from .receipts import bfcl_answers_path, import_bfcl

    if policy_path or extract_spec:
        click.echo("error: --policy and --extract do not apply to --format bfcl (the offered functions are "
                   "the legal set)", err=True)
        sys.exit(2)
    if answers is None:
        guess = bfcl_answers_path(src)
        if not guess.exists():
            _fail(ZcError(f"{src}: no answers at {guess}: pass --answers FILE, or --answers none when no "
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
    from .receipts import write_file

    try:
        return write_file(out, receipts)
    except ZcError as exc:
        _fail(exc)
    except OSError as exc:
        _fail(ZcError(f"{exc.filename or out}: {exc.strerror}"))


def progress(iterable, label: str, length: int, every_s: float = 30.0):
    """Progress of a long loop on stderr: a bar on a terminal; otherwise (a log, CI) a line at every
    tenth of `length` or every `every_s` seconds, whichever comes first, and one at the end."""
    if sys.stderr.isatty():
        with click.progressbar(iterable, length=length or None, label=f"  {label}", file=sys.stderr,
                               show_pos=True) as it:
            yield from it
        return
    started = last = time.monotonic()
    tenth = max(1, length // 10) if length else 0

    def line(i: int) -> None:
        click.echo(f"  {label}: {i}{f'/{length}' if length else ''} ({time.monotonic() - started:.0f} s)", err=True)

    click.echo(f"  {label}", err=True)
    i = 0
    for i, x in enumerate(iterable, 1):
        yield x
        if (tenth and i % tenth == 0) or time.monotonic() - last >= every_s:
            last = time.monotonic()
            line(i)
    if not tenth or i % tenth:
        line(i)


@main.command("eval")
@click.option("--policy", "policy_path", default=None, type=click.Path(), metavar="ARTIFACT",
              help="The policy (.zcp, or a .zc source) the specialist was distilled for. Required, except "
              "for a pairwise specialist distilled without one: then the receipts' `legal` lists are the "
              "legal sets and there is no compiler rung.")
@click.option("--specialists", "specialist_dir", required=True, type=click.Path(), metavar="DIR",
              help="The specialist directory (model.onnx + manifest.json): a classifier or a pairwise "
              "specialist, as its manifest says.")
@click.option("--receipts", "sources", multiple=True, required=True, type=click.Path(), metavar="PATH",
              help="Receipts files or directories; more paths may follow, or repeat the option.")
@click.argument("more", nargs=-1, type=click.Path(), metavar="[PATH]...")
@click.option("--json", "json_out", default=None, type=click.Path(dir_okay=False), metavar="F",
              help="Write the figures as JSON to F.")
@click.option("--html", "html_out", default=None, type=click.Path(dir_okay=False), metavar="F",
              help="Write a self-contained HTML report to F.")
@click.option("--split", type=click.Choice(["test", "all"]), default="test", show_default=True,
              help="test: only decisions of tasks the specialist never trained on; all: every decision.")
@click.option("--allow-trained", is_flag=True,
              help="With --split all, report trained-on tasks anyway (labelled NOT held-out).")
@click.option("--skip-invalid", is_flag=True, help="Skip invalid receipt lines (counted) instead of refusing.")
@click.option("--tiers", "tiers_path", default=None, type=click.Path(dir_okay=False), metavar="F",
              help="tiers.toml: replay with these LLM tiers on (default: off; what they leave goes to the teacher).")
def eval_cmd(policy_path, specialist_dir, sources, more, json_out, html_out, split, allow_trained,
             skip_invalid, tiers_path) -> None:
    """Replay receipts through the router (compiler, the specialist, tiers off unless --tiers): per-rung
    and overall figures, complete calls, live shadow agreement.

    A pairwise specialist is given the tools each receipt offered (meta.tools); where no offered action
    fits (a receipt with no action and verified: true) the report gives the share it abstained on."""
    from . import evals
    from .qroute.specialist import read_manifest

    if policy_path is None:
        try:
            why = evals.needs_policy(read_manifest(specialist_dir))
        except ZcError as exc:
            _fail(exc)
        if why:
            click.echo(f"error: {why}", err=True)
            sys.exit(2)
    try:
        policy = _load_policy(policy_path) if policy_path is not None else None
        tiers = {}
        if tiers_path is not None:
            from .tiers import load_tiers

            if policy is None:
                raise ZcError("--tiers needs --policy: tiers are rungs of a policy's routes")
            tiers = load_tiers(tiers_path)
        try:
            rep = evals.run(policy, specialist_dir, [*sources, *more], split=split,
                            allow_trained=allow_trained, skip_invalid=skip_invalid, tiers=tiers)
        finally:
            for tier in tiers.values():
                tier.close()
        for path, data in ((json_out, lambda: evals.to_json(rep)),
                           (html_out, lambda: evals.render_html(rep).encode())):
            if path is not None:
                try:
                    Path(path).write_bytes(data())
                except OSError as exc:
                    raise ZcError(f"{path}: cannot write: {exc.strerror}") from None
    except ZcError as exc:
        _fail(exc)
    if rep["excluded_trained_on"]:
        click.echo(f"note: excluded {rep['excluded_trained_on']} decisions of {rep['excluded_tasks']} tasks "
                   "the specialist was trained on", err=True)
    click.echo(evals.render_text(rep))


@main.command("route")
@click.option("--policy", "policy_path", required=True, type=click.Path(), help="Compiled policy (.zcp) or .zc source.")
@click.option("--specialists", "specialists", multiple=True, type=click.Path(file_okay=False),
              help="Specialist directory; repeat for several (asked in order).")
@click.option("--tiers", "tiers_path", type=click.Path(dir_okay=False), help="tiers.toml binding tier names to endpoints.")
@click.option("--state", "state_path", required=True, metavar="FILE|-", help="State JSON file, or - for stdin.")
@click.option("--intent", default=None, help="Restrict the universe to this intent's `allow` list.")
@click.option("--receipts", "receipts_path", type=click.Path(dir_okay=False), help="Append the receipt here.")
@click.option("--deadline-ms", type=click.FloatRange(min=0, min_open=True), default=None, help="Overall budget.")
@click.option("--json", "as_json", is_flag=True, help="Print the decision and its receipt as JSON.")
def route_cmd(policy_path, specialists, tiers_path, state_path, intent, receipts_path, deadline_ms, as_json) -> None:
    """Decide one step through the ladder: compiler, specialists, LLM tiers, fallback."""
    from .router import Router

    try:
        policy = _load_policy(policy_path)
        tiers = {}
        if tiers_path:
            from .tiers import load_tiers

            tiers = load_tiers(tiers_path)
        state = _read_json(state_path)
        with Router(policy, specialists=list(specialists) or None, tiers=tiers, receipts=receipts_path,
                    deadline_ms=deadline_ms) as router:
            d = router.decide(state, intent)
    except ZcError as exc:
        if state_path != "-" and exc.__class__.__name__ == "StateError":
            exc = ZcError(f"{state_path}: {exc}")
        _fail(exc)
    if as_json:
        click.echo(msgspec.json.encode({"action": d.action, "tier": d.tier, "confidence": d.confidence,
                                        "kind": d.kind, "arguments": d.arguments, "text": d.text,
                                        "legal": list(d.legal.actions), "receipt": d.receipt}).decode())
        return
    conf = "" if d.confidence is None else f" (confidence {d.confidence:.3f})"
    click.echo(f"action: {d.action or '(none: every rung abstained and the fallback is not legal)'}"
               f" by {d.tier}{conf}")
    if d.arguments is not None:
        click.echo("arguments: " + msgspec.json.encode(d.arguments).decode())
    if d.text is not None:
        click.echo(f"reply: {d.text}")
    click.echo("legal: " + ", ".join(d.legal.actions))
    for r in d.rungs:
        extra = f" {r.action}" if r.action else ""
        click.echo(f"  {r.tier:<12} {r.outcome}{extra} {r.latency_ms:.2f} ms {r.detail}".rstrip())


# ---- policy authors' tools: zc test, zc fmt (check --format lives with `check`) ----------------
@main.command("test")
@click.argument("paths", nargs=-1, required=True, type=click.Path())
@click.option("--coverage", is_flag=True, help="Report rules and condition outcomes no case exercised.")
@click.option("--min-coverage", type=click.FloatRange(0, 100), default=None, metavar="PCT",
              help="With --coverage: exit 1 when a policy's coverage is below PCT percent.")
@click.option("-v", "--verbose", is_flag=True, help="Print passing cases too.")
def test_cmd(paths: tuple[str, ...], coverage: bool, min_coverage: float | None, verbose: bool) -> None:
    """Run policy unit tests (`*.test.yaml`, `*.test.json`); exit 1 when a case fails."""
    from .testing import run_suites, suite_files

    coverage = coverage or min_coverage is not None
    try:
        runs = run_suites(suite_files(paths), coverage)
    except ZcError as exc:
        _fail(exc)
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
            where = f" ({run.path}:{line})" if line and not r.passed else ""
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
    sys.exit(1 if failed or low else 0)


@main.command("fmt")
@click.argument("paths", nargs=-1, required=True, type=click.Path())
@click.option("--check", "check_only", is_flag=True, help="Write nothing; exit 1 if a file is not formatted.")
@click.option("--diff", "show_diff", is_flag=True, help="Write nothing; print what would change as a diff.")
def fmt_cmd(paths: tuple[str, ...], check_only: bool, show_diff: bool) -> None:
    """Format policies in place (or `-`: stdin to stdout), keeping comments and meaning."""
    import difflib

    from .driver import policy_files, read_source
    from .fmt import format_source
    from .parse import decode

    if paths == ("-",):
        try:
            click.echo(format_source(decode("<stdin>", sys.stdin.buffer.read())), nl=False)
        except ZcError as exc:
            _fail(exc)
        return
    try:
        files = policy_files(list(paths))
    except ZcError as exc:
        _fail(exc)
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
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
            with os.fdopen(fd, "w", encoding="utf-8", newline="") as fh:
                fh.write(new)
            os.chmod(tmp, path.stat().st_mode & 0o7777)
            os.replace(tmp, path)
        except OSError as exc:
            click.echo(f"error: {path}: cannot write: {exc.strerror}", err=True)
            errors += 1
            continue
        click.echo(f"formatted {path}", err=True)
    verb = "would be reformatted" if check_only or show_diff else "reformatted"
    click.echo(f"{changed} of {len(files)} file{'s' if len(files) != 1 else ''} {verb}"
               + (f", {errors} with errors" if errors else ""), err=True)
    sys.exit(1 if errors or (check_only and changed) else 0)


@main.command("lsp")
def lsp_cmd() -> None:
    """Run the language server on stdio (for editors; needs `pip install 'zcompile[lsp]'`)."""
    try:
        from .lsp.server import main as serve
    except ImportError:
        _fail(ZcError("the language server needs pygls, which is not installed: "
                      "pip install 'zcompile[lsp]'"))
    serve()


def run() -> None:
    """Entry point that keeps user errors free of tracebacks."""
    try:
        main(standalone_mode=True)
    except ZcError as exc:  # pragma: no cover - commands catch their own
        _fail(exc)
