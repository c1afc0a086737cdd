"""The `zc` command line: thin wrappers over the compiler, the runtime and q-route (one module per area)."""

from __future__ import annotations

# each registers its commands on `main`
from . import grader, local, mcp, pdp, policy, qroute, receipts, tools  # noqa: F401
from .common import ZcError, fail, main, progress

__all__ = ["main", "progress", "run"]


def run() -> None:
    """Entry point that keeps user errors free of tracebacks."""
    try:
        main(standalone_mode=True)
    except ZcError as exc:  # pragma: no cover - commands catch their own
        fail(exc)
