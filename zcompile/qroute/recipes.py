"""Distillation recipes: what differs between model kinds (inputs, training, export, calibration family).

The pipeline (`pipeline.py`) runs the same ten steps for every recipe. A recipe supplies:
`prepare` (learn input transforms on the non-test decisions), `inputs` and `take` (model inputs of
decisions and a subset of them), `fit` (a new fitted model), `reference` (the fitted model's raw
scores), `export` (write the ONNX model, return the manifest's `Model`), `exported` (the exported
model's raw scores, read back through the decision-time specialist), `fit_calibration` and
`confidence` (raw scores -> best legal action and calibrated confidence per decision).

Raw scores of classifiers are (P, seen): class probabilities mapped onto the policy's actions
(n, A) and which actions the model can answer; of pairwise scorers (z, best): the choice score
and the best candidate per decision.
"""

from __future__ import annotations

import hashlib
import os
import time
import warnings
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from ..errors import ZcError
from ..receipts.judge import accepts
from . import features as F
from .calibrate import fit_platt, fit_temperature
from .dataset import LoggedDecision, Progress, plain
from .manifest import PROBE_POOL, TEXT_PROBE_POOL, Calibration, Model, TextInput, probes_for, text_probes_for
from .specialist import masked_confidence, session_options

if TYPE_CHECKING:
    from ..runtime import Policy

PARITY_TOLERANCE = 1e-4  # max |Δp|, tabular models
ARGMAX_AGREEMENT = 0.995  # share of test decisions an int8 model must decide like its float model
DECIDE_THREADS = 2  # onnxruntime threads of a transformer specialist at decision time (docs/design.md)
TABULAR = ("logistic", "mlp", "gbt")
AUTO = TABULAR  # what `--model auto` trains and compares
WORKERS = 2  # fits run at a time (the 2 cores of docs/design.md); each is seeded, so no model depends on it


def fit_in_threads(fit: Callable[[Any], Any], jobs: Sequence[Any], report: Progress, label: str) -> list[Any]:
    """`fit(job)` for every job, `WORKERS` at a time in threads (scikit-learn's solvers and tree
    builders release the GIL), BLAS held to one thread per fit so that fits do not fight over the
    cores; the results in the order of `jobs`, the same as fitting one after another (every fit is
    seeded). The first failure is raised once the fits under way end; those not started are dropped."""
    from concurrent.futures import ThreadPoolExecutor

    from threadpoolctl import threadpool_limits

    workers = max(1, min(WORKERS, os.cpu_count() or 1, len(jobs)))
    with threadpool_limits(1), ThreadPoolExecutor(workers) as pool:
        futures = [pool.submit(fit, job) for job in jobs]
        try:
            return [f.result() for f in report.bar(futures, label, len(futures))]
        except BaseException:
            pool.shutdown(cancel_futures=True)
            raise


class Recipe(Protocol):
    """What the pipeline and the featurisation engines ask of a recipe (the module docstring says what
    each method does). `featurizer`: a tabular recipe's, once prepared (its inputs are feature rows
    that engines write and candidates with the same spec share); None for the others."""

    kind: str
    reading: str  # what step 3 does, in the progress line
    calibration_method: str
    crossfit: bool  # cross-fitted folds + a refit (else train, then calibrate on the calibration split)
    parity: tuple[str, float]  # the parity rule and its bound
    quantizations: tuple[str, ...]  # the exports to try, in order
    latency_sample: tuple[int, int]  # (decisions, repeats) timed
    spec: F.FeatureSpec
    featurizer: F.Featurizer | None

    def prepare(self, pool: Sequence[LoggedDecision]) -> None: ...
    def inputs(self, decisions: Iterable[LoggedDecision]) -> Any: ...
    def take(self, x: Any, idx: np.ndarray) -> Any: ...
    def fit(self, x: Any, decisions: Sequence[LoggedDecision], report: Progress) -> Any: ...
    def reference(self, model: Any, x: Any) -> Any: ...
    def exported(self, sp: Any, x: Any) -> Any: ...
    def export(self, model: Any, work: Path, report: Progress, quantization: str) -> Model: ...
    def specialist(self, work: Path, policy: Policy | None) -> Any: ...
    def ask(self, sp: Any, d: LoggedDecision) -> Any: ...
    def fit_calibration(self, raw: Any, decisions: Sequence[LoggedDecision]) -> Calibration: ...
    def confidence(self, raw: Any, decisions: Sequence[LoggedDecision],
                   cal: Calibration) -> tuple[list[str | None], np.ndarray, np.ndarray | None]: ...
    def correct(self, best: Sequence[str | None], decisions: Sequence[LoggedDecision]) -> np.ndarray: ...


def _legal_mask(decisions: Sequence[LoggedDecision], index: dict[str, int]) -> np.ndarray:
    m = np.zeros((len(decisions), len(index)), dtype=bool)
    for i, d in enumerate(decisions):
        m[i, [index[a] for a in d.legal if a in index]] = True
    return m


class ClassifierRecipe:
    """Shared by classifiers: probabilities over the policy's actions, tempered over the legal ones."""

    calibration_method = "temperature"
    crossfit = True
    featurizer: F.Featurizer | None = None

    def __init__(self, spec: F.FeatureSpec) -> None:
        self.spec = spec
        self.actions = spec.actions
        self.index = {a: i for i, a in enumerate(self.actions)}

    def labels(self, decisions: Sequence[LoggedDecision]) -> np.ndarray:
        return np.array([self.index[d.target] if d.target in d.legal and d.target in self.index else -1
                         for d in decisions], dtype=np.int64)

    def _on_actions(self, probs: np.ndarray, classes: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        cols = np.array([self.index[c] for c in classes], dtype=np.int64)
        p = np.zeros((len(probs), len(self.actions)))
        p[:, cols] = probs
        seen = np.zeros(len(self.actions), dtype=bool)
        seen[cols] = True
        return p, np.broadcast_to(seen, p.shape).copy()

    @staticmethod
    def take(x: Any, idx: np.ndarray) -> Any:  # each classifier's inputs
        raise NotImplementedError

    def _fit(self, x: Any, y: list[str], report: Progress) -> Any:  # a new model fit on (x, action names)
        raise NotImplementedError

    def fit(self, x: Any, decisions: Sequence[LoggedDecision], report: Progress) -> Any:
        y = self.labels(decisions)
        ok = y >= 0
        names = [self.actions[i] for i in y[ok]]
        if len(set(names)) < 2:
            raise ZcError("the training decisions hold fewer than two distinct actions: nothing to learn")
        return self._fit(self.take(x, np.flatnonzero(ok)), names, report)

    def fit_calibration(self, raw: tuple[np.ndarray, np.ndarray],
                        decisions: Sequence[LoggedDecision]) -> Calibration:
        p, seen = raw
        mask = seen & _legal_mask(decisions, self.index)
        t = fit_temperature(p, np.arange(len(self.actions)), mask.astype(np.float32), self.labels(decisions))
        return Calibration("temperature", t)

    def confidence(self, raw: tuple[np.ndarray, np.ndarray], decisions: Sequence[LoggedDecision],
                   cal: Calibration) -> tuple[list[str | None], np.ndarray, np.ndarray]:
        """(best legal action, its confidence, the calibrated distribution over actions) per decision."""
        p, seen = raw
        mask = seen & _legal_mask(decisions, self.index)
        full = masked_confidence(p, np.arange(len(self.actions)), mask.astype(np.float32), cal.temperature)
        j = full.argmax(axis=1) if len(full) else np.zeros(0, dtype=int)
        top = full[np.arange(len(full)), j] if len(full) else np.zeros(0)
        best = [self.actions[k] if c > 0 else None for k, c in zip(j, top)]
        return best, top, full

    def correct(self, best: Sequence[str | None], decisions: Sequence[LoggedDecision]) -> np.ndarray:
        return np.array([accepts(d.acceptable, b, None, frozenset(), names=True) for b,
                         d in zip(best, decisions)],
                        dtype=bool)


class TabularRecipe(ClassifierRecipe):
    """A scikit-learn model over feature vectors (features.py), exported with skl2onnx."""

    reading = "featurising"
    parity = ("max_abs_delta", PARITY_TOLERANCE)
    quantizations: tuple[str, ...] = ("none",)
    latency_sample = (300, 3)

    def __init__(self, kind: str, seed: int, spec: F.FeatureSpec) -> None:
        super().__init__(spec)
        if kind not in TABULAR:
            raise ZcError(f"unknown model `{kind}` (choose {', '.join(TABULAR)}, transformer, pairwise or "
                          "auto)")
        self.kind, self.seed = kind, seed

    def prepare(self, pool: Sequence[LoggedDecision]) -> None:
        numeric = [f.path for f in self.spec.fields if f.kind in ("int", "float")]
        fz = F.Featurizer(self.spec)
        values: dict[str, list] = {p: [F.read_path(fz.schema, d.root, p) for d in pool] for p in numeric}
        self.spec = F.fit_scaling(self.spec, values)
        self.featurizer = fz = F.Featurizer(self.spec)

    def inputs(self, decisions: Iterable[LoggedDecision]) -> np.ndarray:
        fz = self.featurizer
        assert fz is not None, "prepare first"
        rows = [fz.row(d.root, d.legal) for d in decisions]
        return np.stack(rows) if rows else np.zeros((0, fz.dim), np.float32)

    @staticmethod
    def take(x: np.ndarray, idx: np.ndarray) -> np.ndarray:
        return x[idx]

    def model(self):
        if self.kind == "logistic":
            from sklearn.linear_model import LogisticRegression

            return LogisticRegression(C=0.1, max_iter=5000)  # strong L2: hundreds of decisions and features
        if self.kind == "mlp":
            from sklearn.neural_network import MLPClassifier

            return MLPClassifier(hidden_layer_sizes=(64,), alpha=1e-3, max_iter=600, random_state=self.seed)
        from sklearn.ensemble import GradientBoostingClassifier

        # HistGradientBoostingClassifier does not export with skl2onnx 1.20 (TOOLCHAIN.md)
        # min_samples_leaf keeps Newton leaf values finite on pure leaves (else probabilities saturate at 1)
        return GradientBoostingClassifier(n_estimators=100, max_depth=3, learning_rate=0.05, subsample=0.8,
                                          min_samples_leaf=20, max_features="sqrt", random_state=self.seed)

    def _fit(self, x: np.ndarray, y: list[str], report: Progress) -> Any:
        from sklearn.exceptions import ConvergenceWarning

        clf = self.model()
        started = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            clf.fit(x, np.array(y))
        clf.train_seconds_ = time.perf_counter() - started
        clf.sample_ = x[:1]
        step = max(1, -(-len(x) // PROBE_POOL))  # at most PROBE_POOL rows, evenly spaced, for the probes
        clf.probe_pool_ = x[::step]
        return clf

    def reference(self, clf: Any, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return self._on_actions(clf.predict_proba(x), [str(c) for c in clf.classes_])

    def exported(self, sp: Any, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return self._on_actions(sp.probabilities(x), sp.model_classes)

    def export(self, clf: Any, work: Path, report: Progress, quantization: str) -> Model:
        import onnxruntime as ort
        from skl2onnx import to_onnx

        onx = to_onnx(clf, clf.sample_.astype(np.float32), options={id(clf): {"zipmap": False}},
                      target_opset=18)
        # skl2onnx's order varies from run to run
        opsets = sorted((o.domain, o.version) for o in onx.opset_import)
        del onx.opset_import[:]
        for domain, version in opsets:
            onx.opset_import.add(domain=domain, version=version)
        blob = onx.SerializeToString()
        (work / "model.onnx").write_bytes(blob)
        classes = tuple(str(c) for c in clf.classes_)
        session = ort.InferenceSession(blob, sess_options=session_options(1),
                                       providers=["CPUExecutionProvider"])
        return Model(self.kind, classes, "model.onnx", hashlib.sha256(blob).hexdigest(),
                     {k: plain(v) for k, v in clf.get_params().items()}
                     | {"train_seconds": clf.train_seconds_},
                     probes=probes_for(session, clf.probe_pool_, classes))

    def specialist(self, work: Path, policy: Policy | None) -> Any:
        from .specialist import Specialist

        return Specialist(work, policy)

    def ask(self, sp: Any, d: LoggedDecision) -> Any:
        return sp.decide(d.state, d.legal)


class TransformerRecipe(ClassifierRecipe):
    """MiniLM-L6 fine-tuned over the state rendered as text, exported with optimum, dynamic int8."""

    kind = "transformer"
    reading = "rendering"
    parity = ("decision_agreement", ARGMAX_AGREEMENT)
    latency_sample = (100, 1)
    crossfit = False  # K fine-tunes cost K times the training: calibrate on the calibration split

    def __init__(self, seed: int, spec: F.FeatureSpec, options: dict[str, Any]) -> None:
        from .render import Renderer
        from .transformer import quantizations

        super().__init__(spec)
        self.options = dict(options)
        # int8 first; if it decides unlike the float model on more than 0.5% of the test split
        # (near ties flip), the float32 export ships instead, and the manifest says so
        self.quantizations = quantizations(self.options.pop("quantization", "auto"))
        self.seed = seed
        self.renderer = Renderer(spec.fields, spec.actions)

    def prepare(self, pool: Sequence[LoggedDecision]) -> None:
        pass

    def inputs(self, decisions: Iterable[LoggedDecision]) -> list[str]:
        return [self.renderer.root(d.root) for d in decisions]

    @staticmethod
    def take(x: list[str], idx: np.ndarray) -> list[str]:
        return [x[i] for i in idx]

    def _fit(self, x: list[str], y: list[str], report: Progress) -> Any:
        from .transformer import transformer_model

        try:
            clf = transformer_model(self.seed, self.options)
        except TypeError as exc:
            raise ZcError(f"unknown transformer option: {exc}") from None
        clf = clf.fit(x, y, bar=report.bar)
        clf.probe_pool_ = x[::max(1, -(-len(x) // TEXT_PROBE_POOL))]  # evenly spaced, for the text probes
        return clf

    def reference(self, clf: Any, x: list[str]) -> tuple[np.ndarray, np.ndarray]:
        return self._on_actions(clf.predict_proba(x), [str(c) for c in clf.classes_])

    def exported(self, sp: Any, x: list[str]) -> tuple[np.ndarray, np.ndarray]:
        return self._on_actions(sp.text_probabilities(x), sp.model_classes)

    def export(self, clf: Any, work: Path, report: Progress, quantization: str) -> Model:
        import onnxruntime as ort

        from .render import VERSION as RENDER_VERSION
        from .specialist import TOKENIZER_FILE, load_tokenizer, text_logits

        files = clf.export(work, report.step, quantization)
        model_sha = files.pop("model.onnx")
        params = plain(clf.get_params()) | {
            "train_seconds": clf.train_seconds_, "steps": clf.steps_, "final_loss": clf.final_loss_,
            "quantization": quantization}
        classes = tuple(str(c) for c in clf.classes_)
        session = ort.InferenceSession(str(work / "model.onnx"), sess_options=session_options(1),
                                       providers=["CPUExecutionProvider"])
        logits = text_logits(session, load_tokenizer(work / TOKENIZER_FILE, clf.max_length), clf.probe_pool_)
        return Model("transformer", classes, "model.onnx", model_sha, params, files,
                     TextInput(RENDER_VERSION, clf.max_length, TOKENIZER_FILE, DECIDE_THREADS),
                     text_probes=text_probes_for(logits, clf.probe_pool_, classes))

    specialist = TabularRecipe.specialist
    ask = TabularRecipe.ask


class PairwiseRecipe:
    """MiniLM-L6 scoring (request, action description) pairs (pairwise.py), for open action sets."""

    kind = "pairwise"
    reading = "rendering requests"
    calibration_method = "platt"
    parity = ("decision_agreement", ARGMAX_AGREEMENT)
    latency_sample = (60, 1)
    crossfit = False
    featurizer: F.Featurizer | None = None

    def __init__(self, seed: int, spec: F.FeatureSpec, policy: Policy | None, options: dict[str, Any],
                 negatives: int = 3) -> None:
        from .transformer import quantizations

        self.spec, self.policy, self.seed, self.negatives = spec, policy, seed, negatives
        self.options = dict(options)
        self.quantizations = quantizations(self.options.pop("quantization", "auto"))

    def prepare(self, pool: Sequence[LoggedDecision]) -> None:
        from ..tools import policy_tools
        from .render import Renderer

        self.described = policy_tools(self.policy) if self.policy is not None else {}
        self.renderer = (Renderer(self.policy.ir.fields, self.policy.actions) if self.policy is not None
                         else None)

    def inputs(self, decisions: Iterable[LoggedDecision]) -> list[Any]:
        from . import pairs

        return [pairs.pair_input(self.request(d), d, self.described) for d in decisions]

    def request(self, d: LoggedDecision) -> str:
        from .pairwise import render_plain

        return self.renderer.root(d.root) if self.renderer is not None else render_plain(d.state)

    @staticmethod
    def take(x: list[Any], idx: np.ndarray) -> list[Any]:
        return [x[i] for i in idx]

    def fit(self, x: list[Any], decisions: Sequence[LoggedDecision], report: Progress) -> Any:
        from . import pairs
        from .transformer import transformer_model

        examples, y = pairs.training_pairs(x, decisions, self.described, self.negatives, self.seed)
        if len(set(y)) < 2:
            raise ZcError("the training split needs both fitting and non-fitting (request, action) pairs")
        report.step(f"  {len(examples)} pairs from {len(decisions)} decisions ({self.negatives} negatives "
                    f"each, decisions where no action fits ×{pairs.none_fits_weight(decisions)})")
        clf = transformer_model(self.seed, self.options)
        clf.fit(examples, y, bar=report.bar)
        clf.pairs_ = len(examples)
        clf.none_fits_weight_ = pairs.none_fits_weight(decisions)
        return clf

    def reference(self, clf: Any, x: list[Any]) -> tuple[np.ndarray, list[str | None]]:
        from . import pairs
        from .pairwise import FIT, fit_margins

        col = list(clf.classes_).index(FIT)
        return pairs.score(x, lambda ps: fit_margins(clf.logits(ps), col))

    def exported(self, sp: Any, x: list[Any]) -> tuple[np.ndarray, list[str | None]]:
        from . import pairs

        return pairs.score(x, None, sp.margins)

    def export(self, clf: Any, work: Path, report: Progress, quantization: str) -> Model:
        from .render import VERSION as RENDER_VERSION
        from .specialist import TOKENIZER_FILE

        files = clf.export(work, report.step, quantization)
        model_sha = files.pop("model.onnx")
        params = plain(clf.get_params()) | {
            "train_seconds": clf.train_seconds_, "steps": clf.steps_, "final_loss": clf.final_loss_,
            "negatives": self.negatives, "none_fits_weight": clf.none_fits_weight_, "pairs": clf.pairs_,
            "quantization": quantization}
        return Model("pairwise", tuple(clf.classes_.tolist()), "model.onnx", model_sha, params, files,
                     TextInput(RENDER_VERSION, clf.max_length, TOKENIZER_FILE, DECIDE_THREADS))

    def specialist(self, work: Path, policy: Policy | None) -> Any:
        from .pairwise import PairwiseSpecialist

        return PairwiseSpecialist(work, policy)

    def ask(self, sp: Any, d: LoggedDecision) -> Any:
        return sp.decide(d.state, d.legal, d.tools or self.described)

    def fit_calibration(self, raw: tuple[np.ndarray, list],
                        decisions: Sequence[LoggedDecision]) -> Calibration:
        z, best = raw
        t, b = fit_platt(z, self.correct(best, decisions))
        return Calibration("platt", t, b)

    def confidence(self, raw: tuple[np.ndarray, list], decisions: Sequence[LoggedDecision],
                   cal: Calibration) -> tuple[list[str | None], np.ndarray, None]:
        from .pairwise import calibrated

        z, best = raw
        ok = np.isfinite(z)
        conf = np.zeros(len(z))
        if ok.any():
            conf[ok] = calibrated(z[ok], cal.temperature, cal.bias)
        return list(best), conf, None

    @staticmethod
    def correct(best: Sequence[str | None], decisions: Sequence[LoggedDecision]) -> np.ndarray:
        return np.array([d.label is not None and b == d.label for b, d in zip(best, decisions)], dtype=bool)


def recipe(kind: str, seed: int, spec: F.FeatureSpec, policy: Policy | None, options: dict[str, Any],
           negatives: int = 3) -> Recipe:
    """The recipe of one model kind."""
    if kind == "transformer":
        return TransformerRecipe(seed, spec, options)
    if kind == "pairwise":
        return PairwiseRecipe(seed, spec, policy, options, negatives)
    if options:
        raise ZcError(f"{', '.join(sorted(options))}: options of the transformer and pairwise models, not of "
                      f"`{kind}`")
    return TabularRecipe(kind, seed, spec)
