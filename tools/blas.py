"""numpy's OpenBLAS: whether the kernels it runs here suit the CPU.

OpenBLAS picks its kernels once, when it loads (at ``import numpy``): from its own table of CPUs,
or from ``OPENBLAS_CORETYPE`` where that is set. Its AVX2 kernels ("Haswell", "Zen") on a core with
AVX-512 run float32 products at about half the speed of its AVX-512 ones ("SkylakeX") there
(measured: docs/performance.md, BLAS kernels), and Delite's 1x1 convolutions and linear layers are
such products. ``blas_note`` says so, for lite-benchmark to print.
"""

from __future__ import annotations

import os
from pathlib import Path

from lite.threads import AVX2_BLAS_KERNELS

AVX512_FLAGS = frozenset({"avx512f", "avx512cd", "avx512bw", "avx512dq", "avx512vl"})


def cpu_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> frozenset[str]:
    """The first processor's flags in ``cpuinfo``; empty where it cannot be read."""
    try:
        first = cpuinfo.read_text(errors="replace").split("\n\n", 1)[0]
    except OSError:
        return frozenset()
    for line in first.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "flags":
            return frozenset(value.split())
    return frozenset()


def blas_note(architectures: list[str], cpuinfo: Path = Path("/proc/cpuinfo"),
              environ: dict[str, str] | None = None) -> str | None:
    """What to change when OpenBLAS runs its AVX2 kernels (``architectures``: threadpoolctl's, one per
    loaded BLAS) on a core with AVX-512, else None."""
    environ = os.environ if environ is None else environ
    if not cpu_flags(cpuinfo) >= AVX512_FLAGS or not any(a.lower() in AVX2_BLAS_KERNELS for a in architectures):
        return None
    forced = environ.get("OPENBLAS_CORETYPE")
    why = f"OPENBLAS_CORETYPE={forced} is set" if forced else "OpenBLAS does not know this CPU"
    return (f"numpy's OpenBLAS runs its AVX2 kernels ({', '.join(architectures)}) on this AVX-512 CPU ({why}): "
            "matrix products run about half as fast as they could; start Python with "
            + ("OPENBLAS_CORETYPE unset, or =SkylakeX" if forced else "OPENBLAS_CORETYPE=SkylakeX"))
