"""Running the gateway (or another of zc's ASGI apps, such as `zc pdp`'s): uvicorn in the foreground
or on a background thread (tests, the example, the benchmark)."""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from collections.abc import Iterator
from typing import Any

import uvicorn

from ..errors import ZcError

SIGNALS = (signal.SIGTERM, signal.SIGINT)
GRACE_S = 5  # in-flight requests have this long to finish after SIGTERM or SIGINT


class Server(uvicorn.Server):
    """uvicorn's server, stopped by SIGTERM or SIGINT as a clean exit: it drains (at most GRACE_S),
    and returns instead of raising the caught signal again after its shutdown, as uvicorn does (the
    process would die by the signal, or Ctrl-C print click's `Aborted!`). A second SIGINT forces the exit."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        original = {sig: signal.signal(sig, self.handle_exit) for sig in SIGNALS}
        try:
            yield
        finally:
            for sig, handler in original.items():
                signal.signal(sig, handler)


def _config(target: Any, host: str, port: int, log_level: str) -> uvicorn.Config:
    # one worker process: receipts are appended under flock, so several `zc serve` may share a file
    if callable(target):  # an ASGI app
        app = target
    else:  # a Gateway
        from .app import create_app

        app = create_app(target)
    # loop and http left to "auto": uvloop and httptools when installed (the `serve` extra), else
    # asyncio's loop and h11
    return uvicorn.Config(app, host=host, port=port, log_level=log_level, lifespan="off",
                          access_log=False, timeout_graceful_shutdown=GRACE_S)


def serve(gateway: Any, host: str = "127.0.0.1", port: int = 8088, log_level: str = "info") -> None:
    """Serve `gateway` (a Gateway, or any ASGI app) until SIGTERM or SIGINT (Ctrl-C), then return
    once in-flight requests are answered. Raises ZcError when the address cannot be listened on."""
    server = Server(_config(gateway, host, port, log_level))
    try:
        server.run()
    except SystemExit:  # uvicorn exits when it cannot bind (it has logged why)
        raise ZcError(f"cannot listen on {host}:{port}") from None
    if not server.started:
        raise ZcError(f"cannot listen on {host}:{port}")


class Running:
    """The gateway (or any ASGI app) served on a background thread, on a free port of 127.0.0.1 by default:

        with Running(gateway) as srv:
            OpenAI(base_url=srv.base_url, api_key="unused")
    """

    def __init__(self, gateway: Any, host: str = "127.0.0.1", port: int = 0) -> None:
        self.gateway = gateway
        self._server = uvicorn.Server(_config(gateway, host, port, "warning"))
        self._thread = threading.Thread(target=self._server.run, name="zc-serve", daemon=True)
        self.host = host
        self.port = port

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    @property
    def origin(self) -> str:
        """`http://host:port`, the root the app is served at."""
        return f"http://{self.host}:{self.port}"

    def start(self) -> Running:
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"the server did not start on {self.host}:{self.port}")
            time.sleep(0.01)
        self.port = self._server.servers[0].sockets[0].getsockname()[1]
        return self

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)

    def __enter__(self) -> Running:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()
