"""Prometheus metrics of a door (`zc serve`, `zc pdp`, `zc mcp --http`), served on `/metrics`."""

from __future__ import annotations

import time
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest

SKIPPED = frozenset({"/metrics", "/healthz", "/readyz"})  # probes are not requests


class DoorMetrics:
    """One door's counters and histograms, in a registry of its own (several doors, or several
    apps in one test process, never share a series)."""

    def __init__(self, door: str) -> None:
        self.door = door
        self.registry = CollectorRegistry()
        r, d = self.registry, ["door"]
        self.requests = Counter("zc_requests", "HTTP requests answered, by status", [*d, "status"],
                                registry=r)
        self.latency = Histogram("zc_request_seconds", "Time to answer one HTTP request (the whole body)", d,
                                 registry=r)
        self.answers = Counter("zc_answers", "Decisions, by the rung that answered", [*d, "rung"], registry=r)
        self.blocked = Counter("zc_blocked_calls", "Calls refused by the policy, by rule", [*d, "rule"],
                               registry=r)
        self.upstream_errors = Counter("zc_upstream_errors", "Upstream failures, by kind", [*d, "kind"],
                                       registry=r)
        self.upstream_latency = Histogram("zc_upstream_seconds", "Time of one upstream request", d,
                                          registry=r)
        self.receipts = Counter("zc_receipts_written", "Receipts appended", d, registry=r)

    def answered(self, rung: str) -> None:
        self.answers.labels(self.door, rung).inc()

    def refused(self, rules: list[str]) -> None:
        for rule in rules or ["unknown"]:
            self.blocked.labels(self.door, rule).inc()

    def upstream(self, seconds: float, error: str | None = None) -> None:
        self.upstream_latency.labels(self.door).observe(seconds)
        if error is not None:
            self.upstream_errors.labels(self.door, error).inc()

    def written(self) -> None:
        self.receipts.labels(self.door).inc()

    def exposition(self) -> tuple[bytes, str]:
        """The text exposition format, and its content type."""
        return generate_latest(self.registry), CONTENT_TYPE_LATEST


class Instrumented:
    """An ASGI app counting each HTTP request by its status, and timing it to its last byte."""

    def __init__(self, app: Any, metrics: DoorMetrics) -> None:
        self.app, self.metrics = app, metrics

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope.get("path") in SKIPPED:
            await self.app(scope, receive, send)
            return
        started, status = time.perf_counter(), [500]

        async def sending(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            m = self.metrics
            m.requests.labels(m.door, str(status[0])).inc()
            m.latency.labels(m.door).observe(time.perf_counter() - started)
