"""Commands for q-route: distill, eval, promote, route, serve (the gateway)."""

from __future__ import annotations

import sys
from pathlib import Path

import click
import msgspec

from ..errors import ZcError
from ..outdir import refuse_foreign_file, write_output
from ..qroute.settings import DEFAULTS, TARGET_ABSTENTION
from ..state import StateError
from .common import fail, load_policy, main, progress, read_json, timed_steps


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
              default=DEFAULTS.model, show_default=True,
              help="auto trains logistic, mlp and gbt and keeps the one the out-of-fold evidence ranks "
                   "first; transformer fine-tunes MiniLM-L6 (needs the `transformer` extra); pairwise "
                   "fine-tunes it to score (request, action description) pairs, for open action sets.")
@click.option("--guarantee", type=click.Choice(["ltt", "conformal"]), default=DEFAULTS.guarantee,
              show_default=True,
              help="ltt: precision ≥ target with 95% confidence (Learn-then-Test); conformal: expected "
              "false-discovery rate ≤ 1 - target (conformal selection; needs fewer decisions, a weaker "
              "claim).")
@click.option("--unit", type=click.Choice(["task", "decision"]), default=DEFAULTS.unit, show_default=True,
              help="The unit of evidence τ is certified on: task (tasks are exchangeable, decisions within "
                   "one are not; the statement holds for new tasks) or decision (the older, weaker claim for "
                   "new tasks).")
@click.option("--folds", type=click.IntRange(2), default=DEFAULTS.folds, show_default=True,
              help="Task-grouped folds of cross-fitting (tabular models): every train and calibration "
                   "decision gets an out-of-fold score, τ is chosen on all of them.")
@click.option("--negatives", type=click.IntRange(0), default=DEFAULTS.negatives, show_default=True,
              help="pairwise: descriptions of other decisions' actions added per training decision as not "
              "fitting, half at random and half the most similar to the right one.")
@click.option("--target-precision", type=click.FloatRange(0, 1, min_open=True, max_open=True),
              default=DEFAULTS.target_precision, show_default=True,
              help="Precision the abstention threshold must guarantee.")
@click.option("--call-precision", type=click.FloatRange(0, 1, min_open=True, max_open=True),
              default=DEFAULTS.call_precision,
              help="Precision the thresholds of complete calls (and of risky calls) must guarantee, where "
                   "the evidence supports less for calls than for replies [default: --target-precision].")
@click.option("--target-abstention", type=click.FloatRange(0, 1, max_open=True),
              default=DEFAULTS.target_abstention,
              help="pairwise: share of the decisions where no offered action fits on which the specialist "
                   f"must abstain (95% lower bound; 0 turns the bound off) [default: {TARGET_ABSTENTION:g}].")
@click.option("--min-coverage", type=click.FloatRange(0, 1), default=DEFAULTS.min_coverage, show_default=True,
              help="Coverage the gate requires on the test split.")
@click.option("--seed", type=int, default=DEFAULTS.seed, show_default=True)
@click.option("--skip-invalid", is_flag=True, default=DEFAULTS.skip_invalid,
              help="Skip invalid receipt lines (counted) instead of refusing.")
@click.option("--epochs", type=click.FloatRange(0, min_open=True), default=None,
              help="transformer: passes over the training split [default: 3].")
@click.option("--max-steps", type=click.IntRange(1), default=None,
              help="transformer: optimiser steps in all (overrides --epochs).")
@click.option("--max-length", type=click.IntRange(8, 512), default=None,
              help="transformer: tokens read per state [default: 128].")
@click.option("--layers", type=click.IntRange(1, 6), default=None,
              help="transformer: fine-tune MiniLM's first N of its 6 layers, the rest dropped; training and "
                   "each decision cost about N/6 as much, usually for less accuracy [default: 6].")
@click.option("--learning-rate", type=click.FloatRange(0, 1, min_open=True), default=None,
              help="transformer: AdamW's peak learning rate; fewer --layers learn faster at a higher one "
              "[default: 1e-4].")
@click.option("--batch-size", type=click.IntRange(1), default=None,
              help="transformer: decisions per step [default: 16].")
@click.option("--ensemble", type=click.IntRange(1), default=None,
              help="transformer: fine-tune this many models (seeds seed, seed+1, …) and decide by the mean "
                   "of their logits, one ONNX graph; N times the training and decision time [default: 1].")
@click.option("--quantization", type=click.Choice(["auto", "int8", "float32"]), default=None,
              help="transformer: the export. int8 fails the distillation when int8 decides unlike the "
                   "trained model on more than 0.5% of the test split; auto [default] then ships float32 "
                   "instead.")
@click.option("--engine", type=click.Choice(["local", "ray"]), default=DEFAULTS.engine, show_default=True,
              help="Featurisation: local, or ray (Ray Data over Parquet shards, on the cluster RAY_ADDRESS "
                   "names or a local instance; needs the `ray` extra; docs/scale.md).")
@click.option("--max-decisions", type=click.IntRange(3), default=DEFAULTS.max_decisions, show_default=True,
              help="Decisions held in memory; beyond it a seeded task-stratified sample of each split is "
                   "used (the split and its seal still cover every task; the report says so).")
def distill_cmd(sources, policy_path, out, model, guarantee, unit, folds, negatives, target_precision,
                call_precision, target_abstention, min_coverage, seed, skip_invalid, epochs, max_steps,
                max_length, layers, learning_rate, batch_size, ensemble, quantization, engine,
                max_decisions) -> None:
    """Distil receipts into an ONNX specialist that answers with a certified confidence or abstains."""
    try:
        from ..qroute import Progress, Settings, distill
    except ZcError as exc:  # the `distill` extra is not installed
        fail(exc)

    options = {k: v for k, v in (("epochs", epochs), ("max_steps", max_steps), ("max_length", max_length),
                                 ("layers", layers), ("learning_rate", learning_rate),
                                 ("batch_size", batch_size), ("ensemble", ensemble),
                                 ("quantization", quantization))
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
    settings = Settings(model=model, target_precision=target_precision, call_precision=call_precision,
                        guarantee=guarantee, unit=unit, target_abstention=target_abstention,
                        min_coverage=min_coverage, seed=seed, folds=folds, negatives=negatives,
                        skip_invalid=skip_invalid, options=options, engine=engine,
                        max_decisions=max_decisions)
    report = Progress(step=timed_steps(), bar=progress)
    try:
        policy = load_policy(policy_path) if policy_path else None
        result = distill(list(sources), policy, out, settings, report=report, name=Path(out).name)
    except ZcError as exc:
        fail(exc)
    m = result.manifest
    click.echo(result.report_text)
    extra = "".join(f", {f}" for f in m.model.files)
    click.echo(f"wrote {out}/ (model.onnx{extra}, manifest.json, report.md); {m.model.kind}; "
               + ("promoted" if m.gate.promoted else "NOT promoted: " + "; ".join(m.gate.reasons)))


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
@click.option("--decisions", "decisions_out", default=None, type=click.Path(dir_okay=False), metavar="F",
              help="Write one JSON line per replayed decision to F: rung, answer, arguments with their "
              "provenance, confidence, strict and acceptable verdicts (docs/evaluation.md).")
@click.option("--split", type=click.Choice(["test", "all"]), default="test", show_default=True,
              help="test: only decisions of tasks the specialist never trained on; all: every decision.")
@click.option("--allow-trained", is_flag=True,
              help="With --split all, report trained-on tasks anyway (labelled NOT held-out).")
@click.option("--skip-invalid", is_flag=True, help="Skip invalid receipt lines (counted) instead of "
                                                   "refusing.")
@click.option("--tiers", "tiers_path", default=None, type=click.Path(dir_okay=False), metavar="F",
              help="tiers.toml: replay with these LLM tiers on (default: off; what they leave goes to the "
                   "teacher).")
@click.option("--grader", "grader_path", default=None, type=click.Path(dir_okay=False), metavar="FILE",
              help="A grader file the tiers' replies must pass; with the text tier bound by --tiers, a "
                   "handed reply counts as off the expensive model only when it wrote one that passed.")
def eval_cmd(policy_path, specialist_dir, sources, more, json_out, html_out, decisions_out, split,
             allow_trained, skip_invalid, tiers_path, grader_path) -> None:
    """Replay receipts through the router (compiler, the specialist, tiers off unless --tiers): per-rung
    and overall figures, complete calls, live shadow agreement.

    A pairwise specialist is given the tools each receipt offered (meta.tools); where no offered action
    fits (a receipt with no action and verified: true) the report gives the share it abstained on."""
    from .. import evals
    from ..evals import decisions
    from ..qroute.specialist import read_manifest

    if policy_path is None:
        try:
            why = evals.needs_policy(read_manifest(specialist_dir))
        except ZcError as exc:
            fail(exc)
        if why:
            click.echo(f"error: {why}", err=True)
            sys.exit(2)
    def report_json(rep):  # the rows go to their own file, not into the report
        return evals.to_json({k: v for k, v in rep.items() if k != "decisions"})

    outputs = [o for o in ((json_out, report_json, "zc eval JSON report", evals.is_json_report),
                           (html_out, lambda r: evals.render_html(r).encode(), "zc eval HTML report",
                            evals.is_html_report),
                           (decisions_out, lambda r: decisions.encode(r["decisions"]),
                            "zc eval decisions file", decisions.is_decisions_file)) if o[0] is not None]
    try:
        for path, _, what, owns in outputs:  # refused before the replay, not after it
            refuse_foreign_file(Path(path), what, owns)
        policy = load_policy(policy_path) if policy_path is not None else None
        tiers = {}
        if tiers_path is not None:
            from ..tiers import load_tiers

            if policy is None:
                raise ZcError("--tiers needs --policy: tiers are rungs of a policy's routes")
            tiers = load_tiers(tiers_path, policy)
        grader = _grader(grader_path)
        try:
            from ..qroute.dataset import Progress

            rep = evals.run(policy, specialist_dir, [*sources, *more], split=split, grader=grader,
                            allow_trained=allow_trained, skip_invalid=skip_invalid, tiers=tiers,
                            progress=Progress(bar=progress), decisions=decisions_out is not None)
        finally:
            for tier in tiers.values():
                tier.close()
        for path, data, what, owns in outputs:
            write_output(path, data(rep), what, owns)  # over nothing but an earlier report
    except ZcError as exc:
        fail(exc)
    if rep["excluded_trained_on"]:
        click.echo(f"note: excluded {rep['excluded_trained_on']} decisions of {rep['excluded_tasks']} tasks "
                   "the specialist was trained on", err=True)
    click.echo(evals.render_text(rep))


@main.command("promote")
@click.argument("specialist_dir", type=click.Path(), metavar="SPECIALIST")
@click.option("--policy", "policy_path", required=True, type=click.Path(), metavar="ARTIFACT",
              help="The policy (.zcp, or a .zc source) the specialist was distilled for.")
@click.option("--receipts", "sources", multiple=True, required=True, type=click.Path(), metavar="PATH",
              help="Receipts written with the specialist in shadow mode (Router(shadow=…)); repeat for more.")
@click.option("--dry-run", is_flag=True, help="Print the verdict; change nothing.")
@click.option("--skip-invalid", is_flag=True, help="Skip invalid receipt lines (counted) instead of "
                                                   "refusing.")
def promote_cmd(specialist_dir, policy_path, sources, dry_run, skip_invalid) -> None:
    """Re-gate a specialist on its shadow answers in live receipts of tasks it never trained on.

    Each shadow answer is judged against what the teacher then did (strict, or acceptable: a
    side-effect-free call the teacher made later). The unit of evidence is the task: each kind of
    output (a call by where its weakest argument value came from, when the receipts carry the
    candidates, else by action; a reply or name by action) is promoted when none of its answers was
    illegal or dangerous and the one-sided 95% Clopper–Pearson lower bound over the tasks it answered
    in (a task counts when every answer of that kind in it was acceptable) reaches the manifest's
    target; the specialist is promoted when every kind is, else not (a promoted one is demoted). Says
    how many more clean tasks each kind needs. The manifest (re-sealed) and report.md are rewritten in
    place unless --dry-run. Exit 0 when promoted, 1 when not."""
    from ..qroute.promote import promote

    try:
        m, ev = promote(specialist_dir, load_policy(policy_path), list(sources), dry_run=dry_run,
                        skip_invalid=skip_invalid)
    except ZcError as exc:
        fail(exc)
    click.echo(f"{m.name}: {ev.answered} of {ev.asked} shadow records answered on {ev.tasks} unseen tasks, "
               f"{ev.right} acceptable, {ev.strict} strict; illegal {ev.illegal}, dangerous {ev.dangerous}; "
               "each kind against its target over tasks (one-sided 95% Clopper–Pearson)")
    for k in ev.kinds:
        bad = "" if k.illegal + k.dangerous == 0 else \
            f" and no illegal ({k.illegal}) or dangerous ({k.dangerous}) answer"
        click.echo(f"  {k.kind} (target {k.target:g}): {k.clean} of {k.tasks} tasks clean ({k.right}/"
                   f"{k.answered} answers "
                   f"acceptable), lower bound {k.lower_bound:.3f}: "
                   + ("promoted" if k.promoted else f"needs {k.tasks_needed} more clean tasks{bad}"))
    click.echo(("would be " if dry_run else "") + ("promoted" if m.gate.promoted else
                                                   "NOT promoted: " + "; ".join(m.gate.reasons)))
    sys.exit(0 if m.gate.promoted else 1)


@main.command("route")
@click.option("--policy", "policy_path", required=True, type=click.Path(),
              help="Compiled policy (.zcp) or .zc source.")
@click.option("--specialists", "specialists", multiple=True, type=click.Path(file_okay=False),
              help="Specialist directory; repeat for several (asked in order).")
@click.option("--tiers", "tiers_path", type=click.Path(dir_okay=False),
              help="tiers.toml binding tier names to endpoints.")
@click.option("--state", "state_path", required=True, metavar="FILE|-",
              help="State JSON file, or - for stdin.")
@click.option("--intent", default=None, help="Restrict the universe to this intent's `allow` list.")
@click.option("--receipts", "receipts_path", type=click.Path(dir_okay=False), help="Append the receipt here.")
@click.option("--deadline-ms", type=click.FloatRange(min=0, min_open=True), default=None,
              help="Overall budget.")
@click.option("--json", "as_json", is_flag=True, help="Print the decision and its receipt as JSON.")
@click.option("--grader", "grader_path", default=None, type=click.Path(dir_okay=False), metavar="FILE",
              help="A grader file the replies of tiers (but the ladder's last) must pass.")
def route_cmd(policy_path, specialists, tiers_path, state_path, intent, receipts_path, deadline_ms,
              as_json, grader_path) -> None:
    """Decide one step through the ladder: compiler, specialists, LLM tiers, fallback."""
    from ..router import Router

    try:
        policy = load_policy(policy_path)
        tiers = {}
        if tiers_path:
            from ..tiers import load_tiers

            tiers = load_tiers(tiers_path, policy)
        state = read_json(state_path)
        grader = _grader(grader_path)
        with Router(policy, specialists=list(specialists) or None, tiers=tiers, receipts=receipts_path,
                    deadline_ms=deadline_ms, grader=grader) as router:
            d = router.decide(state, intent)
    except ZcError as exc:
        for tier in tiers.values():
            tier.close()
        if state_path != "-" and isinstance(exc, StateError):
            exc = ZcError(f"{state_path}: {exc}")
        fail(exc)
    for tier in tiers.values():  # a local model server zc started stops here
        tier.close()
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
        if r.residency is not None:
            extra += f" [{r.residency}" + (f", cold load {r.cold_ms:.0f} ms]" if r.cold_ms is not None
                                           else "]")
        click.echo(f"  {r.tier:<12} {r.outcome}{extra} {r.latency_ms:.2f} ms {r.detail}".rstrip())


@main.command("serve")
@click.option("--policy", "policy_path", required=True, type=click.Path(),
              help="Compiled policy (.zcp) or .zc source.")
@click.option("--upstream", required=True, metavar="URL", help="The upstream's OpenAI base URL, e.g. "
                                                               "http://127.0.0.1:8080/v1.")
@click.option("--model", required=True, help="The model name sent upstream (and listed by GET /v1/models).")
@click.option("--specialists", "specialists", multiple=True, type=click.Path(file_okay=False),
              help="Specialist directory; repeat for several (asked in order).")
@click.option("--tiers", "tiers_path", type=click.Path(dir_okay=False),
              help="tiers.toml binding local tiers.")
@click.option("--upstream-tier", default=None, metavar="NAME",
              help="The policy tier the upstream is bound to (default: the last one not bound by --tiers).")
@click.option("--extract", "extract_spec", default=None, metavar="MODULE:FUNCTION",
              help="State extractor (as for `zc receipts import --format chat`).")
@click.option("--receipts", "receipts_path", default="serve-receipts.jsonl", show_default=True,
              type=click.Path(dir_okay=False), help="Append one receipt per request here.")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind.")
@click.option("--port", default=8088, show_default=True, type=click.IntRange(0, 65535), help="Port to bind.")
@click.option("--timeout-ms", default=60000.0, show_default=True, type=click.FloatRange(min=0, min_open=True),
              help="Deadline of one request (504 past it).")
@click.option("--max-body-bytes", default=4 * 1024 * 1024, show_default=True, type=click.IntRange(min=1),
              help="Larger request bodies are refused (413).")
@click.option("--workers", default=64, show_default=True, type=click.IntRange(1, 4096),
              help="Decisions run at once, each in a thread (the upstream call included); more requests "
                   "wait, and the wait counts against their deadline.")
@click.option("--api-key-env", default=None, metavar="VAR",
              help="Environment variable holding the upstream's API key.")
@click.option("--client-keys", "client_keys_path", default=None, type=click.Path(dir_okay=False),
              metavar="FILE",
              help="Keys a client must present (Authorization: Bearer KEY): one `NAME KEY` a line.")
@click.option("--client-key-env", "client_key_envs", multiple=True, metavar="VAR",
              help="An environment variable holding a client key (its name is the variable's); repeatable.")
@click.option("--insecure-no-client-keys", is_flag=True,
              help="Bind a non-loopback --host without client keys (anyone who reaches it spends the "
                   "upstream key).")
@click.option("--resident", multiple=True, metavar="NAME",
              help="Load this tier (one with `launch` in tiers.toml) before serving, and keep it loaded; "
                   "repeat for several. Other such tiers are loaded when a decision's deadline covers "
                   "their cold load.")
@click.option("--grader", "grader_path", default=None, type=click.Path(dir_okay=False), metavar="FILE",
              help="A grader file: replies written by a local tier must pass its checks, else the "
                   "upstream writes the reply (docs/router.md, The reply grader).")
def serve_cmd(policy_path, upstream, model, specialists, tiers_path, upstream_tier, extract_spec,
              receipts_path, host, port, timeout_ms, max_body_bytes, workers, api_key_env, client_keys_path,
              client_key_envs, insecure_no_client_keys, resident, grader_path) -> None:
    """Serve an OpenAI-compatible chat-completions endpoint that offers the upstream only legal tools,
    answers locally when a rung is sure, and lets no illegal call reach the harness (docs/gateway.md)."""
    try:
        from ..gateway import Gateway, load_client_keys, serve
    except ImportError as exc:
        fail(ZcError(f"zc serve needs the `serve` extra ({exc.name} is not installed): pip install "
                     "'zcompile[serve]'"))
    from ..receipts import default_extract, load_extractor

    try:
        policy = load_policy(policy_path)
        tiers = {}
        if tiers_path:
            from ..tiers import load_tiers

            tiers = load_tiers(tiers_path, policy)
        extract = load_extractor(extract_spec) if extract_spec else default_extract
        client_keys = load_client_keys(client_keys_path, client_key_envs)
        if not client_keys and not insecure_no_client_keys and not _loopback(host):
            raise ZcError(f"--host {host}: not a loopback address, and no client keys: give --client-keys "
                          "FILE or --client-key-env VAR (or --insecure-no-client-keys to serve anyone who "
                          "reaches it)")
        grader = _grader(grader_path)
        gateway = Gateway(policy, upstream, model, specialists=list(specialists) or None, tiers=tiers,
                          upstream_tier=upstream_tier, extract=extract, receipts=receipts_path,
                          timeout_ms=timeout_ms, max_body_bytes=max_body_bytes, api_key_env=api_key_env,
                          client_keys=client_keys, grader=grader, workers=workers)
    except ZcError as exc:
        fail(exc)
    try:
        for name, ms in gateway.router.preload(resident).items():
            click.echo(f"zc serve: tier `{name}` resident ({gateway.router.tiers[name].model}, cold load "
                       f"{ms:.0f} ms)", err=True)
    except ZcError as exc:
        gateway.close()
        fail(exc)
    text = gateway.router.text_tier
    click.echo(f"zc serve: policy {policy.name}, upstream {upstream} ({model}) as tier "
               f"`{gateway.upstream_tier}`, "
               + (f"replies by text tier `{text}` ({gateway.router.tiers[text].model}), " if text else "")
               + f"receipts {receipts_path}; http://{host}:{port}/v1"
               + (f"; {len(client_keys)} client key(s)" if client_keys else "; no client keys"), err=True)
    try:
        serve(gateway, host, port)
    except ZcError as exc:
        fail(exc)
    finally:
        gateway.close()


def _grader(path: str | None):
    """The reply grader a `--grader FILE` names, or None without one."""
    if path is None:
        return None
    from ..router.grader import load_grader

    return load_grader(path)


def _loopback(host: str) -> bool:
    """Whether `host` is a loopback address (or `localhost`)."""
    import ipaddress

    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


@main.command("arms")
@click.option("--policy", "policy_path", required=True, type=click.Path(), metavar="ARTIFACT",
              help="The policy (.zcp, or a .zc source) the specialist was distilled for.")
@click.option("--specialists", "specialist_dir", required=True, type=click.Path(file_okay=False),
              metavar="DIR", help="The specialist: its manifest seals the held-out split; it is the "
                                  "`specialist` arm.")
@click.option("--receipts", "sources", multiple=True, required=True, type=click.Path(), metavar="PATH",
              help="Receipts files or directories (repeat for more).")
@click.option("--tiers", "tiers_path", default=None, type=click.Path(dir_okay=False), metavar="F",
              help="tiers.toml: each tier is an arm alone (compiler-first and unfiltered) and after the "
                   "specialist.")
@click.option("--limit", type=click.IntRange(min=1), default=None,
              help="Only the first N held-out decisions.")
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False), metavar="DIR",
              help="Writes DIR/arms.json, DIR/arms.html and DIR/receipts/<arm>.jsonl (a new directory).")
def arms_cmd(policy_path, specialist_dir, sources, tiers_path, limit, out_dir) -> None:
    """Replay the held-out decisions (the specialist's sealed test split) through several arms side by
    side: the specialist alone, each tier alone behind the compiler and unfiltered (every declared
    action offered), the specialist then each tier. Per arm: success strict and acceptable with Wilson
    intervals, warm p50, abstentions, dangerous and illegal selections, cold loads (docs/evaluation.md)."""
    from ..evals import arms
    from ..qroute import Progress, load_specialist

    out = Path(out_dir)
    tiers = {}
    try:
        if out.exists() and any(out.iterdir()):
            raise ZcError(f"{out}: exists and is not empty: give a new directory")
        policy = load_policy(policy_path)
        sp = load_specialist(specialist_dir, policy)
        if tiers_path is not None:
            from ..tiers import load_tiers

            tiers = load_tiers(tiers_path)  # arm tiers need not be declared by the policy
        decisions = arms.held_out([*sources], policy, sp, limit=limit)
        rep = arms.run(policy, decisions, arms.default_arms(list(tiers), True), specialists=[sp], tiers=tiers,
                       receipts=out / "receipts", progress=Progress(bar=progress))
        (out / "arms.json").write_bytes(msgspec.json.format(msgspec.json.encode(rep), indent=2) + b"\n")
        (out / "arms.html").write_text(arms.render_html(rep))
    except ZcError as exc:
        fail(exc)
    finally:
        for tier in tiers.values():
            tier.close()
    click.echo(arms.render_text(rep))
    click.echo(f"wrote {out}/arms.json, {out}/arms.html, {out}/receipts/ ({len(rep['arms'])} arms)")
