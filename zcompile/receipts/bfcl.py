"""Function-calling benchmark import: BFCL questions and possible answers to receipts."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec

from .format import Receipt, ReceiptError
from .io import decoded_lines

__all__ = ["bfcl_answers_path", "canonical_arguments", "import_bfcl"]


class _BfclTurn(msgspec.Struct):
    role: str
    content: str | None = None


class _BfclFunction(msgspec.Struct):
    name: str
    description: str = ""
    parameters: dict[str, Any] = {}


class _BfclQuestion(msgspec.Struct):
    id: str
    question: list[list[_BfclTurn]]
    function: list[_BfclFunction]


class _BfclAnswer(msgspec.Struct):
    id: str
    ground_truth: list[dict[str, Any]]


def bfcl_answers_path(src_path: str | os.PathLike) -> Path:
    """Where BFCL keeps the answers of a question file: `possible_answer/<same name>` beside it."""
    p = Path(src_path)
    return p.parent / "possible_answer" / p.name


def canonical_arguments(possible: Any) -> dict[str, Any] | None:
    """One call from a BFCL possible answer `{argument: [acceptable values…]}`: each argument's
    first acceptable value; an argument that may be left out (`""` is among its values) is left
    out. None when `possible` is not of that form."""
    if not isinstance(possible, dict) or not all(isinstance(v, list) and v for v in possible.values()):
        return None
    return {k: v[0] for k, v in possible.items() if "" not in v}


def import_bfcl(src_path: str | os.PathLike, answers: str | os.PathLike | None) -> Iterator[Receipt]:
    """Turn a function-calling benchmark file (BFCL format) into one receipt per question.

    Each line is `{"id", "question": [[{"role", "content"}, …]], "function": [{name, description,
    parameters}, …]}`. The state is `{"request": …}`, the user messages joined by newlines; the
    offered functions are the legal set, and their schemas go to `meta.tools` (a pairwise
    specialist reads their descriptions). The label comes from `answers` (lines `{"id",
    "ground_truth": [{function name: {argument: [acceptable values]}}, …]}`): the first call's
    function is `action` and `gold`, `arguments` is `canonical_arguments` of its possible answer
    and `meta.possible_arguments` keeps every acceptable value. With `answers=None`, calling none
    of the offered functions is the right answer to every question (BFCL's irrelevance category):
    `action` is None (abstain) and `verified` is True. A question that offers no function at all
    is imported the same way, with an empty legal set, answers or not (nothing can be called, so
    abstaining is the answer; `meta.no_function` marks it). Every receipt's task is its question
    id: each question is its own task.

    Raises:
        ReceiptError: `FILE:LINE: $.path: problem` for a malformed line, a question without an
            answer (one offering functions), or an answer naming a function that was not offered.
    """
    path = Path(src_path)
    gold: dict[str, tuple[str, Any]] | None = None
    if answers is not None:
        apath = Path(answers)
        gold = {}
        for lineno, a in decoded_lines(apath, msgspec.json.Decoder(_BfclAnswer).decode):
            if not a.ground_truth or not isinstance(a.ground_truth[0], dict) or len(a.ground_truth[0]) != 1:
                raise ReceiptError(f"{apath}:{lineno}: $.ground_truth: expected a list of "
                                   "{function name: arguments} objects")
            gold[a.id] = next(iter(a.ground_truth[0].items()))
    for lineno, q in decoded_lines(path, msgspec.json.Decoder(_BfclQuestion).decode):
        where = f"{path}:{lineno}"
        request = "\n".join(t.content for turns in q.question for t in turns if t.role == "user"
                            and t.content)
        if not request:
            raise ReceiptError(f"{where}: $.question: no user message")
        names = tuple(dict.fromkeys(f.name for f in q.function))
        tools = [{"name": f.name, "description": f.description, "parameters": f.parameters}
                 for f in q.function]
        meta: dict[str, Any] = {"tools": tools, "source": path.name}
        if not names:
            meta["no_function"] = True
        action = arguments = None
        if gold is not None and (names or q.id in gold):
            if q.id not in gold:
                raise ReceiptError(f"{where}: $.id: no answer for question `{q.id}` in {answers}")
            action, possible = gold[q.id]
            if not names:
                raise ReceiptError(f"{where}: $.function: no function offered, yet the answer names "
                                   f"`{action}`")
            if action not in names:
                raise ReceiptError(f"{where}: the answer `{action}` is not one of the offered functions "
                                   f"({', '.join(names)})")
            arguments = canonical_arguments(possible)
            meta["possible_arguments"] = possible
        yield Receipt(id=q.id, task=q.id, state={"request": request}, tier="gold", legal=names,
                      action=action, arguments=arguments, gold=action, verified=True, meta=meta)
