"""lite.ops.norm against ONNX BatchNormalization (reference evaluator) and LRN (onnxruntime); LayerNorm axes."""

from __future__ import annotations

import math

import numpy as np
import pytest

from lite.ops.norm import batchnorm_affine, lrn_window, norm_axis, stats_dtype
from tests.support.op_reference import run_ort, run_reference


@pytest.mark.parametrize("shape, epsilon", [((2, 3, 4, 5), 1e-5), ((4, 6), 1e-3), ((1, 2, 7), 0.5)])
def test_affine_form_equals_batch_normalization(shape, epsilon):
    rng = np.random.default_rng(5)
    channels = shape[1]
    x = rng.standard_normal(shape).astype(np.float32)
    scale, bias, mean = (rng.standard_normal(channels).astype(np.float32) for _ in range(3))
    var = rng.uniform(0.1, 3.0, channels).astype(np.float32)
    [expected] = run_reference("BatchNormalization", {"x": x, "scale": scale, "bias": bias, "mean": mean,
                                                      "var": var}, opset=15, epsilon=epsilon)
    multiplier, offset = batchnorm_affine(scale, bias, mean, var, epsilon)
    channel = (-1,) + (1,) * (len(shape) - 2)
    assert multiplier.dtype == offset.dtype == np.float64 and multiplier.shape == offset.shape == (channels,)
    np.testing.assert_allclose(x * multiplier.reshape(channel) + offset.reshape(channel), expected,
                               rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("size", range(1, 9))
def test_lrn_window_is_the_specs(size):
    """ONNX: channels max(0, c - floor((size - 1) / 2)) .. min(C - 1, c + ceil((size - 1) / 2))."""
    assert lrn_window(size) == (math.floor((size - 1) / 2), math.ceil((size - 1) / 2))


@pytest.mark.parametrize("size", [1, 3, 5, 7])  # onnxruntime runs odd sizes only
def test_lrn_sums_the_window(size):
    x = np.random.default_rng(9).standard_normal((2, 6, 3, 2)).astype(np.float32)
    alpha, beta, bias = 0.3, 0.75, 1.5
    [expected] = run_ort("LRN", {"x": x}, opset=13, size=size, alpha=alpha, beta=beta, bias=bias)
    before, after = lrn_window(size)
    squares = np.pad(x * x, [(0, 0), (before, after), (0, 0), (0, 0)])
    sums = sum(squares[:, k:k + x.shape[1]] for k in range(before + after + 1))
    assert before + after + 1 == size
    np.testing.assert_allclose(x / (bias + alpha / size * sums) ** beta, expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(("rank", "axis", "expected"), [(3, -1, 2), (3, 0, 0), (4, -4, 0), (1, 0, 0)])
def test_norm_axis_is_made_non_negative(rank, axis, expected):
    assert norm_axis(rank, axis) == expected


@pytest.mark.parametrize(("rank", "axis"), [(3, 3), (3, -4), (0, 0)])
def test_norm_axis_out_of_range_raises(rank, axis):
    with pytest.raises(ValueError, match="out of range"):
        norm_axis(rank, axis)


def test_statistics_are_float32_or_wider():
    assert stats_dtype(np.dtype(np.float16)) == stats_dtype(np.dtype(np.float32)) == np.float32
    assert stats_dtype(np.dtype(np.float64)) == np.float64
