"""lite.ops.quant against ONNX's reference evaluator on fresh random data."""

from __future__ import annotations

import numpy as np
import pytest

from lite.ops.quant import broadcast_param, dequantize, qrange, quantize
from tests.support.quant import quant_reference


def _params(rng, shape, dtype, axis, block_size, mode):
    if mode == "tensor":
        scale_shape = ()
    elif mode == "axis":
        scale_shape = (shape[axis],)
    else:
        scale_shape = tuple(-(-n // block_size) if d == axis else n for d, n in enumerate(shape))
    scale = rng.uniform(0.01, 0.2, scale_shape).astype(np.float32)
    low, high = qrange(dtype)
    zero_point = rng.integers(max(low, -20), min(high, 20) + 1, scale_shape).astype(dtype)
    return scale, zero_point


CASES = [("tensor", 1, 0), ("axis", 1, 0), ("axis", 0, 0), ("block", 1, 2), ("block", 2, 3)]


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int16, np.uint16])
@pytest.mark.parametrize(("mode", "axis", "block_size"), CASES)
def test_quantize_matches_thequant_reference(dtype, mode, axis, block_size):
    rng = np.random.default_rng(7)
    shape = (2, 5, 7)
    x = rng.normal(0, 4, shape).astype(np.float32)
    scale, zero_point = _params(rng, shape, np.dtype(dtype), axis, block_size, mode)
    attrs = {"axis": axis, **({"block_size": block_size} if block_size else {})}
    expected = quant_reference("QuantizeLinear", [x, scale, zero_point], **attrs)
    actual = quantize(x, scale, zero_point, dtype, axis, block_size)
    assert actual.dtype == expected.dtype
    np.testing.assert_array_equal(actual, expected)


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int16, np.uint16, np.int32])
@pytest.mark.parametrize(("mode", "axis", "block_size"), CASES)
def test_dequantize_matches_thequant_reference(dtype, mode, axis, block_size):
    rng = np.random.default_rng(11)
    shape = (3, 4, 6)
    low, high = qrange(dtype)
    q = rng.integers(max(low, -1000), min(high, 1000) + 1, shape).astype(dtype)
    scale, zero_point = _params(rng, shape, np.dtype(dtype), axis, block_size, mode)
    attrs = {"axis": axis, **({"block_size": block_size} if block_size else {})}
    expected = quant_reference("DequantizeLinear", [q, scale, zero_point], **attrs)
    np.testing.assert_allclose(dequantize(q, scale, zero_point, axis, block_size), expected, rtol=1e-6)


def test_ties_round_to_even():
    x = np.array([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 3.5], np.float32)
    np.testing.assert_array_equal(quantize(x, np.float32(1), np.int8(0), np.int8), [0, 2, 2, 0, -2, -2, 4])


def test_saturates_to_the_output_range_without_wrapping():
    x = np.array([1e9, -1e9, 300.0, -300.0, np.float32(3e38)], np.float32)
    np.testing.assert_array_equal(quantize(x, np.float32(1), np.uint8(10), np.uint8), [255, 0, 255, 0, 255])
    np.testing.assert_array_equal(quantize(x, np.float32(1), None, np.int16), [32767, -32768, 300, -300, 32767])


def test_default_zero_point_and_int32_input():
    x = np.array([-7, 0, 9, 1000], np.int32)
    np.testing.assert_array_equal(quantize(x, np.float32(2), None, np.int8), [-4, 0, 4, 127])


def test_scales_that_do_not_fit_are_refused():
    with pytest.raises(ValueError, match="per-axis"):
        broadcast_param(np.ones(3), (2, 4), 1)
    with pytest.raises(ValueError, match="blocked"):
        broadcast_param(np.ones((2, 3)), (2, 4), 1, block_size=2)
    with pytest.raises(ValueError, match="axis"):
        broadcast_param(np.ones(3), (3,), 1)
