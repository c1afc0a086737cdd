"""OpenTelemetry spans of the doors, exported for real: each door runs as a subprocess with the OTel
SDK's OTLP/HTTP exporter pointed at an in-process collector (`Collector`, protobuf decoded with
opentelemetry-proto), and a request carrying a `traceparent` must come back as spans of that trace:
the server span, the decision inside it, the upstream request inside that, whose context the
upstream received. Without the variables, no exporter (nor the SDK) is loaded."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest
from doors import ROOT, free_port, start, stop
from openai_stub import OpenAIStub

from zcompile import tracing
from zcompile.errors import ZcError

trace_service = pytest.importorskip("opentelemetry.proto.collector.trace.v1.trace_service_pb2")

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_ID = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE_ID}-{PARENT_ID}-01"


class Collector:
    """An OTLP/HTTP trace receiver on 127.0.0.1: every span POSTed to /v1/traces, decoded, as a
    dict (name, kind, ids in hex, attributes as plain values, the service name)."""

    def __init__(self) -> None:
        self.spans: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        collector = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the stdlib's name
                pass

            def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
                raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                if self.path != "/v1/traces" or self.headers.get("Content-Type") != "application/x-protobuf":
                    self.send_response(404)
                    self.end_headers()
                    return
                collector.receive(raw)
                out = trace_service.ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def receive(self, raw: bytes) -> None:
        request = trace_service.ExportTraceServiceRequest.FromString(raw)
        for rs in request.resource_spans:
            service = {a.key: _value(a.value) for a in rs.resource.attributes}.get("service.name")
            for ss in rs.scope_spans:
                for s in ss.spans:
                    with self.lock:
                        self.spans.append({"name": s.name, "kind": s.kind, "trace_id": s.trace_id.hex(),
                                           "span_id": s.span_id.hex(), "parent": s.parent_span_id.hex(),
                                           "attributes": {a.key: _value(a.value) for a in s.attributes},
                                           "status": s.status.code, "service": service})

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def wait(self, names: set[str], timeout_s: float = 20) -> dict[str, dict[str, Any]]:
        """The first span of each name in `names` of trace TRACE_ID, once all have arrived."""
        deadline = time.monotonic() + timeout_s
        while True:
            with self.lock:
                found = {}
                for s in self.spans:
                    if s["trace_id"] == TRACE_ID and s["name"] in names:
                        found.setdefault(s["name"], s)
            if set(found) == names:
                return found
            assert time.monotonic() < deadline, f"spans {names - set(found)} not received: {self.spans}"
            time.sleep(0.05)

    def __enter__(self) -> Collector:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


def _value(v: Any) -> Any:
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return [_value(x) for x in v.array_value.values]
    return getattr(v, kind) if kind else None


def otel_env(endpoint: str | None, **more: str) -> dict[str, str]:
    """This environment without any OTEL_* variable, then with the collector's endpoint (and `more`)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    if endpoint is not None:
        env.update(OTEL_EXPORTER_OTLP_ENDPOINT=endpoint, OTEL_BSP_SCHEDULE_DELAY="50", **more)
    return env


SPAN_KIND_SERVER, SPAN_KIND_CLIENT, SPAN_KIND_INTERNAL = 2, 3, 1


# past the compiler's one-legal-action answer (the airports first): the upstream is asked
MESSAGES = [{"role": "user", "content": "secret words"},
            {"role": "assistant", "content": None, "tool_calls": [{"id": "c0", "type": "function",
                                                                   "function": {"name": "list_all_airports",
                                                                                "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "c0", "content": "[]"}]


def test_zc_serve_exports_request_decision_and_upstream_spans(tmp_path):
    tools = [{"type": "function", "function": {"name": n, "parameters": {"type": "object"}}}
             for n in ("list_all_airports", "get_user_details")]
    with Collector() as collector, OpenAIStub() as stub:
        port = free_port()
        proc = start(["serve", "--policy", str(ROOT / "examples/gateway/desk.zc"), "--upstream",
                      stub.base_url, "--model", "stub-model", "--port", str(port), "--receipts",
                      str(tmp_path / "r.jsonl")],
                     port, env=otel_env(collector.endpoint, OTEL_SERVICE_NAME="zc-under-test"))
        try:
            r = httpx.post(f"http://127.0.0.1:{port}/v1/chat/completions", timeout=20,
                           headers={"traceparent": TRACEPARENT},
                           json={"model": "m", "messages": MESSAGES, "tools": tools})
            assert r.status_code == 200, r.text
            spans = collector.wait({"POST /v1/chat/completions", "zc.decision", "chat stub-model"})
        finally:
            code, err, _ = stop(proc, signal.SIGTERM)
        assert code == 0, err
    server, decision, chat = (spans["POST /v1/chat/completions"], spans["zc.decision"],
                              spans["chat stub-model"])
    assert server["parent"] == PARENT_ID and server["kind"] == SPAN_KIND_SERVER
    assert server["service"] == "zc-under-test"
    assert server["attributes"] == {"zc.door": "serve", "http.request.method": "POST",
                                    "url.path": "/v1/chat/completions", "http.route": "/v1/chat/completions",
                                    "http.response.status_code": 200}
    assert decision["parent"] == server["span_id"] and decision["kind"] == SPAN_KIND_INTERNAL
    a = decision["attributes"]
    assert a["zc.door"] == "serve" and a["zc.status"] == 200 and a["zc.rung"] == r.headers["x-zc-rung"]
    assert "list_all_airports" in a["zc.legal"] and a["zc.legal.count"] == len(a["zc.legal"])
    assert a["zc.rung"] != "compiler" and a["zc.upstream_requests"] == 1
    assert a["zc.kind"] == "call" and a["zc.action"] in a["zc.legal"] and a["zc.blocked.rules"] == []
    assert chat["parent"] == decision["span_id"] and chat["kind"] == SPAN_KIND_CLIENT
    assert chat["attributes"]["gen_ai.request.model"] == "stub-model"
    assert chat["attributes"]["zc.outcome"] == "ok" and chat["attributes"]["http.response.status_code"] == 200
    # the upstream request carried the client span's context
    sent = {k.lower(): v for k, v in stub.headers[0].items()}
    assert sent["traceparent"] == f"00-{TRACE_ID}-{chat['span_id']}-01"
    # no argument values, no message text
    everything = repr([s["attributes"] for s in collector.spans])
    assert "secret words" not in everything


def test_without_the_variables_no_exporter_nor_sdk_is_loaded():
    code = ("import sys; from zcompile import tracing; from zcompile.gateway.app import create_app; "
            "assert not tracing.setup('serve') and not tracing.enabled(); "
            "assert tracing.parent({'traceparent': 'x'}) is None and tracing.inject({}) == {}; "
            "assert not any(m.startswith('opentelemetry.sdk') or m.startswith('opentelemetry.exporter') "
            "for m in sys.modules), sorted(m for m in sys.modules if m.startswith('opentelemetry'))")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=otel_env(None), capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize(("env", "names"), [
    ({}, []),
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, ["otlp"]),
    ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces"}, ["otlp"]),
    ({"OTEL_TRACES_EXPORTER": "console"}, ["console"]),
    ({"OTEL_TRACES_EXPORTER": "otlp,console"}, ["otlp", "console"]),
    ({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, []),
    ({"OTEL_SDK_DISABLED": "true", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, []),
])
def test_configured_reads_the_standard_variables(env, names):
    assert tracing.configured(env) == names


@pytest.mark.parametrize("env", [{"OTEL_TRACES_EXPORTER": "zipkin"},
                                 {"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}])
def test_configured_refuses_what_zc_does_not_set_up(env):
    with pytest.raises(ZcError, match="OTEL_"):
        tracing.configured(env)


def test_zc_pdp_exports_request_and_decision_spans():
    fix = ROOT / "tests" / "fixtures" / "authzen"
    case = json.loads((fix / "todo.decisions.json").read_text())["evaluation"][0]
    with Collector() as collector:
        port = free_port()
        proc = start(["pdp", "--policy", str(fix / "todo.zc"), "--mapping", str(fix / "todo.mapping.yaml"),
                      "--port", str(port)], port, env=otel_env(collector.endpoint))
        try:
            r = httpx.post(f"http://127.0.0.1:{port}/access/v1/evaluation", json=case["request"], timeout=20,
                           headers={"traceparent": TRACEPARENT})
            assert r.status_code == 200 and r.json()["decision"] is case["expected"]
            spans = collector.wait({"POST /access/v1/evaluation", "zc.decision"})
        finally:
            code, err, _ = stop(proc, signal.SIGTERM)
        assert code == 0, err
    server, decision = spans["POST /access/v1/evaluation"], spans["zc.decision"]
    assert server["parent"] == PARENT_ID and server["kind"] == SPAN_KIND_SERVER
    assert server["service"] == "zc-pdp"  # the default without OTEL_SERVICE_NAME
    assert server["attributes"]["zc.door"] == "pdp"
    assert server["attributes"]["http.response.status_code"] == 200
    assert decision["parent"] == server["span_id"]
    assert decision["attributes"] == {"zc.door": "pdp", "zc.endpoint": "/access/v1/evaluation",
                                      "zc.action": case["request"]["action"]["name"],
                                      "zc.decision": case["expected"]}
    assert case["request"]["subject"]["id"] not in repr([s["attributes"] for s in collector.spans])


def test_zc_mcp_http_exports_decision_and_server_call_spans(tmp_path):
    """The parent is the call's `_meta.traceparent` (the HTTP request's span is its sibling, as the SDK
    answers the call in a task of its own); the server receives the client span's context in
    its own `_meta.traceparent`; a blocked call has no server span, and names its rule."""
    log = tmp_path / "c.jsonl"
    headers = {"accept": "application/json, text/event-stream", "mcp-protocol-version": "2026-07-28",
               "mcp-method": "tools/call"}
    modern = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
              "io.modelcontextprotocol/clientCapabilities": {}}

    def call(name: str, args: dict[str, Any], trace: str) -> httpx.Response:
        body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                "params": {"name": name, "arguments": args, "_meta": {**modern, "traceparent": trace}}}
        return httpx.post(f"http://127.0.0.1:{port}/mcp", json=body, timeout=20,
                          headers={**headers, "mcp-name": name, "traceparent": trace})

    with Collector() as collector:
        port = free_port()
        proc = start(["mcp", "--policy", str(ROOT / "tests/fixtures/mcp/reservations.zc"), "--server",
                      f"{sys.executable} {ROOT / 'tests/mcp_servers/reservations.py'} --log {log}",
                      "--receipts", str(tmp_path / "r.jsonl"), "--http", str(port)], port,
                     env=otel_env(collector.endpoint))
        try:
            assert call("get_reservation", {"reservation_id": "SECRET42"}, TRACEPARENT).status_code == 200
            spans = collector.wait({"POST /mcp", "zc.decision", "tools/call get_reservation"})
            other = "00-" + "1" * 32 + "-" + "2" * 16 + "-01"
            assert call("cancel", {"reservation_id": "X"}, other).status_code == 200
        finally:
            code, err, _ = stop(proc, signal.SIGTERM)
        assert code == 0, err
    server, decision, upstream = spans["POST /mcp"], spans["zc.decision"], spans["tools/call get_reservation"]
    assert server["service"] == "zc-mcp" and server["attributes"]["zc.door"] == "mcp"
    assert server["parent"] == PARENT_ID and server["kind"] == SPAN_KIND_SERVER
    assert decision["parent"] == PARENT_ID and decision["trace_id"] == TRACE_ID
    a = decision["attributes"]
    assert a["zc.door"] == "mcp" and a["zc.action"] == "get_reservation" and a["zc.verdict"] == "allowed"
    assert "get_reservation" in a["zc.legal"] and a["zc.blocked.rules"] == []
    assert upstream["parent"] == decision["span_id"] and upstream["kind"] == SPAN_KIND_CLIENT
    assert upstream["attributes"]["zc.outcome"] == "ok"
    sent = json.loads(log.read_text().splitlines()[0])
    assert sent["traceparent"] == f"00-{TRACE_ID}-{upstream['span_id']}-01"
    blocked = [s for s in collector.spans if s["trace_id"] == "1" * 32]
    deadline = time.monotonic() + 20
    while len(blocked) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
        blocked = [s for s in collector.spans if s["trace_id"] == "1" * 32]
    assert sorted(s["name"] for s in blocked) == ["POST /mcp", "zc.decision"]  # no server call
    refused = next(s["attributes"] for s in blocked if s["name"] == "zc.decision")
    assert refused["zc.verdict"] == "blocked" and "agents_cancel" in refused["zc.blocked.rules"]
    assert "SECRET42" not in repr([s["attributes"] for s in collector.spans])
