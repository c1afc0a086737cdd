"""Helpers for the tests that start a door (`zc serve`, `zc mcp --http`, `zc pdp`) as a real subprocess."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(
    args: list[str], port: int | None, *, stdin: int | None = None, timeout_s: float = 30,
    env: dict[str, str] | None = None,
) -> subprocess.Popen:
    """`python -m zcompile ARGS` in the repository, stderr piped; with a port, returned once it accepts.
    `env`: the process's whole environment (default: this one's)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "zcompile", *args],
        cwd=ROOT,
        env=env,
        stdin=stdin,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    if port is None:
        return proc
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return proc
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise AssertionError(f"the door did not start: {proc.communicate()[1].decode()}") from None
            time.sleep(0.05)


def stop(proc: subprocess.Popen, sig: int, timeout_s: float = 30) -> tuple[int, str, str]:
    """Send SIG, wait for the exit; (return code, stderr, stdout)."""
    proc.send_signal(sig)
    try:  # not communicate(): it would close stdin, and a stdio door would see its agent leave
        proc.wait(timeout=timeout_s)
        out, err = proc.communicate()
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
        raise AssertionError(f"no exit within {timeout_s} s after signal {sig}: {err.decode()}") from None
    return proc.returncode, err.decode(), out.decode()
