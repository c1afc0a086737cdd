"""Evaluation: replay receipts through the router (replay.py), the figures counted as they go
(metrics.py), the report (report.py), text and HTML (render.py with a Jinja2 template), one row
per decision (decisions.py)."""

from __future__ import annotations

from .decisions import DecisionRow
from .metrics import SAMPLE, Ledger, agreement, calls, curve, figures, rate
from .render import is_html_report, render_html, render_text
from .replay import SPLITS, WARMUP, Replay, Seal, check_policy, needs_policy, replay, replays, seal
from .report import is_json_report, report, run, to_json

__all__ = ["SAMPLE", "SPLITS", "WARMUP", "DecisionRow", "Ledger", "Replay", "Seal", "agreement", "calls",
           "check_policy", "curve", "figures", "is_html_report", "is_json_report", "needs_policy", "rate",
           "render_html", "render_text", "replay", "replays", "report", "run", "seal", "to_json"]
