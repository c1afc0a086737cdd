"""The router package: one rung protocol (rung.py), the ladder (router.py), shadow mode and demotion
(shadow.py)."""

from __future__ import annotations

from .router import Decision, Router, load_specialists
from .rung import CAUSES, KINDS, REPLY_TAG, SPECIALIST, Answer, Catalog, Rung, Step, settle
from .shadow import Monitor

__all__ = ["CAUSES", "KINDS", "REPLY_TAG", "SPECIALIST", "Answer", "Catalog", "Decision", "Monitor", "Router",
           "Rung", "Step", "load_specialists", "settle"]
