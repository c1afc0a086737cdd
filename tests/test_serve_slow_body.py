"""zc serve refuses a request body that trickles in slower than the request's deadline (408)."""

from __future__ import annotations

import json
from pathlib import Path

from openai_stub import OpenAIStub
from trickle import trickle

import zcompile
from zcompile.gateway import Gateway, Running

ROOT = Path(__file__).resolve().parents[1]
AIRLINE = ROOT / "policies" / "airline_chat.zc"


def test_a_trickled_body_gets_408_within_the_deadline_and_leaves_no_receipt(tmp_path):
    policy = zcompile.compile_text(AIRLINE.read_text(), str(AIRLINE))
    receipts = tmp_path / "receipts.jsonl"
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]}).encode()
    with OpenAIStub() as stub:
        gw = Gateway(policy, stub.base_url, "stub-model", receipts=receipts, timeout_ms=300)
        with Running(gw) as srv:
            host, port = srv.base_url.removeprefix("http://").removesuffix("/v1").split(":")
            reply, sent = trickle(host, int(port), b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                                  b"Content-Type: application/json\r\n", body)  # 3 s for the whole body
        gw.close()
        assert stub.requests == []  # nothing was forwarded
    head, _, rest = reply.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408"), reply[:200]
    assert sent < len(body)  # refused before the body was complete
    assert json.loads(rest)["error"]["code"] == "body_timeout"
    assert not receipts.exists() or receipts.read_text() == ""
