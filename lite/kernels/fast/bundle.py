"""Kernels compiled ahead of time: a bundle of numba's cache, one folder per instruction-set level
(``lite.kernels.fast.targets``), shipped in the package and copied into the user's empty cache.

A fresh install would otherwise compile every kernel a model uses on its first build (seconds per
model, a minute for the whole zoo on a small machine). The bundle is built with
``python -m lite.tools.kernel_bundle build`` from ``MANIFEST`` (the kernels and argument types the
zoo's models compile, recorded per level by ``... kernel_bundle record``), before the wheel is made.

Three things make numba's cache portable, and this module provides them:

- the level, not the host CPU model, is the compile target (numba's cache keys on it);
- ``PackageLocator`` files each function's cache under its path inside the ``lite`` package, not
  under a hash of the absolute folder it was installed in, and stamps it with a hash of its source
  file's bytes, not the file's time;
- a bundle is copied only into a cache folder it was made for: the same cache key (the sources and
  compiler options, ``lite.kernels.fast._cache_key``), numba version, Python version and level.
  numba checks its own version and each function's bytecode again when it loads an entry, and
  compiles what is missing or stale, so a bundle can be incomplete but never wrong.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
from pathlib import Path
from types import ModuleType

from lite.kernels.fast import cache_loading

PACKAGE_ROOT = Path(__file__).resolve().parents[2]
"""The ``lite`` package's folder: cache paths are relative to it."""
MANIFEST = Path(__file__).with_name("aot_manifest.json")
BUNDLE = Path(__file__).with_name("aot")
INFO = "bundle.json"
MAX_INFO_BYTES = 1 << 16


def bundle_root() -> Path | None:
    """``$DELITE_KERNEL_BUNDLE`` (``off``: none), else the package's ``aot`` folder."""
    explicit = os.environ.get("DELITE_KERNEL_BUNDLE", "").strip()
    if explicit.lower() == "off":
        return None
    return Path(explicit).expanduser() if explicit else BUNDLE


def python_tag() -> str:
    return f"py{sys.version_info.major}{sys.version_info.minor}"


def bundle_info(cache_key: str, level: str, numba_version: str) -> dict[str, str]:
    """What a bundle folder's ``bundle.json`` must say to be copied into a cache folder."""
    return {"cache_key": cache_key, "level": level, "numba": numba_version, "python": python_tag()}


def seed(folder: Path, cache_key: str, level: str, numba_version: str) -> int:
    """Links (or copies) the files of the bundle made for this cache key, level, numba and Python
    into the new cache ``folder`` (numba's cache files and the runtime library ``cache_loading``
    keeps); how many (0 where there is no such bundle or it cannot be read)."""
    root = bundle_root()
    source = root / level if root is not None else None
    if source is None or not _matches(source / INFO, bundle_info(cache_key, level, numba_version)):
        return 0
    copied = 0
    try:
        for path in sorted(source.rglob("*")):
            if path.is_file() and not path.is_symlink() and _cache_file(path):
                target = folder / path.relative_to(source)
                target.parent.mkdir(parents=True, exist_ok=True)
                _link_or_copy(path, target)
                copied += 1
    except OSError:
        return copied  # NOTE: what was copied is whole files; numba compiles whatever is missing
    return copied


_DIFFERENCES = {"cache_key": "other sources or compiler options: rebuild it with python -m lite.tools.kernel_bundle "
                              "build", "level": "another instruction-set level", "numba": "numba {}",
                "python": "Python {}"}


def unused_reason(cache_key: str, level: str, numba_version: str) -> str:
    """Why ``seed`` finds no bundle to copy for these (say so to a user whose first build compiles
    every kernel): switched off, none installed for the level, unreadable, or made for what."""
    root = bundle_root()
    if root is None:
        return "DELITE_KERNEL_BUNDLE=off"
    info_path = root / level / INFO
    if not info_path.is_file():
        return f"none installed for {level} in {root}"
    found = _read_info(info_path)
    if found is None:
        return f"{info_path} is unreadable"
    wanted = bundle_info(cache_key, level, numba_version)
    made_for = [text.format(found.get(key)) for key, text in _DIFFERENCES.items() if found.get(key) != wanted[key]]
    return "the installed one was made for " + ", ".join(made_for) if made_for else ""


def _cache_file(path: Path) -> bool:
    """numba's index and code files, and numba's runtime library (``cache_loading.RUNTIME_FILE``)."""
    return path.suffix in (".nbi", ".nbc") or path.name == cache_loading.RUNTIME_FILE


def _link_or_copy(source: Path, target: Path) -> None:
    """A hard link where the file system allows one (numba never writes a cache file in place: it
    writes a new file and renames it over the old, so the bundle's file stays as it was), else a copy."""
    try:
        os.link(source, target)
    except OSError:
        shutil.copyfile(source, target)


def _matches(info_path: Path, expected: dict[str, str]) -> bool:
    return _read_info(info_path) == expected


def _read_info(info_path: Path) -> dict | None:
    """A bundle's ``bundle.json`` (a dict), or None: missing, a link, oversized or not a JSON object."""
    try:
        if info_path.is_symlink() or info_path.stat().st_size > MAX_INFO_BYTES:
            return None
        info = json.loads(info_path.read_text())
    except (OSError, ValueError):
        return None
    return info if isinstance(info, dict) else None


def install_locator(numba: ModuleType) -> None:
    """Puts ``PackageLocator`` first in numba's list of cache locators (once)."""
    from numba.core import caching

    impl = getattr(caching, "CacheImpl", None) or caching._CacheImpl
    if _locator_class() not in impl._locator_classes:
        impl._locator_classes.insert(0, _locator_class())


_LOCATOR: list[type] = []


def _locator_class() -> type:
    """``PackageLocator``, defined on first use (its base class is numba's)."""
    if not _LOCATOR:
        from numba.core import caching, config

        class PackageLocator(caching._CacheLocator):
            """Caches a function of the ``lite`` package under its package path in numba's
            ``CACHE_DIR``, stamped with its source's hash: the same entries wherever it is installed."""

            def __init__(self, py_func, py_file: str):
                self._source = Path(py_file)
                self._lineno = py_func.__code__.co_firstlineno
                relative = self._source.resolve().parent.relative_to(PACKAGE_ROOT)
                self._cache_path = os.path.join(config.CACHE_DIR, "lite", *relative.parts)

            def get_cache_path(self) -> str:
                return self._cache_path

            def get_source_stamp(self) -> str:
                return source_hash(self._source)

            def get_disambiguator(self) -> str:
                return str(self._lineno)

            @classmethod
            def from_function(cls, py_func, py_file):
                source = Path(py_file)
                if not config.CACHE_DIR or not source.is_file() or not source.resolve().is_relative_to(PACKAGE_ROOT):
                    return None
                locator = cls(py_func, py_file)
                try:
                    locator.ensure_cache_path()
                except OSError:
                    return None
                return locator

        _LOCATOR.append(PackageLocator)
    return _LOCATOR[0]


_SOURCE_HASHES: dict[tuple[str, int, int], str] = {}


def source_hash(path: Path) -> str:
    """The sha256 of a source file's bytes (memoized on its path, time and size)."""
    stat = path.stat()
    key = (str(path), stat.st_mtime_ns, stat.st_size)
    if key not in _SOURCE_HASHES:
        _SOURCE_HASHES[key] = hashlib.sha256(path.read_bytes()).hexdigest()
    return _SOURCE_HASHES[key]
