"""Distillation (DESIGN.md §5 steps 1–10): receipts -> a calibrated ONNX specialist that answers or abstains."""

from __future__ import annotations

import hashlib
import math
import os
import shutil
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
from scipy.optimize import minimize_scalar

from .. import __version__, stats
from ..errors import ZcError
from ..runtime import Policy
from . import features as F
from .manifest import (MANIFEST_VERSION, Calibration, DataFile, Gate, Manifest, Model, Split,
                       Splits, TextInput, Threshold, encode)
from .specialist import Specialist, masked_confidence

RISKY_TAGS = frozenset({"destructive", "publish", "money", "credential"})
SPLIT = (0.70, 0.15, 0.15)
ALPHA = 0.05
PARITY_TOLERANCE = 1e-4  # max |Δp|, tabular models
DECIDE_THREADS = 2  # onnxruntime threads of a transformer specialist at decision time (DESIGN.md §8)
ARGMAX_AGREEMENT = 0.995  # share of test decisions an int8 transformer must decide like its float model
NEVER = 2.0  # a τ above every confidence: the specialist always abstains


@dataclass
class Decision:
    """One usable decision from a receipt: what the state was, what was legal, what the teacher did."""

    id: str
    task: str
    order: tuple[float, int]  # (timestamp or inf, position in the input)
    state: dict
    intent: str | None
    legal: tuple[str, ...]
    label: str
    teacher: str | None = None  # the receipt's action (the label is its gold when it has one)
    gold: str | None = None


@dataclass
class Report:
    """Progress sink: `step(text)` announces a stage; `bar(iterable, label)` wraps long loops."""

    step: Callable[[str], None] = lambda text: None
    bar: Callable[[Iterable, str, int], Iterable] = lambda it, label, n: it


# ---- 1. load -----------------------------------------------------------------------------------
def load_decisions(paths: Sequence[str | Path], policy: Policy, *, skip_invalid: bool = False,
                   report: Report | None = None) -> tuple[list[Decision], Counter, list[DataFile]]:
    """Read and validate receipts; keep those whose teacher answered and was not judged wrong."""
    from ..receipts import ReadStats

    report = report or Report()
    counts: Counter = Counter()
    files = data_files(paths)
    rstats = ReadStats()
    decisions: list[Decision] = []
    for i, r in enumerate(read_receipts(paths, policy, skip_invalid, rstats, report)):
        counts["receipts"] += 1
        label = r.gold if r.gold is not None else r.action
        if r.verified is False:
            counts["dropped_judged_wrong"] += 1
            continue
        if label is None:
            counts["dropped_abstained"] += 1
            continue
        legal = policy.legal(r.state, r.intent).actions
        if label not in legal:
            counts["label_not_legal"] += 1  # kept: the specialist can never match it, and that counts
        decisions.append(Decision(r.id, r.task, (r.ts if r.ts is not None else math.inf, i),
                                  r.state, r.intent, legal, label, r.action, r.gold))
    counts["skipped_invalid"] = rstats.skipped
    counts["used"] = len(decisions)
    if not decisions:
        raise ZcError("no usable receipts: every receipt was invalid, abstained or judged wrong")
    return decisions, counts, files


def data_files(paths: Sequence[str | Path]) -> list[DataFile]:
    """Each receipts file with its sha256, for the manifest."""
    from ..receipts import expand

    files = []
    for p in expand(paths):
        try:
            files.append(DataFile(str(p), _sha256_file(Path(p))))
        except OSError as exc:
            raise ZcError(f"{p}: cannot read receipts: {exc.strerror}") from None
    return files


def read_receipts(paths: Sequence[str | Path], policy: Any, skip_invalid: bool, rstats: Any, report: Report):
    """The receipts of `paths`, validated (against `policy` when given), behind a progress bar."""
    from ..receipts import read

    return report.bar(read(paths, skip_invalid=skip_invalid, policy=policy, stats=rstats), "reading receipts", 0)


def _sha256_file(p: Path) -> str:
    h = hashlib.sha256()
    with p.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


# ---- 2. split ----------------------------------------------------------------------------------
def split_by_task(decisions: Sequence[Decision]) -> dict[str, list[Decision]]:
    """70/15/15 by task, tasks ordered by their first decision (timestamp, else input order)."""
    first: dict[str, tuple[float, int]] = {}
    for d in decisions:
        first[d.task] = min(first.get(d.task, d.order), d.order)
    tasks = sorted(first, key=first.__getitem__)
    n = len(tasks)
    if n < 3:
        raise ZcError(f"need receipts from at least 3 tasks to split train/calibration/test, got {n}")
    n_train = max(1, round(n * SPLIT[0]))
    n_cal = max(1, round(n * SPLIT[1]))
    n_train = min(n_train, n - 2)
    n_cal = min(n_cal, n - n_train - 1)
    which = {t: ("train" if i < n_train else "calibration" if i < n_train + n_cal else "test")
             for i, t in enumerate(tasks)}
    out: dict[str, list[Decision]] = {"train": [], "calibration": [], "test": []}
    for d in decisions:
        out[which[d.task]].append(d)
    return out


def seal(part: Sequence[Decision]) -> Split:
    tasks = tuple(sorted({d.task for d in part}))
    return Split(tasks, hashlib.sha256("\n".join(tasks).encode()).hexdigest(), len(part))


# ---- 4./5./6. model, calibration, threshold ------------------------------------------------------
def make_model(kind: str, seed: int):
    if kind == "logistic":
        from sklearn.linear_model import LogisticRegression

        return LogisticRegression(C=0.1, max_iter=5000)  # strong L2: hundreds of decisions, hundreds of features
    if kind == "mlp":
        from sklearn.neural_network import MLPClassifier

        return MLPClassifier(hidden_layer_sizes=(64,), alpha=1e-3, max_iter=600, random_state=seed)
    raise ZcError(f"unknown model `{kind}` (choose logistic, mlp or transformer)")


def fit_temperature(probs: np.ndarray, class_index: np.ndarray, masks: np.ndarray,
                    labels: np.ndarray) -> float:
    """The temperature minimising the masked negative log-likelihood of the teacher's actions."""
    usable = labels >= 0
    if not usable.any():
        return 1.0

    def nll(log_t: float) -> float:
        conf = masked_confidence(probs[usable], class_index, masks[usable], math.exp(log_t))
        p = conf[np.arange(usable.sum()), labels[usable]]
        return float(-np.mean(np.log(np.clip(p, 1e-12, 1.0))))

    res = minimize_scalar(nll, bounds=(math.log(0.05), math.log(20.0)), method="bounded")
    return float(math.exp(res.x))


def select_threshold(confidence: np.ndarray, correct: np.ndarray, target: float,
                     alpha: float = ALPHA, floor: float = 0.0) -> tuple[float, int, int, float]:
    """The smallest τ (≥ `floor`) whose one-sided (1-alpha) lower bound on answered precision is ≥ target.

    Returns (τ, answered, correct, lower bound); τ = NEVER (above any confidence) when none qualifies.
    """
    best = (NEVER, 0, 0, 0.0)
    for tau in np.unique(confidence[(confidence > 0) & (confidence >= floor)]):
        answered = confidence >= tau
        n = int(answered.sum())
        k = int(correct[answered].sum())
        lb = stats.lower_bound(k, n, alpha)
        if lb >= target:
            return float(tau), n, k, lb
    return best


# ---- 7. evaluation on the sealed test split ----------------------------------------------------------
def evaluate(conf: np.ndarray, labels: np.ndarray, actions: Sequence[str], tau: float,
             decisions: Sequence[Decision], risky: frozenset[str]) -> dict[str, Any]:
    """Coverage, precision (Wilson), per action and intent, Brier, ECE, risk–coverage, selections."""
    n = len(decisions)
    best = conf.argmax(axis=1) if n else np.zeros(0, dtype=int)
    top = conf[np.arange(n), best] if n else np.zeros(0)
    answered = (top >= tau) & (top > 0)
    correct = (best == labels) & (labels >= 0)
    k, m = int(correct[answered].sum()), int(answered.sum())
    lo, hi = stats.wilson(k, m)
    illegal = sum(1 for i in np.flatnonzero(answered) if actions[best[i]] not in decisions[i].legal)
    dangerous = sum(1 for i in np.flatnonzero(answered)
                    if actions[best[i]] in risky and not correct[i])
    exposed = sum(1 for d in decisions if any(a in risky for a in d.legal))
    per_action: dict[str, dict] = {}
    for i in np.flatnonzero(answered):
        row = per_action.setdefault(actions[best[i]], {"answered": 0, "correct": 0})
        row["answered"] += 1
        row["correct"] += int(correct[i])
    per_intent: dict[str, dict] = {}
    for i, d in enumerate(decisions):
        row = per_intent.setdefault(d.intent or "(none)", {"n": 0, "answered": 0, "correct": 0})
        row["n"] += 1
        row["answered"] += int(answered[i])
        row["correct"] += int(answered[i] and correct[i])
    valid = labels >= 0
    return {
        "n": n, "answered": m, "correct": k,
        "coverage": m / n if n else 0.0,
        "precision": k / m if m else None,
        "precision_ci": [lo, hi],
        "label_not_legal": int(n - valid.sum()),
        "illegal_selected": illegal,
        "dangerous_selected": dangerous,
        "dangerous_exposed": exposed,
        "brier": stats.brier(conf[valid], labels[valid]),
        "ece": stats.ece(top, correct.astype(float)),
        "aurc": stats.aurc(top, correct.astype(float)),
        "accuracy_top1": float(correct.mean()) if n else None,
        "risk_coverage": stats.risk_coverage(top, correct.astype(float)),
        "per_action": dict(sorted(per_action.items())),
        "per_intent": per_intent,
    }


# ---- 9. gate -------------------------------------------------------------------------------------------
def gate(metrics: dict, target: float, min_coverage: float, max_ms: float | None,
         abstention: float | None = None) -> Gate:
    """Promote only if, lexicographically: no illegal or dangerous selection, precision lower bound
    ≥ target (and, with `abstention`, for a pairwise specialist: precision where an action fits,
    and the lower bound on abstaining where none fits ≥ `abstention`), coverage ≥ the minimum,
    latency within the tier's budget.

    The key orders candidates the same way: safety first, so a wrong-but-fast specialist never
    ties with (or beats) a correct-but-slow one; then the lower bound, coverage, and the test
    split's AURC (how well confidence ranks correctness), so that latency, which is noisy, only
    breaks ties between candidates that are equal on every quality figure.
    """
    bad = metrics["illegal_selected"] + metrics["dangerous_selected"]
    fits = "_where_fits" if abstention is not None else ""
    lb = metrics[f"precision{fits}_ci"][0] if metrics[f"answered{fits}"] else 0.0
    p50_ms = metrics["latency_us"]["p50"] / 1000.0
    checks = [
        (bad == 0, f"{bad} illegal or dangerous selections on the test split"),
        (lb >= target, f"precision{fits.replace('_', ' ')} lower bound {lb:.3f} < target {target:.2f}"),
        (metrics["coverage"] >= min_coverage,
         f"coverage {metrics['coverage']:.3f} < minimum {min_coverage:.3f}"),
        (max_ms is None or p50_ms <= max_ms, f"p50 latency {p50_ms:.3f} ms > tier budget {max_ms} ms"),
    ]
    if abstention is not None and metrics["n_none_fits"]:
        a_lb = metrics["abstained_where_none_fits_ci"][0]
        checks.insert(2, (a_lb >= abstention, f"abstention where no action fits: lower bound {a_lb:.3f} < "
                                              f"target {abstention:.2f}"))
    key = (*(float(ok) for ok, _ in checks), -float(bad), round(lb, 6), round(metrics["coverage"], 6),
           -round(metrics["aurc"], 6), -round(p50_ms, 6))
    return Gate(all(ok for ok, _ in checks), key, tuple(msg for ok, msg in checks if not ok))


# ---- the pipeline ---------------------------------------------------------------------------------------
@dataclass
class Result:
    manifest: Manifest
    directory: Path
    report_text: str
    extra: dict = field(default_factory=dict)


def distill(paths: Sequence[str | Path], policy: Policy, out: str | Path, *, model: str = "logistic",
            target_precision: float = 0.95, min_coverage: float = 0.0, seed: int = 0,
            skip_invalid: bool = False, report: Report | None = None, name: str | None = None,
            options: dict[str, Any] | None = None) -> Result:
    """Run DESIGN.md §5 steps 1–10 and write `out/model.onnx`, `manifest.json` and `report.md`.

    `model` is logistic, mlp or transformer; `options` are the transformer's training options
    (`epochs`, `max_steps`, `max_length`, `batch_size`, `learning_rate`, `threads`; see
    `zcompile.qroute.transformer.TransformerClassifier`). Only the training and export steps
    differ between kinds; split, calibration, threshold, evaluation, gate and manifest are shared.
    """
    report = report or Report()
    if not 0 < target_precision < 1:
        raise ZcError(f"--target-precision must be between 0 and 1, got {target_precision}")
    report.step("1/10 loading and validating receipts")
    decisions, counts, files = load_decisions(paths, policy, skip_invalid=skip_invalid, report=report)
    report.step("2/10 splitting by task (chronological, sealed)")
    parts = split_by_task(decisions)
    splits = Splits(seal(parts["train"]), seal(parts["calibration"]), seal(parts["test"]))

    report.step("3/10 features from the state schema")
    spec = F.spec_for(policy.ir)
    numeric = [f.path for f in spec.fields if f.kind in ("int", "float")]
    fz0 = F.Featurizer(spec)
    values: dict[str, list] = {p: [] for p in numeric}
    for d in parts["train"]:
        root = fz0.schema.convert(d.state)
        for p in numeric:
            values[p].append(F.read_path(fz0.schema, root, p))
    spec = F.fit_scaling(spec, values)
    learner = make_learner(model, seed, spec, options or {})
    actions = spec.actions
    index = {a: i for i, a in enumerate(actions)}
    X, M, Y = {}, {}, {}
    for split, part in parts.items():
        X[split] = learner.inputs(report.bar(part, f"{learner.reading} {split}", len(part)))
        M[split] = np.zeros((len(part), len(actions)), np.float32)
        for i, d in enumerate(part):
            M[split][i, [index[a] for a in d.legal]] = 1.0
        Y[split] = np.array([index[d.label] if d.label in d.legal else -1 for d in part], dtype=np.int64)

    report.step(f"4/10 training a {model} model on {len(parts['train'])} decisions")
    train_ok = Y["train"] >= 0
    y_train = [actions[i] for i in Y["train"][train_ok]]
    if len(set(y_train)) < 2:
        raise ZcError("the training split has fewer than two distinct actions: nothing to learn")
    learner.fit(learner.take(X["train"], train_ok), y_train, report)
    classes = learner.classes
    class_index = np.array([index[c] for c in classes], dtype=np.int64)

    report.step("8/10 exporting to ONNX and checking parity")
    work = Path(tempfile.mkdtemp(prefix=".distill-", dir=Path(out).parent if Path(out).parent.exists() else None))
    try:
        name = name or Path(out).name
        placeholder = Threshold(NEVER, target_precision, ALPHA, 0, 0, 0.0)
        test_split = "test" if len(parts["test"]) else "train"
        p_ref = learner.reference(X[test_split])

        def attempt(quantization: str):
            exported = learner.export(work, report, quantization)
            pre = Manifest(
                version=MANIFEST_VERSION, zcompile=__version__, name=name, policy_name=policy.name,
                policy_sha256=policy.sha256, data=tuple(files), counts=dict(counts), splits=splits,
                features=spec, model=exported, calibration=Calibration("temperature", 1.0), threshold=placeholder,
                metrics={}, gate=Gate(False, (), ("not evaluated",)), seed=seed)
            (work / "manifest.json").write_bytes(encode(pre))
            sp = Specialist(work, policy)
            p_ox = learner.exported(sp, X[test_split])
            return (*check_parity(p_ref, p_ox, class_index, M[test_split], learner.parity), (pre, sp, p_ox))

        parity, (pre, sp, p_ox) = export_checked(learner.quantizations, attempt, report)

        report.step("5/10 calibrating (temperature, outside ONNX, on the exported model's outputs)")
        p_cal = learner.exported(sp, X["calibration"]) if len(parts["calibration"]) else \
            np.zeros((0, len(classes)), np.float32)
        temperature = fit_temperature(p_cal, class_index, M["calibration"], Y["calibration"])
        conf_cal = masked_confidence(p_cal, class_index, M["calibration"], temperature)

        report.step(f"6/10 choosing τ for precision ≥ {target_precision} (one-sided 95% bound)")
        best_cal = conf_cal.argmax(axis=1) if len(conf_cal) else np.zeros(0, dtype=int)
        top_cal = conf_cal[np.arange(len(best_cal)), best_cal] if len(conf_cal) else np.zeros(0)
        correct_cal = (best_cal == Y["calibration"]) & (Y["calibration"] >= 0)
        tau, cal_n, cal_k, cal_lb = select_threshold(top_cal, correct_cal, target_precision)
        threshold = Threshold(tau, target_precision, ALPHA, cal_n, cal_k, cal_lb)
        pre = msgspec.structs.replace(pre, calibration=Calibration("temperature", temperature), threshold=threshold)
        (work / "manifest.json").write_bytes(encode(pre))
        sp = Specialist(work, policy)

        report.step("7/10 evaluating on the sealed test split")
        conf_test = masked_confidence(p_ox[: len(parts["test"])], class_index, M["test"], temperature)
        risky = frozenset(a.name for a in policy.ir.actions if RISKY_TAGS & set(a.tags))
        metrics = evaluate(conf_test, Y["test"], actions, tau, parts["test"], risky)
        metrics["latency_us"] = latency(lambda d: sp.decide(d.state, d.legal), parts["test"] or parts["train"],
                                        *learner.latency_sample)
        metrics["parity_max_abs_delta"] = parity["max_abs_delta"]
        metrics["parity"] = parity
        metrics["calibration"] = {"n": len(parts["calibration"]), "answered": cal_n, "correct": cal_k,
                                  "lower_bound": cal_lb,
                                  "ece": stats.ece(top_cal, correct_cal.astype(float))}

        manifest, text = gate_and_write(work, out, pre, metrics, policy, target_precision, min_coverage,
                                        render_report, report)
    finally:
        if work.exists():
            shutil.rmtree(work, ignore_errors=True)
    return Result(manifest, Path(out), text)


def write_specialist(work: Path, out: str | Path, manifest: Manifest, text: str) -> str:
    """Step 10: the final manifest and report into `work`, then `work` atomically replaces `out`."""
    (work / "manifest.json").write_bytes(encode(manifest))
    (work / "report.md").write_text(text)
    target = Path(out)
    if target.exists():
        shutil.rmtree(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    os.replace(work, target)
    return text


def check_parity(p_ref: np.ndarray, p_ox: np.ndarray, class_index: np.ndarray, masks: np.ndarray,
                 rule: tuple[str, float]) -> tuple[dict[str, Any], str | None]:
    """Compare the trained model's probabilities with the exported model's on the same rows.

    Reports max |Δp|, agreement of the raw argmax over the model's classes, and agreement of the
    decision (argmax over the legal classes, what the specialist answers). `rule` is
    ("max_abs_delta", tolerance) for tabular models or ("decision_agreement", minimum) for int8
    transformers. Returns (figures, None) or (figures, what failed); a failure fails the
    distillation (DESIGN.md §5 step 8) unless another export is left to try.
    """
    n = len(p_ref)
    delta = float(np.max(np.abs(p_ref - p_ox))) if n else 0.0
    raw = float(np.mean(p_ref.argmax(axis=1) == p_ox.argmax(axis=1))) if n else 1.0
    c_ref = masked_confidence(p_ref, class_index, masks[:n], 1.0)
    c_ox = masked_confidence(p_ox, class_index, masks[:n], 1.0)
    decision = float(np.mean(c_ref.argmax(axis=1) == c_ox.argmax(axis=1))) if n else 1.0
    out = {"n": n, "max_abs_delta": delta, "argmax_agreement": raw, "decision_agreement": decision,
           "rule": rule[0], "bound": rule[1]}
    what, bound = rule
    if what == "max_abs_delta" and not delta <= bound:
        return out, (f"ONNX and the trained model's probabilities differ by {delta:.2e} (> {bound:.0e}) "
                     "on the test split")
    if what == "decision_agreement" and not decision >= bound:
        return out, (f"the exported model decides like the trained one on only {decision:.2%} of the test "
                     f"split (< {bound:.1%}; max |Δp| {delta:.3f})")
    return out, None


class TabularLearner:
    """A scikit-learn model over feature vectors, exported with skl2onnx."""

    reading = "featurising"
    parity = ("max_abs_delta", PARITY_TOLERANCE)
    quantizations = ("none",)
    latency_sample = (300, 3)

    def __init__(self, kind: str, seed: int, spec: F.FeatureSpec) -> None:
        self.kind = kind
        self.clf = make_model(kind, seed)
        self.fz = F.Featurizer(spec)

    def inputs(self, part: Iterable[Decision]) -> np.ndarray:
        rows = [self.fz.one(d.state, d.legal) for d in part]
        return np.stack(rows) if rows else np.zeros((0, self.fz.dim), np.float32)

    @staticmethod
    def take(x: np.ndarray, keep: np.ndarray) -> np.ndarray:
        return x[keep]

    def fit(self, x: np.ndarray, y: list[str], report: Report) -> None:
        import warnings

        from sklearn.exceptions import ConvergenceWarning

        started = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            self.clf.fit(x, np.array(y))
        self.train_seconds = time.perf_counter() - started
        self.classes = tuple(str(c) for c in self.clf.classes_)
        self.sample = x[:1]

    def reference(self, x: np.ndarray) -> np.ndarray:
        return self.clf.predict_proba(x)

    @staticmethod
    def exported(sp: Specialist, x: np.ndarray) -> np.ndarray:
        return sp.probabilities(x)

    def export(self, work: Path, report: Report, quantization: str) -> Model:
        onnx_bytes = export_onnx(self.clf, self.sample)
        (work / "model.onnx").write_bytes(onnx_bytes)
        return Model(self.kind, self.classes, "model.onnx", hashlib.sha256(onnx_bytes).hexdigest(),
                     {k: _plain(v) for k, v in self.clf.get_params().items()}
                     | {"train_seconds": self.train_seconds})


class TransformerLearner:
    """MiniLM-L6 fine-tuned over the state rendered as text, exported with optimum, dynamic int8."""

    reading = "rendering"
    parity = ("decision_agreement", ARGMAX_AGREEMENT)
    latency_sample = (100, 1)

    def __init__(self, seed: int, spec: F.FeatureSpec, options: dict[str, Any]) -> None:
        from .render import Renderer
        from .transformer import quantizations, transformer_model

        options = dict(options)
        # by default int8 first; if it decides unlike the float model on more than 0.5% of the test
        # split (near ties flip), the float32 export ships instead, and the manifest says so
        self.quantizations = quantizations(options.pop("quantization", "auto"))
        try:
            self.clf = transformer_model(seed, options)
        except TypeError as exc:
            raise ZcError(f"unknown transformer option: {exc}") from None
        self.renderer = Renderer(spec.fields, spec.actions)
        self.kind = "transformer"

    def inputs(self, part: Iterable[Decision]) -> list[str]:
        return [self.renderer.one(d.state) for d in part]

    @staticmethod
    def take(x: list[str], keep: np.ndarray) -> list[str]:
        return [t for t, k in zip(x, keep) if k]

    def fit(self, x: list[str], y: list[str], report: Report) -> None:
        self.clf.fit(x, y, bar=report.bar)
        self.classes = tuple(str(c) for c in self.clf.classes_)

    def reference(self, x: list[str]) -> np.ndarray:
        return self.clf.predict_proba(x)

    @staticmethod
    def exported(sp: Specialist, x: list[str]) -> np.ndarray:
        return sp.text_probabilities(x)

    def export(self, work: Path, report: Report, quantization: str) -> Model:
        from .render import VERSION as RENDER_VERSION
        from .specialist import TOKENIZER_FILE

        files = self.clf.export(work, report.step, quantization)
        model_sha = files.pop("model.onnx")
        params = _plain(self.clf.get_params()) | {
            "train_seconds": self.clf.train_seconds_, "steps": self.clf.steps_, "final_loss": self.clf.final_loss_,
            "quantization": quantization}
        return Model("transformer", self.classes, "model.onnx", model_sha, params, files,
                     TextInput(RENDER_VERSION, self.clf.max_length, TOKENIZER_FILE, DECIDE_THREADS))


def export_checked(tried: Sequence[str], attempt: Callable[[str], tuple[dict[str, Any], str | None, Any]],
                   report: Report) -> tuple[dict[str, Any], Any]:
    """Step 8: `attempt(quantization)` exports and checks parity, returning (figures, problem or None,
    what the export made); the exports in `tried` are attempted in order until one passes. When the
    last fails too, the distillation fails. Returns the passing figures with every attempt, and what
    the passing export made."""
    attempts = []
    for i, quantization in enumerate(tried):
        parity, problem, made = attempt(quantization)
        attempts.append({"quantization": quantization, **parity})
        if problem is None:
            return {**attempts[-1], "attempts": attempts}, made
        if i + 1 == len(tried):
            hint = "; --quantization auto ships float32 when int8 fails" if tuple(tried) == ("int8",) else ""
            raise ZcError(f"parity check failed ({quantization}): {problem}; nothing was written{hint}")
        report.step(f"  parity with {quantization}: {problem}; exporting {tried[i + 1]} instead")
    raise ZcError("no export to try")


def gate_and_write(work: Path, out: str | Path, manifest: Manifest, metrics: dict[str, Any], policy: Any,
                   target_precision: float, min_coverage: float, render: Callable[[Manifest], str],
                   report: Report, abstention: float | None = None) -> tuple[Manifest, str]:
    """Steps 9 and 10: gate `metrics` (the policy's `specialist` tier bounds latency), then write the
    specialist with its report. Returns the final manifest and the report text."""
    report.step("9/10 gate")
    tier = next((t for t in policy.ir.tiers if t.name == "specialist"), None) if policy is not None else None
    verdict = gate(metrics, target_precision, min_coverage, tier.max_ms if tier else None, abstention)
    manifest = msgspec.structs.replace(manifest, metrics=_plain(metrics), gate=verdict)
    report.step("10/10 writing the specialist")
    return manifest, write_specialist(work, out, manifest, render(manifest))


def make_learner(kind: str, seed: int, spec: F.FeatureSpec, options: dict[str, Any]):
    """The training and export steps of one model kind; everything else in `distill` is shared."""
    if kind == "transformer":
        return TransformerLearner(seed, spec, options)
    if options:
        raise ZcError(f"{', '.join(sorted(options))}: options of the transformer model, not of `{kind}`")
    return TabularLearner(kind, seed, spec)


def export_onnx(clf, sample: np.ndarray) -> bytes:
    """skl2onnx export with ZipMap off: outputs `label` and `probabilities`."""
    from skl2onnx import to_onnx

    onx = to_onnx(clf, sample.astype(np.float32), options={id(clf): {"zipmap": False}}, target_opset=18)
    return onx.SerializeToString()


def latency(ask: Callable[[Any], Any], part: Sequence[Any], size: int = 300, repeat: int = 3,
            warmup: int = 20) -> dict[str, float]:
    """Single-decision latency of `ask(decision)` (features or text + ONNX + mask + threshold), µs,
    over the first `size` decisions of `part`, `repeat` times, after `warmup` untimed calls."""
    sample = list(part)[:size]
    for d in sample[:warmup]:
        ask(d)
    times = []
    for _ in range(repeat):
        for d in sample:
            t = time.perf_counter_ns()
            ask(d)
            times.append((time.perf_counter_ns() - t) / 1000.0)
    return {"n": len(times), "p50": float(np.percentile(times, 50)), "p99": float(np.percentile(times, 99))}


def _plain(v: Any) -> Any:
    """JSON-safe copy (numpy scalars, tuples, infinities)."""
    if isinstance(v, dict):
        return {str(k): _plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    if isinstance(v, np.generic):
        v = v.item()
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    return repr(v)


def render_report(m: Manifest) -> str:
    """A human-readable report of a distillation."""
    t = m.metrics
    pr = "n/a" if t["precision"] is None else f"{t['precision']:.3f}"
    lo, hi = t["precision_ci"]
    if m.model.text is None:
        reads = f"{m.features.dim} features (version {m.features.version})"
    else:
        p = m.model.params
        reads = (f"the state rendered as text (version {m.model.text.render_version}, first "
                 f"{m.model.text.max_length} tokens), fine-tuned {p.get('steps')} steps of {p.get('batch_size')} "
                 f"from `{p.get('base')}` in {p.get('train_seconds', 0):.0f} s, exported {p.get('quantization')}")
    par = t.get("parity") or {"max_abs_delta": t["parity_max_abs_delta"]}
    parity = f"ONNX parity on the test split: max |Δp| = {par['max_abs_delta']:.2e}"
    if "decision_agreement" in par:
        parity += (f", same decision on {par['decision_agreement']:.2%}, same raw argmax on "
                   f"{par['argmax_agreement']:.2%} (n = {par['n']})")
    for a in (par.get("attempts") or [])[:-1]:
        parity += (f"; {a['quantization']} was tried first and refused: same decision on "
                   f"{a['decision_agreement']:.2%}, max |Δp| = {a['max_abs_delta']:.3f}")
    lines = [
        f"# Specialist `{m.name}` for policy `{m.policy_name}`", "",
        f"Model: {m.model.kind} over {len(m.features.actions)} actions ({len(m.model.classes)} seen in "
        f"training), reading {reads}. "
        f"Temperature {m.calibration.temperature:.3f}. τ = {m.threshold.tau:.4f} "
        f"(calibration: {m.threshold.calibration_correct}/{m.threshold.calibration_answered} answered correct, "
        f"one-sided 95% lower bound {m.threshold.calibration_lower_bound:.3f} ≥ {m.threshold.target_precision}).",
        "", "## Data", "",
        "| split | tasks | decisions |", "|---|---:|---:|",
        *(f"| {k} | {len(s.tasks)} | {s.decisions} |" for k, s in
          (("train", m.splits.train), ("calibration", m.splits.calibration), ("test", m.splits.test))),
        "", "Counts: " + ", ".join(f"{k} {v}" for k, v in sorted(m.counts.items())), "",
        "## Sealed test split", "",
        "| n | answered | coverage | precision | Wilson 95% | Brier | ECE | AURC | p50 µs | p99 µs |",
        "|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|",
        f"| {t['n']} | {t['answered']} | {t['coverage']:.3f} | {pr} | [{lo:.3f}, {hi:.3f}] | "
        f"{t['brier']:.3f} | {t['ece']:.3f} | {t['aurc']:.3f} | {t['latency_us']['p50']:.1f} | "
        f"{t['latency_us']['p99']:.1f} |",
        "", f"Illegal selections: {t['illegal_selected']}; dangerous selections: {t['dangerous_selected']} "
        f"(decisions with a risky action legal: {t['dangerous_exposed']}). Labels outside the legal set: "
        f"{t['label_not_legal']}. {parity}.",
        "", "### Per action (answered)", "", "| action | answered | correct |", "|---|---:|---:|",
        *(f"| {a} | {r['answered']} | {r['correct']} |" for a, r in t["per_action"].items()),
        "", "### Risk–coverage (test split, by confidence)", "", "| coverage | precision | threshold |",
        "|---:|---:|---:|",
        *(f"| {r['coverage']:.2f} | {r['precision']:.3f} | {r['threshold']:.4f} |" for r in t["risk_coverage"]),
        "", "## Gate", "", "promoted" if m.gate.promoted else "not promoted: " + "; ".join(m.gate.reasons), "",
    ]
    return "\n".join(lines)
