"""Distillation, the ten steps once for every recipe: receipts -> a specialist that answers with a guarantee
or abstains.

1 load and validate receipts (`dataset.load`)       6 calibrate on out-of-fold scores
2 split by task, chronologically, and seal            7 choose τ with a named guarantee (`threshold`)
3 inputs (features, rendered text or pairs)          8 evaluate on the sealed test split
4 train: cross-fitted folds + a refit (or holdout)    9 gate (`gate.gate`)
5 export to ONNX and check parity                    10 write the specialist atomically (`outdir.staged`)

`--model auto` runs steps 3–8 for every tabular recipe and keeps the one that non-test evidence
ranks first (`gate.selection_key`); each candidate's τ is certified at δ / (number of candidates),
so the kept one's guarantee holds at δ whichever wins (Bonferroni).
"""

from __future__ import annotations

import shutil
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec
import numpy as np

from .. import __version__, stats
from ..errors import ZcError
from ..outdir import staged
from ..receipts.candidates import GROUNDINGS, as_candidates, grounding
from ..receipts.judge import LOOKAHEAD, RULE, lenient_actions, strict
from . import arguments as argmodel
from . import dataset as D
from . import engine as E
from . import features as F
from . import novelty as N
from .calibrate import fit_platt
from .calls import Signatures, argument_examples, call_outputs, fit_arguments
from .gate import gate, selection_key
from .manifest import MANIFEST_VERSION, Calibration, Calls, Gate, Manifest, Model, Threshold, decode, encode
from .metrics import (
    CallFigures,
    NameFigures,
    OofFigures,
    answer_right,
    call_figures,
    evaluate,
    grounding_figures,
    risky_actions,
    task_figures,
)
from .recipes import AUTO, ClassifierRecipe, Recipe, TabularRecipe, fit_in_threads, recipe
from .report import render
from .settings import TARGET_ABSTENTION, Settings
from .specialist import call_confidence
from .threshold import DELTA, GUARANTEES, NEVER, UNITS, abstention_floor, choose

if TYPE_CHECKING:
    from ..runtime import Policy

MIN_GROUNDED = 30  # out-of-fold complete calls a grounding needs for a Platt scaling of its own


@dataclass
class Candidate:
    """One recipe after steps 3–8, in its own directory."""

    kind: str
    directory: Path
    manifest: Manifest
    oof: OofFigures


@dataclass(frozen=True)
class Run:
    """What every candidate of one distillation shares: the decisions (targets set), the policy, its
    feature spec, the settings, the manifest's head, how many candidates there are, the progress sink,
    the featurisation engine, and `shared`: argument models already fit on the same folds, inputs
    already computed with the same feature spec and novelty models, by key."""

    parts: dict[str, list[D.LoggedDecision]]
    policy: Policy | None
    spec: F.FeatureSpec
    settings: Settings
    head: dict[str, Any]
    n_candidates: int
    report: D.Progress
    engine: Any
    shared: dict[Any, Any] = field(default_factory=dict)


@dataclass
class Result:
    manifest: Manifest
    directory: Path
    report_text: str


def is_specialist_dir(path: Path) -> bool:
    """Whether `path` holds a specialist's manifest (of any version), so replacing it loses nothing
    foreign."""
    from ..inputs import decode_json, read_file

    try:
        head = decode_json(read_file(path / "manifest.json", "specialist manifest"), dict)
    except (ZcError, msgspec.DecodeError, msgspec.ValidationError):
        return False
    return {"features", "model", "threshold", "splits"} <= set(head)


def distill(paths: Sequence[str | Path], policy: Policy | None, out: str | Path,
            settings: Settings | None = None, *, report: D.Progress | None = None, name: str | None = None,
            parts: dict[str, list[D.LoggedDecision]] | None = None) -> Result:
    """Run the ten steps and write `out/` (model.onnx, manifest.json, report.md, and the model's files).

    `parts` replaces steps 1–2 with given train / calibration / test decisions (a benchmark that
    trains on some categories and reports on others); they are sealed the same way.
    """
    s = settings or Settings()
    report = report or D.QUIET
    _validate(s, policy)
    pairwise = s.model == "pairwise"
    engine = E.make(s.engine, paths, policy, skip_invalid=s.skip_invalid, none_fits=pairwise)
    if parts is None:
        report.step("1/10 loading and validating receipts")
        data = D.load_split(paths, policy, skip_invalid=s.skip_invalid, none_fits=pairwise,
                            limit=s.max_decisions, seed=s.seed, report=report,
                            scan=getattr(engine, "scan", None))
        parts, counts, files, splits = data.parts, data.counts, data.files, data.splits
        engine.sampling = data.sampling
        report.step(f"   training data: {data.sampling.text()}")
    else:
        counts, files = Counter(used=sum(len(v) for v in parts.values())), D.data_files(paths)
        splits = D.seal_all(parts)
    _warn_thin(parts, pairwise, report)
    parts, judge = _targets(parts, policy, engine, report)
    kinds = AUTO if s.model == "auto" else (s.model,)
    spec = F.spec_for(policy.ir) if policy is not None else F.FeatureSpec(F.VERSION, (), ())
    head = dict(version=MANIFEST_VERSION, zcompile=__version__, name=name or Path(out).name,
                policy_name=policy.name if policy is not None else "",
                policy_sha256=policy.sha256 if policy is not None else "", data=tuple(files),
                counts=dict(counts), splits=splits, seed=s.seed)
    with staged(out, "specialist directory", is_specialist_dir) as work:
        candidates = []
        run = Run(parts=parts, policy=policy, spec=spec, settings=s, head=head, n_candidates=len(kinds),
                  report=report, engine=engine)
        for kind in kinds:
            if len(kinds) > 1:
                report.step(f"== {kind}")
            (work / kind).mkdir()
            c = _candidate(kind, work / kind, run)
            c.manifest = msgspec.structs.replace(c.manifest, metrics=c.manifest.metrics | {"judge": judge})
            candidates.append(c)
        best = max(candidates, key=lambda c: selection_key(c.oof))
        if len(kinds) > 1:
            report.step(f"   kept {best.kind} (out-of-fold evidence: " + ", ".join(
                f"{c.kind} {c.oof.answered}/{c.oof.n} answered at the certified τ"
                for c in candidates) + ")")
        manifest, text = _gate_and_write(best, work, policy, s, report)
    return Result(manifest, Path(out), text)


def _targets(parts: dict[str, list[D.LoggedDecision]], policy: Policy | None, engine: Any,
             report: D.Progress) -> tuple[dict[str, list[D.LoggedDecision]], dict[str, Any]]:
    """Training targets from the judge (`dataset.targets`) for train and calibration, and what the
    report says of the judge. Test decisions keep the teacher's step as their label: the judge
    scores answers there, never chooses what they are."""
    n_train = len(parts["train"])
    pool, changed = D.targets(parts["train"] + parts["calibration"], Signatures(policy).replies)
    every = [d for p in D.PARTS for d in parts[p]]
    sampled = getattr(getattr(engine, "sampling", None), "method", "all") != "all"
    info = {"rule": RULE if not sampled else "strict: equal to the teacher's next step (a sample of the "
                                             "receipts was taken, and the judge needs whole conversations)",
            "lenient_actions": sorted(lenient_actions(policy)), "lookahead": LOOKAHEAD, "n": len(every),
            "more_than_strict": sum(len(d.acceptable) > 1 for d in every), "targets_changed": changed,
            "mode": "strict" if sampled else "acceptable"}
    if changed:
        report.step(f"   targets: {changed} of {len(pool)} train + calibration decisions learn an acceptable "
                    "side-effect-free call instead of the teacher's step (the judge: docs/evaluation.md)")
    return {"train": pool[:n_train], "calibration": pool[n_train:], "test": parts["test"]}, info


def _validate(s: Settings, policy: Policy | None) -> None:
    if not 0 < s.target_precision < 1:
        raise ZcError(f"--target-precision must be between 0 and 1, got {s.target_precision}")
    if s.call_precision is not None and not 0 < s.call_precision < 1:
        raise ZcError(f"--call-precision must be between 0 and 1, got {s.call_precision}")
    if s.guarantee not in GUARANTEES:
        raise ZcError(f"unknown guarantee `{s.guarantee}` (choose {' or '.join(GUARANTEES)})")
    if s.unit not in UNITS:
        raise ZcError(f"unknown unit `{s.unit}` (choose {' or '.join(UNITS)})")
    if s.target_abstention is not None and not 0 <= s.target_abstention < 1:
        raise ZcError(f"--target-abstention must be at least 0 and below 1, got {s.target_abstention}")
    if s.folds < 2:
        raise ZcError(f"--folds must be at least 2, got {s.folds}")
    if policy is None and s.model != "pairwise":
        raise ZcError("a policy is required (except for --model pairwise)")


def _warn_thin(parts: dict[str, list[D.LoggedDecision]], pairwise: bool, report: D.Progress) -> None:
    """Say loudly when a split cannot support the figures it will be used for."""
    for p in ("calibration", "test"):
        fits = sum(1 for d in parts[p] if d.label is not None)
        if not fits:
            report.step(f"WARNING: the {p} split holds no decision where an action fits: its figures say "
                        "nothing")
        if pairwise and fits == len(parts[p]):
            report.step(f"WARNING: the {p} split holds no decision where no action fits: abstention there is "
                        "not measured")


def _candidate(kind: str, cdir: Path, run: Run) -> Candidate:
    """Steps 3–8 for one recipe, reusing what `run.shared` holds."""
    parts, policy, s, report, shared = run.parts, run.policy, run.settings, run.report, run.shared
    rec = recipe(kind, s.seed, run.spec, policy, s.options, s.negatives)
    sig = Signatures(policy)
    pool = parts["train"] + parts["calibration"]
    report.step(f"3/10 {rec.reading} ({kind})")
    rec.prepare(pool if rec.crossfit else parts["train"])
    # tabular: same spec, same rows
    key = ("inputs", msgspec.msgpack.encode(rec.spec)) if rec.featurizer is not None else None
    x = shared.get(key) if key else None
    if x is None:  # scratch files beside the candidates' directories, removed with them
        x = (run.engine or E.Local()).inputs(rec, parts, cdir.parent, report)
        if key:
            shared[key] = x
    else:
        report.step("   the features computed for the candidate before (the same scaling, the same rows)")
    model, oof_raw, oof, folds = _train(rec, parts, x, s, report)
    novelty = _novelty(rec, x, folds, pool, report, shared)
    with_calls = policy is not None and isinstance(rec, ClassifierRecipe) and sig.any
    arguments = None
    if with_calls:
        arguments = shared.get(folds.tobytes()) or _arguments(pool, folds, sig, s.seed, report)
        shared[folds.tobytes()] = arguments
    report.step("5/10 exporting to ONNX and checking parity")
    test = parts["test"] or parts["train"]
    x_test = x["test"] if parts["test"] else x["train"]
    pre = dict(run.head, features=rec.spec,
               calibration=Calibration(rec.calibration_method, 1.0),
               threshold=Threshold(NEVER, s.target_precision, DELTA, 0, 0, 0.0), metrics={},
               gate=Gate(False, (), ("not evaluated",)))
    exported, parity, sp = export_checked(rec, model, cdir, pre, x_test, test, policy, report)
    if oof_raw is None:
        oof_raw = rec.exported(sp, x["calibration"])
    report.step(f"6/10 calibrating ({rec.calibration_method}, outside ONNX) on {len(oof)} "
                + ("out-of-fold decisions" if rec.crossfit else "calibration-split decisions"))
    cal = rec.fit_calibration(oof_raw, oof)
    best, conf, _ = rec.confidence(oof_raw, oof, cal)
    oof_figures: OofFigures
    if arguments is None:
        threshold, oof_figures = _threshold(rec, best, conf, oof, s, run.n_candidates, report)
        calls = None
    else:
        threshold, calls, oof_figures = _call_thresholds(best, conf, oof, sig, arguments,
                                                         risky_actions(policy), s, run.n_candidates, report)
    report.step("8/10 evaluating on the sealed test split")
    manifest = Manifest(**pre | dict(model=exported, calibration=cal, threshold=threshold, calls=calls,
                                     novelty=novelty))
    (cdir / "manifest.json").write_bytes(encode(manifest))
    sp = rec.specialist(cdir, policy)
    metrics = _test_figures(rec, sp, x["test"], parts["test"], cal, threshold, sig, policy, calls is not None)
    if novelty is not None:
        metrics["novelty"] = {"cut": novelty.cut, "test_novel": int(_novel(sp, x["test"]).sum()),
                              "test_n": len(parts["test"])}
    metrics["latency_us"] = latency(lambda d: rec.ask(sp, d), test, *rec.latency_sample)
    metrics["parity"] = parity
    metrics["calibration"] = oof_figures
    if arguments is not None and arguments.final is not None and arguments.final.sampled_:
        kept, n, candidates = arguments.final.sampled_
        metrics["argument_sample"] = {"kept": kept, "n": n, "candidates": candidates,
                                      "limit": argmodel.MAX_ROWS, "seed": s.seed}
    return Candidate(kind, cdir, msgspec.structs.replace(manifest, metrics=D.plain(metrics)), oof_figures)


def _novelty(rec: Recipe, x: dict[str, Any], folds: np.ndarray, pool: list[D.LoggedDecision],
             report: D.Progress, shared: dict[Any, Any]) -> N.Novelty | None:
    """The novelty model of a cross-fitted tabular recipe, its cut chosen on the out-of-fold rows of
    train + calibration (`qroute.novelty`: the test split is not read); None for other recipes.
    Candidates with the same feature spec and folds share it (`shared`)."""
    if not (isinstance(rec, TabularRecipe) and rec.crossfit):
        return None
    key = ("novelty", msgspec.msgpack.encode(rec.spec), folds.tobytes())
    if key not in shared:
        shared[key], _ = N.fit(_concat(x["train"], x["calibration"]), folds, [d.task for d in pool])
        report.step(f"   {shared[key].statement}")
    return shared[key]


def _novel(sp: Any, x: np.ndarray) -> np.ndarray:
    """Which feature rows are past the specialist's novelty cut (none without a model or cut)."""
    if getattr(sp, "novelty", None) is None or sp.novelty_cut is None or not len(x):
        return np.zeros(len(x), bool)
    return sp.novelty.many(x) > sp.novelty_cut


def _train(rec: Recipe, parts: dict[str, list[D.LoggedDecision]], x: dict[str, Any], s: Settings,
           report: D.Progress) -> tuple[Any, Any, list[D.LoggedDecision], np.ndarray]:
    """Step 4: the shipped model, out-of-fold raw scores (None: the calibration split is scored by
    the exported model later), the decisions they score, and each one's fold (-1: the holdout)."""
    pool = parts["train"] + parts["calibration"]
    if isinstance(rec, TabularRecipe) and rec.crossfit:
        k = min(s.folds, len({d.task for d in pool}))
        report.step(f"4/10 training {rec.kind}: {k} task-grouped folds over {len(pool)} train + calibration "
                    "decisions, then a refit on all of them")
        xp = _concat(x["train"], x["calibration"])
        folds = np.array(D.task_folds(pool, k))
        raw, model = crossfit(rec, xp, pool, folds, report, refit=True)
        return model, raw, pool, folds
    report.step(f"4/10 training {rec.kind} on {len(parts['train'])} decisions (calibrated on the calibration "
                "split)")
    model = rec.fit(x["train"], parts["train"], report)
    # the holdout as a fold: the calibration split (-1) is scored by what the train split (0) fits
    folds = np.r_[np.zeros(len(parts["train"]), int), -np.ones(len(parts["calibration"]), int)]
    return model, None, parts["calibration"], folds


def _concat(a: Any, b: Any) -> Any:
    return np.concatenate([a, b]) if isinstance(a, np.ndarray) else list(a) + list(b)


def crossfit(rec: TabularRecipe, x: Any, pool: Sequence[D.LoggedDecision], folds: np.ndarray,
             report: D.Progress, refit: bool = False) -> tuple[Any, Any]:
    """Out-of-fold raw scores: fold j's decisions are scored by a model fit on the other folds'
    tasks only (grouped K-fold by task, `dataset.task_folds`), so every decision has a score from a
    model that never saw its task. With `refit`, the model fit on all of `pool` as well (else None),
    beside the folds' fits (`recipes.fit_in_threads`). Returns (raw scores, that model)."""
    k = int(folds.max()) + 1
    subsets = [np.flatnonzero(folds != j) for j in range(k)] + ([np.arange(len(pool))] if refit else [])
    models = fit_in_threads(lambda idx: rec.fit(rec.take(x, idx), [pool[i] for i in idx], report), subsets,
                            report, f"fits: {k} folds" + (" and the refit" if refit else ""))
    p = np.zeros((len(pool), len(rec.actions)))
    seen = np.zeros((len(pool), len(rec.actions)), dtype=bool)
    for j in range(k):
        held = np.flatnonzero(folds == j)
        p[held], seen[held] = rec.reference(models[j], rec.take(x, held))
    return (p, seen), (models[k] if refit else None)


@dataclass
class Arguments:
    """The argument model to ship and, for each scored decision, one fit without its task."""

    final: Any
    by_fold: dict[int, Any]
    folds: np.ndarray  # fold of each scored decision (-1: the calibration split of a holdout recipe)
    # (decision, action): every candidate's
    proposed: dict[tuple[int, str], Any] = field(default_factory=dict)


def _arguments(pool: list[D.LoggedDecision], folds: np.ndarray, sig: Signatures, seed: int,
               report: D.Progress) -> Arguments:
    """Step 4 for arguments, cross-fitted like the name model: fold j's decisions get proposals from
    an argument model fit on the other folds (a holdout recipe: the calibration split's from the
    train split's); the shipped one is fit on every training decision."""
    trains = folds >= 0
    # built once, for every fit
    per = [argument_examples([d], sig) if t else [] for d, t in zip(pool, trains)]
    examples = [e for es in per for e in es]
    n_rows, n_cands = len(examples), sum(len(e.candidates) for e in examples if e.present)
    sampled = (f"; above {argmodel.MAX_ROWS:,} candidates each fit trains on a seeded sample of whole "
               "arguments")
    report.step(f"  argument model: {n_rows} teacher arguments, {n_cands:,} candidates"
                + (sampled if n_cands > argmodel.MAX_ROWS else "")
                + ("" if n_rows else " (none: names only)"))
    scored = sorted(set(folds.tolist())) if folds.min() >= 0 else [-1]
    jobs = [*scored, None]  # None: the shipped one
    fits = dict(zip(jobs, fit_in_threads(
        lambda j: fit_arguments([e for es, f in zip(per, folds) if j is None or f != j for e in es], seed),
        jobs, report, "argument model fits")))
    final = fits.pop(None)
    by_fold = {j: m for j, m in fits.items() if j is not None}
    return Arguments(final, by_fold, folds[np.isin(folds, scored)])


def _threshold(rec: Recipe, best: list[str | None], conf: np.ndarray, oof: Sequence[D.LoggedDecision],
               s: Settings, n_candidates: int, report: D.Progress) -> tuple[Threshold, NameFigures]:
    """Step 7 (names only): τ with the chosen guarantee on the out-of-fold confidences."""
    correct = rec.correct(best, oof)
    fits = np.array([d.label is not None for d in oof], dtype=bool)
    delta = DELTA / n_candidates
    a_target = s.target_abstention if s.target_abstention is not None else (
        TARGET_ABSTENTION if s.model == "pairwise" else 0.0)
    floor = abstention_floor(conf[~fits], a_target, delta) if a_target else 0.0
    report.step(f"7/10 choosing τ: precision ≥ {s.target_precision:g} ({s.guarantee} over {s.unit}s, δ = "
                f"{delta:.3g}, n = {len(oof)})"
                + (f", abstention ≥ {a_target:g} where no action fits" if a_target else ""))
    # no floor (no τ keeps abstention where none fits): no τ is tested, the evidence's n stays its own
    choice = choose(conf[fits], correct[fits], s.target_precision, s.guarantee, delta,
                    np.inf if floor is None else floor, _tasks(oof)[fits] if s.unit == "task" else None)
    n_none = int((~fits).sum())
    abstained = int((conf[~fits] < choice.tau).sum())
    th = _as_threshold(choice, s, delta, "cross-fitted" if rec.crossfit else "calibration split",
                       target_abstention=a_target, calibration_none_fits=n_none,
                       calibration_abstained=abstained, calibration_abstention_lower_bound=stats.lower_bound(
                           abstained, n_none, delta))
    figures = NameFigures(n=len(oof), source=th.source, answered=choice.answered, correct=choice.correct,
                          lower_bound=th.calibration_lower_bound, ece=stats.ece(conf, correct.astype(float)),
                          aurc=stats.aurc(conf, correct.astype(float)), none_fits=n_none,
                          abstained_where_none_fits=abstained, abstention_certified=floor is not None)
    return th, figures


def _tasks(decisions: Sequence[D.LoggedDecision]) -> np.ndarray:
    """Each decision's task (its unit of evidence)."""
    return np.array([d.task for d in decisions], dtype=object)


def _as_threshold(choice: Any, s: Settings, delta: float, source: str, target: float | None = None,
                  **extra: Any) -> Threshold:
    """The manifest's record of a `threshold.Choice` for `target` (default: the settings'); its lower bound
    is over the choice's unit."""
    k, n = ((choice.tasks_clean, choice.tasks_answered) if choice.unit == "task"
            else (choice.correct, choice.answered))
    return Threshold(choice.tau, s.target_precision if target is None else target, delta, choice.answered,
                     choice.correct, stats.lower_bound(k, n, delta), guarantee=choice.guarantee,
                     statement=choice.statement, n=choice.n, source=source, unit=choice.unit,
                     tasks=choice.tasks, tasks_answered=choice.tasks_answered, tasks_clean=choice.tasks_clean,
                     needs_tasks=choice.needs_tasks, **extra)


def _call_thresholds(best: list[str | None], conf: np.ndarray, oof: list[D.LoggedDecision], sig: Signatures,
                     arguments: Arguments, risky: frozenset[str], s: Settings, n_candidates: int,
                     report: D.Progress) -> tuple[Threshold, Calls, CallFigures]:
    """Step 7 with complete calls: the out-of-fold output of each decision (a reply, a complete call
    with arguments proposed by a model that never saw its task, or a name left incomplete); the
    call confidence calibrated as a whole; one τ for calls, one for calls of risky actions and one
    for replies, each certified at δ / 3 (Bonferroni over the three and over `--model auto`'s
    candidates)."""
    # the same decision and action: the same proposal, whichever candidate asks
    def propose(i: int, action: str):
        if (i, action) not in arguments.proposed:
            model = arguments.by_fold.get(int(arguments.folds[i]))
            arguments.proposed[i, action] = None if model is None else model.propose(
                action, sig.params[action], as_candidates(oof[i].candidates))
        return arguments.proposed[i, action]

    out = call_outputs(best, conf, oof, sig, propose)
    kind = np.array([k or "" for k in out.kind])
    raw, correct, exact = np.array(out.raw), np.array(out.correct,
                                                      dtype=bool), np.array(out.strict, dtype=bool)
    is_call, is_reply = kind == "call", kind == "reply"
    is_risky = is_call & np.array([b in risky for b in best], dtype=bool)
    is_safe = is_call & ~is_risky
    grounded = np.array([grounding(a, d.candidates) if k == "call" else ""
                         for k, a, d in zip(kind, out.arguments, oof)])
    log_raw = np.log(np.clip(raw, 1e-12, 1.0))
    t, b = fit_platt(log_raw[is_call], correct[is_call]) if is_call.any() else (1.0, 0.0)
    by_ground: dict[str, Calibration] = {
        g: Calibration("platt", *fit_platt(log_raw[is_call & (grounded == g)],
                                           correct[is_call & (grounded == g)]))
        for g in GROUNDINGS if int((is_call & (grounded == g)).sum()) >= MIN_GROUNDED}
    scale = [by_ground.get(g, Calibration("platt", t, b)) for g in grounded]
    call_conf = np.array([call_confidence(c, k.temperature, k.bias) for c, k in zip(raw, scale)])
    delta = DELTA / (3 * n_candidates)
    call_target = s.target_precision if s.call_precision is None else s.call_precision
    report.step(f"7/10 choosing τ for calls ({int(is_safe.sum())} complete out-of-fold) and risky calls "
                f"({int(is_risky.sum())}): precision ≥ {call_target:g}; replies ({int(is_reply.sum())}): "
                f"precision ≥ {s.target_precision:g} ({s.guarantee} over {s.unit}s, δ = {delta:.3g} each)")
    source = "cross-fitted" if arguments.folds.min() >= 0 else "calibration split"
    tasks = _tasks(oof)

    def certify(mask: np.ndarray, c: np.ndarray, target: float) -> Threshold:
        choice = choose(c[mask], correct[mask], target, s.guarantee, delta,
                        tasks=tasks[mask] if s.unit == "task" else None)
        return _as_threshold(choice, s, delta, source, target)

    calls_th, risky_th = certify(is_safe, call_conf, call_target), certify(is_risky, call_conf, call_target)
    reply_th = certify(is_reply, conf, s.target_precision)
    spec = arguments.final.spec() if arguments.final is not None else None
    calls = Calls(tuple(sorted(sig.replies)), {a: p for a, p in sig.params.items() if p is not None},
                  Calibration("platt", t, b), reply_th, tuple(sorted(risky)), risky_th,
                  D.plain(spec) if spec is not None else None, grounded=by_ground)
    answered = ((is_safe & (call_conf >= calls_th.tau)) | (is_risky & (call_conf >= risky_th.tau))
                | (is_reply & (conf >= reply_th.tau)))
    figures = CallFigures(
        n=len(oof), source=source, answered=int(answered.sum()), correct=int((answered & correct).sum()),
        strict_correct=int((answered & exact).sum()), lower_bound=calls_th.calibration_lower_bound,
        calls_complete=int(is_call.sum()), risky_calls_complete=int(is_risky.sum()),
        names_incomplete=int((kind == "name").sum()), replies=int(is_reply.sum()),
        ece=stats.ece(conf, correct.astype(float)),
        aurc=stats.aurc(np.where(is_reply, conf, call_conf), correct.astype(float)),
        grounding=grounding_figures(grounded, is_call, correct, answered),
        tasks=task_figures(tasks, is_call, is_reply, correct, answered))
    return calls_th, calls, figures


def _test_figures(rec: Recipe, sp: Any, x: Any, test: list[D.LoggedDecision], cal: Calibration,
                  threshold: Threshold, sig: Signatures, policy: Policy | None,
                  with_calls: bool) -> dict[str, Any]:
    """Step 8: the sealed test split through the decision-time specialist, exactly as the router asks it."""
    best, conf, full = rec.confidence(rec.exported(sp, x), test, cal)
    labels = rec.labels(test) if full is not None and isinstance(rec, ClassifierRecipe) else None
    if not with_calls:
        answered = (conf >= threshold.tau) & (conf > 0) & ~_novel(sp, x)
        return evaluate(best, conf, rec.correct(best, test), test, answered, risky_actions(policy), full,
                        labels)
    answers = [sp.decide(d.state, d.legal, d.candidates) for d in test]
    ok = np.array([answer_right(a, d) for a, d in zip(answers, test)], dtype=bool)
    exact = np.array([answer_right(a, d, judge=strict) for a, d in zip(answers, test)], dtype=bool)
    answered = np.array([a.action is not None for a in answers], dtype=bool)
    metrics = evaluate([a.best for a in answers], np.array([a.confidence for a in answers]), ok, test,
                       answered, risky_actions(policy), full, labels)
    k, m = int((exact & answered).sum()), int(answered.sum())
    metrics["strict"] = {"answered": m, "correct": k, "precision": k / m if m else None,
                         "precision_ci": list(stats.wilson(k, m))}
    metrics.update(call_figures(answers, test, sig))
    return metrics


def export_checked(rec: Recipe, model: Any, cdir: Path, pre: dict[str, Any], x_test: Any,
                   test: Sequence[D.LoggedDecision], policy: Policy | None,
                   report: D.Progress) -> tuple[Model, dict[str, Any], Any]:
    """Step 5: export, load through the decision-time specialist and compare with the trained
    model on the test split; the recipe's exports are tried in order until one passes parity, and
    when the last fails the distillation fails."""
    attempts = []
    neutral = Calibration(rec.calibration_method, 1.0)
    ref = rec.reference(model, x_test)
    for i, quantization in enumerate(rec.quantizations):
        exported = rec.export(model, cdir, report, quantization)
        (cdir / "manifest.json").write_bytes(encode(Manifest(**pre | dict(model=exported))))
        sp = rec.specialist(cdir, policy)
        ox = rec.exported(sp, x_test)
        figures, problem = parity(rec, ref, ox, test, neutral)
        attempts.append({"quantization": quantization, **figures})
        if problem is None:
            return exported, {**attempts[-1], "attempts": attempts}, sp
        if i + 1 == len(rec.quantizations):
            hint = ("; --quantization auto ships float32 when int8 fails" if rec.quantizations == ("int8",)
                    else "")
            raise ZcError(f"parity check failed ({quantization}): {problem}; nothing was written{hint}")
        report.step(f"  parity with {quantization}: {problem}; exporting {rec.quantizations[i + 1]} instead")
    raise ZcError("no export to try")


def parity(rec: Recipe, ref: Any, ox: Any, decisions: Sequence[D.LoggedDecision],
           neutral: Calibration) -> tuple[dict[str, Any], str | None]:
    """max |Δp| and agreement of the decision (the best legal action) between trained and exported."""
    n = len(decisions)
    b_ref, c_ref, _ = rec.confidence(ref, decisions, neutral)
    b_ox, c_ox, _ = rec.confidence(ox, decisions, neutral)
    a, b = (ref[0], ox[0]) if isinstance(ref[0], np.ndarray) and ref[0].ndim == 2 else (c_ref, c_ox)
    delta = float(np.max(np.abs(np.asarray(a) - np.asarray(b)))) if n else 0.0
    agree = float(np.mean([p == q for p, q in zip(b_ref, b_ox)])) if n else 1.0
    what, bound = rec.parity
    out = {"n": n, "max_abs_delta": delta, "decision_agreement": agree, "rule": what, "bound": bound}
    if what == "max_abs_delta" and not delta <= bound:
        return out, (f"ONNX and the trained model's probabilities differ by {delta:.2e} (> {bound:.0e}) on "
                     "the test split")
    if what == "decision_agreement" and not agree >= bound:
        return out, (f"the exported model decides like the trained one on only {agree:.2%} of the test split "
                     f"(< {bound:.1%}; max |Δp| {delta:.3f})")
    return out, None


def _gate_and_write(best: Candidate, work: Path, policy: Policy | None, s: Settings,
                    report: D.Progress) -> tuple[Manifest, str]:
    """Steps 9 and 10: gate the kept candidate (the policy's `specialist` tier bounds latency), move
    its files into the staged directory with the final manifest and report."""
    report.step("9/10 gate")
    tier = next((t for t in policy.ir.tiers if t.name == "specialist"), None) if policy is not None else None
    m = best.manifest
    abstention = None
    if m.threshold.target_abstention and m.threshold.calibration_none_fits:
        certified = isinstance(best.oof, NameFigures) and best.oof.abstention_certified
        abstention = (m.threshold.target_abstention, certified)
    others = (m.calls.risky_threshold, m.calls.reply_threshold) if m.calls is not None else ()
    verdict = gate(m.metrics, m.threshold, s.min_coverage, tier.max_ms if tier else None, abstention, others)
    m = msgspec.structs.replace(m, gate=verdict)
    report.step("10/10 writing the specialist")
    for f in best.directory.iterdir():
        if f.name != "manifest.json":
            f.rename(work / f.name)
    for c in work.iterdir():
        if c.is_dir():
            shutil.rmtree(c)
    text = render(m)
    (work / "manifest.json").write_bytes(encode(m))
    (work / "report.md").write_text(text)
    decode((work / "manifest.json").read_bytes(), str(work / "manifest.json"))  # what we wrote loads
    return m, text


def latency(ask: Callable[[Any], Any], part: Sequence[Any], size: int = 300, repeat: int = 3,
            warmup: int = 20) -> dict[str, float]:
    """Single-decision latency of `ask(decision)` (inputs + ONNX + mask + threshold), µs, over the
    first `size` decisions of `part`, `repeat` times, after `warmup` untimed calls."""
    sample = list(part)[:size]
    for d in sample[:warmup]:
        ask(d)
    times = []
    for _ in range(repeat):
        for d in sample:
            t = time.perf_counter_ns()
            ask(d)
            times.append((time.perf_counter_ns() - t) / 1000.0)
    return {"n": len(times), "p50": float(np.percentile(times, 50)) if times else 0.0,
            "p99": float(np.percentile(times, 99)) if times else 0.0}
