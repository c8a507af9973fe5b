"""The compiled batch of 2-D transposes against numpy's transposed copy, and which Transposes take it."""

from __future__ import annotations

import numpy as np
import pytest

from lite.kernels import fast
from lite.kernels.shape import swapped_planes
from tests.support.kernel_harness import run_kernel

pytestmark = pytest.mark.skipif(fast.numba_module() is None, reason="numba is not importable here")

CASES = [  # (shape, perm): NCHW <-> NHWC, odd sizes around the 8 x 8 blocks, 2-D, size-1 axes, merged axes
    ((1, 40, 56, 56), (0, 2, 3, 1)),
    ((2, 13, 9, 7), (0, 3, 1, 2)),
    ((17, 23), (1, 0)),
    ((3, 1, 8, 5), (0, 3, 1, 2)),
    ((4, 6, 5), (2, 0, 1)),
    ((2, 3, 4, 5, 6), (0, 3, 4, 1, 2)),
]


@pytest.mark.parametrize("dtype", [np.float32, np.int32])
@pytest.mark.parametrize(("shape", "perm"), CASES)
def test_the_compiled_transpose_matches_numpy(monkeypatch, shape, perm, dtype):
    from lite.kernels.fast import transpose

    x = (np.random.default_rng(len(shape)).standard_normal(shape) * 100).astype(dtype)
    x.reshape(-1)[::7] = np.float32(np.nan) if dtype == np.float32 else -1  # NOTE: NaNs move bit for bit
    transpose.warm()
    calls, planes = [], transpose.transpose_planes
    monkeypatch.setattr(transpose, "transpose_planes", lambda *args: calls.append(args[2:]) or planes(*args))
    [got] = run_kernel("Transpose", {"perm": list(perm)}, [x])
    want = x.transpose(perm)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got.view(np.uint32) if dtype == np.float32 else got,
                                  np.ascontiguousarray(want).view(np.uint32) if dtype == np.float32 else want)
    assert calls == [swapped_planes(shape, perm)]


@pytest.mark.parametrize(("shape", "perm", "dtype"), [
    ((1, 4, 197, 64), (0, 2, 1, 3), np.float32),  # a run of 64 moved whole: numpy copies it as one
    ((2, 3, 4), (0, 1, 2), np.float32),
    ((4, 6, 5), (2, 0, 1), np.float64),
    ((4, 6, 5), (2, 0, 1), np.int16),
])
def test_other_transposes_stay_on_numpy(monkeypatch, shape, perm, dtype):
    from lite.kernels.fast import transpose

    monkeypatch.setattr(transpose, "transpose_planes", lambda *args: pytest.fail("compiled"))
    x = np.arange(np.prod(shape)).reshape(shape).astype(dtype)
    [got] = run_kernel("Transpose", {"perm": list(perm)}, [x])
    np.testing.assert_array_equal(got, x.transpose(perm))
