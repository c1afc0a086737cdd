"""LLM tiers: rungs that ask a chat model behind an OpenAI-compatible endpoint, and tiers.toml."""

from __future__ import annotations

from .config import TierConfig, load_tiers
from .local import LocalServer, LocalTier, packaged_model
from .offer import MODES, render_state, tool_names
from .tier import OpenAITier, Tier, TierAnswer

__all__ = ["MODES", "LocalServer", "LocalTier", "OpenAITier", "Tier", "TierAnswer", "TierConfig",
           "load_tiers", "packaged_model", "render_state", "tool_names"]
