"""The gateway (`zc serve`): an OpenAI-compatible proxy that puts the policy and the router in the
LLM gateway's slot (app.py the ASGI app, request.py the request and its state, upstream.py the
forwarding rung, replies.py what goes back, body.py bounded request bodies, server.py uvicorn)."""

from __future__ import annotations

import importlib
from typing import Any

# exported lazily: `zc pdp` reuses body.py and server.py without loading the gateway's router and
# HTTP client (httpx imports click, which decision-time code must not load)
_EXPORTS = {"Gateway": "app", "create_app": "app", "load_client_keys": "app", "FALLBACK_TEXT": "replies",
            "Running": "server", "serve": "server"}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{module}", __name__), name)
