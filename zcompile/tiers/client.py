"""The wire of the LLM tiers: one chat-completions POST over httpx, ended by its wall-clock deadline."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpcore
import httpx

from .. import tracing
from ..errors import ZcError
from ..inputs import decode_json

SNIPPET = 120  # characters of a server's text quoted in a detail
CONNECT_RETRIES = 1  # a failed connect is tried once more, at once (httpcore's backoff: 0 s, 0.5 s, 1 s, …)
LIMITS = httpx.Limits(max_connections=64, max_keepalive_connections=16, keepalive_expiry=5.0)


class ChatClient:
    """One kept-alive httpx client for one chat-completions URL, shared by every thread that calls it.

    A call's deadline is mapped onto httpx's timeouts (connect, write, read and pool each get the time
    left when the call starts), and it also bounds the whole call: the transport gives every socket
    operation (the connect, each write and read, a retry's backoff) at most the time left by then, so
    a server that trickles its headers or body a byte at a time, which restarts httpx's per-read
    timeout with every byte, still cannot keep a call past its deadline.

    Args:
        url: the endpoint, e.g. "http://127.0.0.1:8080/v1/chat/completions".
        headers: sent with every request (the API key's `Authorization` among them).
    """

    def __init__(self, url: str, headers: dict[str, str]) -> None:
        self.url = url
        # trust_env=False: proxy variables must not divert calls to a local model server.
        self._client = httpx.Client(headers=headers, transport=DeadlineTransport(), trust_env=False,
                                    follow_redirects=False)

    def close(self) -> None:
        """Close the connections. Later calls answer "error" (`tier unavailable: …`)."""
        self._client.close()

    def exchange(self, body: dict[str, Any], deadline: float, on_event: Callable[[Any], None] | None = None,
                 since: float | None = None) -> tuple[str, Any, str]:
        """POST one chat-completions `body`, ending by `deadline` (a `time.perf_counter()` second)
        whatever the server does: ("ok", the decoded JSON reply, "") or ("timeout" | "error", None,
        the cause). Never raises for what the server does.

        With `on_event` (for a body with `"stream": true`), a server-sent-events reply is read as it
        arrives: each event's decoded JSON goes to `on_event`, and the reply is the list of events
        (a plain JSON reply is returned as it is). `since` (a `perf_counter()` second) is when the
        caller's budget began: a timeout's detail names `deadline - since`, else the time left now."""
        now = time.perf_counter()
        if deadline <= now:
            return "timeout", None, "no time left for this tier"
        budget = deadline - (now if since is None else since)  # what a timeout's detail names
        try:
            content = json.dumps(body, ensure_ascii=False, default=jsonable).encode()
        except (TypeError, ValueError) as exc:  # e.g. a non-JSON value in extra_body
            return "error", None, f"request not encodable: {exc}"
        if not tracing.enabled():
            return self._exchange(content, deadline, on_event, budget)
        model = body.get("model") if isinstance(body.get("model"), str) else None
        url = httpx.URL(self.url)
        with tracing.span(f"chat {model}" if model else "chat", {
                "gen_ai.operation.name": "chat", "gen_ai.request.model": model, "server.address": url.host,
                "server.port": url.port, "zc.stream": on_event is not None}, kind="client") as span:
            outcome, reply, detail = self._exchange(content, deadline, on_event, budget)
            tracing.annotate(span, {"zc.outcome": outcome})
            if outcome != "ok":
                tracing.failed(span, outcome)
            return outcome, reply, detail

    def _exchange(self, content: bytes, deadline: float, on_event: Callable[[Any], None] | None,
                  budget: float) -> tuple[str, Any, str]:
        try:
            status, raw = self._post(content, deadline, on_event)
        except _BadStream as exc:
            return "error", None, f"malformed reply: {exc}"
        except httpx.TimeoutException as exc:
            return "timeout", None, f"timed out after {budget * 1000:.0f} ms ({_phase(exc)})"
        except httpx.ConnectError as exc:
            return "error", None, _connect_detail(exc)
        except httpx.RemoteProtocolError as exc:
            return "error", None, f"connection dropped: {_first_line(exc)}"
        except httpx.ReadError as exc:
            return "error", None, f"connection reset: {_first_line(exc)}"
        except httpx.HTTPError as exc:
            return "error", None, f"{type(exc).__name__}: {_first_line(exc)}"
        except RuntimeError as exc:  # the client was closed
            return "error", None, f"tier unavailable: {exc}"
        if status != 200:
            return "error", None, f"HTTP {status}{_error_message(raw)}"
        if isinstance(raw, list):  # the events of a stream
            return "ok", raw, ""
        try:
            return "ok", loads(raw), ""
        except (ValueError, UnicodeDecodeError, RecursionError):
            return "error", None, f"malformed reply: body is not JSON: {snippet(raw)}"

    def _post(self, content: bytes, deadline: float,
              on_event: Callable[[Any], None] | None = None) -> tuple[int, bytes | list]:
        timeout = httpx.Timeout(max(deadline - time.perf_counter(), 0.001))  # each phase: the time left
        with _until(deadline), self._client.stream("POST", self.url, content=content, timeout=timeout,
                                                   headers=tracing.inject({})) as resp:
            tracing.annotate(tracing.current(), {"http.response.status_code": resp.status_code})
            sse = resp.headers.get("content-type", "").startswith("text/event-stream")
            if on_event is None or resp.status_code != 200 or not sse:
                return resp.status_code, resp.read()
            return resp.status_code, _events(resp, on_event)


class _BadStream(Exception):
    """A server-sent-events reply with an event that is not JSON, or that ends before `[DONE]`."""


def _events(resp: httpx.Response, on_event: Callable[[Any], None]) -> list:
    """The decoded `data:` events of an SSE reply up to `[DONE]`, each handed to `on_event` on arrival."""
    out = []
    for line in resp.iter_lines():
        if not line.startswith("data:"):
            continue  # comments, `event:` and `id:` lines, the blank lines between events
        data = line[5:].strip()
        if data == "[DONE]":
            return out
        try:
            event = loads(data)
        except (ValueError, RecursionError):
            raise _BadStream(f"an event is not JSON: {snippet(data)}") from None
        out.append(event)
        on_event(event)
    raise _BadStream(f"the stream ended before [DONE] after {len(out)} events (cut short?)")


# ---- the transport: httpx over httpcore's pool, every socket operation bounded by the deadline ----
_DEADLINE = threading.local()  # `.at`: the perf_counter second by which this thread's call must end


@contextlib.contextmanager
def _until(deadline: float) -> Iterator[None]:
    """Bound this thread's socket operations by `deadline` while the block runs."""
    _DEADLINE.at = deadline
    try:
        yield
    finally:
        _DEADLINE.at = None


def _left(timeout: float | None, exc: type[Exception]) -> float | None:
    at = getattr(_DEADLINE, "at", None)
    if at is None:
        return timeout
    left = at - time.perf_counter()
    if left <= 0:
        raise exc("the call's deadline passed")
    return left if timeout is None else min(timeout, left)


class _DeadlineStream(httpcore.NetworkStream):
    """A socket stream whose every read and write waits at most until the calling thread's deadline."""

    def __init__(self, inner: httpcore.NetworkStream) -> None:
        self._inner = inner

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._inner.read(max_bytes, _left(timeout, httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._inner.write(buffer, _left(timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        self._inner.close()

    def start_tls(self, ssl_context: Any, server_hostname: str | None = None,
                  timeout: float | None = None) -> httpcore.NetworkStream:
        return _DeadlineStream(self._inner.start_tls(ssl_context, server_hostname,
                                                     _left(timeout, httpcore.ConnectTimeout)))

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class _DeadlineBackend(httpcore.NetworkBackend):
    """httpcore's sync backend, with connects, streams and retry backoffs bounded by the calling
    thread's deadline."""

    def __init__(self) -> None:
        self._inner = httpcore.SyncBackend()

    def connect_tcp(self, host: str, port: int, timeout: float | None = None, local_address: str
                    | None = None, socket_options: Any = None) -> httpcore.NetworkStream:
        return _DeadlineStream(self._inner.connect_tcp(host, port, _left(timeout, httpcore.ConnectTimeout),
                                                       local_address, socket_options))

    def connect_unix_socket(self, path: str, timeout: float | None = None,
                            socket_options: Any = None) -> httpcore.NetworkStream:
        return _DeadlineStream(self._inner.connect_unix_socket(path, _left(timeout, httpcore.ConnectTimeout),
                                                               socket_options))

    def sleep(self, seconds: float) -> None:
        left = _left(None, httpcore.ConnectTimeout)
        if left is not None and seconds >= left:  # the backoff before a retry would outlast the call
            self._inner.sleep(left)
            raise httpcore.ConnectTimeout("the call's deadline passed before a connect retry")
        self._inner.sleep(seconds)


_AS_HTTPX = (  # httpcore's exceptions and the httpx exceptions they are, the most specific first
    (httpcore.ConnectTimeout, httpx.ConnectTimeout), (httpcore.ReadTimeout, httpx.ReadTimeout),
    (httpcore.WriteTimeout, httpx.WriteTimeout), (httpcore.PoolTimeout, httpx.PoolTimeout),
    (httpcore.TimeoutException, httpx.TimeoutException), (httpcore.ConnectError, httpx.ConnectError),
    (httpcore.ReadError, httpx.ReadError), (httpcore.WriteError, httpx.WriteError),
    (httpcore.NetworkError, httpx.NetworkError), (httpcore.RemoteProtocolError, httpx.RemoteProtocolError),
    (httpcore.LocalProtocolError, httpx.LocalProtocolError), (httpcore.ProtocolError, httpx.ProtocolError),
    (httpcore.UnsupportedProtocol, httpx.UnsupportedProtocol))


@contextlib.contextmanager
def _as_httpx() -> Iterator[None]:
    try:
        yield
    except Exception as exc:
        mapped = next((to for core, to in _AS_HTTPX if isinstance(exc, core)), None)
        if mapped is None:
            raise
        raise mapped(str(exc)) from exc


class _Body(httpx.SyncByteStream):
    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def __iter__(self) -> Iterator[bytes]:
        with _as_httpx():
            yield from self._stream

    def close(self) -> None:
        self._stream.close()


class DeadlineTransport(httpx.BaseTransport):
    """httpx's transport contract over httpcore's connection pool (keep-alive within `LIMITS`,
    `CONNECT_RETRIES` connect retries, TCP_NODELAY) with a network backend that bounds each socket
    operation by the calling thread's deadline (`_until`). httpx.HTTPTransport takes no network
    backend, so this is the part of it the tiers use: the request and the response handed across,
    httpcore's exceptions raised as httpx's."""

    def __init__(self) -> None:
        # TCP_NODELAY: a small request must never wait on Nagle's algorithm for the server's delayed
        # ACK (~40 ms on Linux), which a reused connection can otherwise hit on every call.
        self._pool = httpcore.ConnectionPool(
            max_connections=LIMITS.max_connections,
            max_keepalive_connections=LIMITS.max_keepalive_connections,
            keepalive_expiry=LIMITS.keepalive_expiry, retries=CONNECT_RETRIES,
            socket_options=[(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)], network_backend=_DeadlineBackend())

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        url = request.url
        core = httpcore.Request(request.method, httpcore.URL(scheme=url.raw_scheme, host=url.raw_host,
                                                             port=url.port, target=url.raw_path),
                                headers=request.headers.raw, content=request.stream,
                                extensions=request.extensions)
        with _as_httpx():
            resp = self._pool.handle_request(core)
        return httpx.Response(resp.status, headers=resp.headers, stream=_Body(resp.stream),
                              extensions=resp.extensions)

    def close(self) -> None:
        self._pool.close()


# ---- causes and the server's text ---------------------------------------------------------------
def _phase(exc: httpx.TimeoutException) -> str:
    return {httpx.ConnectTimeout: "connect", httpx.ReadTimeout: "read", httpx.WriteTimeout: "write",
            httpx.PoolTimeout: "pool"}.get(type(exc), "timeout")


def _first_line(exc: Exception) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def _connect_detail(exc: httpx.ConnectError) -> str:
    text = _first_line(exc)
    cause = exc.__cause__ or exc.__context__
    while cause is not None and not isinstance(cause, OSError):
        cause = cause.__cause__ or cause.__context__
    if isinstance(cause, ConnectionRefusedError) or "refused" in text.lower():
        return "connection refused"
    return f"connection failed: {text}"


def jsonable(obj: Any) -> Any:
    """`json.dumps`'s `default` for requests: sets become sorted lists, tuples lists, anything else its
    `str`."""
    if isinstance(obj, (set, frozenset)):
        return sorted(obj, key=lambda x: (type(x).__name__, str(x)))
    if isinstance(obj, tuple):
        return list(obj)
    return str(obj)


def snippet(raw: bytes | str) -> str:
    """A server's text quoted in a cause: whitespace folded, cut at `SNIPPET` characters."""
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
    text = " ".join(text.split())
    return repr(text if len(text) <= SNIPPET else text[:SNIPPET] + "…")


def loads(text: str | bytes) -> Any:
    """A model server's JSON, nesting bounded (`inputs.MAX_JSON_DEPTH`): ValueError when it is not JSON,
    or nested deeper."""
    try:
        return decode_json(text, what="the reply")
    except ZcError as exc:
        raise ValueError(str(exc)) from None


def _error_message(raw: bytes) -> str:
    """`: message` from an OpenAI-style error body, if there is one."""
    try:
        err = loads(raw).get("error")
        msg = err.get("message") if isinstance(err, dict) else err
    except (ValueError, AttributeError, UnicodeDecodeError):
        return ""
    if not isinstance(msg, str) or not msg.strip():
        return ""
    msg = " ".join(msg.split())
    return ": " + (msg if len(msg) <= SNIPPET else msg[:SNIPPET] + "…")
