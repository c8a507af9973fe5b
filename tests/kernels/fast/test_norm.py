"""The compiled layer, group and instance normalizations against the numpy kernels they stand in for."""

from __future__ import annotations

import numpy as np
import pytest

from lite.kernels import fast
from lite.kernels.fast import norm
from tests.support.kernel_harness import run_kernel

pytestmark = pytest.mark.skipif(fast.numba_module() is None, reason="numba is not importable here")

# (x shape, begin_norm_axis, scale shape, bias shape or None)
CASES = [
    ((2, 16, 768), -1, (768,), (768,)),
    ((3, 7, 5), 1, (7, 5), None),
    ((4, 6), 0, (4, 6), (1, 6)),
    ((2, 3, 4, 5), 2, (1,), (5,)),
    ((1, 1), -1, (1,), (1,)),
]


def layer_norm(x, scale, bias, axis):
    return run_kernel("LayerNormFusion", {"begin_norm_axis": axis, "epsilon": 1e-5},
                      [x, scale] + ([] if bias is None else [bias]))[0]


# NOTE: float64 compiles kernels of its own: the slow suite
@pytest.mark.parametrize("dtype", [np.float32, pytest.param(np.float64, marks=pytest.mark.slow)])
@pytest.mark.parametrize(("x_shape", "axis", "scale_shape", "bias_shape"), CASES)
def test_compiled_matches_the_numpy_kernel(monkeypatch, x_shape, axis, scale_shape, bias_shape, dtype):
    rng = np.random.default_rng([len(x_shape), *x_shape])
    x = (rng.standard_normal(x_shape) * 3 + 2).astype(dtype)
    scale = rng.standard_normal(scale_shape).astype(dtype)
    bias = None if bias_shape is None else rng.standard_normal(bias_shape).astype(dtype)
    monkeypatch.setenv("DELITE_FAST_KERNELS", "0")
    reference = layer_norm(x, scale, bias, axis)
    monkeypatch.setenv("DELITE_FAST_KERNELS", "1")
    got = layer_norm(x, scale, bias, axis)
    assert got.dtype == reference.dtype and got.shape == reference.shape
    np.testing.assert_allclose(got, reference, rtol=1e-4, atol=1e-5 if dtype == np.float32 else 1e-12)


def test_the_compiled_kernel_runs(monkeypatch):
    norm.warm("float32")  # NOTE: before the patch, which the warm-up would call
    calls = []
    monkeypatch.setattr(norm, "layer_norm", lambda *args: calls.append(args[0].shape))
    layer_norm(np.ones((2, 8), np.float32), np.ones(8, np.float32), None, -1)
    assert calls == [(2, 8)]


# (op, x shape, groups: None for InstanceNorm)
GROUP_CASES = [
    ("InstanceNorm", (2, 6, 5, 7), None),
    ("InstanceNorm", (1, 3, 40), None),
    ("GroupNorm", (2, 8, 4, 4), 2),
    ("GroupNorm", (1, 16, 3, 5, 2), 1),
    ("GroupNorm", (3, 4, 1, 1), 4),
]


def group_norm(op, x, scale, bias, groups):
    attrs = {"epsilon": 1e-5} | ({} if groups is None else {"num_groups": groups})
    return run_kernel(op, attrs, [x, scale, bias])[0]


@pytest.mark.parametrize("dtype", [np.float32, pytest.param(np.float64, marks=pytest.mark.slow)])
@pytest.mark.parametrize(("op", "x_shape", "groups"), GROUP_CASES)
def test_compiled_group_norm_matches_the_numpy_kernel(monkeypatch, op, x_shape, groups, dtype):
    rng = np.random.default_rng([len(x_shape), *x_shape])
    x = (rng.standard_normal(x_shape) * 3 + 20).astype(dtype)  # NOTE: a mean far from zero
    scale, bias = (rng.standard_normal(x_shape[1]).astype(dtype) for _ in range(2))
    monkeypatch.setenv("DELITE_FAST_KERNELS", "0")
    reference = group_norm(op, x, scale, bias, groups)
    monkeypatch.setenv("DELITE_FAST_KERNELS", "1")
    got = group_norm(op, x, scale, bias, groups)
    assert got.dtype == reference.dtype and got.shape == reference.shape
    np.testing.assert_allclose(got, reference, rtol=1e-4, atol=1e-4 if dtype == np.float32 else 1e-12)


def test_the_compiled_group_norm_runs(monkeypatch):
    norm.warm_group_norm("float32")
    calls = []
    monkeypatch.setattr(norm, "group_norm", lambda *args: calls.append(args[0].shape))
    group_norm("GroupNorm", np.ones((2, 8, 3), np.float32), np.ones(8, np.float32), np.zeros(8, np.float32), 2)
    assert calls == [(2, 2, 4, 3)]
