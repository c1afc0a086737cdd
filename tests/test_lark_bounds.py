"""The lark the suite runs against: inside the range pyproject.toml declares, with the internals that
parse.py reads (`_Loop` walks its LALR tables; grammar/zc.tables is its serialisation)."""

import tomllib
from pathlib import Path

import lark
import lark.grammar
import lark.lexer
from packaging.requirements import Requirement
from packaging.version import Version

from zcompile import parse

ROOT = Path(__file__).resolve().parent.parent


def _declared() -> Requirement:
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    (req,) = [Requirement(d) for d in deps if Requirement(d).name == "lark"]
    return req


def test_the_installed_lark_is_inside_the_declared_range():
    req = _declared()
    assert Version(lark.__version__) in req.specifier, (
        f"lark {lark.__version__} is installed, pyproject.toml declares `{req}`: parse.py reads lark's "
        "internals, so run the suite on this version before widening the range")


def test_the_declared_range_stays_within_one_minor_release():
    spec = _declared().specifier
    uppers = [Version(s.version) for s in spec if s.operator == "<"]
    lowers = [Version(s.version) for s in spec if s.operator == ">="]
    assert uppers and lowers, f"lark `{spec}`: both bounds are needed"
    assert uppers[0] <= Version(f"{lowers[0].major}.{lowers[0].minor + 1}"), (
        f"lark `{spec}` admits a minor release the suite never ran against")


def test_the_internals_parse_reads_exist():
    where = f"lark {lark.__version__}"
    parser = parse._build_parser()
    table = parser.parser.parser.parser.parse_table  # what _Loop reads
    for attr in ("states", "start_states", "end_states"):
        assert hasattr(table, attr), f"{where}: its LALR parse table has no `{attr}`"
    assert "start" in table.start_states and "start" in table.end_states, where
    assert hasattr(lark.parsers.lalr_analysis, "Shift"), f"{where}: no lalr_analysis.Shift"
    assert hasattr(lark.Lark, "_load_from_dict"), f"{where}: no Lark._load_from_dict"
    assert hasattr(parser, "memo_serialize"), f"{where}: no Lark.memo_serialize"
    assert hasattr(parser, "lexer_conf"), f"{where}: no Lark.lexer_conf"
    for cls in (lark.lexer.TerminalDef, lark.grammar.Rule):
        assert hasattr(cls, "__serialize_fields__"), f"{where}: {cls.__name__} is not serialisable"
    assert parse._loop(parse._parser()) is not None, f"{where}: the parse loop cannot read its tables"
