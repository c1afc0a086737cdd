"""`zc fmt`: the canonical layout of a policy, keeping every token and every comment.

The formatter re-emits the policy's tokens in their order with canonical spacing, so the meaning
(and `Policy.sha256`) cannot change. Layout: one declaration a line; state fields and an intent's
`allow` on their own lines, indented 2; a line break the author put inside a declaration is kept,
and its continuation is indented 4 (plus 2 per open bracket); at most one blank line between
declarations; runs of one-line declarations of the same kind are aligned in columns, and so are
their trailing comments (two spaces after the code).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from importlib import resources

import lark
from lark import Token, Tree

from .errors import ZcError
from .parse import parse
from .source import Source

INDENT = 2
CONTINUATION = 4
_NO_SPACE_BEFORE = {",", ")", "]", ":"}
_TIGHT_OPEN = {"enum_type", "params", "tags", "call", "set_type"}  # `enum(`, `f(`, `set[`
# a new alignment column starts at these tokens (first token of the declaration is column 0)
_SLOTS = {"action_decl": ("TAGS", "COST", "STRING"), "tier_decl": ("MAX_MS", "COST")}


@functools.cache
def _parser() -> lark.Lark:
    grammar = resources.files("zcompile.grammar").joinpath("zc.lark").read_text("utf-8")
    return lark.Lark(grammar, parser="lalr", lexer="basic", propagate_positions=True,
                     keep_all_tokens=True, maybe_placeholders=False)


@dataclass(slots=True)
class _Tok:
    tok: Token
    parent: str  # the grammar rule the token sits in (decides its spacing)
    keep: str | None = None  # spacing kept as written (inside a rule's condition, on one line)

    @property
    def text(self) -> str:
        return str(self.tok)


@dataclass(slots=True)
class _Segment:
    """One output line of structure (a declaration, a field, a block's opening or closing)."""

    kind: str
    indent: int
    toks: list[_Tok]
    cells_at: dict[int, int] = field(default_factory=dict)  # token index -> the column it opens
    closes: bool = False  # a block's `}`: comments before it are indented like the block's body


@dataclass(slots=True)
class _Line:
    indent: int
    cells: list[str]
    comment: str | None = None
    blank_before: bool = False
    kind: str | None = None  # alignment group kind, None for comment lines and continuations
    single: bool = True  # the segment fits on this one line
    extra: list[_Line] = field(default_factory=list)


def format_source(source: Source) -> str:
    """The canonical text of a policy. Raises ZcError (syntax diagnostics) on a policy that does
    not parse; semantic errors do not stop formatting.

    The result is checked before it is returned: the same tokens and comments, and (when the policy
    compiles) the same identity; a layout that would change either is refused with a ZcError.
    """
    parse(source)  # the compiler's own syntax errors, with its diagnostics
    text = source.text
    tree = _parser().parse(text)
    comments = [t for t in _parser().lex(text, dont_ignore=True) if t.type == "COMMENT"]
    newline = "\r\n" if "\r\n" in text else "\n"  # the file keeps its line endings
    out = _render(_lines(_segments(tree, text), comments), newline)
    if _signature(out) != _signature(text) or _identity(source.path, out) != _identity(source.path, text):
        raise ZcError(f"{source.path}: cannot be formatted without changing its meaning "
                      "(please report it); the file is left as it is")
    return out


def _signature(text: str) -> list[tuple[str, str]]:
    """The tokens and comments of a text, in order, without the whitespace between them."""
    return [(t.type, str(t).rstrip()) for t in _parser().lex(text, dont_ignore=True)
            if not t.type.startswith("__")]


def _identity(path: str, text: str) -> str | None:
    from .driver import compile_source
    from .ir import identity

    try:
        return identity(compile_source(Source(path, text))[0])
    except ZcError:
        return None  # a policy with errors has no identity: the tokens are compared alone


def format_text(text: str, path: str = "<string>") -> str:
    """`format_source` on a text."""
    return format_source(Source(path, text))


# ---- structure -----------------------------------------------------------------------------
def _tokens(tree, parent: str) -> list[_Tok]:
    out: list[_Tok] = []
    stack = [(tree, parent)]
    while stack:
        node, par = stack.pop()
        if isinstance(node, Token):
            out.append(_Tok(node, par))
        else:
            stack.extend((c, node.data) for c in reversed(node.children))
    return out


def _keep_condition_spacing(rule: Tree, toks: list[_Tok], text: str) -> None:
    """A rule's condition is quoted by its reasons and so is part of the policy's identity
    (`RuleDef.text`, with line breaks made single spaces): its spacing within a line is kept."""
    body = rule.children[-1]
    if body.data == "after":
        return
    ids = {id(t.tok) for t in _tokens(body.children[-1], "")}
    prev = None
    for t in toks:
        if id(t.tok) in ids:
            if prev is not None and prev.tok.end_line == t.tok.line:
                t.keep = text[prev.tok.end_pos : t.tok.start_pos]
            prev = t


def _segments(tree: Tree, text: str) -> list[_Segment]:
    segs: list[_Segment] = []
    for item in tree.children:
        kind = item.data
        if kind == "state_block":
            toks = _tokens(item, kind)
            segs.append(_Segment("state_open", 0, toks[:2]))
            for f in item.children[2:-1]:
                ft = _tokens(f, f.data)
                colon = next(i for i, t in enumerate(ft) if t.text == ":")
                segs.append(_Segment("field", INDENT, ft, {colon + 1: 1}))
            segs.append(_Segment("close", 0, toks[-1:], closes=True))
        elif kind == "intent_decl":
            toks = _tokens(item, kind)
            brace = next(i for i, t in enumerate(toks) if t.text == "{" and t.parent == kind)
            segs.append(_Segment("intent_open", 0, toks[: brace + 1]))
            segs.append(_Segment("allow", INDENT, toks[brace + 1 : -1]))
            segs.append(_Segment("close", 0, toks[-1:], closes=True))
        else:
            toks = _tokens(item, kind)
            if kind in _SLOTS:  # fixed columns: a missing `tags(…)` leaves its column empty
                slots: dict[int, int] = {}
                for i, t in enumerate(toks):
                    if t.tok.type in _SLOTS[kind] and t.parent != "name":
                        slot = _SLOTS[kind].index(t.tok.type) + 1
                        if slot not in slots.values():
                            slots[i] = slot
                segs.append(_Segment(kind, 0, toks, slots))
            elif kind in ("rule_decl", "route_decl"):
                if kind == "rule_decl":
                    _keep_condition_spacing(item, toks, text)
                colon = next(i for i, t in enumerate(toks) if t.text == ":")
                segs.append(_Segment(kind, 0, toks, {colon + 1: 1}))
            else:
                segs.append(_Segment(kind, 0, toks))
    return segs


def _space(prev: _Tok | None, tok: _Tok) -> str:
    if prev is None:
        return ""
    if tok.keep is not None:
        return tok.keep
    p, t = prev.text, tok.text
    if t in _NO_SPACE_BEFORE or tok.tok.type == "OPTIONAL":
        return ""
    if p in ("(", "["):
        return ""
    if t in ("(", "[") and tok.parent in _TIGHT_OPEN:
        return ""
    if (p == "{" and prev.parent == "set_lit") or (t == "}" and tok.parent == "set_lit"):
        return ""
    if p == "-" and prev.parent == "neg":
        return ""
    return " "


# ---- lines and comments --------------------------------------------------------------------
def _lines(segments: list[_Segment], comments: list[Token]) -> list[_Line]:
    lines: list[_Line] = []
    ci = 0  # next comment
    last_line = 0  # source line of the last element emitted
    for seg in segments:
        first, last = seg.toks[0].tok, seg.toks[-1].tok
        # comments before this segment: trailing the previous line, or on lines of their own
        while ci < len(comments) and comments[ci].start_pos < first.start_pos:
            c = comments[ci]
            ci += 1
            if lines and c.line == last_line:
                _attach(lines[-1], str(c).rstrip())
            else:
                indent = seg.indent + (INDENT if seg.closes else 0)
                blank = _blank(c.line, last_line, lines)
                lines.append(_Line(indent, [str(c).rstrip()], blank_before=blank))
            last_line = c.end_line
        internal = []
        while ci < len(comments) and comments[ci].start_pos < last.end_pos:
            internal.append(comments[ci])
            ci += 1
        blank = _blank(first.line, last_line, lines) and not seg.closes
        seg_lines = _segment_lines(seg, internal)
        seg_lines[0].blank_before = blank
        lines.extend(seg_lines)
        last_line = max(last.end_line, internal[-1].end_line if internal else 0)
    while ci < len(comments):
        c = comments[ci]
        ci += 1
        if lines and c.line == last_line:
            _attach(lines[-1], str(c).rstrip())
        else:
            lines.append(_Line(0, [str(c).rstrip()], blank_before=_blank(c.line, last_line, lines)))
        last_line = c.end_line
    return lines


def _attach(line: _Line, comment: str) -> None:
    line.comment = comment if line.comment is None else f"{line.comment}  {comment}"


def _blank(line: int, last_line: int, lines: list[_Line]) -> bool:
    """A blank line is kept (one at most), except at the top of the file and of a block."""
    if not lines or line - last_line <= 1:
        return False
    prev = lines[-1]
    return not (prev.kind in ("state_open", "intent_open") and not prev.extra)


def _segment_lines(seg: _Segment, comments: list[Token]) -> list[_Line]:
    """A segment's lines: the author's line breaks inside it kept, continuation indented."""
    elems = sorted([(t.tok.start_pos, t) for t in seg.toks] + [(c.start_pos, c) for c in comments],
                   key=lambda e: e[0])
    head = _Line(seg.indent, [], kind=seg.kind)
    current: list[str] = [""]  # cells of the line being built
    line = head
    prev: _Tok | None = None
    prev_line = seg.toks[0].tok.line
    depth = 0
    index = {id(t): i for i, t in enumerate(seg.toks)}

    def flush_to_new(indent: int) -> None:
        nonlocal line, current, prev
        line.cells = list(current) if line is head else ["".join(current)]
        line = _Line(indent, [])
        head.extra.append(line)
        current = [""]
        prev = None

    for _, e in elems:
        if isinstance(e, Token):  # a comment inside the segment
            if e.line == prev_line and (current != [""] or line is head):
                line.cells = list(current) if line is head else ["".join(current)]
                _attach(line, str(e).rstrip())
                flush_to_new(seg.indent + CONTINUATION + INDENT * depth)
            else:
                indent = seg.indent + CONTINUATION + INDENT * depth
                if current != [""]:
                    flush_to_new(indent)
                line.cells = [str(e).rstrip()]  # the empty continuation line becomes the comment's
                current = [str(e).rstrip()]
                flush_to_new(indent)
            prev_line = e.end_line
            continue
        tok = e
        if tok.text in (")", "]") or (tok.text == "}" and tok.parent == "set_lit"):
            depth -= 1
        if tok.tok.line > prev_line and current != [""]:
            flush_to_new(seg.indent + CONTINUATION + INDENT * depth)
        if line is head and index[id(tok)] in seg.cells_at:
            current.extend([""] * (seg.cells_at[index[id(tok)]] + 1 - len(current)))
            current[-1] = tok.text
        else:
            current[-1] += _space(prev, tok) + tok.text
        prev = tok
        prev_line = tok.tok.end_line
        if tok.text in ("(", "[") or (tok.text == "{" and tok.parent == "set_lit"):
            depth += 1
    if current != [""] or line is head:
        line.cells = list(current) if line is head else ["".join(current)]
    else:  # the segment ended on a comment: drop the empty continuation opened after it
        head.extra.pop()
    head.single = not head.extra
    return [head] + head.extra


def _render(lines: list[_Line], newline: str) -> str:
    # alignment groups: consecutive one-line segments of one kind, no blank line or comment line
    out: list[str] = []
    i = 0
    while i < len(lines):
        j = i + 1
        if lines[i].kind is not None and lines[i].single:
            while (j < len(lines) and lines[j].kind == lines[i].kind and lines[j].single
                   and not lines[j].blank_before):
                j += 1
        group = lines[i:j]
        # a column is as wide as its widest cell, when some line has a cell after it
        last = max(len(ln.cells) for ln in group) - 1
        widths = {k: max(len(ln.cells[k]) for ln in group if len(ln.cells) > k) for k in range(last)}
        texts = []
        for ln in group:
            parts = [cell.ljust(widths[k]) if k < len(ln.cells) - 1 and len(group) > 1 else cell
                     for k, cell in enumerate(ln.cells)]
            joined = " ".join(p for p in parts if p or len(group) > 1)
            texts.append(" " * ln.indent + joined.rstrip())
        col = max((len(t) for t, ln in zip(texts, group) if ln.comment), default=0) + 2
        for t, ln in zip(texts, group):
            if ln.blank_before and out:
                out.append("")
            if ln.comment is not None:
                t = (t.ljust(col) if len(group) > 1 else t + "  ") + ln.comment if t.strip() \
                    else " " * ln.indent + ln.comment
            out.append(t.rstrip())
        i = j
    return newline.join(out).rstrip("\r\n") + newline
