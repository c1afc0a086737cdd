"""`zc fmt`: the canonical layout of a policy, keeping every token and every comment.

The formatter re-emits the policy's tokens in their order with canonical spacing, so the meaning
(and `Policy.sha256`) cannot change. Layout: one declaration a line; state fields and an intent's
`allow` on their own lines, indented 2; a line break the author put inside a declaration is kept,
and its continuation lines up under the first token after the open bracket it is in (when that
token follows the bracket on its line), else under a rule's, route's or field's body (the part
after its `:`), else is indented 4 (plus 2 per open bracket); at most one blank line between
declarations; runs of declarations of the same kind are aligned in columns (a declaration over
several lines aligns its first line, its continuations move with it), and so are their trailing
comments (two spaces after the code; a line much longer than the run's others keeps its comment
two spaces after its own code instead of pushing the column).
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
_SLOTS = {"action_decl": ("TAGS", "COST", "STRING"), "tier_decl": ("MAX_MS", "COST", "TEXT")}
_BODY_ALIGNED = {"rule_decl", "route_decl", "field"}  # continuations line up under the part after `:`


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
    # the segment's kind (its alignment group), None for comment lines and continuations
    kind: str | None = None
    extra: list[_Line] = field(default_factory=list)  # a segment's continuation lines
    # a continuation under a bracket of the head's cell k: moves with its padding
    shift_cell: int | None = None


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
    from .driver import lower_source
    from .ir import identity

    try:
        return identity(lower_source(Source(path, text)))
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
                        if slot > max(slots.values(), default=0):  # an option out of order stays in its cell
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
    # per open bracket: (column, head cell) of the token after it
    visual: list[tuple[int, int | None] | None] = []
    body: tuple[int, int] | None = None  # a rule's, route's or field's body: where its continuations line up
    index = {id(t): i for i, t in enumerate(seg.toks)}

    def column() -> tuple[int, int | None]:
        """(where the line being built ends, the head's cell it is in): on the head, as rendered
        without alignment padding (`_render` adds the padding of the cells before it)."""
        if line is head:
            return seg.indent + len(" ".join(c for c in current if c)), len(current) - 1
        return line.indent + len(current[0]), None

    def indent_here() -> tuple[int, int | None]:
        if visual and visual[-1] is not None:
            return visual[-1]
        if body is not None and depth == 0:
            return body
        return seg.indent + CONTINUATION + INDENT * depth, None

    def flush_to_new(at: tuple[int, int | None]) -> None:
        nonlocal line, current, prev
        line.cells = list(current) if line is head else ["".join(current)]
        line = _Line(at[0], [], shift_cell=at[1])
        head.extra.append(line)
        current = [""]
        prev = None

    for _, e in elems:
        if isinstance(e, Token):  # a comment inside the segment
            if e.line == prev_line and (current != [""] or line is head):
                line.cells = list(current) if line is head else ["".join(current)]
                _attach(line, str(e).rstrip())
                flush_to_new(indent_here())
            else:
                at = indent_here()
                if current != [""]:
                    flush_to_new(at)
                line.cells = [str(e).rstrip()]  # the empty continuation line becomes the comment's
                current = [str(e).rstrip()]
                flush_to_new(at)
            prev_line = e.end_line
            continue
        tok = e
        if tok.text in (")", "]") or (tok.text == "}" and tok.parent == "set_lit"):
            depth -= 1
            visual.pop()
        if tok.tok.line > prev_line and current != [""]:
            flush_to_new(indent_here())
        elif visual and visual[-1] is None and prev is not None and prev.text in "([{":
            col, cell = column()
            visual[-1] = (col + len(_space(prev, tok)), cell)  # the first token after the bracket
        if line is head and index[id(tok)] in seg.cells_at:
            current.extend([""] * (seg.cells_at[index[id(tok)]] + 1 - len(current)))
            current[-1] = tok.text
            if seg.kind in _BODY_ALIGNED and body is None:
                before = " ".join(c for c in current[:-1] if c)
                body = (seg.indent + len(before) + (1 if before else 0), len(current) - 1)
        else:
            current[-1] += _space(prev, tok) + tok.text
        prev = tok
        prev_line = tok.tok.end_line
        if tok.text in ("(", "[") or (tok.text == "{" and tok.parent == "set_lit"):
            depth += 1
            visual.append(None)
    if current != [""] or line is head:
        line.cells = list(current) if line is head else ["".join(current)]
    else:  # the segment ended on a comment: drop the empty continuation opened after it
        head.extra.pop()
    return [head] + head.extra


COMMENT_SLACK = 16  # a line this much longer than the run's median keeps its comment to itself


def _comment_column(widths: list[int]) -> int:
    """The column of a run's trailing comments: two after the longest code line that is not much
    longer than the run's median (the longer ones put theirs two after their own code)."""
    if not widths:
        return 0
    median = sorted(widths)[len(widths) // 2]
    return max(w for w in widths if w <= median + COMMENT_SLACK) + 2


def _render(lines: list[_Line], newline: str) -> str:
    # segments: a head line (kind set) and its continuation lines; comment lines stand alone
    units: list[tuple[_Line, list[_Line]]] = []
    i = 0
    while i < len(lines):
        n = len(lines[i].extra) if lines[i].kind is not None else 0
        units.append((lines[i], lines[i + 1 : i + 1 + n]))
        i += 1 + n
    # alignment groups: consecutive segments of one kind, no blank line or comment line between
    out: list[str] = []
    i = 0
    while i < len(units):
        j = i + 1
        if units[i][0].kind is not None:
            while j < len(units) and units[j][0].kind == units[i][0].kind and not units[j][0].blank_before:
                j += 1
        group = units[i:j]
        # a column is as wide as its widest cell, when some line has a cell after it (the last
        # cell of a head whose segment goes on below does not count: it is not a column)
        last = max(len(h.cells) for h, _ in group) - 1
        widths = {k: max((len(h.cells[k]) for h, more in group if len(h.cells) > k
                          and not (more and k == len(h.cells) - 1)), default=0) for k in range(last)}
        texts, starts = [], []
        for h, _ in group:
            parts = [cell.ljust(widths[k]) if k < len(h.cells) - 1 and len(group) > 1 else cell
                     for k, cell in enumerate(h.cells)]
            kept = [bool(p) or len(group) > 1 for p in parts]
            texts.append(" " * h.indent + " ".join(p for p, k in zip(parts, kept) if k).rstrip())
            # each cell's shift: where it starts as rendered, less where it starts unpadded
            at, plain, shift = 0, 0, {}
            for k, (part, cell, keep) in enumerate(zip(parts, h.cells, kept)):
                shift[k] = at - plain
                at += len(part) + 1 if keep else 0
                plain += len(cell) + 1 if cell else 0
            starts.append(shift)
        col = _comment_column([len(t) for t, (h, more) in zip(texts, group) if h.comment and not more])
        for t, (h, more), shift in zip(texts, group, starts):
            if h.blank_before and out:
                out.append("")
            out.append(_with_comment(t, h, col if len(group) > 1 and not more else 0))
            for ln in more:
                indent = ln.indent + shift.get(ln.shift_cell, 0)  # None (no head cell): no shift
                text = " " * indent + "".join(ln.cells)
                out.append(_with_comment(text.rstrip(), ln, 0))
        i = j
    return newline.join(out).rstrip("\r\n") + newline


def _with_comment(text: str, ln: _Line, col: int) -> str:
    """A rendered line with its trailing comment: at `col` when the code ends before it, else two
    spaces after the code; a line of only a comment keeps its own indent."""
    if ln.comment is None:
        return text.rstrip()
    if not text.strip():
        return " " * ln.indent + ln.comment
    return (text.ljust(col) if len(text) < col else text + "  ") + ln.comment
