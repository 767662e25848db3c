"""Writing files so that a reader sees the old file or the whole new one, never a part.

Every output of the project (result tables, caches, manifests, downloaded images, reports)
goes through these two functions: write to a temporary file in the same folder, then
``os.replace`` it over the target. The temporary name keeps the target's suffix, so writers
that infer the format from it (matplotlib, pandas) behave as for the real name.
"""

from __future__ import annotations

import contextlib
import errno
import os
import threading
import uuid
from pathlib import Path
from typing import Callable, Mapping

#: errno values of a write that failed for lack of room: a full disk, a full quota, a file-size limit
#: (``ulimit -f``, RLIMIT_FSIZE). They are one condition for a user: free space or write elsewhere.
NO_SPACE_ERRNOS = frozenset(e for e in (getattr(errno, n, None) for n in ("ENOSPC", "EDQUOT", "EFBIG")) if e)


def is_no_space(err: BaseException) -> bool:
    """True when ``err`` is an OSError of :data:`NO_SPACE_ERRNOS` (disk full, quota, file-size limit)."""
    return isinstance(err, OSError) and err.errno in NO_SPACE_ERRNOS


def write_error_text(err: OSError) -> str:
    """A short description of a failed write for one-line messages: 'no space left (disk full, quota or
    file-size limit: [Errno 28] ...)' or the error's own text."""
    text = f"[Errno {err.errno}] {err.strerror}" if err.errno is not None and err.strerror else str(err)
    if is_no_space(err):
        return f"no space left (disk full, quota or file-size limit: {text})"
    return text


def temporary_path(path: str | os.PathLike) -> Path:
    """A unique hidden sibling of ``path`` with the same suffix (per process and thread)."""
    path = Path(path)
    tag = f"{os.getpid()}.{threading.get_ident()}.{uuid.uuid4().hex[:8]}"
    return path.with_name(f".{path.name}.{tag}.tmp{path.suffix}")


def _fsync_dir(folder: Path) -> None:
    with contextlib.suppress(OSError):  # not every platform or file system allows it
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def atomic_write(path: str | os.PathLike, write: Callable[[Path], object], *, durable: bool = False) -> Path:
    """Calls ``write(tmp)`` and renames ``tmp`` over ``path``; on error nothing is left behind.

    Args:
        path: the target file (its folder is created).
        write: writes the whole file at the path it is given.
        durable: also fsync the file and its folder (caches, manifests: survive a crash).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temporary_path(path)
    try:
        write(tmp)
        if durable:
            with open(tmp, "rb+") as fh:
                os.fsync(fh.fileno())
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
    if durable:
        _fsync_dir(path.parent)
    return path


def atomic_write_bytes(path: str | os.PathLike, data: bytes, *, durable: bool = False) -> Path:
    """:func:`atomic_write` of ``data``."""
    return atomic_write(path, lambda tmp: tmp.write_bytes(data), durable=durable)


def atomic_write_files(files: Mapping[str | os.PathLike, Callable[[Path], object]]) -> list[Path]:
    """Writes every file to a temporary sibling first and renames them over their targets only when
    all were written: a failure (a full disk) leaves every target as it was and no temporary file.

    Args:
        files: ``{target path: write(tmp)}``, renamed in this order.

    Returns:
        The target paths.
    """
    staged: list[tuple[Path, Path]] = []
    try:
        for path, write in files.items():
            path = Path(path)
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = temporary_path(path)
            staged.append((tmp, path))
            write(tmp)
        for tmp, path in staged:
            os.replace(tmp, path)
    finally:
        for tmp, _ in staged:
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()
    return [path for _, path in staged]
