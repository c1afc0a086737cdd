"""zc serve refuses a request body that trickles in slower than the request's deadline (408)."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import zcompile
from openai_stub import OpenAIStub
from zcompile.gateway import Gateway, Running

ROOT = Path(__file__).resolve().parents[1]
AIRLINE = ROOT / "policies" / "airline_chat.zc"


def length(reply: bytes) -> int:
    """The Content-Length of a response whose head has arrived."""
    head = reply.partition(b"\r\n\r\n")[0].decode().lower()
    return next((int(h.split(":")[1]) for h in head.split("\r\n") if h.startswith("content-length:")), 0)


def test_a_trickled_body_gets_408_within_the_deadline_and_leaves_no_receipt(tmp_path):
    policy = zcompile.compile_text(AIRLINE.read_text(), str(AIRLINE))
    receipts = tmp_path / "receipts.jsonl"
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]}).encode()
    with OpenAIStub() as stub:
        gw = Gateway(policy, stub.base_url, "stub-model", receipts=receipts, timeout_ms=300)
        with Running(gw) as srv:
            host, port = srv.base_url.removeprefix("http://").removesuffix("/v1").split(":")
            with socket.create_connection((host, int(port)), timeout=10) as s:
                s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                          b"Content-Length: %d\r\n\r\n" % len(body))
                sent, reply = 0, b""
                s.settimeout(0.05)
                while sent < len(body) and not reply:  # a byte every 50 ms: 3 s for the whole body
                    s.sendall(body[sent:sent + 1])
                    sent += 1
                    try:
                        reply = s.recv(4096)
                    except TimeoutError:
                        pass
                s.settimeout(10)
                while b"\r\n\r\n" not in reply or len(reply.partition(b"\r\n\r\n")[2]) < length(reply):
                    more = s.recv(4096)
                    if not more:
                        break
                    reply += more
        gw.close()
        assert stub.requests == []  # nothing was forwarded
    head, _, rest = reply.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408"), reply[:200]
    assert sent < len(body)  # refused before the body was complete
    assert json.loads(rest)["error"]["code"] == "body_timeout"
    assert not receipts.exists() or receipts.read_text() == ""
