"""The gateway example runs in one command and shows what it says it shows."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_gateway_example_runs(tmp_path):
    run = subprocess.run([sys.executable, "-m", "examples.gateway.run", "--conversations", "0", "--out",
                          str(tmp_path)],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    out = run.stdout
    assert "Traceback" not in run.stderr
    assert "answered by `compiler` locally" in out  # the lookup answered without the upstream
    assert "stripped: delete_account" in out  # an undeclared tool never offered
    assert "blocked cancel_reservation" in out and "must come after `get_reservation_details`" in out
    assert "agent -> cancel_reservation" in out  # the confirmed write passed
    assert "5 receipts in" in out
    assert "need receipts from at least 3 tasks" in out  # one conversation certifies nothing, and says so
    assert len((tmp_path / "receipts.jsonl").read_text().splitlines()) == 5
