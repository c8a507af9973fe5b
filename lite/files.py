"""Reading files from untrusted places: only regular files, sized by the open file (never by a
limit, which only refuses a larger one), refused when they change size while read.

The loader (models and their external data), saved partitions and the placement cache read
through here.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import mmap
import os
import stat
import sys
import tempfile
import threading
import weakref
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


def read_lite_file(path: str | os.PathLike, size_limit: int = DEFAULT_MEMORY_LIMIT, *,
                   follow_links: bool = True) -> np.ndarray:
    """A ``.lite`` file read straight into a 64-byte aligned buffer (the reader then views its
    constants and saved partitions in place, with no second copy); ``follow_links`` False
    refuses a symbolic link.

    Raises:
        ModelFileError, MemoryLimitError: as ``read_model_file``.
    """
    from lite.aligned import aligned_empty

    path = Path(path)
    with _opened(path, size_limit, "model file", follow_links=follow_links) as f:
        size = _size_within(f, path, size_limit, "model file")
        data = aligned_empty(size)
        done = f.readinto(memoryview(data)) if size else 0
        _check_complete(f, path, done, size, "model file")
    return data


class MappedModelFile:
    """A ``.lite`` file mapped copy-on-write: ``array`` holds the bytes the reader validates, and
    ranges whose constants no kernel reads in their original layout any more can leave memory.

    Every page of the private mapping is made this process's own copy of the file as it was when
    built (faulted in writable where Linux can, else read in with ``readinto``): a file that
    changes afterwards changes nothing that was validated. ``release`` hands whole pages of a range back
    (``MADV_DONTNEED``): they are no longer resident and, read again (a fallback, a resize that
    repacks), fault back in from the file. ``check_unchanged`` refuses a file whose size or
    modification time changed since, before anything may read released pages again: a file
    truncated under its mapping would kill the process (SIGBUS) on such a read.

    Attributes:
        array: the file's bytes (uint8, page-aligned), viewing the mapping.
        released: bytes handed back so far.
    """

    def __init__(self, path: Path, f, size: int) -> None:
        self.path = path
        self._map = mmap.mmap(f.fileno(), size, access=mmap.ACCESS_COPY)
        self._fd = os.dup(f.fileno())
        weakref.finalize(self, os.close, self._fd)
        self._stamp = _stamp(os.fstat(self._fd))
        self.array = np.frombuffer(self._map, dtype=np.uint8)
        self.released = 0

    def base(self) -> int:
        """The address of the first byte."""
        return self.array.ctypes.data

    def release(self, start: int, length: int) -> int:
        """Hands back the whole pages inside bytes ``[start, start + length)``; returns how many bytes."""
        first = -(-start // mmap.PAGESIZE) * mmap.PAGESIZE
        end = min(start + length, self.array.size) // mmap.PAGESIZE * mmap.PAGESIZE
        if end <= first:
            return 0
        self._map.madvise(mmap.MADV_DONTNEED, first, end - first)
        self.released += end - first
        return end - first

    def check_unchanged(self) -> None:
        """Raises ModelFileError when pages were released and the file's size or modification time
        changed since it was mapped (reading those pages again could crash the process)."""
        if self.released and _stamp(os.fstat(self._fd)) != self._stamp:
            raise ModelFileError(f"model file {str(self.path)!r} changed on disk while the model built from it "
                                 "was in use; build the model again from the new file (replace a model file by "
                                 "renaming a new one over it, never by writing into it)")


def cache_folder(setting: str | os.PathLike | None, variable: str, name: str) -> Path | None:
    """Where a Delite cache lives: None (off) for a ``setting`` of None, "off" or "none"; a folder
    given; or, for "default", ``$variable`` ("off" or "none": None), else
    ``$XDG_CACHE_HOME/delite/name`` (``~/.cache`` by default)."""
    if setting is None or str(setting).strip().lower() in ("off", "none", ""):
        return None
    if str(setting) != "default":
        return Path(setting).expanduser()
    explicit = os.environ.get(variable, "").strip()
    if explicit:
        return None if explicit.lower() in ("off", "none") else Path(explicit).expanduser()
    base = os.environ.get("XDG_CACHE_HOME", "").strip() or "~/.cache"
    return Path(base).expanduser() / "delite" / name


DIGEST_CHUNK = 1 << 22
"""Bytes of a file each ``file_digest`` job reads, hashes and searches."""


def file_digest(path: str | os.PathLike, size_limit: int, what: str, workers: int = 2) -> bytes:
    """The SHA-256 of a regular file's chunks' SHA-256s (DIGEST_CHUNK bytes each, hashed by
    ``workers`` threads: hashlib lets go of the GIL); ``bytes_digest`` of its bytes.

    Each worker reads its chunks into a buffer of its own (the whole file is never in memory).

    Raises:
        ModelFileError: the file cannot be read, is not a regular file, or changes size meanwhile.
        MemoryLimitError: it has more than ``size_limit`` bytes.
    """
    path = Path(path)
    with _opened(path, size_limit, what) as f:
        size = _size_within(f, path, size_limit, what)

        def chunk_of(chunk: int, buffer: memoryview) -> memoryview:
            view = buffer[:min(DIGEST_CHUNK, size - chunk * DIGEST_CHUNK)]
            if _read_at(f, view, chunk * DIGEST_CHUNK) != len(view):
                raise _changed_size(path, what)
            return view

        digest = _chunks_digest(-(-size // DIGEST_CHUNK), chunk_of, workers if hasattr(os, "preadv") else 1)
        f.seek(size)  # NOTE: without preadv, one reader seeks
        _check_complete(f, path, size, size, what)
    return digest


def bytes_digest(data, workers: int = 2) -> bytes:
    """``file_digest`` of bytes in memory (a bytes-like object)."""
    view = memoryview(data).cast("B")

    def chunk_of(chunk: int, _: memoryview) -> memoryview:
        return view[chunk * DIGEST_CHUNK:(chunk + 1) * DIGEST_CHUNK]

    return _chunks_digest(-(-len(view) // DIGEST_CHUNK), chunk_of, workers, buffered=False)


def _chunks_digest(chunks: int, chunk_of, workers: int, buffered: bool = True) -> bytes:
    """The SHA-256 of the SHA-256s of ``chunk_of(chunk, buffer)`` for each chunk, ``workers`` threads
    taking every workers-th chunk, each with a buffer of DIGEST_CHUNK bytes (if ``buffered``)."""
    digests: list[bytes] = [b""] * chunks
    failed: list[BaseException] = []

    def work(first: int) -> None:
        buffer = memoryview(bytearray(DIGEST_CHUNK if buffered else 0))
        try:
            for chunk in range(first, chunks, workers):
                digests[chunk] = hashlib.sha256(chunk_of(chunk, buffer)).digest()
        except BaseException as exc:  # NOTE: handed to the caller's thread
            failed.append(exc)

    helpers = [threading.Thread(target=work, args=(first,), daemon=True) for first in range(1, workers)]
    for helper in helpers:
        helper.start()
    work(0)
    for helper in helpers:
        while helper.is_alive():  # NOTE: each has a bounded share of the chunks
            helper.join(0.1)
    if failed:
        raise failed[0]
    return hashlib.sha256(b"".join(digests)).digest()


def _read_at(f, view: memoryview, start: int) -> int:
    """Reads into ``view`` from byte ``start`` of the open file; how many bytes it read (fewer only at
    the file's end)."""
    done = 0
    while done < len(view):
        if hasattr(os, "preadv"):
            count = os.preadv(f.fileno(), [view[done:]], start + done)
        else:
            f.seek(start + done)
            count = f.readinto(view[done:])
        if not count:
            break
        done += count
    return done


def replace_file(path: Path, data) -> None:
    """Writes ``data`` (bytes-like) to a new file made exclusively in ``path``'s folder, then renames it
    over ``path`` (a link planted at ``path`` is replaced, its target untouched); the new file is
    removed on failure. A reader never sees a partial file, and a file already mapped keeps its bytes."""
    fd, partial = tempfile.mkstemp(prefix=f".{path.stem}.", suffix=".tmp", dir=path.parent)
    try:
        try:
            view = memoryview(data).cast("B")
            while view:
                view = view[os.write(fd, view):]
        finally:
            os.close(fd)
        os.replace(partial, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(partial)
        raise


def _stamp(info: os.stat_result) -> tuple[int, int]:
    return info.st_size, info.st_mtime_ns


def map_lite_file(path: str | os.PathLike, size_limit: int = DEFAULT_MEMORY_LIMIT, *,
                  follow_links: bool = True) -> MappedModelFile | None:
    """A ``.lite`` file read into a private mapping (``MappedModelFile``); None where mapping is not
    available (an empty file, no ``madvise``): read it with ``read_lite_file`` then.
    ``follow_links`` False refuses a symbolic link (a cache entry).

    Raises:
        ModelFileError, MemoryLimitError: as ``read_lite_file``.
    """
    if not hasattr(mmap, "MADV_DONTNEED"):
        return None
    path = Path(path)
    with _opened(path, size_limit, "model file", follow_links=follow_links) as f:
        size = _size_within(f, path, size_limit, "model file")
        if not size:
            return None
        try:
            mapped = MappedModelFile(path, f, size)
        except ValueError as exc:  # NOTE: the file is shorter now than it was measured
            raise _changed_size(path, "model file") from exc
        try:
            done = os.fstat(f.fileno()).st_size if _copied_in(mapped, size) else f.readinto(memoryview(mapped._map))
        except OSError as exc:  # NOTE: EFAULT: the file shrank under the mapping while it was read
            raise _changed_size(path, "model file") from exc
        f.seek(done)
        _check_complete(f, path, done, size, "model file")
    return mapped


MADV_POPULATE_WRITE = 23
"""Linux's madvise advice (5.14 and later) that faults every page of a range in writable: in a private
file mapping, each page becomes this process's own copy of the file's bytes."""


def _copied_in(mapped: MappedModelFile, size: int) -> bool:
    """Makes every page of the mapping a private copy of the file in one call (Linux 5.14 and later:
    one copy, where ``readinto`` copies each page twice, a write fault and the read); False where the
    kernel lacks it (the caller reads the file in).

    Raises:
        OSError: EFAULT: the file shrank under the mapping.
    """
    if not sys.platform.startswith("linux"):
        return False
    try:
        mapped._map.madvise(MADV_POPULATE_WRITE, 0, size)
    except OSError as exc:
        if exc.errno == errno.EFAULT:
            raise
        return False
    return True


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
        raise _changed_size(path, what)


def _changed_size(path: Path, what: str) -> ModelFileError:
    return ModelFileError(f"{what} {str(path)!r} changed size while it was read; read it again once nothing "
                          "writes to it")


def check_size(path: Path, size: int, limit: int, what: str = "model file",
                limit_name: str = "Context.memory_limit") -> None:
    if size > limit:
        raise MemoryLimitError(f"{what} {str(path)!r} is larger than the memory limit of {limit} bytes ({limit_name})")
