"""The benchmark's generated zc, Cedar and Casbin policies agree on every decision (else its timings are void)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).parents[1] / "bench" / "legal_bench.py"


def test_legal_bench_engines_agree():
    proc = subprocess.run([sys.executable, str(BENCH), "--check-only", "--sizes", "10,100"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "agreement check passed" in proc.stdout + proc.stderr
    assert "[100 actions] agree: 20,000 decisions (zc = Cedar = Casbin = reference)" in proc.stdout + proc.stderr
