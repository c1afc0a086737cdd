"""A local OpenAI-compatible chat-completions server for tests: no model, scripted behaviours.

    with OpenAIStub() as stub:            # 127.0.0.1, a free port, HTTP/1.1 keep-alive
        tier = OpenAITier(stub.base_url, "stub-model")
        stub.behaviour = "slow"; stub.delay_ms = 500
        ...
        stub.requests                      # the parsed JSON bodies it received, in order
        stub.connections                   # how many TCP connections it accepted

Behaviours:
    correct    answer with `answer` (an offered name, or an index into the offered names) or the
               first offered action, as a tool call (with `arguments`, a dict) when the request
               offered tools, else as JSON content {"action": …}; `content`, when set, is sent as
               the message's text instead
    slow       sleep `delay_ms`, then answer as "correct"
    garbage    200 with a body that is not JSON
    illegal    answer `illegal_action` (default: a name that was not offered)
    empty      200, no tool call and empty content
    http_error 500 with an OpenAI-style error body (`status` picks another code)
    drop       close the connection without any response
    malformed  200 with JSON that has no "choices"
    refuse     content {"action": null}
    trickle    answer as "correct", but send the whole response (status line and headers first) one
               byte every `delay_ms`; with `trickle_body`, the status line and headers at once and
               only the body a byte at a time; a stream sends one event every `delay_ms`

A request with `"stream": true` gets its well-formed reply as server-sent events (`chat.completion.chunk`
deltas: the text in pieces, each tool call's arguments in two fragments, then `[DONE]`); behaviour
`cut` (streams only) sends the first half of those events, then closes the connection.

`script`, a list of dicts of these settings (`behaviour`, `answer`, `arguments`, `content`,
`illegal_action`, `delay_ms`, `calls`, `trickle_body`), plays one entry per request, then the settings take
over
again; `calls`, a list of (name, arguments), answers several tool calls at once.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

BEHAVIOURS = ("correct", "slow", "garbage", "illegal", "empty", "http_error", "drop", "malformed", "refuse",
              "trickle")
FAST_BEHAVIOURS = tuple(b for b in BEHAVIOURS if b not in ("slow", "trickle"))


def free_port() -> int:
    """A port on 127.0.0.1 with nothing listening (bound, then released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def offered(body: dict) -> list[str]:
    """The names a request offered: tool names, or the JSON-schema enum."""
    if "tools" in body:
        return [t["function"]["name"] for t in body["tools"]]
    if "response_format" not in body:  # a chat request without tools (the gateway stripped them all)
        return []
    fmt = body["response_format"]  # OpenAI's json_schema form, or llama-cpp-python's json_object one
    schema = fmt["schema"] if fmt.get("type") == "json_object" else fmt["json_schema"]["schema"]
    return list(schema["properties"]["action"]["enum"])


def _completion(body: dict, message: dict, finish: str = "stop") -> dict:
    return {"id": "chatcmpl-stub", "object": "chat.completion", "created": 0,
            "model": body.get("model", "stub"),
            "choices": [{"index": 0, "message": {"role": "assistant", **message}, "finish_reason": finish}],
            "usage": dict(USAGE)}


USAGE = {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10}  # every reply's


def _sse(done: dict, include_usage: bool = False) -> list[bytes]:
    """A chat completion as the events of a stream (with `include_usage`, a last chunk with no
    choice and the usage, as OpenAI sends it)."""
    head = {"id": done["id"], "object": "chat.completion.chunk", "created": 0, "model": done["model"]}
    message = done["choices"][0]["message"]
    deltas: list[dict] = [{"role": "assistant", "content": ""}]
    text = message.get("content") or ""
    step = max(1, len(text) // 3)
    deltas += [{"content": text[i:i + step]} for i in range(0, len(text), step)]
    for i, call in enumerate(message.get("tool_calls") or ()):
        args = call["function"]["arguments"]
        half = len(args) // 2
        deltas.append({"tool_calls": [{"index": i, "id": call["id"], "type": "function",
                                       "function": {"name": call["function"]["name"],
                                                    "arguments": args[:half]}}]})
        deltas.append({"tool_calls": [{"index": i, "function": {"arguments": args[half:]}}]})
    events = [{**head, "choices": [{"index": 0, "delta": d, "finish_reason": None}]} for d in deltas]
    finish = done["choices"][0]["finish_reason"]
    events.append({**head, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
    if include_usage:
        events.append({**head, "choices": [], "usage": done["usage"]})
    return [b"data: " + json.dumps(e).encode() + b"\n\n" for e in events] + [b"data: [DONE]\n\n"]


def _call(i: int, name: str, arguments: dict | str | None) -> dict:
    args = arguments if isinstance(arguments, str) else json.dumps(arguments or {})
    return {"id": f"call_{i}", "type": "function", "function": {"name": name, "arguments": args}}


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def setup(self) -> None:
        super().setup()
        self.server.stub._connected(self.connection)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            self.server.stub._disconnected(self.connection)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the stdlib's name
        pass

    def do_GET(self) -> None:  # noqa: N802 - the stdlib's name; `GET /models`, for readiness probes
        if self.path.rstrip("/").endswith("/models"):
            models = {"object": "list", "data": [{"id": "stub", "object": "model"}]}
            return self._send(200, json.dumps(models).encode())
        self._send(404, b'{"error": {"message": "not found"}}')

    def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
        stub = self.server.stub
        raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        try:
            body = json.loads(raw)
        except ValueError:
            body = {"_unparsable": raw.decode("utf-8", "replace")}
        stub._record(self.path, dict(self.headers), body)
        with stub._lock:
            turn = {"behaviour": stub.behaviour, "answer": stub.answer, "arguments": stub.arguments,
                    "content": stub.content, "illegal_action": stub.illegal_action, "delay_ms": stub.delay_ms,
                    "calls": stub.calls, "trickle_body": stub.trickle_body,
                    **(stub.script.pop(0) if stub.script else {})}
        behaviour, delay_ms = turn["behaviour"], turn["delay_ms"]
        if self.path.rstrip("/") != stub.path:
            return self._send(404, json.dumps({"error": {"message": f"no route {self.path}"}}).encode())
        if behaviour == "drop":
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        if behaviour == "slow":
            time.sleep(delay_ms / 1000.0)
        if behaviour == "garbage":
            return self._send(200, b"<html>this is not JSON</html>", "text/html")
        if behaviour == "http_error":
            err = {"error": {"message": "stub failure", "type": "server_error", "code": stub.status}}
            return self._send(stub.status, json.dumps(err).encode())
        if behaviour == "malformed":
            return self._send(200, json.dumps({"id": "chatcmpl-stub", "object": "chat.completion"}).encode())
        trickle_s = delay_ms / 1000.0 if behaviour == "trickle" else 0.0
        if body.get("stream") is True:
            usage = (body.get("stream_options") or {}).get("include_usage") is True
            return self._stream(_sse(stub.reply(body, behaviour, turn), usage), cut=behaviour == "cut",
                                every_s=trickle_s)
        self._send(200, json.dumps(stub.reply(body, behaviour, turn)).encode(), trickle_s=trickle_s,
                   head_at_once=bool(turn["trickle_body"]))

    def _stream(self, events: list[bytes], cut: bool, every_s: float = 0.0) -> None:
        try:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Connection", "close")
            self.end_headers()
            for e in events[:len(events) // 2] if cut else events:
                self.wfile.write(e)
                self.wfile.flush()
                time.sleep(every_s)
            if cut:
                self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.close_connection = True

    def _send(self, status: int, payload: bytes, ctype: str = "application/json", trickle_s: float = 0.0,
              head_at_once: bool = False) -> None:
        try:
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(payload)))
            self._headers_buffer.append(b"\r\n")  # end_headers, with the body in the same write:
            data = b"".join(self._headers_buffer) + payload  # no Nagle/delayed-ACK stall
            self._headers_buffer = []
            if not trickle_s:
                self.wfile.write(data)
                return
            start = len(data) - len(payload) if head_at_once else 0
            if start:
                self.wfile.write(data[:start])
                self.wfile.flush()
            # one byte at a time: headers (or the body) never complete in time
            for i in range(start, len(data)):
                self.wfile.write(data[i:i + 1])
                self.wfile.flush()
                time.sleep(trickle_s)
        except OSError:  # the client gave up (e.g. timed out) before the reply
            self.close_connection = True


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    request_queue_size = 64
    stub: OpenAIStub

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # dropped and timed-out connections are expected here


class OpenAIStub:
    """A local OpenAI-compatible server with a settable behaviour; a context manager."""

    def __init__(self, behaviour: str = "correct", *, path: str = "/v1/chat/completions") -> None:
        self.behaviour = behaviour
        self.answer: str | int | None = None
        self.illegal_action: str | None = None
        self.arguments: dict | str | None = None
        self.content: str | None = None
        self.calls: list[tuple[str, dict | str]] | None = None
        self.trickle_body = False
        self.script: list[dict] = []
        self.delay_ms = 500.0
        self.status = 500
        self.path = path
        self.requests: list[dict] = []
        self.headers: list[dict] = []
        self.paths: list[str] = []
        self.connections = 0
        self._open: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        assert self._server is not None, "the stub is not started"
        return self._server.server_address[1]

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}{self.path.removesuffix('/chat/completions')}"

    def start(self) -> OpenAIStub:
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.stub = self
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="openai-stub", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is None:
            return
        self._server.shutdown()
        with self._lock:
            sockets = list(self._open)
        for s in sockets:  # idle keep-alive connections: wake their handler threads
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self._server.server_close()
        self._thread.join(timeout=5)
        self._server = None

    def __enter__(self) -> OpenAIStub:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def reset(self, behaviour: str = "correct") -> None:
        """Back to answering correctly, with nothing recorded (connections are still counted)."""
        with self._lock:
            self.behaviour, self.answer, self.illegal_action = behaviour, None, None
            self.arguments, self.content, self.calls, self.trickle_body = None, None, None, False
            self.script.clear()
            self.delay_ms, self.status = 500.0, 500
            self.requests.clear()
            self.headers.clear()
            self.paths.clear()

    def reply(self, body: dict, behaviour: str, turn: dict | None = None) -> dict:
        """The chat completion for a request that gets a well-formed reply (`turn`: this request's
        settings, default the stub's own)."""
        t = turn or {"answer": self.answer, "arguments": self.arguments, "content": self.content,
                     "illegal_action": self.illegal_action, "calls": self.calls}
        names = offered(body)
        tools = "tools" in body
        if behaviour == "empty":
            return _completion(body, {"content": "", "tool_calls": []} if tools else {"content": ""})
        if t["content"] is not None:
            return _completion(body, {"content": t["content"]})
        if behaviour == "refuse":
            return _completion(body, {"content": json.dumps({"action": None})})
        if t["calls"]:
            calls = [_call(i, n, a) for i, (n, a) in enumerate(t["calls"])]
            return _completion(body, {"content": None, "tool_calls": calls}, "tool_calls")
        if behaviour == "illegal":
            name = t["illegal_action"] or next(f"deploy{i or ''}" for i in range(len(names) + 1)
                                               if f"deploy{i or ''}" not in names)
        elif isinstance(t["answer"], int):
            name = names[t["answer"]]
        elif t["answer"] is None and not names:  # nothing offered: a text reply
            return _completion(body, {"content": "stub reply"})
        else:
            name = t["answer"] if t["answer"] is not None else names[0]
        if tools or "response_format" not in body:
            return _completion(body, {"content": None, "tool_calls": [_call(0, name, t["arguments"])]},
                               "tool_calls")
        return _completion(body, {"content": json.dumps({"action": name})})

    def _record(self, path: str, headers: dict, body: dict) -> None:
        with self._lock:
            self.paths.append(path)
            self.headers.append(headers)
            self.requests.append(body)

    def _connected(self, sock: socket.socket) -> None:
        with self._lock:
            self.connections += 1
            self._open.add(sock)

    def _disconnected(self, sock: socket.socket) -> None:
        with self._lock:
            self._open.discard(sock)
