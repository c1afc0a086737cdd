"""The optional extras of the package: which modules each brings, and a clear error when one is missing."""

from __future__ import annotations

import importlib.util

from .errors import ZcError

# training (`zc distill`, `zcompile.qroute.distill`): the core install and every decision work without it
EXTRAS = {"distill": ("sklearn", "scipy", "skl2onnx", "onnx", "mapie")}


def missing(extra: str) -> list[str]:
    """The modules of `extra` that cannot be imported here."""
    out = []
    for module in EXTRAS[extra]:
        try:
            found = importlib.util.find_spec(module) is not None
        except ImportError:
            found = False
        if not found:
            out.append(module)
    return out


def require(extra: str, what: str) -> None:
    """Raise ZcError naming the pip command when a module of `extra` is not installed."""
    gone = missing(extra)
    if gone:
        raise ZcError(f"{what} needs the `{extra}` extra ({', '.join(gone)} not installed): "
                      f"pip install 'zcompile[{extra}]'")
