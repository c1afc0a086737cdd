"""The ASGI app of `zc pdp`: the AuthZEN Authorization API 1.0 over HTTP (the discovery document,
evaluation, evaluations and the three searches), `X-Request-ID` echoed, errors as the spec's
"error message string", sent as a JSON string."""

from __future__ import annotations

import asyncio
import hmac
import logging
from collections.abc import Callable
from typing import Any

import msgspec
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from .. import tracing
from ..gateway.body import read_body
from ..gateway.request import BadRequest
from ..metrics import DoorMetrics, Instrumented
from .model import BadInput, body_object
from .pdp import PDP

MAX_BODY_BYTES = 1024 * 1024
TIMEOUT_S = 30.0
_log = logging.getLogger("zcompile.authzen")
ENDPOINTS = {"access_evaluation_endpoint": "/access/v1/evaluation",
             "access_evaluations_endpoint": "/access/v1/evaluations",
             "search_subject_endpoint": "/access/v1/search/subject",
             "search_resource_endpoint": "/access/v1/search/resource",
             "search_action_endpoint": "/access/v1/search/action"}


def create_app(pdp: PDP, *, pdp_url: str | None = None, api_key: str | None = None,
               max_body_bytes: int = MAX_BODY_BYTES, timeout_s: float = TIMEOUT_S) -> Any:
    """The ASGI app serving `pdp` (with `GET /readyz` and Prometheus `GET /metrics`).

    Args:
        pdp: the decision point.
        pdp_url: the `policy_decision_point` identifier of the discovery document, the base of its
            endpoint URLs (default: the URL the request reached, e.g. `http://127.0.0.1:8089`).
        api_key: when set, every API request must carry `Authorization: Bearer <api_key>` (or the
            key itself as the header's value, as the AuthZEN interop's PEPs send it): 401 otherwise.
        max_body_bytes: larger bodies are refused (413).
        timeout_s: a body slower to arrive than this is refused (408).
    """
    searches = pdp.searches

    def text(status: int, message: str, headers: dict[str, str]) -> Response:
        """An error: the specification's "error message string", as a JSON string (application/json)."""
        return Response(msgspec.json.encode(message), status_code=status, media_type="application/json",
                        headers=headers)

    def authorised(request: Request) -> bool:
        if api_key is None:
            return True
        got = request.headers.get("authorization", "")
        return any(hmac.compare_digest(got.encode(), v.encode()) for v in (api_key, f"Bearer {api_key}"))

    def endpoint(fn: Callable[[dict[str, Any]], dict[str, Any]], threaded: bool = False):
        """A POST handler around `fn`: in a worker thread when `threaded` (a directory search, whose
        work grows with the directory), else inline: a decision takes microseconds, less than the
        hop to a thread (which buys no parallelism for Python work anyway), and a batch is bounded."""
        async def handle(request: Request) -> Response:
            rid = request.headers.get("x-request-id")
            headers = {"X-Request-ID": rid} if rid is not None else {}
            if not authorised(request):
                return text(401, "missing or wrong Authorization header",
                            {**headers, "WWW-Authenticate": "Bearer"})
            ctype = request.headers.get("content-type", "application/json").split(";")[0].strip().lower()
            if ctype != "application/json":
                return text(415, f"Content-Type must be application/json, got `{ctype}`", headers)
            try:
                raw = await asyncio.wait_for(read_body(request, max_body_bytes), timeout_s)
                body = body_object(raw)
                with tracing.span("zc.decision", {"zc.door": "pdp", "zc.endpoint": request.url.path,
                                                  **_traced(body)}) as span:
                    result = await run_in_threadpool(fn, body) if threaded else fn(body)
                    tracing.annotate(span, _verdicts(result))
            except (BadInput, BadRequest) as exc:
                return text(exc.status, exc.message, headers)
            except TimeoutError:
                return text(408, f"the request body did not arrive within {timeout_s:g} s", headers)
            except Exception as exc:  # noqa: BLE001 - a bug must not leak a traceback or take the server down
                _log.exception("zc pdp: the request failed")
                return text(500, f"internal error: {type(exc).__name__}", headers)
            return Response(msgspec.json.encode(result), media_type="application/json", headers=headers)
        return handle

    async def discovery(request: Request) -> Response:
        base = (pdp_url or str(request.base_url)).rstrip("/")
        doc = {"policy_decision_point": base}
        for key, path in ENDPOINTS.items():
            kind = key.removeprefix("search_").removesuffix("_endpoint")
            if not key.startswith("search_") or searches[kind]:
                doc[key] = base + path
        rid = request.headers.get("x-request-id")
        return Response(msgspec.json.encode(doc), media_type="application/json",
                        headers={"X-Request-ID": rid} if rid is not None else {})

    async def health(request: Request) -> Response:
        return Response(msgspec.json.encode({"status": "ok", "policy": pdp.policy.name,
                                             "policy_sha256": pdp.policy.sha256,
                                             "mapping": pdp.mapping.name}),
                        media_type="application/json")

    async def http_error(request: Request, exc: Exception) -> Response:
        status = exc.status_code if isinstance(exc, HTTPException) else 500
        detail = exc.detail if isinstance(exc, HTTPException) else "internal error"
        rid = request.headers.get("x-request-id")
        return text(status, f"{request.method} {request.url.path}: {detail}", {"X-Request-ID": rid} if rid
                    else {})

    meter = DoorMetrics("pdp")

    async def metrics(request: Request) -> Response:
        body, ctype = meter.exposition()
        return Response(body, media_type=ctype)

    routes = [Route("/.well-known/authzen-configuration", discovery, methods=["GET"]),
              Route("/healthz", health, methods=["GET"]), Route("/readyz", health, methods=["GET"]),
              Route("/metrics", metrics, methods=["GET"]),
              Route(ENDPOINTS["access_evaluation_endpoint"], endpoint(pdp.evaluate), methods=["POST"]),
              Route(ENDPOINTS["access_evaluations_endpoint"], endpoint(pdp.evaluate_many), methods=["POST"]),
              Route(ENDPOINTS["search_action_endpoint"], endpoint(pdp.search_action), methods=["POST"]),
              # answered when the mapping makes them answerable (listed in the discovery document
              # then); otherwise a 400 that says why
              Route(ENDPOINTS["search_resource_endpoint"], endpoint(pdp.search_resource, True),
                    methods=["POST"]),
              Route(ENDPOINTS["search_subject_endpoint"], endpoint(pdp.search_subject, True),
                    methods=["POST"])]
    app = Instrumented(Starlette(routes=routes, exception_handlers={HTTPException: http_error}), meter)
    return tracing.traced(app, "pdp", frozenset(r.path for r in routes))


def _traced(body: dict[str, Any]) -> dict[str, Any]:
    """A request's span attributes: its action's name and how many evaluations it asks (no subject,
    resource or context values)."""
    action = body.get("action")
    name = action.get("name") if isinstance(action, dict) else None
    many = body.get("evaluations")
    return {"zc.action": name if isinstance(name, str) else None,
            "zc.evaluations": len(many) if isinstance(many, list) else None}


def _verdicts(result: dict[str, Any]) -> dict[str, Any]:
    """A response's span attributes: the decision, or how many of a batch permit."""
    if isinstance(result.get("decision"), bool):
        return {"zc.decision": result["decision"]}
    many = result.get("evaluations")
    if isinstance(many, list):
        return {"zc.permitted": sum(1 for d in many if isinstance(d, dict) and d.get("decision") is True)}
    return {}
