"""`make demo` on a fresh clone runs end to end and leaves `git status` clean (its outputs go under build/)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
DATA = ROOT.parent / "shared" / "data"


@pytest.mark.skipif(shutil.which("git") is None or shutil.which("make") is None, reason="needs git and make")
def test_make_demo_in_a_fresh_clone_leaves_the_tree_clean(tmp_path):
    if subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True).returncode:
        pytest.skip("not a git checkout")
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
    venv = Path(sys.prefix)  # this interpreter's environment: the clone's demo must not reinstall
    make = ["make", "-C", str(clone), f"VENV={venv}", "-o", f"{venv}/.installed", "demo"]
    if DATA.exists():
        make += [f"CHAT={DATA / 'receipts' / 'tau-airline-gpt4o.chat.jsonl'}", f"TAU={DATA / 'tau'}"]
    run = subprocess.run(make, capture_output=True, text=True, timeout=1200)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "Traceback" not in run.stderr
    status = subprocess.run(["git", "-C", str(clone), "status", "--porcelain"], capture_output=True, text=True,
                            check=True)
    assert status.stdout == "", status.stdout
    assert (clone / "build" / "specialists" / "airline_chat" / "manifest.json").exists()
