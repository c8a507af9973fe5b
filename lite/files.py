"""Reading files from untrusted places: only regular files, sized by the open file (never by a
limit, which only refuses a larger one), refused when they change size while read.

The loader (models and their external data), saved partitions and the placement cache read
through here.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from lite.errors import MemoryLimitError, ModelFileError
from lite.schema.reader import DEFAULT_MEMORY_LIMIT


def read_regular_file(path: str | os.PathLike, size_limit: int, what: str, *,
                      limit_name: str = "Context.memory_limit", follow_links: bool = True) -> bytes:
    """The bytes of a file from an untrusted place (a model, a saved partition, a cache entry).

    Only a regular file is read (a FIFO or a device is refused without blocking), and only as
    many bytes as the open file says it has: memory is sized by the file, never by
    ``size_limit``, which only refuses a larger file. ``what`` names the file in errors, and
    ``limit_name`` the setting ``size_limit`` comes from. ``follow_links`` False refuses a
    symbolic link at ``path`` (a cache entry someone else may have planted).

    Raises:
        ModelFileError: the file cannot be opened or read, is not a regular file, or changes
            size while it is read.
        MemoryLimitError: it has more than ``size_limit`` bytes.
    """
    path = Path(path)
    with _opened(path, size_limit, what, limit_name, follow_links) as f:
        size = _size_within(f, path, size_limit, what, limit_name)
        data = f.read(size)
        _check_complete(f, path, len(data), size, what)
    return data


def read_lite_file(path: str | os.PathLike, size_limit: int = DEFAULT_MEMORY_LIMIT) -> np.ndarray:
    """A ``.lite`` file read straight into a 64-byte aligned buffer (the reader then views its
    constants and saved partitions in place, with no second copy).

    Raises:
        ModelFileError, MemoryLimitError: as ``read_model_file``.
    """
    from lite.aligned import aligned_empty

    path = Path(path)
    with _opened(path, size_limit, "model file") as f:
        size = _size_within(f, path, size_limit, "model file")
        data = aligned_empty(size)
        done = f.readinto(memoryview(data)) if size else 0
        _check_complete(f, path, done, size, "model file")
    return data


@contextlib.contextmanager
def _opened(path: Path, size_limit: int, what: str, limit_name: str = "Context.memory_limit",
            follow_links: bool = True) -> Iterator:
    """The open file, after checking it is a regular file within ``size_limit``; OSError -> ModelFileError."""
    try:
        info = path.stat() if follow_links else path.lstat()
        if not stat.S_ISREG(info.st_mode):
            raise ModelFileError(f"{what} {str(path)!r} is not a regular file")
        check_size(path, info.st_size, size_limit, what, limit_name)
        with open_regular(path, what, follow_links) as f:
            yield f
    except OSError as exc:
        hint = ("; zoo:NAME works in the tools (lite-benchmark zoo:resnet18); in Python, build a zoo model with "
                "lite.tools.zoo.MODELS[NAME]() and load its bytes" if str(path).startswith("zoo:") else "")
        raise ModelFileError(f"cannot read {what} {str(path)!r}: {exc.strerror or exc}{hint}") from exc


def open_regular(path: Path, what: str, follow_links: bool = True):
    """``path`` opened for reading, refused unless it is (still) a regular file (and, without
    ``follow_links``, not a symbolic link: O_NOFOLLOW fails on one).

    O_NONBLOCK: a FIFO put in the file's place after it was checked must not block the open.
    """
    nonblocking = getattr(os, "O_NONBLOCK", 0)  # NOTE: not on Windows, which has no FIFOs in the file system
    no_links = 0 if follow_links else getattr(os, "O_NOFOLLOW", 0)
    fd = os.open(path, os.O_RDONLY | nonblocking | no_links | getattr(os, "O_CLOEXEC", 0))
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ModelFileError(f"{what} {str(path)!r} is not a regular file")
        if nonblocking:
            os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def _size_within(f, path: Path, size_limit: int, what: str, limit_name: str = "Context.memory_limit") -> int:
    """The size of the open file ``f``, refused when over ``size_limit``."""
    size = os.fstat(f.fileno()).st_size
    check_size(path, size, size_limit, what, limit_name)
    return size


def _check_complete(f, path: Path, done: int, size: int, what: str) -> None:
    """Refuses a read of ``done`` bytes of a file that had ``size`` (it shrank), or that has more (it grew)."""
    if done != size or f.read(1):
        raise ModelFileError(f"{what} {str(path)!r} changed size while it was read; read it again once "
                             "nothing writes to it")


def check_size(path: Path, size: int, limit: int, what: str = "model file",
                limit_name: str = "Context.memory_limit") -> None:
    if size > limit:
        raise MemoryLimitError(f"{what} {str(path)!r} is larger than the memory limit of {limit} bytes ({limit_name})")
