"""Receipt files: streaming validated reads (JSON Lines, gzip, Parquet), crash-safe appends, atomic
whole-file writes."""

from __future__ import annotations

import fcntl
import gzip
import io
import math
import os
import stat
import threading
import zlib
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import msgspec

from ..errors import ZcError, json_problem
from ..inputs import files_under
from ..outdir import new_file, refuse_foreign_file
from .format import FORMAT_VERSION, Receipt, ReceiptError, newer_major

__all__ = ["GZIP_MAGIC", "PROBLEMS_KEPT", "SUFFIXES", "ReadStats", "ReceiptWriter", "check_receipt",
           "decoded_lines", "encode", "expand", "is_parquet_file", "iter_lines", "line_problem", "read",
           "receipt_of", "write_file"]

PROBLEMS_KEPT = 100  # problems kept in ReadStats.problems (all are counted)
GZIP_MAGIC = b"\x1f\x8b"
BOM = b"\xef\xbb\xbf"
TORN_LAST = "$: torn last line (the writer stopped mid-line)"
TORN = "$: torn line (a writer stopped mid-line; the next append started a new line after it)"
SUFFIXES = (".jsonl", ".jsonl.gz", ".parquet")  # what a directory is expanded to


@dataclass
class ReadStats:
    """Counts kept by `read`: non-blank lines read, valid receipts, skipped lines, problems.

    `foreign` counts, per policy identity, the receipts that were written for another policy than
    the one checked against and do not match it (reported once per identity, then only counted).
    """

    files: int = 0  # files opened so far (the one being read is files - 1)
    line: int = 0  # the line (Parquet: row) number of the last line read in that file
    read: int = 0
    valid: int = 0
    skipped: int = 0
    problems: list[str] = field(default_factory=list)  # the first PROBLEMS_KEPT, as `file:line: …`
    foreign: Counter = field(default_factory=Counter)

    def problem(self, text: str | None) -> None:
        """Count a skipped line; keep `text` (None: counted, not listed) among the first problems."""
        self.skipped += 1
        if text is not None and len(self.problems) < PROBLEMS_KEPT:
            self.problems.append(text)


# ---- lines --------------------------------------------------------------------------------------

def expand(paths: str | os.PathLike | Iterable[str | os.PathLike]) -> list[Path]:
    """The receipt files named by paths: files as given, directories expanded (sorted)."""
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    out: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            found = files_under(p, lambda name: name.endswith(SUFFIXES))
            if not found:
                raise ReceiptError(f"{p}: no receipt files (*.jsonl, *.jsonl.gz, *.parquet) in this "
                                   "directory")
            out.extend(found)
        else:
            out.append(p)
    if not out:
        raise ReceiptError("no receipt files given")
    return out


class _CorruptStream(ReceiptError):
    """A gzip stream that ends early or does not decompress."""


def _open_regular(path: Path) -> BinaryIO:
    """Open a regular file for reading; a FIFO, device or directory is refused, never waited on."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as exc:
        raise ReceiptError(f"{path}: cannot read: {exc.strerror}") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise ReceiptError(f"{path}: cannot read: not a regular file")
    return os.fdopen(fd, "rb")


def is_parquet_file(path: Path) -> bool:
    """Whether `path` is a Parquet file (by its magic bytes, not its name); unreadable files raise."""
    from .parquet import is_parquet

    with _open_regular(path) as raw:
        return is_parquet(raw.peek(4)[:4])


def iter_lines(path: Path) -> Iterator[tuple[int, bytes, bool]]:
    """Yield (line number, line without its newline, whether the line lacks its newline).

    Streams one line at a time; gzip is detected by its magic bytes, not by the file name. Blank
    lines are skipped (they still count in line numbers); a UTF-8 byte-order mark starting the file
    is dropped.
    """
    with _open_regular(path) as raw:
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
            if not lineno and line.startswith(BOM):  # JSON readers may ignore it (RFC 8259 §8.1)
                line = line[len(BOM):]
            lineno += 1
            complete = line.endswith(b"\n")
            body = line.rstrip(b"\r\n") if complete else line
            if body.strip():
                yield lineno, body, not complete


def line_problem(exc: Exception, unterminated: bool) -> str:
    """`$.path: problem` for a line that did not decode; a torn line (JSON cut short) says so."""
    p = json_problem(exc)
    if isinstance(exc, msgspec.ValidationError) or p.kind == "depth":
        return str(p)
    if unterminated:
        return TORN_LAST
    return TORN if p.kind == "truncated" else str(p)


def decoded_lines(path: Path, decode: Callable[[bytes], Any]) -> Iterator[tuple[int, Any]]:
    """(line number, decode(line)) per non-blank line; a bad line raises `FILE:LINE: $.path: problem`."""
    for lineno, body, unterminated in iter_lines(path):
        try:
            value = decode(body)
        except (msgspec.DecodeError, RecursionError) as exc:  # ValidationError is a DecodeError
            raise ReceiptError(f"{path}:{lineno}: {line_problem(exc, unterminated)}") from None
        yield lineno, value


# ---- reading ------------------------------------------------------------------------------------

class _Head(msgspec.Struct):
    """What a line that is not a valid receipt may still say about itself."""

    version: Any = None
    messages: msgspec.Raw = msgspec.Raw(b"")  # kept undecoded: only their presence matters
    question: msgspec.Raw = msgspec.Raw(b"")
    function: msgspec.Raw = msgspec.Raw(b"")


_DECODER = msgspec.json.Decoder(Receipt)
_HEAD = msgspec.json.Decoder(_Head)
_NOT_RECEIPTS = {"chat": "this line is a chat log (a conversation with `messages`), not a receipt: "
                         "convert the file with `zc receipts import --format chat FILE -o OUT`",
                 "bfcl": "this line is a function-calling question (`question`, `function`), not a "
                         "receipt: convert the file with `zc receipts import --format bfcl FILE -o OUT`"}


def _invalid(body: bytes, exc: msgspec.ValidationError) -> tuple[str, bool]:
    """(problem, whether the file is another format) for a line that is JSON but not a receipt."""
    try:
        head = _HEAD.decode(body)
    except (msgspec.DecodeError, RecursionError):
        return str(json_problem(exc)), False
    if (version := newer_major(head.version)) is not None:
        return version, False
    if head.messages:
        return f"$: {_NOT_RECEIPTS['chat']}", True
    if head.question and head.function:
        return f"$: {_NOT_RECEIPTS['bfcl']}", True
    return str(json_problem(exc)), False


def check_receipt(r: Receipt, policy: Any) -> str | None:
    """The problem of a decoded receipt (a newer major version, or disagreeing with `policy` when
    given), or None: the one check every reader applies after decoding."""
    problem = newer_major(r.version)
    if problem is None and policy is not None:
        problem = _check_against(r, policy)
    return problem


def _check_against(r: Receipt, policy: Any) -> str | None:
    """The first way `r` disagrees with `policy` (state schema, intent, action names), or None."""
    from ..state import StateError

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
            return (f"{where}: unknown action {msgspec.json.encode(name).decode()} (not in policy "
                    f"`{policy.name}`)")
    return None


def _foreign(r: Receipt, policy: Any, problem: str) -> str:
    """The problem of a receipt written for another policy: that first, then what does not match."""
    return (f"$.policy: this receipt was written for another policy (identity `{r.policy[:16]}…`; "
            f"`{policy.name}` is `{policy.sha256[:16]}…`), and it does not match `{policy.name}`: "
            f"{problem} (further receipts of that policy that do not match are counted, not listed)")


def read(paths: str | os.PathLike | Iterable[str | os.PathLike], *, skip_invalid: bool = False,
         policy: Any = None, stats: ReadStats | None = None) -> Iterator[Receipt]:
    """Stream receipts from JSON Lines (gzip detected by its magic bytes) and Parquet files (by
    theirs, `receipts.parquet`), validating every line or row.

    Args:
        paths: a file, a directory (every `*.jsonl`, `*.jsonl.gz` and `*.parquet` below it, sorted),
            or a list of them. Files are read in the order given; with `ts=None`, that order is the
            receipts' order.
        skip_invalid: skip invalid lines (counting them in `stats`) instead of raising.
        policy: a zcompile Policy; when given, each receipt's state must validate against its schema
            and `action`, `gold` and `legal` must name its actions. A receipt written for another
            policy (its `policy` identity differs) that does not match is reported once per
            identity, then counted in `stats.foreign`.
        stats: a ReadStats to fill in (files, lines read, valid, skipped, the first 100 problems).

    Returns:
        An iterator of Receipts; files are opened lazily and read one line (Parquet: one batch of
        rows) at a time, so memory does not grow with the files.

    Raises:
        ReceiptError: `FILE:LINE: $.path: problem` (Parquet: `FILE:row N: …`) for the first invalid
            line (unless `skip_invalid`), and for unreadable files and truncated gzip streams in
            any case (with `skip_invalid`, a truncated gzip stream or corrupt Parquet data is a
            problem and the next file is read). A receipt of a newer major format version, a torn
            line and a file of another format (a chat log, function-calling questions) are
            problems that say so; with `skip_invalid`, the rest of a file of another format is not
            read.
    """
    files = expand(paths)
    return _read(files, skip_invalid, policy, stats if stats is not None else ReadStats())


def _bodies(path: Path) -> Iterator[tuple[int, str, bytes, Callable[[Exception], str]]]:
    """(line or row number, where, the receipt's JSON, the problem of a body that is not JSON) per
    line or Parquet row."""
    if is_parquet_file(path):
        from .parquet import bad_json, iter_rows

        try:
            for n, body, texts in iter_rows(path):
                yield (n, f"{path}:row {n}", body, lambda exc, texts=texts: bad_json(texts)
                       or str(json_problem(exc)))
        except ReceiptError as exc:
            raise _CorruptStream(str(exc)) from None
        return
    for lineno, body, unterminated in iter_lines(path):
        yield lineno, f"{path}:{lineno}", body, lambda exc, u=unterminated: line_problem(exc, u)


def receipt_of(body: bytes, texts: dict[str, bytes], policy: Any) -> tuple[Receipt | None, str | None]:
    """A Parquet row's receipt (`parquet.batch_bodies`), or the problem `read` reports for it."""
    from .parquet import bad_json

    try:
        r = _DECODER.decode(body)
    except msgspec.ValidationError as exc:
        return None, _invalid(body, exc)[0]
    except (msgspec.DecodeError, RecursionError) as exc:
        return None, bad_json(texts) or str(json_problem(exc))
    problem = check_receipt(r, policy)
    return (r, None) if problem is None else (None, problem)


def _read(files: list[Path], skip_invalid: bool, policy: Any, stats: ReadStats) -> Iterator[Receipt]:
    for path in files:
        stats.files += 1
        bodies = _bodies(path)
        while True:
            try:
                stats.line, where, body, not_json = next(bodies)
            except StopIteration:
                break
            except _CorruptStream as exc:
                stats.problem(str(exc))
                if not skip_invalid:
                    raise ReceiptError(str(exc)) from None
                break
            stats.read += 1
            problem, other_format, listed = None, False, True
            try:
                r = _DECODER.decode(body)
            except msgspec.ValidationError as exc:  # a subclass of DecodeError: catch it first
                problem, other_format = _invalid(body, exc)
            except (msgspec.DecodeError, RecursionError) as exc:
                problem = not_json(exc)
            else:
                problem = check_receipt(r, policy)
                if problem is not None and policy is not None and r.policy and r.policy != policy.sha256 \
                        and newer_major(r.version) is None:
                    listed = not stats.foreign[r.policy]
                    stats.foreign[r.policy] += 1
                    problem = _foreign(r, policy, problem)
            if problem is None:
                stats.valid += 1
                yield r
                continue
            text = f"{where}: {problem}"
            stats.problem(text if listed else None)
            if not skip_invalid:
                raise ReceiptError(text)
            if other_format:
                break


# ---- writing ------------------------------------------------------------------------------------

_ENCODER = msgspec.json.Encoder()
_VERSIONED = b'{"version":' + msgspec.json.encode(FORMAT_VERSION) + b","


_DEFAULT_OF = dict(zip(Receipt.__struct_fields__[-len(Receipt.__struct_defaults__):],
                       Receipt.__struct_defaults__))
# the objects themselves
_DEFAULTS = tuple((f, _DEFAULT_OF[f]) for f in ("policy", "latency_ms", "cost", "version"))


def _equal(v: Any, d: Any) -> bool:
    """Whether `v` is written as the default `d` (-0.0 is written as it is; any version as this build's)."""
    if d is FORMAT_VERSION:
        return True
    return type(v) is type(d) and v == d and not (isinstance(v, float) and math.copysign(1.0, v) < 0)


def encode(r: Receipt) -> bytes:
    """One receipt as one JSON line, newline included, `version` first (always written).

    Raises:
        ReceiptError: a value that JSON cannot hold, or nesting beyond the encoder's limit.
    """
    # canonical: a field equal to its default is omitted whichever object holds it (`omit_defaults`
    # omits only the default object itself), and `version` is this build's (its fields only)
    same = {f: d for f, d in _DEFAULTS if getattr(r, f) is not d and _equal(getattr(r, f), d)}
    if same:
        r = msgspec.structs.replace(r, **same)
    try:
        body = _ENCODER.encode(r)  # `version` equals its default, so it is omitted here
    except (TypeError, ValueError, OverflowError, RecursionError, msgspec.EncodeError) as exc:
        raise ReceiptError(f"receipt `{r.id}`: cannot be written as JSON: "
                           f"{json_problem(exc) if isinstance(exc, RecursionError) else exc}") from None
    return _VERSIONED + body[1:] + b"\n"


class ReceiptWriter:
    """Append receipts to a JSONL file, crash-safe for threads, processes and killed writers.

    Each `append` takes an exclusive `flock` on the file (processes, and other writers in this
    process), checks under it that the file ends with a newline (its last byte is read unless the
    file still ends where this writer's last line did), writes one first if it does not
    (a writer was killed mid-line: its torn fragment stays a line of its own, which readers report
    as torn), then writes the whole line on an O_APPEND descriptor. A thread lock serialises the
    threads sharing this writer; a forked child opens the file anew at its first append. Every line reaches
    the operating system before `append` returns;
    with `fsync=True` it also reaches the disk. Plain JSONL only: a gzip stream cannot be appended
    to crash-safely line by line (write `.jsonl` and compress it when it is complete).
    """

    def __init__(self, path: str | os.PathLike, *, fsync: bool = False) -> None:
        self.path = Path(path)
        if self.path.name.endswith(".gz"):
            raise ReceiptError(f"{self.path}: cannot append to a gzip file; write plain .jsonl "
                               "and compress it when it is complete")
        self.fsync = fsync
        self._fd: int | None = None
        self._open()

    def _open(self) -> None:
        """A descriptor of this process's own (flock locks it, not the process: a forked child
        sharing its parent's would not be excluded by the parent's lock) and a fresh thread lock."""
        self._lock = threading.Lock()
        self._pid = os.getpid()
        self._end = -1  # the file's size after this writer's last append (-1: none yet)
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK, 0o644)
        except OSError as exc:
            raise ReceiptError(f"{self.path}: cannot open for appending: {exc.strerror}") from None
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise ReceiptError(f"{self.path}: cannot open for appending: not a regular file")
        self._fd = fd

    def _write(self, fd: int, data: bytes) -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        if self.fsync:
            os.fsync(fd)

    def append(self, r: Receipt) -> None:
        """Append one receipt as one line (flushed; fsync'ed when asked).

        Raises:
            ReceiptError: the writer is closed, the receipt cannot be encoded, or the write fails.
        """
        data = encode(r)
        if self._pid != os.getpid() and self._fd is not None:  # forked: the parent keeps its descriptor
            self._open()
        with self._lock:
            fd = self._fd
            if fd is None:
                raise ReceiptError(f"{self.path}: the writer is closed")
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                try:
                    size = os.fstat(fd).st_size
                    # the file ending where this writer's last line ended ends with its newline
                    if size and size != self._end and os.pread(fd, 1, size - 1) != b"\n":
                        data = b"\n" + data  # repair a torn line left by a killed writer
                    self._write(fd, data)
                    self._end = size + len(data)
                finally:
                    fcntl.flock(fd, fcntl.LOCK_UN)
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


def is_receipts_file(path: Path) -> bool:
    """Whether `path` holds receipts (its first receipt reads, or it holds none: `write_file` of no
    receipts writes an empty gzip stream or a Parquet file without rows): what `write_file` may replace."""
    try:
        next(iter(read([path])), None)
    except (ZcError, OSError):
        return False
    return True


def write_file(path: str | os.PathLike, receipts: Iterable[Receipt]) -> int:
    """Write receipts to a new file atomically (temp file + rename); gzip when `path` ends `.gz`,
    Parquet when it ends `.parquet` (`receipts.parquet`). An existing `path` is replaced only when
    it is empty or holds receipts (ZcError otherwise: a stranger's file is never overwritten).

    The gzip header carries no name and mtime 0, so equal receipts give equal bytes. Nothing is
    left at `path` if iterating `receipts` raises. Returns the number of receipts written.
    """
    path = Path(path)
    refuse_foreign_file(path, "receipts file", is_receipts_file)  # never over a stranger's file
    if path.name.endswith(".parquet"):
        from .parquet import write_parquet

        return write_parquet(path, receipts)
    path.parent.mkdir(parents=True, exist_ok=True)
    n = 0
    with new_file(path) as tmp, open(tmp, "wb") as raw:
        out: io.BufferedIOBase = (gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0)
                                  if path.name.endswith(".gz") else raw)
        with out:
            for r in receipts:
                out.write(encode(r))
                n += 1
    return n
