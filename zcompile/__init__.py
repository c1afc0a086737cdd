"""zc: compile agent policies to legal-action sets; route decisions to the cheapest rung that can answer."""

from __future__ import annotations

__version__ = "0.1.0"

from .errors import ZcError
from .runtime import LegalSet, Policy, Reason, Verdict, load
from .state import StateError

__all__ = ["LegalSet", "OpenAITier", "Policy", "Reason", "Router", "StateError", "Verdict", "ZcError",
           "compile_file", "compile_text", "load"]


def __getattr__(name: str):
    """The router and tiers load on first use, so `import zcompile` stays light."""
    if name == "Router":
        from .router import Router

        return Router
    if name == "OpenAITier":
        from .tiers import OpenAITier

        return OpenAITier
    raise AttributeError(f"module 'zcompile' has no attribute {name!r}")


def compile_text(text: str, name: str = "<string>") -> Policy:
    """Compile policy source text to a Policy. Raises ZcError (with diagnostics) on errors."""
    from .driver import compile_text as _compile

    return _compile(text, name)


def compile_file(path) -> Policy:
    """Compile a `.zc` file to a Policy. Raises ZcError (with diagnostics) on errors."""
    from .driver import compile_file as _compile

    return _compile(path)
