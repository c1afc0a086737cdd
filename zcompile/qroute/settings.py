"""What `zc distill` lets the user choose, and its defaults: the one place both the pipeline and the
command line read them (light: no training import)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

FOLDS = 5
MAX_DECISIONS = 50_000  # decisions held in memory (each ~15 KB with its argument candidates)
TARGET_ABSTENTION = 0.85  # pairwise default: abstain where no offered action fits


@dataclass
class Settings:
    """What the user chose (see `zc distill --help`)."""

    model: str = "auto"
    target_precision: float = 0.95
    call_precision: float | None = None  # the calls' own target (and risky calls'); None: target_precision
    guarantee: str = "ltt"
    unit: str = "task"  # the unit of evidence τ is certified on: task or decision (`threshold.UNITS`)
    target_abstention: float | None = None  # pairwise only; None: TARGET_ABSTENTION
    min_coverage: float = 0.0
    seed: int = 0
    folds: int = FOLDS
    negatives: int = 3
    skip_invalid: bool = False
    options: dict[str, Any] = field(default_factory=dict)
    max_decisions: int = MAX_DECISIONS  # beyond it, a seeded task-stratified sample (dataset.load_split)
    engine: str = "local"  # featurisation: local or ray (engine.py)


DEFAULTS = Settings()
