"""q-route: distil logged decisions into specialists that answer with a calibrated confidence or abstain.

The public API (bench/, examples/ and harnesses use these names; modules load on first use, so
`import zcompile.qroute` pulls in no training code):

- `distill(paths, policy, out, Settings(...))` -> `Result`: the ten distillation steps (pipeline.py)
- `load_specialist(directory, policy)`: a specialist for decision time (classifier or pairwise)
- `load_decisions(paths, policy)` -> `Dataset`; `split_by_task`, `seal`, `LoggedDecision`, `Progress`
- `choose_threshold(conf, correct, target, guarantee)`; `evaluate(...)` (the figures of a split);
  `threshold_line(manifest)` (τ and its guarantee in words); `recipe(kind, seed, spec, policy, options)`
  (what differs between model kinds: `.model()` is a tabular recipe's unfitted scikit-learn estimator)
- pairwise: `describe(action, tool)` (a candidate's text), `nearest` and `words_of` (similar descriptions)
"""

from __future__ import annotations

import importlib
from typing import Any

from ..extras import require

_API = {
    "distill": ("pipeline", "distill"), "Settings": ("settings", "Settings"),
    "Result": ("pipeline", "Result"), "TARGET_ABSTENTION": ("settings", "TARGET_ABSTENTION"),
    "load_specialist": ("loading", "load"), "Specialist": ("specialist", "Specialist"),
    "PairwiseSpecialist": ("pairwise", "PairwiseSpecialist"),
    "read_manifest": ("specialist", "read_manifest"), "LoggedDecision": ("dataset", "LoggedDecision"),
    "Dataset": ("dataset", "Dataset"), "load_decisions": ("dataset", "load"), "split_by_task": (
        "dataset", "split_by_task"), "seal": ("dataset", "seal"), "Progress": ("dataset", "Progress"),
    "evaluate": ("metrics", "evaluate"), "answer_right": ("metrics", "answer_right"),
    "RISKY_TAGS": ("metrics", "RISKY_TAGS"), "risky_actions": ("metrics", "risky_actions"),
    "choose_threshold": ("threshold", "choose"), "NEVER": ("threshold", "NEVER"),
    "recipe": ("recipes", "recipe"), "threshold_line": ("report", "threshold_line"),
    "describe": ("pairwise", "describe"), "nearest": ("pairs", "nearest"), "words_of": ("pairs", "words_of"),
}
__all__ = sorted(_API)
_TRAINING = {"pipeline", "recipes", "threshold", "report"}  # modules that need the `distill` extra


def __getattr__(name: str) -> Any:
    try:
        module, attr = _API[name]
    except KeyError:
        raise AttributeError(f"module 'zcompile.qroute' has no attribute {name!r}") from None
    if module in _TRAINING:
        require("distill", "training a specialist")
    return getattr(importlib.import_module(f"{__name__}.{module}"), attr)
