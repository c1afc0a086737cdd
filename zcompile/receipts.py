"""Receipts: the Receipt struct, JSONL(.gz) reading and appending, chat-log import."""

from __future__ import annotations

import gzip
import importlib
import os
import re
import sys
import tempfile
import threading
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, BinaryIO, Literal

import msgspec

from .errors import ZcError

__all__ = ["ReadStats", "Receipt", "ReceiptError", "ReceiptWriter", "default_extract", "import_chat",
           "load_extractor", "read", "write_file"]

NonNegative = Annotated[float, msgspec.Meta(ge=0)]
Probability = Annotated[float, msgspec.Meta(ge=0, le=1)]

TOOL_TEXT_LIMIT = 2000  # characters of the last tool message kept in `last.tool_text`
PROBLEMS_KEPT = 100  # problems kept in ReadStats.problems (all are counted)
GZIP_MAGIC = b"\x1f\x8b"


class Receipt(msgspec.Struct, frozen=True, omit_defaults=True, forbid_unknown_fields=True):
    """One logged decision: what was seen, what was legal, who answered, and whether it was right.

    Attributes:
        id: unique id of the decision (for chat imports: `"{conversation}:{message index}"`).
        task: the task the decision belongs to; distillation splits by task, never by row.
        state: the runtime state the decision was taken in (the policy's state schema).
        tier: the rung that answered (`compiler`, `specialist`, a tier name, `remote`).
        ts: unix seconds; None means "order in the file".
        policy: sha256 of the policy artifact the legal set came from, or "".
        intent: the active intent, if any.
        legal: the legal actions offered, if known.
        model: the model that answered, if any.
        action: the action taken; None when the rung abstained.
        confidence: the rung's confidence in `action`, in [0, 1].
        latency_ms: time taken by the rung.
        cost: the rung's cost for this decision.
        verified: whether the action was judged correct (None: not judged).
        gold: the correct action, when known.
        meta: anything else (free-form JSON).
    """

    id: str
    task: str
    state: dict[str, Any]
    tier: str
    ts: float | None = None
    policy: str = ""
    intent: str | None = None
    legal: tuple[str, ...] | None = None
    model: str | None = None
    action: str | None = None
    confidence: Probability | None = None
    latency_ms: NonNegative = 0.0
    cost: NonNegative = 0.0
    verified: bool | None = None
    gold: str | None = None
    meta: dict[str, Any] = {}


class ReceiptError(ZcError):
    """A receipt or chat-log file that cannot be read; the message is `FILE:LINE: $.path: problem`."""


@dataclass
class ReadStats:
    """Counts kept by `read`: non-blank lines read, valid receipts, skipped lines, problems."""

    files: int = 0
    read: int = 0
    valid: int = 0
    skipped: int = 0
    problems: list[str] = field(default_factory=list)  # the first PROBLEMS_KEPT, as `file:line: …`

    def _problem(self, text: str) -> None:
        self.skipped += 1
        if len(self.problems) < PROBLEMS_KEPT:
            self.problems.append(text)


# ---- reading ------------------------------------------------------------------------------------

def expand(paths: str | os.PathLike | Iterable[str | os.PathLike]) -> list[Path]:
    """The receipt files named by paths: files as given, directories expanded (sorted)."""
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    out: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            found = sorted(q for q in p.rglob("*")
                           if q.is_file() and q.name.endswith((".jsonl", ".jsonl.gz")))
            if not found:
                raise ReceiptError(f"{p}: no receipt files (*.jsonl, *.jsonl.gz) in this directory")
            out.extend(found)
        else:
            out.append(p)
    if not out:
        raise ReceiptError("no receipt files given")
    return out


class _CorruptStream(ReceiptError):
    """A gzip stream that ends early or does not decompress."""


def _lines(path: Path) -> Iterator[tuple[int, bytes, bool]]:
    """Yield (line number, line without its newline, whether the line lacks its newline).

    Streams one line at a time; gzip is detected by its magic bytes, not by the file name. Blank
    lines are skipped (they still count in line numbers).
    """
    try:
        raw = open(path, "rb")  # noqa: SIM115 - closed below
    except OSError as exc:
        raise ReceiptError(f"{path}: cannot read: {exc.strerror}") from None
    with raw:
        fh: BinaryIO = gzip.GzipFile(fileobj=raw, mode="rb") if raw.peek(2)[:2] == GZIP_MAGIC else raw
        lineno = 0
        while True:
            try:
                line = fh.readline()
            except (EOFError, OSError, zlib.error) as exc:
                what = ("the gzip stream ends early (the writer stopped mid-file)"
                        if isinstance(exc, EOFError) else f"corrupt gzip data ({exc})")
                raise _CorruptStream(f"{path}:{lineno + 1}: $: {what}") from None
            if not line:
                return
            lineno += 1
            complete = line.endswith(b"\n")
            body = line.rstrip(b"\r\n") if complete else line
            if body.strip():
                yield lineno, body, not complete


def _problem_text(exc: msgspec.MsgspecError) -> str:
    """A msgspec error as `$.path: problem` (lowercase, path first)."""
    text = str(exc)
    if not isinstance(exc, msgspec.ValidationError):
        if "truncated" in text:
            return "$: invalid JSON: the line ends before the JSON value is complete"
        return f"$: invalid JSON: {text.removeprefix('JSON is malformed: ')}"
    msg, sep, where = text.rpartition(" - at `")
    path = where.rstrip("`") if sep else "$"
    msg = msg if sep else text
    m = re.match(r"Object missing required field `(.*)`", msg)
    if m:
        return f"{path}.{m.group(1)}: required field is missing"
    m = re.match(r"Object contains unknown field `(.*)`", msg)
    if m:
        return f"{path}.{m.group(1)}: unknown field"
    return f"{path}: {msg[0].lower() + msg[1:]}"


def _check_against(r: Receipt, policy: Any) -> str | None:
    """The first way `r` disagrees with `policy` (state schema, intent, action names), or None."""
    from .state import StateError

    try:
        policy.legal(r.state, r.intent)
    except StateError as exc:
        msg = str(exc)
        msg = msg[len(exc.path) + 2:] if msg.startswith(exc.path + ": ") else msg
        return f"$.state{exc.path[1:]}: {msg}"
    except ZcError as exc:
        return f"$.intent: {exc}"
    known = set(policy.actions)
    checks: list[tuple[str, str | None]] = [("$.action", r.action), ("$.gold", r.gold)]
    checks += [(f"$.legal[{i}]", a) for i, a in enumerate(r.legal or ())]
    for where, name in checks:
        if name is not None and name not in known:
            return f"{where}: unknown action {msgspec.json.encode(name).decode()} (not in policy `{policy.name}`)"
    return None


_DECODER = msgspec.json.Decoder(Receipt)


def read(paths: str | os.PathLike | Iterable[str | os.PathLike], *, skip_invalid: bool = False,
         policy: Any = None, stats: ReadStats | None = None) -> Iterator[Receipt]:
    """Stream receipts from JSONL files (gzip detected by its magic bytes), validating every line.

    Args:
        paths: a file, a directory (every `*.jsonl` / `*.jsonl.gz` below it, sorted), or a list of them.
            Files are read in the order given; with `ts=None`, that order is the receipts' order.
        skip_invalid: skip invalid lines (counting them in `stats`) instead of raising.
        policy: a zcompile Policy; when given, each receipt's state must validate against its schema
            and `action`, `gold` and `legal` must name its actions.
        stats: a ReadStats to fill in (files, lines read, valid, skipped, the first 100 problems).

    Returns:
        An iterator of Receipts; files are opened lazily and read one line at a time.

    Raises:
        ReceiptError: `FILE:LINE: $.path: problem` for the first invalid line (unless
            `skip_invalid`), and for unreadable files and truncated gzip streams in any case
            (with `skip_invalid`, a truncated gzip stream is a problem and the next file is read).
    """
    files = expand(paths)
    return _read(files, skip_invalid, policy, stats if stats is not None else ReadStats())


def _read(files: list[Path], skip_invalid: bool, policy: Any, stats: ReadStats) -> Iterator[Receipt]:
    for path in files:
        stats.files += 1
        lines = _lines(path)
        while True:
            try:
                lineno, body, last_unterminated = next(lines)
            except StopIteration:
                break
            except _CorruptStream as exc:
                stats._problem(str(exc))
                if not skip_invalid:
                    raise ReceiptError(str(exc)) from None
                break
            stats.read += 1
            problem = None
            try:
                r = _DECODER.decode(body)
            except msgspec.ValidationError as exc:  # a subclass of DecodeError: catch it first
                problem = _problem_text(exc)
            except msgspec.DecodeError as exc:
                problem = ("$: torn last line (the writer stopped mid-line)" if last_unterminated
                           else _problem_text(exc))
            else:
                if policy is not None:
                    problem = _check_against(r, policy)
            if problem is not None:
                text = f"{path}:{lineno}: {problem}"
                if not skip_invalid:
                    stats._problem(text)
                    raise ReceiptError(text)
                stats._problem(text)
                continue
            stats.valid += 1
            yield r


# ---- writing ------------------------------------------------------------------------------------

_ENCODER = msgspec.json.Encoder()


def encode(r: Receipt) -> bytes:
    """One receipt as one JSON line, newline included."""
    return _ENCODER.encode(r) + b"\n"


class ReceiptWriter:
    """Append receipts to a JSONL file: one whole line per `os.write` on an O_APPEND descriptor.

    Thread-safe (a lock serialises appends; O_APPEND keeps concurrent processes from overwriting
    each other). Every line reaches the operating system before `append` returns; with
    `fsync=True` it also reaches the disk. If the file ends in a torn line (an earlier writer
    crashed mid-line), a newline is written first, so the torn fragment stays a line of its own
    that readers report, and no new receipt is merged into it. Plain JSONL only: appending to a
    gzip file cannot be made crash-safe line by line.
    """

    def __init__(self, path: str | os.PathLike, *, fsync: bool = False) -> None:
        self.path = Path(path)
        if self.path.name.endswith(".gz"):
            raise ReceiptError(f"{self.path}: cannot append to a gzip file; write plain .jsonl "
                               "and compress it when it is complete")
        self.fsync = fsync
        self._lock = threading.Lock()
        try:
            self._fd: int | None = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            size = os.fstat(self._fd).st_size
            if size:
                with open(self.path, "rb") as fh:
                    fh.seek(size - 1)
                    if fh.read(1) != b"\n":
                        self._write(b"\n")
        except OSError as exc:
            raise ReceiptError(f"{self.path}: cannot open for appending: {exc.strerror}") from None

    def _write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(self._fd, view):]  # type: ignore[arg-type]
        if self.fsync:
            os.fsync(self._fd)  # type: ignore[arg-type]

    def append(self, r: Receipt) -> None:
        """Append one receipt as one line (flushed; fsync'ed when asked)."""
        data = encode(r)
        with self._lock:
            if self._fd is None:
                raise ReceiptError(f"{self.path}: the writer is closed")
            try:
                self._write(data)
            except OSError as exc:
                raise ReceiptError(f"{self.path}: cannot append: {exc.strerror}") from None

    def close(self) -> None:
        """Close the file (idempotent)."""
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None

    def __enter__(self) -> ReceiptWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def write_file(path: str | os.PathLike, receipts: Iterable[Receipt]) -> int:
    """Write receipts to a new file atomically (temp file + rename); gzip when `path` ends `.gz`.

    The gzip header carries no name and mtime 0, so equal receipts give equal bytes. Nothing is
    left at `path` if iterating `receipts` raises. Returns the number of receipts written.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    n = 0
    try:
        with os.fdopen(fd, "wb") as raw:
            if path.name.endswith(".gz"):
                with gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as out:
                    for r in receipts:
                        out.write(encode(r))
                        n += 1
            else:
                for r in receipts:
                    raw.write(encode(r))
                    n += 1
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return n


# ---- chat-log import ----------------------------------------------------------------------------

class _Function(msgspec.Struct):
    name: str
    arguments: Any = None


class _ToolCall(msgspec.Struct):
    function: _Function


class _Message(msgspec.Struct):
    role: Literal["system", "user", "assistant", "tool"]
    content: str | None = None
    tool_calls: list[_ToolCall] | None = None
    name: str | None = None


class _Conversation(msgspec.Struct):
    id: str
    messages: list[_Message]
    task: str | None = None
    trial: int | None = None
    reward: float | None = None
    model: str | None = None


_CHAT_DECODER = msgspec.json.Decoder(_Conversation)


def _tool_error(content: str) -> bool:
    if content.startswith("Error"):
        return True
    if content.lstrip().startswith("{"):
        try:
            obj = msgspec.json.decode(content)
        except msgspec.DecodeError:
            return False
        return isinstance(obj, dict) and "error" in obj
    return False


def default_extract(messages: list[dict], index: int, conversation: dict) -> dict:
    """The state for the decision at `messages[index]`, from the messages before it only.

    Deterministic, and blind to `messages[index:]` (the decision itself and what follows). The
    fields (documented in the README, section Receipts) match `policies/airline_chat.zc`:
    `prev.role`, `last.tool`, `last.tool_error`, `last.user_text`, `last.tool_text`,
    `last.assistant_text`, `turn`, `user_turns`, `tool_calls`, `history`.

    Args:
        messages: the conversation's messages as dicts (`role`, `content`, `tool_calls`, …).
        index: the index of the assistant message being decided.
        conversation: the whole conversation object (unused by this extractor).
    """
    tool = user_text = tool_text = assistant_text = None
    tool_error = False
    turn = user_turns = tool_calls = 0
    history: dict[str, None] = {}  # an insertion-ordered set: tools in first-call order
    for m in messages[:index]:
        role, content = m.get("role"), m.get("content") or ""
        if role == "assistant":
            turn += 1
            calls = m.get("tool_calls") or ()
            for call in calls:
                tool = call["function"]["name"]
                tool_calls += 1
                history.setdefault(tool, None)
            if not calls:
                assistant_text = content
        elif role == "user":
            user_turns += 1
            user_text = content
        elif role == "tool":
            tool_text = content[:TOOL_TEXT_LIMIT]
            tool_error = _tool_error(content)
    last: dict[str, Any] = {"tool": tool, "tool_error": tool_error, "user_text": user_text,
                            "tool_text": tool_text, "assistant_text": assistant_text}
    state: dict[str, Any] = {}
    if index > 0:
        state["prev"] = {"role": messages[index - 1].get("role")}
    state["last"] = {k: v for k, v in last.items() if v is not None}
    state.update(turn=turn, user_turns=user_turns, tool_calls=tool_calls, history=list(history))
    return state


def load_extractor(spec: str) -> Callable[[list[dict], int, dict], dict]:
    """Import a state extractor named `module:function` (the current directory is importable too).

    Raises:
        ZcError: the spec is malformed, the module cannot be imported, or the name is not callable.
    """
    mod_name, sep, attr = spec.partition(":")
    if not sep or not mod_name or not attr:
        raise ZcError(f"extractor `{spec}` is not of the form `module:function` "
                      "(e.g. `myharness.states:extract`)")
    added = os.getcwd() not in sys.path
    if added:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(mod_name)
    except ModuleNotFoundError as exc:
        raise ZcError(f"extractor `{spec}`: cannot import module `{mod_name}` "
                      f"(no module named `{exc.name}`; is it on PYTHONPATH?)") from None
    except Exception as exc:  # noqa: BLE001 - any import-time failure is the user's module
        raise ZcError(f"extractor `{spec}`: importing `{mod_name}` failed: "
                      f"{type(exc).__name__}: {exc}") from None
    finally:
        if added:
            sys.path.remove(os.getcwd())
    fn = module
    for part in attr.split("."):
        fn = getattr(fn, part, None)
        if fn is None:
            raise ZcError(f"extractor `{spec}`: module `{mod_name}` has no attribute `{attr}`")
    if not callable(fn):
        raise ZcError(f"extractor `{spec}`: `{attr}` is not callable")
    return fn  # type: ignore[return-value]


def _verified(reward: float | None) -> bool | None:
    """A successful run vouches for each of its decisions; a failed one does not say which failed."""
    return True if reward == 1.0 else None


def import_chat(src_path: str | os.PathLike, *, extract: Callable[[list[dict], int, dict], dict] = default_extract,
                policy: Any = None) -> Iterator[Receipt]:
    """Turn an OpenAI-format chat log (one conversation a line) into one receipt per assistant message.

    The action is `tool_calls[0].function.name`, or `respond` for a text reply. The task is the
    conversation's `task` (so every trial of one scenario lands in the same split), else its id.
    `verified` is True for reward 1.0, False for 0.0, None otherwise. With `policy`, each receipt
    carries the policy's sha256 and the legal set of its state, and a state or action the policy
    does not know is an error.

    Raises:
        ReceiptError: `FILE:LINE: $.path: problem` for a malformed conversation, a state the policy
            refuses, an unknown action, or an extractor that fails.
    """
    path = Path(src_path)
    sha = policy.sha256 if policy is not None else ""
    actions = set(policy.actions) if policy is not None else None
    for lineno, (conv, raw) in _decoded_lines(path, lambda body: (_CHAT_DECODER.decode(body),
                                                                   msgspec.json.decode(body))):
        messages = raw["messages"]
        for i, m in enumerate(conv.messages):
            if m.role != "assistant":
                continue
            where = f"{path}:{lineno}: $.messages[{i}]"
            action = m.tool_calls[0].function.name if m.tool_calls else "respond"
            try:
                state = extract(messages, i, raw)
            except Exception as exc:  # noqa: BLE001 - a harness's extractor is user code
                raise ReceiptError(f"{where}: the state extractor failed: "
                                   f"{type(exc).__name__}: {exc}") from None
            if not isinstance(state, dict):
                raise ReceiptError(f"{where}: the state extractor returned "
                                   f"{type(state).__name__}, expected a dict")
            legal = None
            if policy is not None:
                if action not in actions:
                    field_ = ".tool_calls[0].function.name" if m.tool_calls else ""
                    raise ReceiptError(f"{where}{field_}: unknown action "
                                       f"{msgspec.json.encode(action).decode()} (not in policy `{policy.name}`)")
                from .state import StateError

                try:
                    legal = policy.legal(state).actions
                except StateError as exc:
                    raise ReceiptError(f"{where}: extracted state does not match policy "
                                       f"`{policy.name}`: {exc}") from None
            yield Receipt(
                id=f"{conv.id}:{i}", task=conv.task if conv.task is not None else conv.id,
                state=state, tier="remote", ts=None, policy=sha, legal=legal, model=conv.model,
                action=action, verified=_verified(conv.reward), gold=None,
                meta={"conversation": conv.id, "trial": conv.trial, "reward": conv.reward, "turn": i})


# ---- function-calling (BFCL) import ---------------------------------------------------------------

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


def _decoded_lines(path: Path, decode: Callable[[bytes], Any]) -> Iterator[tuple[int, Any]]:
    """(line number, decode(line)) per non-blank line; a bad line raises `FILE:LINE: $.path: problem`."""
    for lineno, body, unterminated in _lines(path):
        try:
            yield lineno, decode(body)
        except msgspec.ValidationError as exc:  # a subclass of DecodeError: catch it first
            raise ReceiptError(f"{path}:{lineno}: {_problem_text(exc)}") from None
        except msgspec.DecodeError as exc:
            problem = ("$: torn last line (the writer stopped mid-line)" if unterminated
                       else _problem_text(exc))
            raise ReceiptError(f"{path}:{lineno}: {problem}") from None


def bfcl_answers_path(src_path: str | os.PathLike) -> Path:
    """Where BFCL keeps the answers of a question file: `possible_answer/<same name>` beside it."""
    p = Path(src_path)
    return p.parent / "possible_answer" / p.name


def import_bfcl(src_path: str | os.PathLike, answers: str | os.PathLike | None) -> Iterator[Receipt]:
    """Turn a function-calling benchmark file (BFCL format) into one receipt per question.

    Each line is `{"id", "question": [[{"role", "content"}, …]], "function": [{name, description,
    parameters}, …]}`. The state is `{"request": …}`, the user messages joined by newlines; the
    offered functions are the legal set, and their schemas go to `meta.tools` (a pairwise
    specialist reads their descriptions). The label comes from `answers` (lines `{"id",
    "ground_truth": [{function name: arguments}, …]}`): the first call's function is `action` and
    `gold`. With `answers=None`, calling none of the offered functions is the right answer to every
    question (BFCL's irrelevance category): `action` is None (abstain) and `verified` is True.
    Every receipt's task is its question id: each question is its own task.

    Raises:
        ReceiptError: `FILE:LINE: $.path: problem` for a malformed line, a question without an
            answer, or an answer naming a function that was not offered.
    """
    path = Path(src_path)
    gold: dict[str, str] | None = None
    if answers is not None:
        apath = Path(answers)
        gold = {}
        for lineno, a in _decoded_lines(apath, msgspec.json.Decoder(_BfclAnswer).decode):
            if not a.ground_truth or not isinstance(a.ground_truth[0], dict) or len(a.ground_truth[0]) != 1:
                raise ReceiptError(f"{apath}:{lineno}: $.ground_truth: expected a list of "
                                   "{function name: arguments} objects")
            gold[a.id] = next(iter(a.ground_truth[0]))
    for lineno, q in _decoded_lines(path, msgspec.json.Decoder(_BfclQuestion).decode):
        where = f"{path}:{lineno}"
        request = "\n".join(t.content for turns in q.question for t in turns if t.role == "user" and t.content)
        if not request:
            raise ReceiptError(f"{where}: $.question: no user message")
        names = tuple(dict.fromkeys(f.name for f in q.function))
        if not names:
            raise ReceiptError(f"{where}: $.function: no function offered")
        tools = [{"name": f.name, "description": f.description, "parameters": f.parameters} for f in q.function]
        action = None
        if gold is not None:
            if q.id not in gold:
                raise ReceiptError(f"{where}: $.id: no answer for question `{q.id}` in {answers}")
            action = gold[q.id]
            if action not in names:
                raise ReceiptError(f"{where}: the answer `{action}` is not one of the offered functions "
                                   f"({', '.join(names)})")
        yield Receipt(id=q.id, task=q.id, state={"request": request}, tier="gold", legal=names,
                      action=action, gold=action, verified=True,
                      meta={"tools": tools, "source": path.name})
