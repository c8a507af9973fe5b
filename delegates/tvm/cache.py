"""The on-disk cache of compiled partitions: ``<key>.so`` plus a ``<key>.json`` checksum sidecar.

The key hashes the Relax module (its structural hash: ops, attributes, shapes, constants),
a digest of every constant's bytes, the target, the TVM version and the tuning database,
so any change to what would be compiled gives a new key. Entries are written to a
temporary file and moved into place with ``os.replace`` under an exclusive ``flock`` (two
processes may write the same key at once; readers hold a shared lock while they check and
load). A missing, truncated, corrupt or stale entry (checksum, size, format or TVM version
disagree, or TVM cannot load it) counts as a miss: the caller compiles and overwrites it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import secrets
import stat
import time
from collections.abc import Iterator
from pathlib import Path

import tvm

from lite.errors import LiteError
from lite.files import read_regular_file

try:
    import fcntl
except ImportError:  # NOTE: not on Windows: entries are still replaced atomically, without the lock
    fcntl = None

logger = logging.getLogger("lite")

FORMAT = 1  # bump when what an entry holds changes
ENV = "DELITE_TVM_CACHE"
OFF_VALUES = ("off", "0", "false", "no", "none")
MAX_SIDECAR_BYTES = 1 << 16  # a sidecar is a few hundred bytes of JSON


def default_directory() -> Path | None:
    """``$DELITE_TVM_CACHE`` (a directory, or off), else ``$XDG_CACHE_HOME/delite/tvm`` (``~/.cache``)."""
    env = os.environ.get(ENV, "").strip()
    if env.lower() in OFF_VALUES:
        return None
    if env:
        return Path(env).expanduser()
    base = os.environ.get("XDG_CACHE_HOME", "").strip() or "~/.cache"
    return Path(base).expanduser() / "delite" / "tvm"


def cache_key(mod: tvm.IRModule, constants_digest: str, target: str, extra: str = "") -> str:
    """sha256 of the module's structural hash, its constants, the target, TVM's version and ``extra``."""
    import tvm_ffi

    structural = tvm_ffi.structural_hash(mod) & (2**64 - 1)
    text = f"{FORMAT}|{structural:016x}|{constants_digest}|{target}|{tvm.__version__}|{extra}"
    return hashlib.sha256(text.encode()).hexdigest()


def file_digest(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


class ModuleCache:
    """Compiled modules on disk, keyed by ``cache_key``.

    Args:
        directory: where entries live (created on first store).
    """

    def __init__(self, directory: str | os.PathLike):
        self.directory = Path(directory)

    def paths(self, key: str) -> tuple[Path, Path]:
        return self.directory / f"{key}.so", self.directory / f"{key}.json"

    @contextlib.contextmanager
    def _lock(self, exclusive: bool) -> Iterator[None]:
        if fcntl is None:
            yield
            return
        self.directory.mkdir(parents=True, exist_ok=True)
        with open(self.directory / ".lock", "a+b") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def load(self, key: str) -> tvm.runtime.Module | None:
        """The cached module for ``key``, or None (missing or invalid: compile and ``store``)."""
        library, sidecar = self.paths(key)
        if not library.exists():
            return None
        try:
            with self._lock(exclusive=False):
                problem = self._problem(library, sidecar)
                if problem is None:
                    return tvm.runtime.load_module(str(library))
        except Exception as exc:  # NOTE: a library that passed the checks and still fails to load is a miss too
            problem = f"TVM could not load it: {type(exc).__name__}: {exc}"
        logger.warning("TVM cache entry %s is invalid (%s); recompiling", library, problem)
        return None

    def _problem(self, library: Path, sidecar: Path) -> str | None:
        try:
            meta = json.loads(read_regular_file(sidecar, MAX_SIDECAR_BYTES, "TVM cache checksum sidecar",
                                                limit_name="MAX_SIDECAR_BYTES"))
        except (OSError, ValueError, RecursionError, LiteError) as exc:  # NOTE: a FIFO or a huge file is refused
            return f"checksum sidecar unreadable: {exc}"
        if not isinstance(meta, dict) or meta.get("format") != FORMAT or meta.get("tvm") != tvm.__version__:
            return "stale: written by another format or TVM version"
        info = library.stat()
        if not stat.S_ISREG(info.st_mode):
            return "not a regular file"
        size = info.st_size
        if size != meta.get("size"):
            return f"size {size} bytes, expected {meta.get('size')} (truncated?)"
        if file_digest(library) != meta.get("sha256"):
            return "checksum mismatch (corrupt)"
        return None

    def _remove_abandoned(self, age: float = 86400.0) -> None:
        """Deletes temporary files a killed process left behind (older than ``age`` seconds)."""
        now = time.time()
        for path in self.directory.glob(".*.tmp.*"):
            with contextlib.suppress(OSError):
                if now - path.stat().st_mtime > age:
                    path.unlink()

    def store(self, key: str, executable, target: str) -> bool:
        """Exports ``executable`` as the entry for ``key``; False (and a warning) when that fails."""
        library, sidecar = self.paths(key)
        token = f"{os.getpid()}.{secrets.token_hex(4)}"
        temp_library = self.directory / f".{key}.{token}.tmp.so"
        temp_sidecar = self.directory / f".{key}.{token}.tmp.json"
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            executable.export_library(str(temp_library))
            meta = {"format": FORMAT, "tvm": tvm.__version__, "target": target, "size": temp_library.stat().st_size,
                    "sha256": file_digest(temp_library), "created": time.time()}
            temp_sidecar.write_text(json.dumps(meta))
            with self._lock(exclusive=True):
                os.replace(temp_library, library)
                os.replace(temp_sidecar, sidecar)
            self._remove_abandoned()
            return True
        except Exception as exc:  # NOTE: a cache that cannot be written must not fail the build
            logger.warning("TVM cache: could not store %s: %s: %s", library, type(exc).__name__, exc)
            return False
        finally:
            for path in (temp_library, temp_sidecar):
                with contextlib.suppress(OSError):
                    path.unlink()
