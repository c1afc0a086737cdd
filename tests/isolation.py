"""What a fresh interpreter imports: for the tests that decision-time code stays light."""

from __future__ import annotations

import subprocess
import sys

# the compiler's modules, which the runtime must never import (besides lark itself)
COMPILER = ("zcompile.parse", "zcompile.transform", "zcompile.ast", "zcompile.check", "zcompile.checked",
            "zcompile.lint", "zcompile.lower", "zcompile.interp",
            "zcompile.driver", "zcompile.cli", "click")
# what the `distill` extra brings: the core install (and so every decision) must work without it
DISTILL = ("sklearn", "scipy", "skl2onnx", "onnx", "mapie")

# installed first in the child: importing a blocked top-level package fails as if it were not installed
_BLOCK = """
import sys
class _Blocked:
    def __init__(self, names):
        self.names = frozenset(names)
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in self.names:
            raise ModuleNotFoundError(f"No module named {{name!r}} (blocked by the test)", name=name)
        return None
sys.meta_path.insert(0, _Blocked({blocked!r}))
"""


def modules_after(code: str, blocked: tuple[str, ...] = ()) -> set[str]:
    """The modules loaded in a fresh interpreter once `code` has run (it must not fail), with the
    top-level packages `blocked` made unimportable."""
    prefix = _BLOCK.format(blocked=tuple(blocked)) if blocked else ""
    out = subprocess.run([sys.executable, "-c", prefix + code + "\nimport sys\nprint(','.join(sys.modules))"],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return set(out.stdout.strip().rsplit("\n", 1)[-1].split(","))


def compiler_modules(loaded: set[str]) -> list[str]:
    return sorted(m for m in loaded if m == "lark" or m.startswith("lark.") or m in COMPILER)
