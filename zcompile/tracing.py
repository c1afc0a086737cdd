"""OpenTelemetry spans of the doors (`zc serve`, `zc mcp`, `zc pdp`), off unless the standard OTel
environment configures an exporter (`OTEL_EXPORTER_OTLP_ENDPOINT`, `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`
or `OTEL_TRACES_EXPORTER`). The SDK (the `otel` extra) is imported only then: without the variables
nothing here imports it, and every span is a no-op.

Spans: one server span per HTTP request (`traced`), whose parent is the request's W3C `traceparent`;
a `zc.decision` span inside it; one client span per upstream request (`upstream`), whose context
goes on to the upstream as its `traceparent` (an HTTP header, or an MCP request's `_meta`). Attributes
name actions, rules, rungs and statuses, never argument values or message text.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator, Mapping
from typing import Any

from .errors import ZcError

_SKIPPED = frozenset({"/metrics", "/healthz", "/readyz"})  # probes are not traced
_EXPORTERS = ("otlp", "console")  # OTEL_TRACES_EXPORTER values zc sets up (http/protobuf OTLP)
_lock = threading.Lock()
_tracer: Any = None  # the SDK's Tracer once `setup` found a configured exporter
_provider: Any = None


def configured(env: Mapping[str, str] | None = None) -> list[str]:
    """The exporters the environment asks for (empty: tracing off). `OTEL_SDK_DISABLED=true` or
    `OTEL_TRACES_EXPORTER=none` turn it off; an OTLP endpoint alone means `otlp`."""
    env = os.environ if env is None else env
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return []
    names = [n.strip().lower() for n in env.get("OTEL_TRACES_EXPORTER", "").split(",") if n.strip()]
    if not names:
        endpoint = env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_ENDPOINT")
        return ["otlp"] if endpoint else []
    if "none" in names:
        return []
    unknown = [n for n in names if n not in _EXPORTERS]
    if unknown:
        raise ZcError(f"OTEL_TRACES_EXPORTER: zc sets up {' and '.join(_EXPORTERS)}, "
                      f"not {', '.join(unknown)}")
    protocol = (env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or env.get("OTEL_EXPORTER_OTLP_PROTOCOL")
                or "http/protobuf")
    if "otlp" in names and protocol != "http/protobuf":
        raise ZcError(f"OTEL_EXPORTER_OTLP_PROTOCOL `{protocol}`: zc exports OTLP over http/protobuf only")
    return names


def setup(door: str) -> bool:
    """Create the tracer provider and its exporters when the environment configures them (once per
    process); whether tracing is on. `OTEL_SERVICE_NAME` names the service (default `zc-DOOR`)."""
    global _tracer, _provider
    with _lock:
        if _tracer is not None:
            return True
        names = configured()
        if not names:
            return False
        try:
            from opentelemetry.sdk.resources import Resource
            from opentelemetry.sdk.trace import TracerProvider
            from opentelemetry.sdk.trace.export import (
                BatchSpanProcessor,
                ConsoleSpanExporter,
                SimpleSpanProcessor,
            )
        except ImportError as exc:
            raise ZcError(f"OpenTelemetry is configured (OTEL_* variables) but {exc.name} is not installed: "
                          "pip install 'zcompile[otel]'") from None
        resource = Resource.create()
        if str(resource.attributes.get("service.name", "")).startswith("unknown_service"):
            resource = resource.merge(Resource({"service.name": f"zc-{door}"}))
        provider = TracerProvider(resource=resource)  # shut down (spans flushed) at exit
        if "otlp" in names:
            try:
                from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
            except ImportError as exc:
                raise ZcError(f"OTLP export needs {exc.name}: pip install 'zcompile[otel]'") from None
            provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        if "console" in names:
            provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter()))
        from . import __name__ as package

        _provider, _tracer = provider, provider.get_tracer(package)
        return True


def enabled() -> bool:
    return _tracer is not None


def _propagator() -> Any:
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    return TraceContextTextMapPropagator()


def parent(carrier: Mapping[str, Any] | None) -> Any:
    """The OTel context a `traceparent` (and `tracestate`) in `carrier` names (None: the current one)."""
    if _tracer is None or not carrier or not isinstance(carrier.get("traceparent"), str):
        return None
    return _propagator().extract({k: v for k, v in carrier.items() if isinstance(v, str)})


def inject(carrier: dict[str, Any]) -> dict[str, Any]:
    """`carrier` with the current span's `traceparent` (and `tracestate`) set, when tracing is on."""
    if _tracer is not None:
        _propagator().inject(carrier)
    return carrier


@contextlib.contextmanager
def span(name: str, attributes: Mapping[str, Any] | None = None, *, kind: str = "internal",
         context: Any = None) -> Iterator[Any]:
    """A span made current for the block (None when tracing is off); `kind`: internal, server or client.
    An exception escaping the block is recorded on it, with an error status."""
    if _tracer is None:
        yield None
        return
    from opentelemetry.trace import SpanKind

    attributes = {k: v for k, v in (attributes or {}).items() if v is not None}
    with _tracer.start_as_current_span(name, context=context, kind=getattr(SpanKind, kind.upper()),
                                       attributes=attributes) as s:
        yield s


def current() -> Any:
    """The current span (None when tracing is off)."""
    if _tracer is None:
        return None
    from opentelemetry import trace

    return trace.get_current_span()


def annotate(s: Any, attributes: Mapping[str, Any]) -> None:
    """Set attributes on a span from `span` (nothing for None, or for None values)."""
    if s is not None:
        s.set_attributes({k: v for k, v in attributes.items() if v is not None})


def failed(s: Any, description: str) -> None:
    """Mark a span from `span` as an error (an upstream that failed, an answer with status >= 500)."""
    if s is not None:
        from opentelemetry.trace import Status, StatusCode

        s.set_status(Status(StatusCode.ERROR, description))


class Traced:
    """An ASGI app answering each HTTP request (probes aside) inside a server span named
    `METHOD ROUTE` (ROUTE one of `routes`, else the span is named by the method alone), whose
    parent is the request's `traceparent` header."""

    def __init__(self, app: Any, door: str, routes: frozenset[str]) -> None:
        self.app, self.door, self.routes = app, door, routes

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        path = scope.get("path", "")
        if scope["type"] != "http" or path in _SKIPPED:
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers") or ()}
        method = scope.get("method", "GET")
        route = path if path in self.routes else None
        attributes = {"zc.door": self.door, "http.request.method": method, "url.path": path,
                      **({"http.route": route} if route else {})}
        with span(f"{method} {route}" if route else method, attributes, kind="server",
                  context=parent(headers)) as s:
            status = [500]

            async def sending(message: dict[str, Any]) -> None:
                if message["type"] == "http.response.start":
                    status[0] = message["status"]
                    annotate(s, {"http.response.status_code": status[0]})
                await send(message)

            await self.app(scope, receive, sending)
            if status[0] >= 500:
                failed(s, f"HTTP {status[0]}")


def traced(app: Any, door: str, routes: frozenset[str] = frozenset()) -> Any:
    """`app` in a `Traced` when the environment configures tracing (`setup`), else `app` itself."""
    return Traced(app, door, routes) if setup(door) else app
