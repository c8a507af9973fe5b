"""The compiled 2-D max pool against the numpy kernel it stands in for."""

from __future__ import annotations

import numpy as np
import pytest

from lite.kernels import fast
from lite.kernels.fast import pool
from tests.support.kernel_harness import run_kernel

pytestmark = pytest.mark.skipif(fast.numba_module() is None, reason="numba is not importable here")

# (x shape, MaxPoolFusion attrs): strides, pads, dilations, ceil rounding, SAME pads, batches
CASES = [
    ((1, 4, 12, 12), {"kernel_size": (3, 3), "strides": (2, 2), "pad_list": (1, 1, 1, 1)}),
    ((2, 3, 111, 111), {"kernel_size": (3, 3), "strides": (2, 2), "round_mode": "CEIL"}),
    ((1, 5, 13, 9), {"kernel_size": (2, 3), "strides": (1, 2), "pad_list": (1, 0, 0, 2)}),
    ((1, 2, 15, 16), {"kernel_size": (3, 3), "strides": (2, 2), "dilation": (2, 2), "pad_list": (2, 2, 2, 2)}),
    ((1, 3, 10, 11), {"kernel_size": (3, 3), "strides": (3, 2), "pad_mode": "SAME_UPPER"}),
    ((3, 1, 7, 7), {"kernel_size": (7, 7), "strides": (1, 1)}),
    ((1, 6, 28, 28), {"kernel_size": (3, 3), "strides": (1, 1), "pad_list": (1, 1, 1, 1)}),  # one pass of nine taps
    ((1, 4, 20, 19), {"kernel_size": (5, 5), "strides": (1, 1), "pad_list": (2, 2, 2, 2)}),  # passes of three
    ((2, 3, 17, 16), {"kernel_size": (4, 4), "strides": (4, 4), "round_mode": "CEIL"}),  # stride 4
    ((1, 2, 9, 9), {"kernel_size": (1, 1), "strides": (2, 2)}),  # one tap
]


def max_pool(x, attrs):
    return run_kernel("MaxPoolFusion", attrs, [x])[0]


# NOTE: float64 compiles kernels of its own: the slow suite
@pytest.mark.parametrize("dtype", [np.float32, pytest.param(np.float64, marks=pytest.mark.slow)])
@pytest.mark.parametrize(("x_shape", "attrs"), CASES)
def test_compiled_matches_the_numpy_kernel(monkeypatch, x_shape, attrs, dtype):
    x = np.random.default_rng(list(x_shape)).standard_normal(x_shape).astype(dtype)
    monkeypatch.setenv("DELITE_FAST_KERNELS", "0")
    reference = max_pool(x, attrs)
    monkeypatch.setenv("DELITE_FAST_KERNELS", "1")
    got = max_pool(x, attrs)
    assert got.dtype == reference.dtype and got.shape == reference.shape
    np.testing.assert_array_equal(got, reference)


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
@pytest.mark.parametrize(("x_shape", "attrs"), CASES)
def test_compiled_matches_the_numpy_kernel_on_bytes(monkeypatch, x_shape, attrs, dtype):
    """8-bit (quantized) tensors: the whole range, the lowest value included (pads never win)."""
    info = np.iinfo(dtype)
    x = np.random.default_rng(list(x_shape)).integers(info.min, info.max + 1, x_shape).astype(dtype)
    x.reshape(-1)[::7] = info.min
    monkeypatch.setenv("DELITE_FAST_KERNELS", "0")
    reference = max_pool(x, attrs)
    monkeypatch.setenv("DELITE_FAST_KERNELS", "1")
    calls = []
    real_run = pool.run
    monkeypatch.setattr(pool, "run", lambda *args: calls.append(1) or real_run(*args))
    got = max_pool(x, attrs)
    assert calls and got.dtype == reference.dtype
    np.testing.assert_array_equal(got, reference)


def test_every_case_runs_the_compiled_kernel(monkeypatch):
    pool.warm("float32")
    calls = []
    monkeypatch.setattr(pool, "run", lambda plan, x, *rest: calls.append(x.shape))
    for x_shape, attrs in CASES:
        max_pool(np.zeros(x_shape, np.float32), attrs)
    assert calls == [shape for shape, _ in CASES]


@pytest.mark.parametrize(("x", "attrs"), [
    (np.zeros((1, 2, 5, 5, 5), np.float32), {"kernel_size": (2, 2, 2)}),  # 3-D
    (np.zeros((1, 2, 6, 6), np.int32), {"kernel_size": (2, 2)}),  # an integer dtype
])
def test_other_pools_stay_on_numpy(monkeypatch, x, attrs):
    monkeypatch.setattr(pool, "run", lambda *args, **kwargs: pytest.fail("the compiled kernel ran"))
    max_pool(x, attrs)


@pytest.mark.parametrize(("x_shape", "attrs"), CASES)
def test_planes_on_the_crew_match_the_numpy_kernel(monkeypatch, crew_runs, x_shape, attrs):
    threads, runs = crew_runs
    x = np.random.default_rng([9, *x_shape]).standard_normal(x_shape).astype(np.float32)
    monkeypatch.setenv("DELITE_FAST_KERNELS", "0")
    reference = max_pool(x, attrs)
    monkeypatch.setenv("DELITE_FAST_KERNELS", "1")
    np.testing.assert_array_equal(run_kernel("MaxPoolFusion", attrs, [x], threads=threads)[0], reference)
    assert len(runs) == (1 if x_shape[0] * x_shape[1] > 1 else 0)  # the planes ran on the crew
