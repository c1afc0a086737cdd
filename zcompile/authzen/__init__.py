"""`zc pdp`: zc as an AuthZEN Authorization API 1.0 decision point (model.py the requests,
mapping.py request -> policy state, pdp.py the decisions and searches, app.py the HTTP binding)."""

from __future__ import annotations

from .app import create_app
from .mapping import Mapping, MappingFile, load_mapping
from .pdp import PDP, REASONS_KEY

__all__ = ["PDP", "REASONS_KEY", "Mapping", "MappingFile", "create_app", "load_mapping"]
