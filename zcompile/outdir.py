"""Output files and directories: written to a temporary sibling and swapped in atomically, never over a
stranger's files."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from .errors import ZcError


@contextmanager
def staged(out: str | os.PathLike, what: str, owns: Callable[[Path], bool]) -> Iterator[Path]:
    """Yield an empty temporary directory beside `out`; on success it replaces `out` atomically.

    `out` may be missing, an empty directory, or a directory `owns(out)` recognises as one this
    command wrote earlier (a `what`); anything else is refused before any work starts, and nothing
    is deleted. On an exception the staged directory is removed and `out` is untouched.
    """
    target = Path(out)
    refuse_foreign(target, what, owns)
    parent = target.absolute().parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix=f".{target.name or 'out'}.", suffix=".tmp", dir=parent))
    except OSError as exc:
        raise ZcError(f"{target}: cannot create the output directory: {exc.strerror}") from None
    try:
        yield work
        refuse_foreign(target, what, owns)  # it may have changed while we worked
        swap(work, target)
    finally:
        if work.exists():
            shutil.rmtree(work, ignore_errors=True)


def refuse_foreign(target: Path, what: str, owns: Callable[[Path], bool]) -> None:
    """Raise unless `target` is missing, an empty directory, or a `what` (per `owns`)."""
    if not os.path.lexists(target):
        return
    if target.is_symlink() or not target.is_dir():
        raise ZcError(f"{target}: exists and is not a directory; refusing to replace it with a {what}")
    try:
        empty = next(target.iterdir(), None) is None
    except OSError as exc:
        raise ZcError(f"{target}: cannot read: {exc.strerror}") from None
    if not empty and not owns(target):
        raise ZcError(f"{target}: exists and is not a {what} (no manifest of one); refusing to replace it: "
                      "choose another -o or remove it yourself")


def swap(work: Path, target: Path) -> None:
    """Put `work` at `target`: a rename when `target` is absent, else two renames through a sibling."""
    try:
        if not os.path.lexists(target):
            os.replace(work, target)
            return
        old = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".old", dir=target.absolute().parent))
        os.rmdir(old)
        os.replace(target, old)
        try:
            os.replace(work, target)
        except OSError:
            os.replace(old, target)  # put the previous one back
            raise
        shutil.rmtree(old, ignore_errors=True)
    except OSError as exc:
        raise ZcError(f"{target}: cannot write the output directory: {exc.strerror}") from None


def refuse_foreign_file(target: Path, what: str, owns: Callable[[Path], bool]) -> None:
    """Raise unless `target` is missing, an empty regular file, or a `what` (per `owns`): an output
    file replaces only what this kind of command wrote, never a stranger's file."""
    if not os.path.lexists(target):
        return
    if target.is_symlink() or not target.is_file():
        raise ZcError(f"{target}: exists and is not a regular file; refusing to replace it with a {what}")
    try:
        empty = target.stat().st_size == 0
        ours = empty or owns(target)
    except OSError as exc:
        raise ZcError(f"{target}: cannot read: {exc.strerror}") from None
    if not ours:
        raise ZcError(f"{target}: exists and is not a {what}; refusing to overwrite it: "
                      "choose another name or remove it yourself")


def write_output(path: str | os.PathLike, data: bytes, what: str, owns: Callable[[Path], bool]) -> None:
    """Write `data` to `path` atomically, over nothing but an earlier `what` (`refuse_foreign_file`)."""
    target = Path(path)
    refuse_foreign_file(target, what, owns)
    try:
        with new_file(target) as tmp:
            tmp.write_bytes(data)
    except OSError as exc:
        raise ZcError(f"{target}: cannot write: {exc.strerror or exc}") from None


@contextmanager
def new_file(path: str | os.PathLike, mode: int = 0o644, *, replace: bool = True) -> Iterator[Path]:
    """Yield a temporary sibling of `path` to write; on success it gets `mode` and takes `path`'s place
    (with `replace=False` only if `path` does not exist: FileExistsError, nothing overwritten); on an
    exception it is removed and `path` is untouched."""
    path = Path(path)
    fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name[:200]}.", suffix=".tmp")
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
        os.chmod(tmp, mode)  # mkstemp makes 0600
        if replace:
            os.replace(tmp, path)
        else:
            os.link(tmp, path)  # fails if the file appeared meanwhile
    finally:
        tmp.unlink(missing_ok=True)
