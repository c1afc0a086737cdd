"""Golden state errors: `zc legal` on every `tests/golden/state_err/*.json` prints exactly its `.err`.

The states go with `tests/golden/ok/support_desk.zc`. Each `.err` was written by running the command
and reading the output: a golden file is a claim that the first error a user sees is right.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

import zcompile
from zcompile.cli import main
from zcompile.errors import ZcError
from zcompile.inputs import decode_json

ROOT = Path(__file__).resolve().parent
DIR = Path("tests/golden/state_err")
POLICY = Path("tests/golden/ok/support_desk.zc")
CASES = sorted(p.stem for p in (ROOT / "golden" / "state_err").glob("*.json"))


@pytest.fixture(autouse=True)
def _at_root(monkeypatch):
    monkeypatch.chdir(ROOT.parent)


def test_there_are_cases():
    assert len(CASES) >= 7


@pytest.mark.parametrize("stem", CASES)
def test_legal_prints_the_golden_error(stem):
    res = CliRunner().invoke(main, ["legal", str(POLICY), "--state", str(DIR / f"{stem}.json")])
    assert res.exit_code == 1
    assert res.stderr == (DIR / f"{stem}.err").read_text()


@pytest.mark.parametrize("stem", CASES)
def test_the_api_raises_the_same_message_without_the_file(stem):
    policy = zcompile.compile_file(POLICY)
    state = decode_json((DIR / f"{stem}.json").read_bytes())
    with pytest.raises(ZcError) as e:
        policy.legal(state)
    golden = (DIR / f"{stem}.err").read_text().strip()
    assert golden == f"error: {DIR / stem}.json: {e.value}"
