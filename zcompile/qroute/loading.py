"""Load a specialist directory as the kind its manifest names (classifier or pairwise scorer)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from .specialist import Specialist, read_manifest

if TYPE_CHECKING:
    from ..runtime import Policy


def load(directory: str | Path, policy: Policy | None = None) -> Any:
    """Load and verify a specialist directory (against `policy`'s sha256 when given): a
    `Specialist` (tabular or transformer classifier) or, when its manifest says `pairwise`, a
    `PairwiseSpecialist`."""
    if read_manifest(directory).model.kind == "pairwise":
        from .pairwise import PairwiseSpecialist

        return PairwiseSpecialist(directory, policy)
    return Specialist(directory, policy)
