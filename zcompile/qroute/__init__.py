"""q-route: distil logged decisions into specialists that answer with a calibrated confidence or abstain.

The public API (bench/, examples/ and harnesses use these names; modules load on first use, so
`import zcompile.qroute` pulls in no training code):

- `distill(paths, policy, out, Settings(...))` -> `Result`: the ten distillation steps (pipeline.py)
- `load_specialist(directory, policy)`: a specialist for decision time (classifier or pairwise)
- `load_decisions(paths, policy)` -> `Dataset`; `split_by_task`, `seal`, `Decision`, `Report`
- `choose_threshold(conf, correct, target, guarantee)`; `evaluate(...)` (the figures of a split)
"""

from __future__ import annotations

import importlib
from typing import Any

_API = {
    "distill": ("pipeline", "distill"), "Settings": ("pipeline", "Settings"), "Result": ("pipeline", "Result"),
    "TARGET_ABSTENTION": ("pipeline", "TARGET_ABSTENTION"),
    "load_specialist": ("loading", "load"), "Specialist": ("specialist", "Specialist"),
    "PairwiseSpecialist": ("pairwise", "PairwiseSpecialist"), "read_manifest": ("specialist", "read_manifest"),
    "Decision": ("dataset", "Decision"), "Dataset": ("dataset", "Dataset"), "load_decisions": ("dataset", "load"),
    "split_by_task": ("dataset", "split_by_task"), "seal": ("dataset", "seal"), "Report": ("dataset", "Report"),
    "evaluate": ("metrics", "evaluate"), "RISKY_TAGS": ("metrics", "RISKY_TAGS"),
    "risky_actions": ("metrics", "risky_actions"), "choose_threshold": ("threshold", "choose"),
    "NEVER": ("threshold", "NEVER"),
}
__all__ = sorted(_API)


def __getattr__(name: str) -> Any:
    try:
        module, attr = _API[name]
    except KeyError:
        raise AttributeError(f"module 'zcompile.qroute' has no attribute {name!r}") from None
    return getattr(importlib.import_module(f"{__name__}.{module}"), attr)
