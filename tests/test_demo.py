"""`make demo` on a fresh clone runs every part end to end and leaves `git status` clean (its outputs go under
build/);
`make distill` rebuilds the shipped specialist (tests/test_reproduce.py checks the same in-process)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
DATA = ROOT.parent / "shared" / "data"


@pytest.mark.skipif(shutil.which("git") is None or shutil.which("make") is None, reason="needs git and make")
@pytest.mark.slow
def test_make_demo_in_a_fresh_clone_leaves_the_tree_clean(tmp_path):
    if subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True).returncode:
        pytest.skip("not a git checkout")
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
    venv = Path(sys.prefix)  # this interpreter's environment: the clone's demo must not reinstall
    make = ["make", "-C", str(clone), f"VENV={venv}", "-o", f"{venv}/.installed", "demo"]
    if DATA.exists():
        make += [f"CHAT={DATA / 'receipts' / 'tau-airline-gpt4o.chat.jsonl'}", f"TAU={DATA / 'tau'}"]
    run = subprocess.run(make, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "Traceback" not in run.stderr
    out = run.stdout
    assert "0 errors" in run.stderr and "compiled policies/airline_chat.zc" in out  # check, compile
    assert "verified specialists/airline_chat" in out and "class probes (" in out  # hash, seal, probes
    assert "split test: held-out" in out  # eval on the sealed test split
    assert "action: " in out and "legal: " in out  # zc route
    assert "zc serve: 1 request in " in out and "1 receipt in build/serve-receipts.jsonl" in out
    assert "local model SmolLM2-135M-Instruct: cold load " in out and "warm decision " in out  # a real model
    assert ": make distill)" in out  # the one line that says how to distil it again
    # the headline, last (before make's own "Leaving directory"): the share taken off the expensive model
    last = [ln for ln in out.strip().splitlines() if not ln.startswith("make")][-1]
    assert (last.startswith("taken off the expensive model: ") and "of 150 decisions" in last
            and "strict" in last)
    status = subprocess.run(["git", "-C", str(clone), "status", "--porcelain"], capture_output=True,
                            text=True, check=True)
    assert status.stdout == "", status.stdout
    assert (clone / "build" / "eval.html").exists()
