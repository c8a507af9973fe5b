"""Compiled kernels beside the numpy ones (TFLite's optimized kernels beside BUILTIN_REF).

The numpy kernels stay the reference: every compiled kernel here is tested against the
numpy kernel it stands in for. The compiler is numba; where it cannot be imported, or
``DELITE_FAST_KERNELS=0`` is set, the numpy kernels run, with the same results.

Compiled code is cached on disk (``$DELITE_NUMBA_CACHE``, else ``$XDG_CACHE_HOME/delite/numba``
or ``~/.cache/delite/numba``), so only the first process on a machine pays for compiling; the
seconds spent compiling in this process are in ``compile_seconds()`` (``Model.build_timings``
reports them as "jit").
"""

from __future__ import annotations

import functools
import os
import time
from pathlib import Path
from types import ModuleType

FAST_DTYPES = ("float32", "float64")

_compile_seconds = 0.0


def enabled() -> bool:
    """Whether compiled kernels may run: the compiler imports and ``DELITE_FAST_KERNELS`` is not 0."""
    return os.environ.get("DELITE_FAST_KERNELS", "1").strip() != "0" and numba_module() is not None


@functools.cache
def numba_module() -> ModuleType | None:
    """numba, with its cache in Delite's cache folder (unless ``NUMBA_CACHE_DIR`` names one); None
    where it cannot be imported."""
    try:
        import numba
    except Exception:  # NOTE: a broken install (llvmlite mismatch) raises more than ImportError
        return None
    if not os.environ.get("NUMBA_CACHE_DIR"):  # NOTE: not via the environment, which child processes inherit
        numba.config.CACHE_DIR = str(cache_directory())
    return numba


def cache_directory() -> Path:
    """``$DELITE_NUMBA_CACHE``, else ``$XDG_CACHE_HOME/delite/numba`` (``~/.cache`` by default)."""
    explicit = os.environ.get("DELITE_NUMBA_CACHE", "").strip()
    if explicit:
        return Path(explicit).expanduser()
    base = os.environ.get("XDG_CACHE_HOME", "").strip() or "~/.cache"
    return Path(base).expanduser() / "delite" / "numba"


def jit(function):
    """Compiles ``function`` with numba on first call (no Python objects, the GIL released)."""
    return numba_module().njit(cache=True, fastmath=True, nogil=True, boundscheck=False)(function)


def compiled(call, *arguments) -> None:
    """Runs ``call(*arguments)`` once to compile it for these argument types, timing the compile."""
    global _compile_seconds
    start = time.perf_counter()
    call(*arguments)
    _compile_seconds += time.perf_counter() - start


def compile_seconds() -> float:
    """Seconds this process spent compiling (or loading from the cache) kernels so far."""
    return _compile_seconds
