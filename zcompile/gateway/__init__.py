"""The gateway (`zc serve`): an OpenAI-compatible proxy that puts the policy and the router in the
LLM gateway's slot (app.py the ASGI app, request.py the request and its state, upstream.py the
forwarding rung, replies.py what goes back, server.py uvicorn)."""

from __future__ import annotations

from .app import Gateway, create_app
from .replies import FALLBACK_TEXT
from .server import Running, serve

__all__ = ["FALLBACK_TEXT", "Gateway", "Running", "create_app", "serve"]
