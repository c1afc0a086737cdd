"""Pairwise distillation (DESIGN.md §5 with a pair scorer): receipts with offered actions -> a specialist that
scores (request, action description) pairs, so it can choose among actions it never saw, or abstain.

Steps as in `distill.py`: load (labels: `gold`, else the teacher's action; a receipt with no action
and `verified: true` means "no offered action fits"), split by task and seal, render requests and
describe candidates (`pairwise.py`), fine-tune MiniLM-L6 on pairs (each legal action of a decision,
plus `negatives` descriptions of other training decisions, half random, half the most similar,
labelled not-fit; decisions where no action fits weighted to balance the others; optionally an
ensemble of seeds), export with optimum and quantise to int8, check parity (same chosen action on
≥ 99.5% of the test split), calibrate the choice score (the best candidate's fit margin, capped by
its lead over the runner-up) with Platt scaling on the calibration split, pick τ with one-sided
bounds on precision where an action fits and on abstention where none does
(`select_pair_threshold`), evaluate on the sealed test split, gate, write the manifest.
"""

from __future__ import annotations

import math
import shutil
import tempfile
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
from scipy.optimize import minimize

from .. import __version__, stats
from ..errors import ZcError
from ..tools import policy_tools
from . import features as F
from .distill import (ALPHA, ARGMAX_AGREEMENT, DECIDE_THREADS, NEVER, RISKY_TAGS, Report, Result, _plain,
                      _sha256_file, data_files, export_checked, gate_and_write, latency, read_receipts, seal,
                      select_threshold, split_by_task)
from .manifest import (MANIFEST_VERSION, Calibration, DataFile, Gate, Manifest, Model, Splits, TextInput,
                       Threshold, encode)
from .pairwise import FIT, PairwiseSpecialist, calibrated, choice_score, describe, fit_margins, render_plain
from .render import VERSION as RENDER_VERSION
from .render import Renderer

OTHER = "other"


@dataclass
class PairDecision:
    """One decision among offered actions: the request text, the candidates and the right one (None: none fits)."""

    id: str
    task: str
    order: tuple[float, int]
    state: dict
    request: str
    legal: tuple[str, ...]
    tools: dict[str, dict]
    label: str | None
    intent: str | None = None
    teacher: str | None = None  # the receipt's action (the label is its gold when it has one)
    gold: str | None = None

    def descriptions(self) -> list[str]:
        return [describe(a, self.tools.get(a)) for a in self.legal]


def load_pair_decisions(paths: Sequence[str | Path], policy: Any = None, *, skip_invalid: bool = False,
                        report: Report | None = None) -> tuple[list[PairDecision], Counter, list[DataFile]]:
    """Read receipts; keep those with a known right answer (an action, or verified abstention)."""
    from ..receipts import ReadStats

    report = report or Report()
    files = data_files(paths)
    renderer = Renderer(policy.ir.fields, policy.actions) if policy is not None else None
    counts: Counter = Counter()
    rstats = ReadStats()
    out: list[PairDecision] = []
    described = policy_tools(policy) if policy is not None else {}
    for i, r in enumerate(read_receipts(paths, policy, skip_invalid, rstats, report)):
        counts["receipts"] += 1
        label = r.gold if r.gold is not None else r.action
        if r.verified is False:
            counts["dropped_judged_wrong"] += 1
            continue
        if label is None and r.verified is not True:
            counts["dropped_abstained"] += 1
            continue
        legal = policy.legal(r.state, r.intent).actions if policy is not None else r.legal
        if legal is None:
            raise ZcError(f"receipt `{r.id}`: $.legal: missing; without --policy a pairwise specialist needs "
                          "receipts that list the offered actions")
        raw_tools = r.meta.get("tools") or []
        tools = {str(t["name"]): t for t in raw_tools if isinstance(t, dict) and "name" in t} or described
        if label is not None and label not in legal:
            counts["label_not_legal"] += 1
        if label is None:
            counts["no_action_fits"] += 1
        request = renderer.one(r.state) if renderer is not None else render_plain(r.state)
        out.append(PairDecision(r.id, r.task, (r.ts if r.ts is not None else math.inf, i), r.state, request,
                                tuple(legal), tools, label, r.intent, r.action, r.gold))
    counts["skipped_invalid"] = rstats.skipped
    counts["used"] = len(out)
    if not out:
        raise ZcError("no usable receipts: every receipt was invalid, abstained unverified or judged wrong")
    return out, counts, files


def _words_of(text: str) -> frozenset[str]:
    return frozenset(w for w in text.lower().replace(":", " ").replace(",", " ").split() if len(w) > 2)


def nearest(desc: str, pool: Sequence[str], pool_words: Sequence[frozenset[str]], k: int) -> list[int]:
    """Indices of the `k` pool descriptions sharing the most words with `desc` (Jaccard), itself excluded."""
    w = _words_of(desc)
    sims = [(len(w & pw) / (len(w | pw) or 1), i) for i, pw in enumerate(pool_words) if pool[i] != desc]
    sims.sort(key=lambda t: (-t[0], t[1]))
    return [i for _, i in sims[:k]]


NONE_FITS_WEIGHT_MAX = 5


def none_fits_weight(decisions: Sequence[PairDecision]) -> int:
    """How many times each decision where no action fits is trained on: as many times as balances
    them against the decisions where one does (round(fitting / none-fitting)), between 1 and
    NONE_FITS_WEIGHT_MAX. Such a decision teaches only "this related tool does not fit", the error
    that limits precision at high confidence (on the BFCL calibration split, balancing moved the
    first confident answer to a question no function fits from rank 50 to rank 56–71, depending on
    the run)."""
    none = sum(1 for d in decisions if d.label is None)
    if not none:
        return 1
    return max(1, min(NONE_FITS_WEIGHT_MAX, round((len(decisions) - none) / none)))


def training_pairs(decisions: Sequence[PairDecision], negatives: int, seed: int) -> tuple[list, list[str]]:
    """(request, description) pairs and fit/other labels. Besides each decision's own candidates,
    `negatives` descriptions of other training decisions are added as not-fit: half drawn at
    random, half the ones sharing the most words with the right description (hard negatives, like
    the near-miss tools an open tool set offers). Decisions where no action fits are repeated
    `none_fits_weight` times (each repeat draws its own random negatives)."""
    rng = np.random.default_rng(seed)
    pool = sorted({desc for d in decisions for desc in d.descriptions()})
    pool_words = [_words_of(p) for p in pool]
    weight = none_fits_weight(decisions)
    pairs, y = [], []
    for d in [d for d in decisions for _ in range(weight if d.label is None else 1)]:
        own = d.descriptions()
        for a, desc in zip(d.legal, own):
            pairs.append((d.request, desc))
            y.append(FIT if a == d.label else OTHER)
        right = describe(d.label, d.tools.get(d.label)) if d.label is not None else None
        picks: list[int] = []
        if pool and negatives:
            hard = negatives // 2 if right is not None else 0
            picks += nearest(right, pool, pool_words, hard + len(own)) if hard else []
            picks = [i for i in picks if pool[i] not in own][:hard]
            picks += rng.choice(len(pool), size=min(negatives - len(picks), len(pool)), replace=False).tolist()
        for j in dict.fromkeys(picks):
            if pool[j] != right and pool[j] not in own:
                pairs.append((d.request, pool[j]))
                y.append(OTHER)
    return pairs, y


def score(decisions: Sequence[PairDecision], margins_of) -> tuple[np.ndarray, list[str | None]]:
    """Choice score (`pairwise.choice_score`) and best candidate per decision; `margins_of(pairs)`
    gives the fit-vs-not logit margin per pair."""
    pairs = [(d.request, desc) for d in decisions for desc in d.descriptions()]
    z = np.asarray(margins_of(pairs) if pairs else np.zeros(0), dtype=np.float64)
    scores = np.full(len(decisions), -np.inf)
    best: list[str | None] = [None] * len(decisions)
    pos = 0
    for i, d in enumerate(decisions):
        zi = z[pos:pos + len(d.legal)]
        pos += len(d.legal)
        if len(zi):
            scores[i], best[i] = choice_score(zi), d.legal[int(np.argmax(zi))]
    return scores, best


def fit_platt(z: np.ndarray, correct: np.ndarray) -> tuple[float, float]:
    """(temperature, bias) minimising the NLL of `correct` under sigmoid(z / T + b) (slight L2 on 1/T, b)."""
    ok = np.isfinite(z)
    z, c = z[ok], correct[ok].astype(float)
    if len(z) == 0:
        return 1.0, 0.0

    def nll(w):
        a, b = w
        p = np.clip(1 / (1 + np.exp(-(a * z + b))), 1e-9, 1 - 1e-9)
        return -np.mean(c * np.log(p) + (1 - c) * np.log(1 - p)) + 1e-3 * (a * a + b * b)

    res = minimize(nll, x0=np.array([1.0, 0.0]), method="L-BFGS-B", bounds=[(1e-3, 50.0), (-50.0, 50.0)])
    a, b = res.x
    return float(1.0 / a), float(b)


TARGET_ABSTENTION = 0.85


def select_pair_threshold(conf: np.ndarray, correct: np.ndarray, fits: np.ndarray, target_precision: float,
                          target_abstention: float, alpha: float = ALPHA) -> Threshold:
    """τ for a pairwise specialist: the smallest whose one-sided (1-alpha) lower bounds reach both
    targets, precision among the answered decisions where an action fits, and abstention among the
    decisions where none fits (not bounded when there are none, or the target is 0).

    The two rates are bounded apart because their mix depends on how many decisions where nothing
    fits the calibration split happens to hold; without such decisions this is `select_threshold`.
    """
    none = ~fits
    n_none = int(none.sum())
    floor, abstained, a_lb = 0.0, n_none, stats.lower_bound(n_none, n_none, alpha)
    if n_none and target_abstention > 0:
        c = np.sort(conf[none])[::-1]
        # the most none-fit decisions answered (the m most confident) that keep the bound
        m = next((m for m in range(n_none, -1, -1)
                  if stats.lower_bound(n_none - m, n_none, alpha) >= target_abstention), None)
        if m is None:
            return Threshold(NEVER, target_precision, alpha, 0, 0, 0.0, target_abstention, n_none, n_none, a_lb)
        floor = float(np.nextafter(c[m], np.inf)) if m < n_none else 0.0
    tau, n, k, lb = select_threshold(conf[fits], correct[fits], target_precision, alpha, floor)
    if n_none:
        abstained = int((conf[none] < tau).sum())
        a_lb = stats.lower_bound(abstained, n_none, alpha)
    return Threshold(tau, target_precision, alpha, n, k, lb, target_abstention, n_none, abstained, a_lb)


def evaluate_pairs(conf: np.ndarray, best: list[str | None], decisions: Sequence[PairDecision], tau: float,
                   risky: frozenset[str]) -> dict[str, Any]:
    """Coverage, precision (Wilson), abstention where no action fits, risk–coverage, selections."""
    n = len(decisions)
    answered = (conf >= tau) & np.array([b is not None for b in best], dtype=bool)
    correct = np.array([d.label is not None and b == d.label for d, b in zip(decisions, best)], dtype=bool)
    k, m = int(correct[answered].sum()), int(answered.sum())
    lo, hi = stats.wilson(k, m)
    fits = np.array([d.label is not None for d in decisions], dtype=bool)
    none = ~fits
    kf, mf = int((correct & answered & fits).sum()), int((answered & fits).sum())
    illegal = sum(1 for i in np.flatnonzero(answered) if best[i] not in decisions[i].legal)
    dangerous = sum(1 for i in np.flatnonzero(answered) if best[i] in risky and not correct[i])
    abst = int((~answered & none).sum())
    a_lo, a_hi = stats.wilson(abst, int(none.sum()))
    top = np.where(np.isfinite(conf), conf, 0.0)
    return {
        "n": n, "answered": m, "correct": k,
        "coverage": m / n if n else 0.0,
        "precision": k / m if m else None,
        "precision_ci": [lo, hi],
        "n_fits": int(fits.sum()),
        "answered_where_fits": mf,
        "coverage_where_fits": float(answered[fits].mean()) if fits.any() else None,
        "precision_where_fits": kf / mf if mf else None,
        "precision_where_fits_ci": list(stats.wilson(kf, mf)),
        "n_none_fits": int(none.sum()),
        "abstained_where_none_fits": abst / int(none.sum()) if none.any() else None,
        "abstained_where_none_fits_ci": [a_lo, a_hi],
        "accuracy_top1": float(correct[fits].mean()) if fits.any() else None,
        "label_not_legal": sum(1 for d in decisions if d.label is not None and d.label not in d.legal),
        "illegal_selected": illegal,
        "dangerous_selected": dangerous,
        "dangerous_exposed": sum(1 for d in decisions if any(a in risky for a in d.legal)),
        "ece": stats.ece(top, correct.astype(float)),
        "aurc": stats.aurc(top, correct.astype(float)),
        "risk_coverage": stats.risk_coverage(top, correct.astype(float)),
    }


def distill_pairwise(paths: Sequence[str | Path], out: str | Path, *, policy: Any = None,
                     parts: dict[str, list[PairDecision]] | None = None, target_precision: float = 0.95,
                     target_abstention: float = TARGET_ABSTENTION, min_coverage: float = 0.0, seed: int = 0,
                     negatives: int = 3, skip_invalid: bool = False,
                     report: Report | None = None, name: str | None = None,
                     options: dict[str, Any] | None = None, quantization: str = "auto") -> Result:
    """Distil a pairwise specialist into `out` (model.onnx, tokenizer.json, manifest.json, report.md).

    `parts` replaces the chronological task split with given train / calibration / test decisions
    (a benchmark that trains on some categories and reports on others); they are sealed the same way.
    `quantization` (auto, int8, float32) picks the exports tried, as for transformer classifiers.
    """
    from .transformer import quantizations, transformer_model

    tried = quantizations(quantization)

    report = report or Report()
    if not 0 < target_precision < 1:
        raise ZcError(f"--target-precision must be between 0 and 1, got {target_precision}")
    if not 0 <= target_abstention < 1:
        raise ZcError(f"--target-abstention must be at least 0 and below 1, got {target_abstention}")
    report.step("1/10 loading and validating receipts")
    if parts is None:
        decisions, counts, files = load_pair_decisions(paths, policy, skip_invalid=skip_invalid, report=report)
        report.step("2/10 splitting by task (chronological, sealed)")
        parts = split_by_task(decisions)
    else:
        counts, files = Counter(used=sum(len(v) for v in parts.values())), []
        for p in paths:
            files.append(DataFile(str(p), _sha256_file(Path(p))))
    splits = Splits(seal(parts["train"]), seal(parts["calibration"]), seal(parts["test"]))

    report.step(f"3/10 pairs: requests rendered, candidates described, {negatives} negatives each, decisions "
                f"where no action fits ×{none_fits_weight(parts['train'])}")
    pairs, y = training_pairs(parts["train"], negatives, seed)
    if len(set(y)) < 2:
        raise ZcError("the training split needs both fitting and non-fitting (request, action) pairs")
    report.step(f"4/10 fine-tuning a pairwise scorer on {len(pairs)} pairs from {len(parts['train'])} decisions")
    clf = transformer_model(seed, options or {})
    clf.fit(pairs, y, bar=report.bar)
    fit_col = list(clf.classes_).index(FIT)

    report.step("8/10 exporting to ONNX (int8) and checking parity")
    work = Path(tempfile.mkdtemp(prefix=".distill-", dir=Path(out).parent if Path(out).parent.exists() else None))
    try:
        from .specialist import TOKENIZER_FILE

        spec = F.spec_for(policy.ir) if policy is not None else F.FeatureSpec(F.VERSION, (), ())
        test = parts["test"]
        z_ref, best_ref = score(test, lambda ps: fit_margins(clf.logits(ps), fit_col))

        def attempt(quant: str):
            exported = clf.export(work, report.step, quant)
            model_sha = exported.pop("model.onnx")
            model = Model("pairwise", tuple(clf.classes_.tolist()), "model.onnx", model_sha,
                          _plain(clf.get_params()) | {"train_seconds": clf.train_seconds_, "steps": clf.steps_,
                                                      "final_loss": clf.final_loss_, "negatives": negatives,
                                                      "none_fits_weight": none_fits_weight(parts["train"]),
                                                      "pairs": len(pairs), "quantization": quant},
                          exported, TextInput(RENDER_VERSION, clf.max_length, TOKENIZER_FILE, DECIDE_THREADS))
            pre = Manifest(
                version=MANIFEST_VERSION, zcompile=__version__, name=name or Path(out).name,
                policy_name=policy.name if policy is not None else "",
                policy_sha256=policy.sha256 if policy is not None else "",
                data=tuple(files), counts=dict(counts), splits=splits, features=spec, model=model,
                calibration=Calibration("platt", 1.0, 0.0),
                threshold=Threshold(NEVER, target_precision, ALPHA, 0, 0, 0.0),
                metrics={}, gate=Gate(False, (), ("not evaluated",)), seed=seed)
            (work / "manifest.json").write_bytes(encode(pre))
            sp = PairwiseSpecialist(work, policy)

            def onnx_margins(ps):  # one onnxruntime call per decision, exactly as `decide` makes it
                out_, i = [], 0
                while i < len(ps):
                    j = i
                    while j < len(ps) and ps[j][0] == ps[i][0]:
                        j += 1
                    out_.extend(sp.margins(ps[i][0], [desc for _, desc in ps[i:j]]).tolist())
                    i = j
                return np.array(out_)

            z_ox, best_ox = score(test, onnx_margins)
            agree = float(np.mean([a == b for a, b in zip(best_ref, best_ox)])) if test else 1.0
            p_ref, p_ox = 1 / (1 + np.exp(-z_ref)), 1 / (1 + np.exp(-z_ox))
            delta = float(np.max(np.abs(p_ref - p_ox))) if test else 0.0
            figures = {"n": len(test), "decision_agreement": agree, "max_abs_delta": delta,
                       "rule": "decision_agreement", "bound": ARGMAX_AGREEMENT}
            problem = (None if agree >= ARGMAX_AGREEMENT else
                       f"the exported model chooses like the trained one on only {agree:.2%} of the test split "
                       f"(< {ARGMAX_AGREEMENT:.1%}; max |Δp| {delta:.3f})")
            return figures, problem, (pre, onnx_margins, z_ox, best_ox)

        parity, (pre, onnx_margins, z_ox, best_ox) = export_checked(tried, attempt, report)

        report.step("5/10 calibrating the choice score (Platt, on the exported model)")
        cal = parts["calibration"]
        z_cal, best_cal = score(cal, onnx_margins)
        correct_cal = np.array([d.label is not None and b == d.label for d, b in zip(cal, best_cal)], dtype=bool)
        temperature, bias = fit_platt(z_cal, correct_cal)
        conf_cal = np.where(np.isfinite(z_cal), calibrated(np.nan_to_num(z_cal, neginf=-50), temperature, bias), 0.0)
        report.step(f"6/10 choosing τ for precision ≥ {target_precision} where an action fits and abstention "
                    f"≥ {target_abstention} where none does (one-sided 95% bounds)")
        fits_cal = np.array([d.label is not None for d in cal], dtype=bool)
        threshold = select_pair_threshold(conf_cal, correct_cal, fits_cal, target_precision, target_abstention)
        tau = threshold.tau

        report.step("7/10 evaluating on the sealed test split")
        conf_test = np.where(np.isfinite(z_ox), calibrated(np.nan_to_num(z_ox, neginf=-50), temperature, bias), 0.0)
        risky = (frozenset(a.name for a in policy.ir.actions if RISKY_TAGS & set(a.tags))
                 if policy is not None else frozenset())
        metrics = evaluate_pairs(conf_test, best_ox, test, tau, risky)
        manifest = msgspec.structs.replace(pre, calibration=Calibration("platt", temperature, bias),
                                           threshold=threshold)
        (work / "manifest.json").write_bytes(encode(manifest))
        sp = PairwiseSpecialist(work, policy)
        metrics["latency_us"] = latency(lambda d: sp.decide(d.state, d.legal, d.tools), test or parts["train"],
                                        size=60, repeat=1, warmup=10)
        metrics["parity"] = parity
        metrics["parity_max_abs_delta"] = parity["max_abs_delta"]
        metrics["calibration"] = {"n": len(cal), "answered_where_fits": threshold.calibration_answered,
                                  "correct_where_fits": threshold.calibration_correct,
                                  "lower_bound": threshold.calibration_lower_bound,
                                  "none_fits": threshold.calibration_none_fits,
                                  "abstained_where_none_fits": threshold.calibration_abstained,
                                  "abstention_lower_bound": threshold.calibration_abstention_lower_bound,
                                  "ece": stats.ece(conf_cal, correct_cal.astype(float))}

        manifest, text = gate_and_write(work, out, manifest, metrics, policy, target_precision, min_coverage,
                                        render_pair_report, report, target_abstention)
    finally:
        if work.exists():
            shutil.rmtree(work, ignore_errors=True)
    return Result(manifest, Path(out), text)


def threshold_text(th: Threshold) -> str:
    """τ and the calibration figures that chose it, in words."""
    text = (f"τ = {th.tau:.4f}, the smallest whose one-sided 95% lower bounds reach precision "
            f"≥ {th.target_precision:g} where an action fits")
    if th.calibration_none_fits and th.target_abstention:
        text += f" and abstention ≥ {th.target_abstention:g} where none does"
    text += (f" (calibration: {th.calibration_correct} of {th.calibration_answered} answered right where an action "
             f"fits, bound {th.calibration_lower_bound:.3f}")
    if th.calibration_none_fits:
        text += (f"; {th.calibration_abstained} of {th.calibration_none_fits} abstained where none fits, bound "
                 f"{th.calibration_abstention_lower_bound:.3f}")
    return text + ("; no τ qualifies, so the specialist abstains on everything" if th.tau >= NEVER else "") + ")"


def render_pair_report(m: Manifest) -> str:
    """A human-readable report of a pairwise distillation."""
    t = m.metrics
    pr = "n/a" if t["precision"] is None else f"{t['precision']:.3f}"
    lo, hi = t["precision_ci"]
    par = t["parity"]
    ab = t["abstained_where_none_fits"]
    a_lo, a_hi = t["abstained_where_none_fits_ci"]
    cw = t["coverage_where_fits"]
    pf = t["precision_where_fits"]
    f_lo, f_hi = t["precision_where_fits_ci"]
    p = m.model.params
    lines = [
        f"# Pairwise specialist `{m.name}`" + (f" for policy `{m.policy_name}`" if m.policy_name else ""), "",
        f"MiniLM-L6 scoring (request, action description) pairs, fine-tuned {p.get('steps')} steps of "
        f"{p.get('batch_size')} on {p.get('pairs')} pairs ({p.get('negatives')} negatives per decision, decisions "
        f"where no action fits ×{p.get('none_fits_weight', 1)}) "
        f"in {p.get('train_seconds', 0):.0f} s, first {m.model.text.max_length} tokens, exported "
        f"{p.get('quantization')}. Platt "
        f"calibration T = {m.calibration.temperature:.3f}, b = {m.calibration.bias:.3f}; "
        f"{threshold_text(m.threshold)}.",
        "", "| split | tasks | decisions |", "|---|---:|---:|",
        *(f"| {k} | {len(s.tasks)} | {s.decisions} |" for k, s in
          (("train", m.splits.train), ("calibration", m.splits.calibration), ("test", m.splits.test))),
        "", "## Sealed test split", "",
        "| n | answered | coverage | precision | Wilson 95% | coverage where an action fits | "
        "precision there [Wilson 95%] | abstained where none fits | top-1 | p50 ms | p99 ms |",
        "|---:|---:|---:|---:|---|---:|---|---|---:|---:|---:|",
        f"| {t['n']} | {t['answered']} | {t['coverage']:.3f} | {pr} | [{lo:.3f}, {hi:.3f}] | "
        f"{'n/a' if cw is None else f'{cw:.3f}'} ({t['n_fits']}) | "
        f"{'n/a' if pf is None else f'{pf:.3f} [{f_lo:.3f}, {f_hi:.3f}]'} | "
        f"{'n/a' if ab is None else f'{ab:.3f} [{a_lo:.3f}, {a_hi:.3f}]'} ({t['n_none_fits']}) | "
        f"{'n/a' if t['accuracy_top1'] is None else format(t['accuracy_top1'], '.3f')} | "
        f"{t['latency_us']['p50'] / 1000:.2f} | {t['latency_us']['p99'] / 1000:.2f} |",
        "", f"Parity ({par['quantization']} export vs the trained model, test split): same choice on "
        f"{par['decision_agreement']:.2%}, max |Δp| {par['max_abs_delta']:.3f}"
        + "".join(f"; {a['quantization']} was refused (same choice on {a['decision_agreement']:.2%})"
                  for a in par.get("attempts", [])[:-1])
        + f". Illegal selections: {t['illegal_selected']}.",
        "", "### Risk–coverage (test split, by confidence)", "", "| coverage | precision | threshold |",
        "|---:|---:|---:|",
        *(f"| {r['coverage']:.2f} | {r['precision']:.3f} | {r['threshold']:.4f} |" for r in t["risk_coverage"]),
        "", "## Gate", "", "promoted" if m.gate.promoted else "not promoted: " + "; ".join(m.gate.reasons), "",
    ]
    return "\n".join(lines)
