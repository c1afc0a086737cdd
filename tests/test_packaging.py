"""The wheel ships every subpackage and the grammar."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).parents[1]


def test_wheel_contains_packages_and_grammar(tmp_path):
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps",
                    "-w", str(tmp_path), str(ROOT)], check=True, capture_output=True)
    names = zipfile.ZipFile(next(tmp_path.glob("zcompile-*.whl"))).namelist()
    assert "zcompile/grammar/zc.lark" in names
    assert "zcompile/evals/templates/report.html" in names
    for module in sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "zcompile").rglob("*.py")):
        assert module in names
