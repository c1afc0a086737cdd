"""The parser's packaged LALR tables (grammar/zc.tables): current, equal to the grammar's, and a stale
file is never used."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from zcompile import parse
from zcompile.source import Source

ROOT = Path(__file__).parents[1]
POLICIES = sorted({*ROOT.glob("policies/**/*.zc"), *ROOT.glob("tests/**/*.zc"),
                   *ROOT.glob("examples/**/*.zc")})


def _outcomes() -> list:
    """Each policy's AST (spans included), or the rendered diagnostics of its syntax errors."""
    out = []
    for p in POLICIES:
        try:
            ast = parse.parse(parse.decode(str(p), p.read_bytes()))
            out.append((ast, [(n.span.start, n.span.end) for n in parse.A.walk(ast)]))
        except parse.ZcError as exc:
            out.append([d.render() for d in exc.diagnostics])
    return out


def test_the_packaged_tables_are_the_grammars():
    packaged = msgspec.msgpack.decode((ROOT / "grammar" / parse.TABLES).read_bytes())
    assert packaged["key"] == parse._tables_key(), "grammar/zc.tables is stale: run `make tables`"
    parse._parser.cache_clear()
    built = []
    try:
        real = parse._build_parser
        parse._build_parser = lambda: built.append(1) or real()  # noqa: E731
        parse._parser()
    finally:
        parse._build_parser = real
    assert not built, "the packaged tables were not used"


def test_tables_parse_as_the_grammar_does(monkeypatch):
    assert len(POLICIES) >= 50
    parse._parser.cache_clear()
    loaded = _outcomes()
    monkeypatch.setattr(parse, "_tables_key", lambda: "a grammar edited since")
    parse._parser.cache_clear()
    try:
        from_grammar = _outcomes()  # a key that does not match: built from the grammar
    finally:
        monkeypatch.undo()
        parse._parser.cache_clear()
    assert loaded == from_grammar
    assert sum(isinstance(o, list) for o in loaded) >= 5  # syntax errors among them


@pytest.mark.parametrize("text, message", [("policy p\nrule r: a requires x = 1\nfallback a\n",
                                            "unexpected `=`"),
                                           ("policy p\naction a tags(\n", "unexpected end of file")])
def test_syntax_errors_are_the_same_from_either(monkeypatch, text, message):
    def errors() -> list[str]:
        with pytest.raises(parse.ZcError) as exc:
            parse.parse(Source("p.zc", text))
        return [d.render() for d in exc.value.diagnostics]

    parse._parser.cache_clear()
    loaded = errors()
    monkeypatch.setattr(parse, "_tables_key", lambda: "stale")
    parse._parser.cache_clear()
    try:
        assert errors() == loaded
    finally:
        monkeypatch.undo()
        parse._parser.cache_clear()
    assert any(message in e for e in loaded), loaded


def test_the_one_loop_parses_as_lark_does():
    """The flattened loop (`_Loop`) against lark's own LALR parser, on the same tables, its parse tree
    built into the AST by the same builder: the same AST for every valid policy (spans included), and
    None exactly where lark raises."""
    loop = parse._loop(parse._parser())
    assert loop is not None, "the parser's loop cannot read this lark's tables"
    checked = 0
    for p in POLICIES:
        try:
            source = parse.decode(str(p), p.read_bytes())
        except parse.ZcError:
            continue
        with parse._LOCK:
            parse._BUILDER.reset(source)
            ours = loop.parse(source.text)
            parse._BUILDER.reset(source)
            try:
                theirs = parse._build(parse._parser().parse(source.text))
            except parse.lark.exceptions.UnexpectedInput:
                theirs = None
            parse._BUILDER.reset(None)
        assert ours == theirs, p
        if ours is not None:
            assert [n.span for n in parse.A.walk(ours)] == [n.span for n in parse.A.walk(theirs)], p
            checked += 1
    assert checked >= 10


def _values(node):
    """Every value held by an AST node's fields, and in its tuples, recursively (spans left out)."""
    for name in node.__dataclass_fields__:
        if name == "span":
            continue
        value = getattr(node, name)
        items = value if isinstance(value, tuple) else (value,)
        for v in items:
            yield v
            if hasattr(v, "__dataclass_fields__"):
                yield from _values(v)


def test_no_parse_tree_or_token_reaches_the_checker():
    """The AST holds AST nodes, spans and plain values only: no lark Tree or Token, no `(text, start,
    end)` token tuple, no list the loop spliced; a grammar rule without a builder method raises."""
    allowed = (str, int, float, bool, type(None), frozenset)
    seen = 0
    for p in POLICIES:
        try:
            ast = parse.parse(parse.decode(str(p), p.read_bytes()))
        except parse.ZcError:
            continue
        for v in _values(ast):
            assert hasattr(v, "__dataclass_fields__") or isinstance(v, allowed), (p, v)
            assert not isinstance(v, (parse.lark.Tree, parse.lark.Token, list)), (p, v)
            if isinstance(v, tuple):
                assert all(hasattr(x, "__dataclass_fields__") for x in v), (p, v)
        for n in parse.A.walk(ast):
            assert n.span is not None and n.span.source.path == str(p), (p, n)
        seen += 1
    assert seen >= 10
    partial = type("Partial", (parse.Builder,), {"set_type": None})()  # a builder lacking one rule
    loop = parse._Loop(parse._parser(), partial)
    with pytest.raises(AssertionError, match="grammar rule 'set_type' has no AST transform"):
        loop.parse("policy p\nstate { s: set[action] }\naction a\nfallback a\n")
