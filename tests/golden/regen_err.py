"""Regenerate the golden diagnostics under tests/golden/err/ (run by hand, not a test).

Usage, from the repository root:

    .venv/bin/python tests/golden/regen_err.py

For every `NN_name.zc` it writes `NN_name.err`: the diagnostics exactly as rendered, i.e.
`"\\n\\n".join(d.render() for d in diagnostics)` for the errors raised by `compile_source`, or for
the warnings it returns (with a `NN_name.tools.json` beside it, the drift from those tools too).
Paths are rendered relative to the repository root, so run it from there.
It also (re)writes the generated inputs: the deeply nested expression and the non-UTF-8 file.
Read every changed `.err` before committing it: a golden file is a claim that the output is right.
"""

from __future__ import annotations

import sys
import traceback
from pathlib import Path

ERR_DIR = Path("tests/golden/err")

# Cases whose `.err` holds the output the compiler *should* give, written by hand, because the
# current output is wrong or misleading. This script never overwrites them; tests/test_golden_err.py
# marks them xfail(strict=True) with these reasons. Remove an entry once the compiler is fixed
# (then regenerate and re-read the file).
KNOWN_BUGS: dict[str, str] = {}
NEST_DEPTH = 250  # deeper than zcompile.parse.MAX_DEPTH (200)


def nested_policy(depth: int = NEST_DEPTH) -> str:
    """A policy whose only rule is `not not … not user.verified`, `depth` levels deep."""
    chain = "not " * depth + "user.verified"
    return (
        "policy support_desk\n"
        "\n"
        "state {\n"
        "  user.verified: bool\n"
        "}\n"
        "\n"
        "action refund    tags(write)\n"
        "action escalate  tags(control)\n"
        "\n"
        "fallback escalate\n"
        "\n"
        f"# {depth} nested `not`s: a machine-generated rule gone wrong\n"
        f"rule generated: refund requires {chain}\n"
    )


def latin1_policy() -> bytes:
    """A policy saved as Latin-1 instead of UTF-8 (the `é` in a comment is byte 0xE9)."""
    text = (
        "policy support_desk\n"
        "\n"
        "# r\u00e8gles du service client\n"
        "state {\n"
        "  user.role: enum(customer, agent, admin)\n"
        "}\n"
        "\n"
        "action get_order  tags(read)\n"
        "action escalate   tags(control)\n"
        "\n"
        "fallback escalate\n"
        "\n"
        "rule staff_lookup: forbid get_order unless user.role != customer\n"
    )
    return text.encode("latin-1")


def write_generated() -> None:
    (ERR_DIR / "06_nesting_too_deep.zc").write_text(nested_policy(), encoding="utf-8")
    (ERR_DIR / "07_not_utf8.zc").write_bytes(latin1_policy())


def render(path: Path) -> str:
    """The rendered diagnostics of one file; a crash is rendered as a marker, never hidden."""
    from zcompile.driver import compile_source, read_source
    from zcompile.errors import ZcError
    from zcompile.tools import check_tools

    try:
        policy, diagnostics = compile_source(read_source(path))
        tools = path.with_suffix(".tools.json")
        if tools.exists():  # a case with a tools file: its drift too (`zc check --tools`)
            diagnostics = [d for _, _, ds in check_tools([(path, policy, diagnostics)], tools) for d in ds]
    except ZcError as exc:
        diagnostics = exc.diagnostics
        if not diagnostics:
            return exc.render()
    except Exception:  # noqa: BLE001 - a compiler bug: keep the case, make it visible
        last = traceback.format_exc().strip().splitlines()[-1]
        return f"!! compiler crashed (not a diagnostic): {last}"
    return "\n\n".join(d.render() for d in diagnostics)


def main() -> int:
    if not (Path.cwd() / "zcompile").is_dir():
        print("run this from the repository root", file=sys.stderr)
        return 2
    write_generated()
    for zc in sorted(ERR_DIR.glob("*.zc")):
        out = zc.with_suffix(".err")
        if zc.stem in KNOWN_BUGS and out.exists():
            print(f"kept      {out} (hand-written: {KNOWN_BUGS[zc.stem]})")
            continue
        text = render(zc)
        old = out.read_text(encoding="utf-8") if out.exists() else None
        out.write_text(text + "\n", encoding="utf-8")
        print(("unchanged " if old == text + "\n" else "wrote     ") + str(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
