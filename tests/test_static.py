"""The static checks: ruff and mypy, configured in pyproject.toml, report nothing."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=600)


def test_ruff_reports_nothing():
    res = _run("ruff", "check", "--no-cache", ".")
    assert res.returncode == 0, res.stdout + res.stderr


def test_mypy_reports_nothing():
    # its cache in build/ (ignored by git): the first run of a clone is cold, about 10 s of CPU
    res = _run("mypy", "--cache-dir", str(ROOT / "build" / "mypy_cache"))
    assert res.returncode == 0, res.stdout + res.stderr
    assert "Success: no issues found" in res.stdout
