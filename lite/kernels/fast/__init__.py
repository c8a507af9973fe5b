"""Compiled kernels beside the numpy ones (TFLite's optimized kernels beside BUILTIN_REF).

The numpy kernels stay the reference: every compiled kernel here is tested against the
numpy kernel it stands in for. The compiler is numba; where it cannot be imported, or
``DELITE_FAST_KERNELS=0`` is set, the numpy kernels run, with the same results.

Compiled code is cached on disk (``$DELITE_NUMBA_CACHE``, else ``$XDG_CACHE_HOME/delite/numba``
or ``~/.cache/delite/numba``), so only the first process on a machine pays for compiling; the
seconds spent compiling in this process are in ``compile_seconds()`` (``Model.build_timings``
reports them as "jit"). The cache's subfolder is named after the compiler options and the
sources compiled code reads (``SOURCES``); the ``KEPT_CACHES`` most recently used subfolders stay.
"""

from __future__ import annotations

import functools
import hashlib
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import numpy as np

from lite.kernels.fast import bundle, cache_loading, targets

FAST_DTYPES = ("float32", "float64")

_compile_seconds = 0.0


def enabled() -> bool:
    """Whether compiled kernels may run: the compiler imports and ``DELITE_FAST_KERNELS`` is not 0."""
    return os.environ.get("DELITE_FAST_KERNELS", "1").strip() != "0" and numba_module() is not None


@functools.cache
def numba_module() -> ModuleType | None:
    """numba, targeting the chosen instruction-set level (``lite.kernels.fast.targets``), with its
    cache in Delite's cache folder (unless ``NUMBA_CACHE_DIR`` names one), seeded from the
    ahead-of-time bundle where the folder is new (``lite.kernels.fast.bundle``); None where it
    cannot be imported."""
    try:
        import numba
    except Exception:  # NOTE: a broken install (llvmlite mismatch) raises more than ImportError
        return None
    level = _PROCESS["level"] = _choose_target(numba)
    bundle.install_locator(numba)
    cache_loading.install(numba)
    if not os.environ.get("NUMBA_CACHE_DIR"):  # NOTE: not via the environment, which child processes inherit
        key = _cache_key()
        folder = cache_directory() / (key if level == targets.HOST else f"{key}-{level}")
        if not folder.is_dir():
            _prune(folder.parent)
            folder.mkdir(parents=True, exist_ok=True)
            _PROCESS["seeded"] = bundle.seed(folder, key, level, numba.__version__)
            if not _PROCESS["seeded"] and level != targets.HOST:
                _PROCESS["unbundled"] = bundle.unused_reason(key, level, numba.__version__)
        numba.config.CACHE_DIR = str(folder)
    return numba


_PROCESS = {"level": targets.HOST, "seeded": 0, "unbundled": ""}
"""What ``numba_module`` chose and did, once per process."""


def target_level() -> str:
    """The instruction-set level compiled kernels target (``targets.HOST``: the host CPU model)."""
    numba_module()
    return str(_PROCESS["level"])


def seeded_files() -> int:
    """Files this process copied from the ahead-of-time bundle into a new cache folder (0: none)."""
    numba_module()
    return int(_PROCESS["seeded"])


def unbundled_reason() -> str:
    """Why this process's new cache folder got nothing from the ahead-of-time bundle ("" where it did,
    or the folder was not new: ``bundle.unused_reason``)."""
    numba_module()
    return str(_PROCESS["unbundled"])


def bundle_info() -> dict[str, str]:
    """What a bundle compiled by this process must say to seed this process's cache folder."""
    return bundle.bundle_info(_cache_key(), target_level(), numba_module().__version__)


def _choose_target(numba: ModuleType) -> str:
    """Sets numba's target to the chosen level (or, for the host, prefers wide vectors)."""
    from llvmlite import binding

    try:
        cpu, features = binding.get_host_cpu_name(), binding.get_host_cpu_features().flatten()
    except RuntimeError:  # NOTE: llvmlite cannot read them on some hosts: LLVM's defaults stay
        cpu, features = "", ""
    level = targets.chosen(cpu, features)
    if level == targets.HOST:
        _prefer_wide_vectors(numba, cpu, features)
    else:
        numba.config.CPU_NAME = targets.LEVELS[level].cpu
        numba.config.CPU_FEATURES = targets.LEVELS[level].feature_string
    return level


def _prefer_wide_vectors(numba: ModuleType, cpu: str, features: str) -> None:
    """Lets LLVM vectorize compiled loops with 512-bit registers on AVX-512 cores (outside
    ``NARROW_CPUS``), unless ``NUMBA_CPU_FEATURES`` or ``NUMBA_CPU_NAME`` names the target.

    LLVM's tuning for these cores prefers 256-bit vectors for the loops it vectorizes (the
    convolutions' register tile is 512-bit IR of its own); 512-bit loops measured faster on an
    Emerald Rapids core (docs/performance.md, runtime CPU fusion). It is numba's
    setting for the process (numba code compiled later in it gets the same features), read when
    numba first compiles: where other code compiled before, nothing changes. The levels of
    ``targets.LEVELS`` with AVX-512 prefer wide vectors too."""
    if numba.config.CPU_FEATURES is not None or numba.config.CPU_NAME is not None or not features:
        return
    if "+avx512f" in features.split(",") and cpu not in targets.NARROW_CPUS:
        numba.config.CPU_FEATURES = features + ",-prefer-256-bit"


def wide_registers() -> bool:
    """Whether compiled code computes in 512-bit registers (32 of them): the target has AVX-512 and
    LLVM is told not to prefer 256-bit vectors (``_prefer_wide_vectors``). Elsewhere (AVX2's sixteen
    256-bit registers, or AVX-512 cores kept at 256 bits) LLVM splits each 16-float vector in two,
    so the register tile has to be smaller (``lite.kernels.fast.tile``)."""
    numba = numba_module()
    features = (numba.config.CPU_FEATURES or "").split(",") if numba is not None else []
    return "+avx512f" in features and "-prefer-256-bit" in features


def cache_directory() -> Path:
    """``$DELITE_NUMBA_CACHE``, else ``$XDG_CACHE_HOME/delite/numba`` (``~/.cache`` by default)."""
    explicit = os.environ.get("DELITE_NUMBA_CACHE", "").strip()
    if explicit:
        return Path(explicit).expanduser()
    base = os.environ.get("XDG_CACHE_HOME", "").strip() or "~/.cache"
    return Path(base).expanduser() / "delite" / "numba"


JIT_OPTIONS = {"cache": True, "fastmath": True, "nogil": True, "boundscheck": False, "error_model": "numpy"}
"""numba's options for every kernel. numpy's error model: a float division by zero gives inf or
nan as in numpy, with no check that raises (Python's model puts a branch in every division, so
loops with one do not vectorize)."""


def jit(function):
    """Compiles ``function`` with numba on first call (no Python objects, the GIL released)."""
    return numba_module().njit(**JIT_OPTIONS)(function)


def exact_jit(function):
    """``jit`` with IEEE arithmetic (no fast-math: no reassociation, no fused multiply-add), for
    kernels whose float results must equal numpy's step by step."""
    return numba_module().njit(**{**JIT_OPTIONS, "fastmath": False})(function)


SOURCES = (Path(__file__).parent, Path(__file__).parents[2] / "ops" / "activation.py")
"""What compiled code reads: every module of this package, and ``lite.ops.activation``, which gives it
constants (the numpy kernels are not among them: editing one recompiles nothing)."""
KEPT_CACHES = 3


def _cache_key() -> str:
    """A cache subfolder named after JIT_OPTIONS and the SOURCES. numba's cache keys each function
    on its own file alone, not on the options, nor on the other files' functions and constants
    it compiled in: after an activation changed in activation.py, the depthwise kernel cached
    from depthwise.py kept the old one."""
    digest = hashlib.sha256(",".join(f"{k}={v}" for k, v in sorted(JIT_OPTIONS.items())).encode())
    for source in SOURCES:
        for path in sorted(source.glob("*.py")) if source.is_dir() else [source]:
            digest.update(path.name.encode() + path.read_bytes())
    return "jit-" + digest.hexdigest()[:12]


def _prune(parent: Path) -> None:
    """Removes all but the KEPT_CACHES - 1 most recently modified ``jit-*`` subfolders of ``parent``
    (the caches of other versions of the sources), before a new one is made."""
    try:
        folders = sorted(parent.glob("jit-*"), key=lambda p: p.stat().st_mtime, reverse=True)
    except OSError:
        return
    for folder in folders[KEPT_CACHES - 1:]:
        shutil.rmtree(folder, ignore_errors=True)


def takes(*arrays: np.ndarray) -> bool:
    """Whether compiled kernels take these arrays as they are: writable and C-contiguous (others are
    other types to numba, compiled again in the middle of a predict)."""
    return all(a.flags.c_contiguous and a.flags.writeable for a in arrays)


def taken(x: np.ndarray) -> np.ndarray:
    """``x`` as compiled kernels take it for one call: itself, or a C-contiguous writable copy."""
    return x if takes(x) else np.array(x, copy=True)


def compiled_input(x: np.ndarray) -> tuple[np.ndarray, list[Callable[[], None]]]:
    """``x`` as compiled kernels take it: itself, or a copy with the call that refreshes it each run."""
    if takes(x):
        return x, []
    copy = np.empty(x.shape, x.dtype)
    return copy, [functools.partial(np.copyto, copy, x)]


def compiled(call, *arguments) -> None:
    """Runs ``call(*arguments)`` once to compile it for these argument types, timing the compile."""
    global _compile_seconds
    start = time.perf_counter()
    call(*arguments)
    _compile_seconds += time.perf_counter() - start


def compile_seconds() -> float:
    """Seconds this process spent compiling (or loading from the cache) kernels so far."""
    return _compile_seconds
