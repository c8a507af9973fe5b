"""A model given any way -> its ``.lite`` bytes: ``lite.loader`` reads files and ONNX models, the
converter (``lite.tools.converter``, which itself reads through the loader) converts ONNX ones.

A module of its own above both, so that the loader never imports the converter. It also keeps
the cache of converted ONNX files (``convert_file``): a model built from the same ``.onnx`` again
maps the ``.lite`` file converted the first time instead of converting again.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import hashlib
import importlib.util
import logging
import os
import re
import shutil
import stat
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from lite.files import bytes_digest, cache_folder, file_digest, replace_file
from lite.loader import ModelSource, ModelType, load_onnx, model_type_of, source_bytes
from lite.schema.reader import DEFAULT_MEMORY_LIMIT
from lite.version import __version__

logger = logging.getLogger(__name__)


def load_lite_bytes(source: ModelSource, model_type: ModelType | None = None, *,
                    size_limit: int = DEFAULT_MEMORY_LIMIT) -> bytes:
    """The .lite bytes of a model given as a path, bytes or an ``onnx.ModelProto``.

    ONNX models are converted in memory with the default options.

    Args:
        source: a ``.lite`` or ``.onnx`` path, .lite or ONNX bytes, or an ``onnx.ModelProto``.
        model_type: what ``source`` holds; None: the path's suffix (``.onnx`` or not), or, for
            bytes, whether they carry the .lite file identifier.
        size_limit: the most bytes a model file or its external data may have.

    Raises:
        InputError: ``model_type`` is not a ModelType.
        ModelFileError: the file cannot be read.
        ModelFormatError: the file is too large, not a regular file, or its external data
            cannot be used.
        UnsupportedOpError: the ONNX model does not convert.
    """
    data = load_lite_buffer(source, model_type, size_limit=size_limit)
    return data if isinstance(data, bytes) else data.tobytes()


def load_lite_buffer(source: ModelSource, model_type: ModelType | None = None, *,
                     size_limit: int = DEFAULT_MEMORY_LIMIT) -> bytes | np.ndarray:
    """``load_lite_bytes`` without copying a converted ONNX model's bytes: a read-only uint8 view of
    the converter's own buffer, which a build reads in place. Raises as ``load_lite_bytes``."""
    kind = model_type_of(source, model_type)
    if kind is ModelType.LITE:
        return source_bytes(source, size_limit)
    from lite.tools.converter import convert_to_buffer  # NOTE: the converter (and onnx) load only when needed

    return convert_to_buffer(load_onnx(source, size_limit=size_limit), memory_limit=size_limit)


CONVERSION_CACHE_ENV = "DELITE_CONVERSION_CACHE"
CACHED_MODELS = 8
"""Converted models a cache folder keeps; storing a ninth removes the oldest (by the time it was
stored: an entry is never touched again, so that a process that mapped it sees it unchanged)."""
CACHED_BYTES = 4 << 30
"""Bytes a cache folder's entries take together, at most: the newest that fit stay; a conversion
larger than this alone is not stored (build such a model from the .lite file lite-convert writes)."""
STALE_PARTIAL_SECONDS = 3600
"""A half-written entry (a writer that died) older than this is removed when another is stored."""


@dataclass(frozen=True)
class ConvertedFile:
    """An ONNX file's conversion: ``data``, the .lite bytes converted now, or ``cached``, the cache
    entry holding the conversion of the same bytes by the same converter."""

    data: bytes | np.ndarray | None
    cached: Path | None


def conversion_cache_directory(setting: str | os.PathLike | None) -> Path | None:
    """Where converted models are cached: None (off), a folder, or "default": ``$DELITE_CONVERSION_CACHE``,
    else ``$XDG_CACHE_HOME/delite/converted`` (``~/.cache`` by default); "off" disables it."""
    return cache_folder(setting, CONVERSION_CACHE_ENV, "converted")


def convert_file(path: str | os.PathLike, folder: Path, size_limit: int = DEFAULT_MEMORY_LIMIT, *,
                 refresh: bool = False) -> ConvertedFile:
    """The conversion of the ONNX file at ``path`` (with its external data), from the cache in
    ``folder`` when it holds one for the same bytes, converter and ``size_limit``; else converted
    now and stored there (in a background thread: the build does not wait for the write).

    An entry is named by a SHA-256 of the converter's sources, ``size_limit`` and the file's
    bytes (``KEY.lite``); a model with external data adds a second one, of those tensors' names
    and bytes (``KEY-EXTERNAL.lite``), so only such a model is parsed before its entry is found.
    An entry is a .lite file like any other, read through the same checks (a symbolic link is
    refused). Cache trouble (a folder that cannot be made, a full disk) never fails the build:
    the model is converted as without a cache. ``refresh``: convert and store again whatever the
    cache holds (its entry did not read).

    Raises:
        as ``load_lite_bytes``.
    """
    workers = min(os.cpu_count() or 1, 4)
    key = _key(file_digest(path, size_limit, "ONNX model", workers), size_limit)
    entry = folder / f"{key}.lite"
    if _is_entry(entry) and not refresh:
        return ConvertedFile(None, entry)
    read = None
    if _has_entry(folder, f"{key}-*.lite"):  # NOTE: the same bytes converted with external data
        read = _read_model(path, size_limit, workers)
        if read[1] == key and read[2] is not None and _is_entry(folder / f"{key}-{read[2]}.lite") and not refresh:
            return ConvertedFile(None, folder / f"{key}-{read[2]}.lite")
    from lite.tools.converter import convert_to_buffer

    parts = list(read or _read_model(path, size_limit, workers))
    read, key, external = None, parts[1], parts[2]
    data = convert_to_buffer(parts.pop(0), memory_limit=size_limit)  # NOTE: the only reference: freed in there
    # NOTE: named by the bytes converted, which a file replaced since it was hashed changed
    entry = folder / (f"{key}.lite" if external is None else f"{key}-{external}.lite")
    _store_later(folder, entry, data)
    return ConvertedFile(data, None)


def _store_later(folder: Path, entry: Path, data: bytes | np.ndarray) -> None:
    """``_store`` in a background thread, unless one of this process is writing that entry already
    (models built from one file at once, as a runner's workers are, convert it each: one writes)."""
    with _WRITING:
        _WRITERS[:] = [(path, w) for path, w in _WRITERS if w.is_alive()]
        if any(path == entry for path, _ in _WRITERS):
            return
        writer = threading.Thread(target=_store, args=(folder, entry, data), name="delite-conversion-cache",
                                  daemon=True)
        writer.start()
        _WRITERS.append((entry, writer))


def _key(content: bytes, size_limit: int) -> str:
    """An entry's key: the converter's fingerprint, the memory limit and the digest of the file's bytes."""
    return hashlib.sha256(_converter_fingerprint() + size_limit.to_bytes(8, "little") + content).hexdigest()


def _read_model(path: str | os.PathLike, size_limit: int, workers: int):
    """(the model at ``path`` read with its external data, the key of the bytes parsed, the digest of
    its external data or None where it has none)."""
    external, parsed = hashlib.sha256(), []
    model = load_onnx(path, size_limit=size_limit, digest=external, seen=parsed.append)
    return model, _key(bytes_digest(parsed[0], workers), size_limit), \
        None if external.hexdigest() == _NOTHING_HASHED else external.hexdigest()


_NOTHING_HASHED = hashlib.sha256().hexdigest()


def _is_entry(entry: Path) -> bool:
    try:
        return stat.S_ISREG(entry.lstat().st_mode)
    except OSError:
        return False


def _has_entry(folder: Path, pattern: str) -> bool:
    try:
        return any(folder.glob(pattern))
    except OSError:
        return False


_WRITERS: list[tuple[Path, threading.Thread]] = []
"""The entries this process is writing, and their writers."""
_WRITING = threading.Lock()
WRITE_WAIT_SECONDS = 60.0
"""At exit, how long the process waits for entries still being written (then leaves them partial)."""


@atexit.register
def _finish_writes() -> None:
    deadline = time.monotonic() + WRITE_WAIT_SECONDS
    for _, writer in list(_WRITERS):
        writer.join(max(0.0, deadline - time.monotonic()))


def discard(entry: Path) -> None:
    """Removes a cache entry that did not read as a model (it is converted and stored again)."""
    with contextlib.suppress(OSError):
        entry.unlink()


def _store(folder: Path, entry: Path, data: bytes | np.ndarray) -> None:
    """Writes ``entry`` (atomically), then keeps the CACHED_MODELS newest entries within CACHED_BYTES;
    nothing where the entry alone is larger, or would leave the disk less than its size free
    (the cache never fills a disk); errors only log."""
    try:
        if len(data) > CACHED_BYTES:
            return
        folder.mkdir(parents=True, exist_ok=True)
        if shutil.disk_usage(folder).free < 2 * len(data):
            logger.info("not caching the converted model in %s: the disk is nearly full", folder)
            return
        replace_file(entry, data)
        _prune(folder)
    except OSError as exc:
        logger.info("could not store the converted model in %s: %s", folder, exc)


def _prune(folder: Path) -> None:
    entries = []
    for path in folder.iterdir():
        with contextlib.suppress(OSError):
            info = path.lstat()
            if path.suffix == ".lite" and _ENTRY.fullmatch(path.stem):
                entries.append((info.st_mtime_ns, info.st_size, path))
            elif path.suffix == ".tmp" and path.name.startswith(".") and \
                    time.time() - info.st_mtime > STALE_PARTIAL_SECONDS:
                path.unlink()
    kept = 0
    for rank, (_, size, path) in enumerate(sorted(entries, reverse=True)):
        kept += size
        if rank >= CACHED_MODELS or kept > CACHED_BYTES:
            with contextlib.suppress(OSError):
                path.unlink()


_ENTRY = re.compile(r"[0-9a-f]{64}(?:-[0-9a-f]{64})?")


@functools.cache
def _converter_fingerprint() -> bytes:
    """A hash of the sources a conversion runs (the package's top level, its ops and numpy kernels
    (constant folding), the converter and the schema's writer): a changed converter never reads
    an entry an older one stored."""
    root = Path(__file__).parent
    tools, schema = (Path(importlib.util.find_spec(name).origin).parent for name in ("lite.tools", "lite.schema"))
    folders = [root, root / "ops", root / "kernels", tools / "converter", tools / "converter" / "mappers", schema]
    digest = hashlib.sha256(f"delite-conversion-cache 1 {__version__}".encode())
    for folder in folders:
        for source in sorted(folder.glob("*.py")):
            digest.update(source.name.encode() + source.read_bytes())
    return digest.digest()
