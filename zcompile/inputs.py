"""Reading untrusted input: regular files of bounded size, JSON of bounded nesting, as ZcErrors."""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import stat
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import msgspec

from .errors import ZcError


def json_type(v: Any, integers: bool = False) -> str:
    """How an error names a JSON value's type (`an object`, `an array`, `a string`, `a boolean`,
    `a number`, `null`); `integers`: `an integer` for an int. Anything else: its Python type's name."""
    if isinstance(v, bool):
        return "a boolean"
    if isinstance(v, int):
        return "an integer" if integers else "a number"
    if isinstance(v, float):
        return "a number"
    if isinstance(v, str):
        return "a string"
    if isinstance(v, (list, tuple)):
        return "an array"
    if isinstance(v, Mapping):
        return "an object"
    return "null" if v is None else type(v).__name__

MAX_JSON_DEPTH = 200  # deepest JSON nesting accepted in states and calls: a named error past it
MAX_FILE_BYTES = 64 * 1024 * 1024  # largest input file read by default


def read_file(path: str | Path, what: str = "file", max_bytes: int = MAX_FILE_BYTES) -> bytes:
    """The bytes of a regular file; ZcError for a FIFO, device or directory, an OS error, a too-large file.

    The file is opened without blocking (a FIFO cannot stall the open) and checked on its
    descriptor, so what is checked is what is read.
    """
    p = Path(path)
    try:
        fd = os.open(p, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise ZcError(f"{p}: cannot read {what}: {_reason(exc)}") from None
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise ZcError(f"{p}: cannot read {what}: it is a directory")
        if not stat.S_ISREG(info.st_mode):
            raise ZcError(f"{p}: cannot read {what}: not a regular file (a FIFO, socket or device)")
        if info.st_size > max_bytes:
            raise ZcError(f"{p}: {what} is larger than the limit of {_size(max_bytes)} "
                          f"({_size(info.st_size)})")
        chunks, total = [], 0
        while True:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                break
            total += len(chunk)
            if total > max_bytes:  # it grew while being read
                raise ZcError(f"{p}: {what} is larger than the limit of {_size(max_bytes)}")
            chunks.append(chunk)
        return b"".join(chunks)
    except OSError as exc:
        raise ZcError(f"{p}: cannot read {what}: {_reason(exc)}") from None
    finally:
        os.close(fd)


def path_kind(path: str | Path) -> str:
    """`dir`, `file` (anything else that exists) or `missing`; ZcError for a path the OS refuses."""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        return "missing"
    except NotADirectoryError:
        return "missing"
    except OSError as exc:
        raise ZcError(f"{path}: {_reason(exc)}") from None
    return "dir" if stat.S_ISDIR(info.st_mode) else "file"


def files_under(root: str | Path, wanted: Callable[[str], bool]) -> list[Path]:
    """The entries below directory `root` that are not directories and whose names `wanted` takes,
    sorted. Directories are walked without recursion, at any depth; links are not followed (a
    FIFO or a link among them is listed: reading it refuses what is not a regular file).

    Raises:
        ZcError: `DIR: cannot list directory: reason` for a directory the system refuses to list
            (permissions, a path past PATH_MAX), `FILE: reason` for an entry it refuses to stat.
    """
    found: list[Path] = []
    pending = [str(root)]
    while pending:
        d = pending.pop()
        try:
            with os.scandir(d) as entries:
                for e in entries:
                    try:
                        is_dir = e.is_dir(follow_symlinks=False)
                    except OSError as exc:
                        raise ZcError(f"{e.path}: {_reason(exc)}") from None
                    if is_dir:
                        pending.append(e.path)
                    elif wanted(e.name):
                        found.append(Path(e.path))
        except OSError as exc:
            raise ZcError(f"{d}: cannot list directory: {_reason(exc)}") from None
    return sorted(found)


def decode_json(data: bytes | str, type: Any = Any, what: str = "JSON",
                max_depth: int = MAX_JSON_DEPTH) -> Any:
    """msgspec JSON decoding with nesting bounded by `max_depth`.

    Raises ZcError (nesting, a surrogate in text) or msgspec's DecodeError / ValidationError for
    the caller to place (it knows the file and line).
    """
    if isinstance(data, str):
        try:
            data = data.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise ZcError(f"{what}: not valid text (an unpaired surrogate or undecodable byte at "
                          f"character {exc.start})") from None
    check_depth(data, what, max_depth)
    with too_deep(what):  # the bound above is exact; this is a second guard
        if type is Any:  # out-of-range floats decode to ±inf, for the schema to refuse at their $.path
            return _PLAIN.decode(data)
        return msgspec.json.decode(data, type=type)


@contextlib.contextmanager
def too_deep(what: str) -> Iterator[None]:
    """Turn the decoder's RecursionError (input nested past the interpreter's limit) into a ZcError.

    msgspec guards its recursion with the interpreter's limit and unwinds cleanly, so this is
    safe to catch; it bounds inputs whose exact nesting is checked later (artifacts).
    """
    try:
        yield
    except RecursionError:
        raise ZcError(f"{what}: nested too deeply for the decoder") from None


def check_depth(data: bytes, what: str = "JSON", max_depth: int = MAX_JSON_DEPTH) -> None:
    """ZcError when the brackets of a JSON text nest deeper than `max_depth` (strings skipped).

    Only texts with more than `max_depth` opening brackets are scanned, and then only their
    brackets (escapes and strings are cut out first).
    """
    if data.count(b"[") + data.count(b"{") <= max_depth:
        return
    plain = _STRING.sub(b"", data.replace(b"\\\\", b"").replace(b'\\"', b""))
    depth = 0
    for byte in plain.translate(None, _NOT_BRACKET):
        if byte in (0x5B, 0x7B):
            depth += 1
            if depth > max_depth:
                raise ZcError(f"{what}: nested more than {max_depth} levels deep")
        else:
            depth -= 1


_PLAIN = msgspec.json.Decoder(float_hook=float)
_STRING = re.compile(rb'"[^"]*"')
_NOT_BRACKET = bytes(b for b in range(256) if b not in b"[]{}")


def _reason(exc: OSError) -> str:
    return exc.strerror or str(exc)


def _size(n: int) -> str:
    return f"{n / (1 << 20):.0f} MB" if n >= 1 << 20 else f"{n} bytes"


def sha256_file(path: str | os.PathLike) -> str:
    """The sha256 of a file's bytes, read in 1 MiB blocks."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()
