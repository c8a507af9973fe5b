"""The instruction sets compiled kernels target: named x86-64 levels, so code compiled on one
machine runs, and is found in a cache, on every machine of the same level.

numba keys its cached code on the CPU name and features it compiled for (its "magic tuple"): code
compiled for the host's own name (``znver5``, ``sapphirerapids``) is found only on that model of
CPU. Compiled for a level instead, the same code serves every CPU that has the level's features,
which is what lets the kernels be compiled ahead of time, once per level, when the wheel is built
(``lite.kernels.fast.bundle``). The levels are x86-64's microarchitecture levels (v3: AVX2 and FMA,
Haswell and Zen 1 on; v4: AVX-512 F/BW/CD/DQ/VL), v4 with AVX-512 VNNI, which the int8 kernels
use (Ice Lake and Zen 4 on), and v3 with AVX-VNNI (Alder Lake's cores and later client CPUs without
AVX-512), whose 256-bit ``vpdpwssd`` LLVM picks for the int8 pair sums (8-10% on int8 models).

``DELITE_KERNEL_TARGET`` chooses: ``auto`` (the default: the highest level the host has), a level's
name, or ``host`` (numba's own choice, tuned for this CPU model; nothing compiled ahead of time is
found then). ``NUMBA_CPU_NAME`` or ``NUMBA_CPU_FEATURES`` in the environment mean ``host``: the
user named a target. CPUs that slow their clock for 512-bit arithmetic (``NARROW_CPUS``) and
non-x86 CPUs compile for the host.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from lite.errors import InputError

V3_FEATURES = ("64bit", "avx", "avx2", "bmi", "bmi2", "cmov", "cx16", "cx8", "f16c", "fma", "fxsr", "lzcnt", "mmx",
               "movbe", "popcnt", "sahf", "sse", "sse2", "sse3", "sse4.1", "sse4.2", "ssse3", "xsave")
V4_FEATURES = (*V3_FEATURES, "avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl")

NARROW_CPUS = ("skylake-avx512", "cascadelake", "cooperlake")
"""AVX-512 cores that slow their clock for 512-bit arithmetic: their loops stay at 256 bits."""

HOST = "host"


@dataclass(frozen=True)
class Level:
    """A compile target: LLVM's CPU name and the exact feature string numba is given."""

    name: str
    cpu: str
    features: tuple[str, ...]
    wide: bool  # 512-bit vectors preferred (``-prefer-256-bit``)

    @property
    def feature_string(self) -> str:
        return ",".join([*(f"+{f}" for f in self.features), *(["-prefer-256-bit"] if self.wide else [])])


LEVELS = {level.name: level for level in (
    Level("x86-64-v4-vnni", "x86-64-v4", (*V4_FEATURES, "avx512vnni"), True),
    Level("x86-64-v4", "x86-64-v4", V4_FEATURES, True),
    Level("x86-64-v3-vnni", "x86-64-v3", (*V3_FEATURES, "avxvnni"), False),
    Level("x86-64-v3", "x86-64-v3", V3_FEATURES, False),
)}
"""Highest first: ``host_level`` takes the first one the host has."""


def host_level(cpu_name: str, host_features: str) -> str | None:
    """The highest level of ``LEVELS`` a CPU has (``host_features`` as llvmlite flattens them:
    "+avx2,-avx512f,..."), or None: not x86-64, short of v3, or one of ``NARROW_CPUS`` with AVX-512."""
    if cpu_name in NARROW_CPUS:
        return None
    return next((level.name for level in LEVELS.values() if runs(level.name, host_features)), None)


def runs(level: str, host_features: str) -> bool:
    """Whether a CPU with ``host_features`` (llvmlite's "+avx2,-avx512f,...") runs ``level``'s code."""
    return set(LEVELS[level].features) <= {f[1:] for f in host_features.split(",") if f.startswith("+")}


def chosen(cpu_name: str, host_features: str, environ: dict[str, str] | None = None) -> str:
    """The level compiled kernels target here, or ``HOST`` (see the module's docstring)."""
    environ = os.environ if environ is None else environ
    if environ.get("NUMBA_CPU_NAME") or environ.get("NUMBA_CPU_FEATURES"):
        return HOST
    wanted = environ.get("DELITE_KERNEL_TARGET", "auto").strip() or "auto"
    best = host_level(cpu_name, host_features)
    if wanted == HOST or best is None:
        return HOST
    if wanted == "auto":
        return best
    if wanted not in LEVELS:
        raise InputError(f"DELITE_KERNEL_TARGET={wanted!r}: expected auto, host or one of {', '.join(LEVELS)}")
    return wanted if runs(wanted, host_features) else best
