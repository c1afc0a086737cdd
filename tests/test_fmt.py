"""`zc fmt`: idempotent, comments kept, identity (`Policy.sha256`) kept, on shipped and generated policies."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import policies

from zcompile.cli import main
from zcompile.driver import compile_text
from zcompile.errors import ZcError
from zcompile.fmt import _parser, format_text

ROOT = Path(__file__).parents[1]
SHIPPED = sorted((ROOT / "policies").glob("*.zc")) + sorted((ROOT / "tests" / "golden" / "ok").glob("*.zc")) \
    + sorted((ROOT / "examples").rglob("*.zc"))


def tokens(text: str) -> list[tuple[str, str]]:
    """Every token and comment, in order (whitespace left out, a comment's trailing whitespace and
    `\r` too: trailing whitespace goes, line endings are the file's)."""
    return [(t.type, str(t).rstrip() if t.type == "COMMENT" else str(t))
            for t in _parser().lex(text, dont_ignore=True) if not t.type.startswith("__")]


def meaning(text: str) -> str | list[tuple[str, str]]:
    """The compiled policy's hash, or the errors' codes and messages (a generated policy may not
    compile: its constants can overflow)."""
    try:
        return compile_text(text).sha256
    except ZcError as e:
        return [(d.code, d.message) for d in e.diagnostics]


def assert_kept(src: str) -> str:
    out = format_text(src)
    assert format_text(out) == out  # idempotent
    assert tokens(out) == tokens(src)  # same tokens, same comments, same order
    assert meaning(out) == meaning(src)  # same meaning
    return out


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_shipped_policies_keep_identity_and_comments(path):
    assert_kept(path.read_text())


@pytest.mark.parametrize("path", [*(ROOT / "policies").glob("*.zc"),
                                  ROOT / "examples" / "gateway" / "desk.zc"],
                         ids=lambda p: p.name)
def test_the_projects_own_policies_are_in_the_canonical_layout(path):
    assert format_text(path.read_text(), str(path)) == path.read_text()


def test_continuations_line_up_and_long_lines_keep_their_comments():
    src = ("policy p\nstate {\n  a: int = 0  # one\n  long_name.here: enum(x, y,\n z) = x\n"
           "  b: bool = false  # two\n  c: enum(aaaaaaaaaaaaaaaaaaaaa, bbbbbbbbbbbbbbbbbbbbbbb, ccccc) = "
           "ccccc  # long\n}\naction a(x: text,\n y: int) tags(read)\naction b tags(write)\nfallback b\n"
           "rule r: forbid a when\n a == 1\nrule rr: a, b requires (a == 1 or\n b)\n")
    assert assert_kept(src) == (
        "policy p\n"
        "state {\n"
        "  a:              int = 0       # one\n"  # comments aligned, but not to the long line's
        "  long_name.here: enum(x, y,\n"
        "                       z) = x\n"  # under the first member, moved by the padding of the name
        "  b:              bool = false  # two\n"
        "  c:              enum(aaaaaaaaaaaaaaaaaaaaa, bbbbbbbbbbbbbbbbbbbbbbb, ccccc) = ccccc  # long\n"
        "}\n"
        "action a(x: text,\n"
        "         y: int) tags(read)\n"  # under the first parameter
        "action b tags(write)\n"
        "fallback b\n"
        "rule r:  forbid a when\n"
        "         a == 1\n"  # under the rule's body
        "rule rr: a, b requires (a == 1 or\n"
        "                        b)\n")


GAPS = [" ", "  ", "\t", "\n", "\n\n", "\n      ", " # a comment\n", "\n# own line\n", "  #c\n\n",
        "\r\n", "  \r\n\t", " #\n", "\f", " \t# tab\tand ünïcødé ✓ \"q\" # again\n",
        "\n\n\n# two\n# lines\n\n"]


@st.composite
def scrambled(draw):
    """A generated (or shipped) policy with random whitespace, line breaks and comments between its
    tokens (the shipped ones bring tiers, routes, strings, signatures and `len`)."""
    src = draw(st.one_of(policies().map(lambda p: p[0]), st.sampled_from(SHIPPED).map(Path.read_text)))
    toks = list(_parser().lex(src))
    out = [str(toks[0])]
    for tok in toks[1:]:
        out.append(draw(st.sampled_from(GAPS)) + str(tok))
    return "".join(out) + draw(st.sampled_from(["", "\n", "  # the end"]))


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scrambled())
def test_generated_policies_keep_identity_and_comments(src):
    assert_kept(src)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_layout_does_not_depend_on_spacing_outside_conditions(data):
    """Two spellings that differ only in the spaces between tokens outside rule conditions format to
    the same text."""
    src, _ = data.draw(policies())
    pad = data.draw(st.sampled_from(["  ", " \t ", "\t"]))
    loose = "\n".join(line if line.startswith("rule") else line.replace(" ", pad).replace(",", " ,")
                      for line in src.split("\n"))
    assert format_text(loose) == format_text(src)


def test_canonical_layout():
    src = ("policy   p # head\nstate{a: enum( x,y )?  # why\n\n\n b : int=0}\n"
           "action get tags( read ) cost 1\naction longer_name tags(write)\n"
           "  # between\nfallback get\nintent i \"d\" { allow get,\n longer_name }\n"
           "rule r1: forbid get when a == x   # trailing\nrule r2 : longer_name requires b in {1, 2}\n"
           "tier t max_ms 5\ntier u cost 2\nroute d: use t, u\n")
    assert assert_kept(src) == (
        "policy p  # head\n"
        "state {\n"
        "  a: enum(x, y)?  # why\n"
        "\n"
        "  b: int = 0\n"
        "}\n"
        "action get         tags(read)  cost 1\n"
        "action longer_name tags(write)\n"
        "# between\n"
        "fallback get\n"
        "intent i \"d\" {\n"
        "  allow get,\n"
        "      longer_name\n"
        "}\n"
        "rule r1: forbid get when a == x  # trailing\n"
        "rule r2: longer_name requires b in {1, 2}\n"
        "tier t max_ms 5\n"
        "tier u          cost 2\n"
        "route d: use t, u\n")


def test_condition_spacing_is_kept_because_reasons_quote_it():
    src = "policy p\nstate { n: int }\naction a\nfallback a\nrule r: forbid a when n>1   and\n   n <3\n"
    out = assert_kept(src)
    assert "rule r: forbid a when n>1   and\n        n <3\n" in out  # under the body, spacing kept


def test_crlf_line_endings_are_kept_with_the_identity():
    """A CRLF file stays CRLF, with the identity of the same policy written with LF (a condition's
    text, which reasons quote, has no `\r`)."""
    src = ("policy p  # c\r\nstate { n: int }\r\naction a\r\nfallback a\r\n"
           "rule r: forbid a when n > 1 and\r\n      n < 3   # why\r\n")
    out = assert_kept(src)
    assert out == ("policy p  # c\r\nstate {\r\n  n: int\r\n}\r\naction a\r\nfallback a\r\n"
                   "rule r: forbid a when n > 1 and\r\n        n < 3  # why\r\n")
    assert compile_text(src).sha256 == compile_text(src.replace("\r\n", "\n")).sha256
    assert compile_text(src).ir.rules[0].text == "n > 1 and n < 3"
    desk = (ROOT / "tests" / "golden" / "ok" / "support_desk.zc").read_text()
    assert compile_text(assert_kept(desk.replace("\n", "\r\n"))).sha256 == compile_text(desk).sha256
    mixed = src.replace("and\r\n", "and\n")  # mixed line endings: CRLF wins, the meaning stays
    assert compile_text(assert_kept(mixed)).sha256 == compile_text(src).sha256


def test_a_layout_that_would_change_the_identity_is_refused(monkeypatch):
    """The formatter checks its own result: were it to respace a condition, it would refuse."""
    from zcompile import fmt

    monkeypatch.setattr(fmt, "_keep_condition_spacing", lambda *args: None)
    src = "policy p\nstate {\n  n: int\n}\naction a\nfallback a\nrule r: forbid a when n>1\n"
    with pytest.raises(ZcError, match="cannot be formatted without changing its meaning"):
        format_text(src)
    assert format_text(src.replace("n>1", "n > 1")) == src.replace("n>1", "n > 1")


def test_syntax_error_is_reported_not_formatted():
    with pytest.raises(ZcError) as exc:
        format_text("policy p\naction\n")
    assert "error[ZC" in exc.value.render()


@pytest.fixture
def messy(tmp_path):
    p = tmp_path / "p.zc"
    p.write_text("policy p\naction a   tags(read)\nfallback a\n")
    return p


def test_cli_check_diff_and_in_place(messy):
    run = CliRunner().invoke
    res = run(main, ["fmt", "--check", str(messy)])
    assert res.exit_code == 1 and f"would reformat {messy}" in res.output
    res = run(main, ["fmt", "--diff", str(messy)])
    assert res.exit_code == 0 and "-action a   tags(read)\n+action a tags(read)\n" in res.output
    assert messy.read_text() == "policy p\naction a   tags(read)\nfallback a\n"  # --diff writes nothing
    res = run(main, ["fmt", str(messy)])
    assert res.exit_code == 0 and messy.read_text() == "policy p\naction a tags(read)\nfallback a\n"
    res = run(main, ["fmt", "--check", str(messy.parent)])
    assert res.exit_code == 0 and "0 of 1 file would be reformatted" in res.output


def test_cli_stdin_and_errors(tmp_path):
    run = CliRunner().invoke
    res = run(main, ["fmt", "-"], input="policy  p\naction a\nfallback   a\n")
    assert res.exit_code == 0 and res.output == "policy p\naction a\nfallback a\n"
    bad = tmp_path / "bad.zc"
    bad.write_text("policy p\naction\n")
    res = run(main, ["fmt", str(bad)])
    assert res.exit_code == 1 and "error[ZC" in res.output and "Traceback" not in res.output
    assert bad.read_text() == "policy p\naction\n"
    assert run(main, ["fmt", str(tmp_path / "missing.zc")]).exit_code == 1
    assert run(main, ["fmt"]).exit_code == 2


def test_in_place_writes_through_a_symlink_keep_the_link_and_the_mode(messy):
    messy.chmod(0o640)
    link = messy.with_name("link.zc")
    link.symlink_to(messy.name)
    res = CliRunner().invoke(main, ["fmt", str(link)])
    assert res.exit_code == 0, res.output
    assert link.is_symlink() and messy.read_text() == "policy p\naction a tags(read)\nfallback a\n"
    assert messy.stat().st_mode & 0o777 == 0o640
    assert sorted(p.name for p in messy.parent.iterdir()) == ["link.zc", "p.zc"]  # no temporary left


def test_a_fifo_is_refused_and_left_alone(tmp_path):
    fifo = tmp_path / "f.zc"
    os.mkfifo(fifo)
    res = CliRunner().invoke(main, ["fmt", str(tmp_path)])  # reading it would block: refused
    assert res.exit_code == 1 and "not a regular file" in res.output
    assert fifo.is_fifo() and [p.name for p in tmp_path.iterdir()] == ["f.zc"]


def test_a_file_edited_while_it_is_formatted_is_not_overwritten(messy, monkeypatch):
    from zcompile import fmt

    real = fmt.format_source

    def edit_meanwhile(source):
        messy.write_text("policy p\naction a    tags(read)  # the author's edit\nfallback a\n")
        return real(source)

    monkeypatch.setattr(fmt, "format_source", edit_meanwhile)
    res = CliRunner().invoke(main, ["fmt", str(messy)])
    assert res.exit_code == 1 and "changed while it was being formatted; not written" in res.output
    assert "the author's edit" in messy.read_text()
    assert [p.name for p in messy.parent.iterdir()] == ["p.zc"]


@pytest.mark.parametrize("path", sorted((ROOT / "tests" / "golden" / "err").glob("*.zc")),
                         ids=lambda p: p.name)
def test_policies_with_errors_format_or_are_refused_with_their_diagnostic(path):
    """A policy with semantic errors is formatted (same tokens, idempotent, same diagnostics); one
    that does not parse is refused with its syntax diagnostic, never a traceback."""
    from zcompile.driver import check_source
    from zcompile.parse import decode
    from zcompile.source import Source

    try:
        source = decode(str(path), path.read_bytes())
        out = format_text(source.text, str(path))
    except ZcError as exc:
        assert exc.diagnostics and all(d.code < "ZC0100" for d in exc.diagnostics), exc.render()
        return
    assert format_text(out) == out and tokens(out) == tokens(source.text)

    def codes(text):
        try:
            return [d.code for d in check_source(Source(str(path), text)).diagnostics]
        except ZcError as exc:
            return [d.code for d in exc.diagnostics]

    assert codes(out) == codes(source.text)


def test_a_read_only_file_is_not_replaced(messy, monkeypatch):
    messy.chmod(0o444)
    if os.geteuid() == 0:  # root may write anything: judge by the mode bits, as for any other user
        real = os.access
        monkeypatch.setattr(os, "access", lambda p, mode: real(p, mode) and not (
            mode & os.W_OK and os.stat(p).st_mode & 0o222 == 0))
    res = CliRunner().invoke(main, ["fmt", str(messy)])
    assert res.exit_code == 1 and "the file is read-only; not written" in res.output
    assert messy.read_text() == "policy p\naction a   tags(read)\nfallback a\n"
    assert [p.name for p in messy.parent.iterdir()] == ["p.zc"]
