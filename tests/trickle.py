"""A client that sends a request body a byte at a time, for the tests of servers' body deadlines."""

from __future__ import annotations

import socket


def length(reply: bytes) -> int:
    """The Content-Length of a response whose head has arrived."""
    head = reply.partition(b"\r\n\r\n")[0].decode().lower()
    return next((int(h.split(":")[1]) for h in head.split("\r\n") if h.startswith("content-length:")), 0)


def trickle(host: str, port: int, head: bytes, body: bytes, every_s: float = 0.05) -> tuple[bytes, int]:
    """(the whole response, the bytes of `body` sent before it began): `head` (the request line and
    headers, without Content-Length) at once, then `body` a byte every `every_s` until an answer comes."""
    with socket.create_connection((host, port), timeout=10) as s:
        s.sendall(head + b"Content-Length: %d\r\n\r\n" % len(body))
        sent, reply = 0, b""
        s.settimeout(every_s)
        while sent < len(body) and not reply:
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
    return reply, sent
