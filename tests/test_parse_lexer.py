"""The parser's own lexer (parse._Lexer) gives exactly lark's basic lexer's tokens and errors."""

from __future__ import annotations

import random
from pathlib import Path

import lark

from zcompile import parse


def _tokens(tokens) -> list[tuple]:
    out = []
    try:
        out.extend((t.type, str(t), t.start_pos, t.end_pos) for t in tokens)
    except lark.exceptions.UnexpectedCharacters as exc:
        out.append(("error", exc.pos_in_stream))
    return out


def test_lexer_matches_lark_basic_lexer():
    theirs = lark.Lark(parse._grammar(), parser="lalr", lexer="basic")  # the grammar with lark's basic lexer
    ours = parse._Lexer(theirs.lexer_conf)
    root = Path(__file__).parent.parent
    texts = [p.read_text("utf-8") for p in sorted((root / "examples").rglob("*.zc"))]
    texts += [p.read_text("utf-8") for p in sorted((root / "tests" / "golden").rglob("*.zc"))
              if p.read_bytes().isascii()]
    rng = random.Random(3)
    pieces = list("abz_.09 \t\n#\"\\{}()[]<>=!-+*?,:@&|'") + [
        "policy", "true", "false", "in", "not", "1.5", "1e5", "1.5e+3", "a.b", "a..b", "_x.1",
        '"a\\"b"', "max_ms", "tags", "int", "# note\n"]
    texts += ["".join(rng.choice(pieces) for _ in range(rng.randrange(1, 30))) for _ in range(3000)]
    errors = 0
    for text in texts:
        want = _tokens(theirs.lex(text))
        assert _tokens(ours.lex(text)) == want, text
        errors += want[-1][0] == "error" if want else 0
    assert 100 < errors < len(texts) - 100  # both clean and failing inputs were compared
