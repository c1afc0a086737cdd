"""`zc mcp --http` as an OAuth 2.1 resource server: metadata, 401 / 403, audience, the token's
principal as the state key, and no token passed to the servers."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import anyio
import httpx
import jwt
import uvicorn
from cryptography.hazmat.primitives.asymmetric import rsa
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from zcompile.driver import compile_file
from zcompile.mcp import McpGateway, ServerSpec
from zcompile.mcp.auth import resource_server
from zcompile.mcp.serve import http_app

ROOT = Path(__file__).resolve().parent.parent
POLICY = ROOT / "tests/fixtures/mcp/reservations.zc"
SERVER = ROOT / "tests/mcp_servers/reservations.py"
ISSUER = "https://auth.example.test"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_resource_server(tmp_path):
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(key.public_key()))
    (tmp_path / "jwks.json").write_text(json.dumps({"keys": [{**jwk, "kid": "k1", "use": "sig",
                                                              "alg": "RS256"}]}))
    port = free_port()
    resource = f"http://127.0.0.1:{port}/mcp"

    def token(sub: str = "alice", aud: str = resource, iss: str = ISSUER, exp: float = 600,
              scope: str = "tools") -> str:
        claims = {"sub": sub, "aud": aud, "iss": iss, "exp": int(time.time() + exp), "scope": scope,
                  "client_id": "agent"}
        return jwt.encode(claims, key, algorithm="RS256", headers={"kid": "k1"})

    # the upstream over HTTP, so that what reaches it can be seen (its call log has the headers)
    up_port, log = free_port(), tmp_path / "calls.jsonl"
    proc = subprocess.Popen([sys.executable, str(SERVER), "--log", str(log), "--http", str(up_port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", up_port), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline
                time.sleep(0.1)
        gw = McpGateway(compile_file(POLICY), [ServerSpec.parse(f"http://127.0.0.1:{up_port}/mcp")],
                        receipts=tmp_path / "r.jsonl", state_key="auth", context={"user": {"role": "agent"}})
        settings, verifier = resource_server(issuer=ISSUER, resource=resource,
                                             jwks=str(tmp_path / "jwks.json"), scopes=["tools"])
        app = http_app(gw, auth=settings, token_verifier=verifier)
        server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))

        async def main() -> None:
            async with gw.connected(), anyio.create_task_group() as tg:
                tg.start_soon(server.serve)
                while not server.started:
                    await anyio.sleep(0.02)
                try:
                    await exercise()
                finally:
                    server.should_exit = True

        async def exercise() -> None:
            async with httpx.AsyncClient() as http:
                meta = await http.get(f"http://127.0.0.1:{port}/.well-known/oauth-protected-resource/mcp")
                assert meta.status_code == 200
                assert meta.json()["resource"] == resource and meta.json()["authorization_servers"] == [
                    ISSUER]
                body = {"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {}}
                hdrs = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
                r = await http.post(resource, json=body, headers=hdrs)
                assert r.status_code == 401 and "resource_metadata=" in r.headers["www-authenticate"]
                for bad in (token(aud="https://elsewhere.test/mcp"), token(iss="https://other.test"),
                            token(exp=-60), token()[:-4] + "AAAA"):
                    r = await http.post(resource, json=body,
                                        headers={**hdrs, "authorization": f"Bearer {bad}"})
                    assert r.status_code == 401, r.text
                r = await http.post(resource, json=body,
                                    headers={**hdrs, "authorization": f"Bearer {token(scope='read')}"})
                assert r.status_code == 403 and "insufficient_scope" in r.headers["www-authenticate"]
            alice = httpx.AsyncClient(headers={"authorization": f"Bearer {token('alice')}"})
            bob = httpx.AsyncClient(headers={"authorization": f"Bearer {token('bob')}"})
            async with Client(streamable_http_client(resource, http_client=alice), mode="2026-07-28") as a, \
                    Client(streamable_http_client(resource, http_client=bob), mode="2026-07-28") as b:
                assert "cancel" not in [t.name for t in (await a.list_tools()).tools]
                await a.call_tool("get_reservation", {"reservation_id": "X"})
                assert "cancel" in [t.name for t in (await a.list_tools(cache_mode="bypass")).tools]
                # bob's state is his own
                assert "cancel" not in [t.name for t in (await b.list_tools()).tools]
            await alice.aclose()
            await bob.aclose()

        anyio.run(main)
        gw.close()
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    assert [c["tool"] for c in calls] == ["get_reservation"]
    assert all(c["authorization"] is None for c in calls)  # the agent's token never went upstream
    text = (tmp_path / "r.jsonl").read_text()
    assert "eyJ" not in text  # no token in any receipt
