"""lite.tools.blas: lite-benchmark's note when numpy's OpenBLAS runs AVX2 kernels on an AVX-512 core."""

from __future__ import annotations

from pathlib import Path

import pytest

from lite.tools.blas import blas_note, cpu_flags

AVX512 = "fpu sse avx avx2 fma avx512f avx512dq avx512cd avx512bw avx512vl avx512_vnni"
AVX2 = "fpu sse avx avx2 fma"


def cpuinfo(tmp_path: Path, flags: str) -> Path:
    path = tmp_path / "cpuinfo"
    block = f"processor\t: 0\nvendor_id\t: AuthenticAMD\nflags\t\t: {flags}\n"
    path.write_text(block + "\n" + block.replace(": 0", ": 1"))
    return path


def test_the_first_processors_flags_are_read(tmp_path):
    assert cpu_flags(cpuinfo(tmp_path, AVX2)) == frozenset(AVX2.split())
    assert cpu_flags(tmp_path / "missing") == frozenset()


@pytest.mark.parametrize(("flags", "architectures", "environ", "expected"), [
    (AVX512, ["Haswell"], {"OPENBLAS_CORETYPE": "Haswell"}, "OPENBLAS_CORETYPE=Haswell is set"),
    (AVX512, ["Zen"], {}, "does not know this CPU"),
    (AVX512, ["SkylakeX"], {}, None),
    (AVX2, ["Haswell"], {}, None),  # AVX2 kernels are the right ones there
    (AVX512, [], {}, None),  # no OpenBLAS loaded
])
def test_the_note_names_avx2_kernels_on_an_avx512_core_and_why(tmp_path, flags, architectures, environ, expected):
    note = blas_note(architectures, cpuinfo(tmp_path, flags), environ)
    if expected is None:
        assert note is None
    else:
        assert expected in note and "OPENBLAS_CORETYPE" in note


def test_an_unreadable_cpuinfo_gives_no_note(tmp_path):
    assert blas_note(["Haswell"], tmp_path / "missing", {}) is None
