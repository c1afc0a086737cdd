"""What a fresh interpreter imports: for the tests that decision-time code stays light."""

from __future__ import annotations

import subprocess
import sys

# the compiler's modules, which the runtime must never import (besides lark itself)
COMPILER = ("zcompile.parse", "zcompile.ast", "zcompile.check", "zcompile.lower", "zcompile.interp",
            "zcompile.driver", "zcompile.cli", "click")


def modules_after(code: str) -> set[str]:
    """The modules loaded in a fresh interpreter once `code` has run (it must not fail)."""
    out = subprocess.run([sys.executable, "-c", code + "\nimport sys\nprint(','.join(sys.modules))"],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return set(out.stdout.strip().rsplit("\n", 1)[-1].split(","))


def compiler_modules(loaded: set[str]) -> list[str]:
    return sorted(m for m in loaded if m == "lark" or m.startswith("lark.") or m in COMPILER)
