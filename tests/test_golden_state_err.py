"""Golden state errors: `zc legal` on every `tests/golden/state_err/*.json` prints exactly its `.err`.

The states go with `tests/golden/ok/support_desk.zc`. Each `.err` was written by running the command
and reading the output: a golden file is a claim that the first error a user sees is right.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import zcompile
from zcompile.cli import main
from zcompile.errors import ZcError
from zcompile.inputs import decode_json
from zcompile.tools import RESERVED

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


SEGMENT = st.from_regex(r"[a-z][a-z0-9_]{0,5}", fullmatch=True).filter(
    lambda s: s not in ("history", "args") and s not in RESERVED)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.lists(SEGMENT, min_size=1, max_size=3), min_size=1, max_size=4), st.data())
def test_any_dotted_field_written_flat_is_refused_by_its_key(paths, data):
    paths = [p for i, p in enumerate(paths)  # no field a prefix of another (a path clash)
             if not any(q[:len(p)] == p or p[:len(q)] == q for q in paths[:i])]
    dotted = [p for p in paths if len(p) > 1]
    assume(dotted)
    fields = "\n".join(f"  {'.'.join(p)}: int?" for p in paths)
    policy = zcompile.compile_text(f"policy p\nstate {{\n{fields}\n}}\naction a\nfallback a\n", "p.zc")
    parts = data.draw(st.sampled_from(dotted))
    cut = data.draw(st.integers(2, len(parts)))
    value: object = 1
    for seg in reversed(parts[cut:]):
        value = {seg: value}
    key = ".".join(parts[:cut])
    with pytest.raises(ZcError) as e:
        policy.legal({key: value})
    nested = "".join(f'{{"{s}": ' for s in parts[:cut - 1]) + f'{{"{parts[cut - 1]}": …}}' + "}" * (cut - 1)
    assert str(e.value) == (f'$["{key}"]: dotted fields are nested objects: write {nested}, not a key '
                            f'"{key}"')
    nested_state: object = 1
    for seg in reversed(parts):
        nested_state = {seg: nested_state}
    assert policy.legal(nested_state).actions == ("a",)  # written nested, it is read
