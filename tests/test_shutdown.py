"""Clean shutdown of every door: SIGTERM and SIGINT sent to the real process while requests are in
flight; each is answered, its receipt written, the children stopped, and the process exits 0 with
no traceback (uvicorn's re-raise of the caught signal is not let through)."""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
from doors import ROOT, free_port, start, stop
from openai import OpenAI
from openai_stub import OpenAIStub

from zcompile.receipts import read

SIGNALS = [signal.SIGTERM, signal.SIGINT]
MCP_POLICY = ROOT / "tests/fixtures/mcp/reservations.zc"
MCP_SERVER = ROOT / "tests/mcp_servers/reservations.py"
MODERN = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {},
}


def clean(code: int, err: str, out: str = "") -> None:
    assert code == 0, err
    assert "Traceback" not in err and "Aborted" not in err and "Error" not in err, err


def wait_for(predicate, timeout_s: float = 20) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.parametrize("sig", SIGNALS, ids=["SIGTERM", "SIGINT"])
def test_zc_serve_drains_and_exits_0(tmp_path, sig):
    n = 4
    with OpenAIStub() as stub:
        stub.behaviour, stub.delay_ms = "slow", 700
        port = free_port()
        proc = start(
            [
                "serve",
                "--policy",
                str(ROOT / "examples/gateway/desk.zc"),
                "--upstream",
                stub.base_url,
                "--model",
                "m",
                "--port",
                str(port),
                "--receipts",
                str(tmp_path / "r.jsonl"),
            ],
            port,
        )
        client = OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused", max_retries=0, timeout=20)
        messages = [{"role": "user", "content": "hello"}]
        tools = [
            {"type": "function", "function": {"name": "list_all_airports", "parameters": {"type": "object"}}},
            {"type": "function", "function": {"name": "get_user_details", "parameters": {"type": "object"}}},
        ]
        answers: list[str] = []
        history = [
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "c0",
                        "type": "function",
                        "function": {"name": "list_all_airports", "arguments": "{}"},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "c0", "content": "[]"},
        ]

        def ask() -> None:  # past the compiler's one-legal-action answer: the upstream is asked
            r = client.chat.completions.create(model="m", messages=messages + history, tools=tools)
            answers.append(r.choices[0].finish_reason)

        threads = [threading.Thread(target=ask) for _ in range(n)]
        for t in threads:
            t.start()
        wait_for(lambda: len(stub.requests) == n)
        code, err, _ = stop(proc, sig)
        for t in threads:
            t.join(timeout=20)
    clean(code, err)
    assert len(answers) == n  # every request in flight was answered
    assert len(list(read(tmp_path / "r.jsonl"))) == n


def mcp_args(tmp_path: Path) -> list[str]:
    return [
        "mcp",
        "--policy",
        str(MCP_POLICY),
        "--server",
        f"{sys.executable} {MCP_SERVER} --log {tmp_path / 'c.jsonl'}",
        "--receipts",
        str(tmp_path / "r.jsonl"),
    ]


def server_pid(tmp_path: Path) -> int:
    return json.loads((tmp_path / "c.jsonl").read_text().splitlines()[0])["pid"]


SLOW_CALL = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "tools/call",
    "params": {"name": "slow", "arguments": {"seconds": 0.7}, "_meta": MODERN},
}


@pytest.mark.parametrize("sig", SIGNALS, ids=["SIGTERM", "SIGINT"])
def test_zc_mcp_stdio_drains_and_exits_0(tmp_path, sig):
    import subprocess

    proc = start(mcp_args(tmp_path), None, stdin=subprocess.PIPE)
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write((json.dumps(SLOW_CALL) + "\n").encode())
    proc.stdin.flush()
    wait_for(lambda: (tmp_path / "c.jsonl").exists())  # the call reached the server
    code, err, out = stop(proc, sig)  # stdin stays open: the agent has not gone away
    clean(code, err)
    answer = json.loads(out.splitlines()[0])
    assert answer["id"] == 1 and answer["result"]["content"][0]["text"] == "slept"
    rs = list(read(tmp_path / "r.jsonl"))
    assert [r.meta["mcp"]["outcome"] for r in rs] == ["ok"]
    assert not alive(server_pid(tmp_path))


@pytest.mark.parametrize("sig", SIGNALS, ids=["SIGTERM", "SIGINT"])
def test_zc_mcp_http_drains_and_exits_0(tmp_path, sig):
    port = free_port()
    proc = start([*mcp_args(tmp_path), "--http", str(port)], port)
    got: list[httpx.Response] = []
    headers = {
        "accept": "application/json, text/event-stream",
        "mcp-protocol-version": "2026-07-28",
        "mcp-method": "tools/call",
        "mcp-name": "slow",
    }

    def call() -> None:
        got.append(httpx.post(f"http://127.0.0.1:{port}/mcp", json=SLOW_CALL, headers=headers, timeout=20))

    t = threading.Thread(target=call)
    t.start()
    wait_for(lambda: (tmp_path / "c.jsonl").exists())
    code, err, _ = stop(proc, sig)
    t.join(timeout=20)
    clean(code, err)
    assert got and got[0].status_code == 200 and "slept" in got[0].text
    assert [r.meta["mcp"]["outcome"] for r in read(tmp_path / "r.jsonl")] == ["ok"]
    assert not alive(server_pid(tmp_path))


@pytest.mark.parametrize("sig", SIGNALS, ids=["SIGTERM", "SIGINT"])
def test_zc_pdp_exits_0(sig):
    port = free_port()
    proc = start(
        [
            "pdp",
            "--policy",
            str(ROOT / "examples/authzen/desk.zc"),
            "--mapping",
            str(ROOT / "examples/authzen/desk.mapping.yaml"),
            "--port",
            str(port),
        ],
        port,
    )
    assert httpx.get(f"http://127.0.0.1:{port}/.well-known/authzen-configuration").status_code == 200
    clean(*stop(proc, sig))
