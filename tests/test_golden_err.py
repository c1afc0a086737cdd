"""Golden diagnostics: every `tests/golden/err/*.zc` renders exactly as its `.err` file.

The `.err` files are written by `tests/golden/regen_err.py` (run by hand, then read). Cases listed in
its KNOWN_BUGS hold hand-written expectations the compiler does not meet yet; they are xfail(strict).
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from zcompile.cli import main
from zcompile.driver import compile_source, read_source
from zcompile.errors import ZcError
from zcompile.tools import check_tools

ROOT = Path(__file__).resolve().parent.parent
ERR_DIR = Path("tests/golden/err")  # relative: diagnostics render the path as given
CODE_RE = re.compile(r"\b(error|warning)\[(ZC\d{4})\]")


def _load_regen():
    spec = importlib.util.spec_from_file_location("regen_err", ROOT / "tests/golden/regen_err.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


KNOWN_BUGS: dict[str, str] = _load_regen().KNOWN_BUGS
CASES = sorted(p.stem for p in (ROOT / ERR_DIR).glob("*.zc"))


def _param(stem: str, *, content: bool):
    marks = ([pytest.mark.xfail(strict=True, reason=KNOWN_BUGS[stem])] if content and stem in KNOWN_BUGS
             else [])
    return pytest.param(stem, id=stem, marks=marks)


@pytest.fixture(autouse=True)
def _at_root(monkeypatch):
    monkeypatch.chdir(ROOT)


def _render(path: Path) -> str:
    try:
        policy, diagnostics = compile_source(read_source(path))
    except ZcError as exc:
        diagnostics = exc.diagnostics
        assert diagnostics, f"ZcError without diagnostics: {exc}"
    else:
        if _tools(path).exists():  # a case with a tools file: its drift too (`zc check --tools`)
            diagnostics = [d for _, _, ds in check_tools([(path, policy, diagnostics)], _tools(path))
                           for d in ds]
    return "\n\n".join(d.render() for d in diagnostics) + "\n"


def _tools(path: Path) -> Path:
    return path.with_suffix(".tools.json")


def _expected(stem: str) -> str:
    return (ERR_DIR / f"{stem}.err").read_text(encoding="utf-8")


def test_enough_cases():
    assert len(CASES) >= 26
    assert set(KNOWN_BUGS) <= set(CASES), "KNOWN_BUGS names a case that does not exist"
    for stem in CASES:
        assert (ROOT / ERR_DIR / f"{stem}.err").is_file(), f"{stem}.zc has no .err"


def test_every_emitted_code_has_a_golden_case():
    """Every ZCxxxx code the compiler can emit is exercised by at least one golden file."""
    emitted: set[str] = set()
    for py in (ROOT / "zcompile").rglob("*.py"):
        emitted |= set(re.findall(r'"(ZC\d{4})"', py.read_text(encoding="utf-8")))
    emitted.discard("ZC0000")  # the CLI's wrapper for errors without a diagnostic
    emitted.discard("ZC1000")  # lint budget exhausted: needs a huge policy, see test_bad_input
    covered = {code for stem in CASES for _, code in CODE_RE.findall(_expected(stem))}
    assert emitted - covered == set()


@pytest.mark.parametrize("stem", [_param(s, content=True) for s in CASES])
def test_rendered_diagnostics(stem):
    actual = _render(ERR_DIR / f"{stem}.zc")
    expected = _expected(stem)
    want_codes = [code for _, code in CODE_RE.findall(expected)]
    assert want_codes, f"{stem}.err names no diagnostic code"
    got_codes = [code for _, code in CODE_RE.findall(actual)]
    for code in set(want_codes):
        assert code in got_codes, f"{code} expected in the diagnostics of {stem}.zc"
    assert actual == expected


@pytest.mark.parametrize("stem", [_param(s, content=False) for s in CASES])
def test_zc_check_exit_code(stem):
    has_errors = any(sev == "error" for sev, _ in CODE_RE.findall(_expected(stem)))
    tools = _tools(ERR_DIR / f"{stem}.zc")
    result = CliRunner().invoke(main, ["check", str(ERR_DIR / f"{stem}.zc"),
                                       *(["--tools", str(tools)] if tools.exists() else [])])
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert result.exit_code == (1 if has_errors else 0), result.output
    assert f"{ERR_DIR / stem}.zc" in result.output  # the place is named
    if stem not in KNOWN_BUGS:  # what `zc check` prints is the golden text, word for word
        assert _expected(stem).strip() in result.output
