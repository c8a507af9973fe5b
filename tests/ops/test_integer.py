"""lite.ops.integer against ONNX's reference evaluator on fresh random data."""

from __future__ import annotations

import numpy as np
import pytest

from lite.ops.integer import conv_integer, dynamic_quantize, exact_int32, matmul_integer
from tests.support.conv import conv
from tests.support.integer import integers, run_reference

INT8 = [np.int8, np.uint8]


@pytest.mark.parametrize(("low", "high"), [(-3.0, 5.0), (0.5, 4.0), (-6.0, -0.25), (-1e-3, 1e-3)])
def test_dynamic_quantize_matches_the_reference(low, high):
    x = np.random.default_rng(1).uniform(low, high, (3, 5, 7)).astype(np.float32)
    expected = run_reference("DynamicQuantizeLinear", {"x": x}, n_outputs=3)
    for actual, wanted in zip(dynamic_quantize(x), expected, strict=True):
        assert actual.dtype == wanted.dtype and actual.shape == wanted.shape
        np.testing.assert_array_equal(actual, wanted)


def test_dynamic_quantize_of_zeros_and_of_nothing():
    for x in (np.zeros((2, 3), np.float32), np.zeros((0, 4), np.float32)):
        y, scale, zero_point = dynamic_quantize(x)
        assert y.shape == x.shape and not y.any() and zero_point == 0
        assert scale == np.float32(1) / np.float32(255)  # ONNX's reference evaluator's scale for an empty range


def test_dynamic_quantize_rounds_ties_to_even():
    x = np.array([0.0, 255.0, 0.5, 1.5, 2.5], np.float32)  # scale exactly 1
    y, scale, zero_point = dynamic_quantize(x)
    assert scale == 1 and zero_point == 0
    np.testing.assert_array_equal(y, [0, 255, 0, 2, 2])


def _zero_point(rng, dtype, shape):
    return integers(rng, dtype, shape) // 8  # near the middle of the range, as real ones are


@pytest.mark.parametrize("a_dtype", INT8)
@pytest.mark.parametrize("b_dtype", INT8)
@pytest.mark.parametrize(("a_zp_shape", "b_zp_shape"), [(None, None), ((), ()), ((1,), (1,)), ((4, 1), (5,)),
                                                         ((2, 4, 1), (2, 1, 5))])
def test_matmul_matches_the_reference(a_dtype, b_dtype, a_zp_shape, b_zp_shape):
    rng = np.random.default_rng(2)
    a, b = integers(rng, a_dtype, (2, 4, 6)), integers(rng, b_dtype, (2, 6, 5))
    inputs = {"a": a, "b": b}
    if a_zp_shape is not None:
        inputs.update(az=_zero_point(rng, a_dtype, a_zp_shape), bz=_zero_point(rng, b_dtype, b_zp_shape))
    (expected,) = run_reference("MatMulInteger", inputs)
    actual = matmul_integer(a, b, inputs.get("az"), inputs.get("bz"))
    assert actual.dtype == np.int32
    np.testing.assert_array_equal(actual, expected)


@pytest.mark.parametrize(("a_shape", "b_shape"), [((3, 1, 4, 7), (2, 7, 5)), ((7,), (7, 3)), ((2, 7), (7,)),
                                                  ((7,), (7,))])
def test_matmul_batches_and_broadcasts_as_numpy(a_shape, b_shape):
    rng = np.random.default_rng(3)
    a, b = integers(rng, np.uint8, a_shape), integers(rng, np.int8, b_shape)
    a_zp, b_zp = np.uint8(131), np.int8(-3)
    (expected,) = run_reference("MatMulInteger", {"a": a, "b": b, "az": np.array(a_zp), "bz": np.array(b_zp)})
    np.testing.assert_array_equal(matmul_integer(a, b, a_zp, b_zp), expected)


def test_a_vector_zero_point_is_one_per_row():
    """ONNX's reference subtracts a vector along a's last axis; the spec says one per row (M)."""
    rng = np.random.default_rng(4)
    a, b = integers(rng, np.uint8, (3, 3)), integers(rng, np.uint8, (3, 2))
    a_zp, b_zp = np.array([1, 50, 200], np.uint8), np.array([7, 9], np.uint8)
    (expected,) = run_reference("MatMulInteger", {"a": a, "b": b, "az": a_zp.reshape(3, 1), "bz": b_zp})
    np.testing.assert_array_equal(matmul_integer(a, b, a_zp, b_zp), expected)
    wide = (a.astype(np.int64) - a_zp[:, None]) @ (b.astype(np.int64) - b_zp)
    np.testing.assert_array_equal(matmul_integer(a, b, a_zp, b_zp), wide)


def test_zero_points_that_do_not_fit_are_refused():
    a, b = np.zeros((3, 4), np.uint8), np.zeros((4, 2), np.uint8)
    with pytest.raises(ValueError, match="rows"):
        matmul_integer(a, b, np.zeros(4, np.uint8))
    with pytest.raises(ValueError, match="output channel"):
        conv_integer(np.zeros((1, 2, 3, 3), np.uint8), np.zeros((4, 2, 1, 1), np.uint8), None,
                     np.zeros(3, np.uint8), lambda x, w: x)
    with pytest.raises(ValueError, match="scalar"):
        conv_integer(np.zeros((1, 2, 3, 3), np.uint8), np.zeros((4, 2, 1, 1), np.uint8), np.zeros(2, np.uint8),
                     None, lambda x, w: x)


def test_sums_are_exact_and_wrap_as_int32():
    rng = np.random.default_rng(5)
    a, b = integers(rng, np.int8, (3, 4096)), integers(rng, np.int8, (4096, 2))
    exact = a.astype(np.int64) @ b.astype(np.int64)
    np.testing.assert_array_equal(matmul_integer(a, b), exact)
    a, b = np.full((1, 40000), 255, np.uint8), np.full((40000, 1), 255, np.uint8)  # 2.6e9: past int32
    assert matmul_integer(a, b)[0, 0] == np.int64(255 * 255 * 40000).astype(np.int32)
    assert exact_int32(np.array([2.0**31, -(2.0**31) - 1, 41.99999999])).tolist() == [-(2**31), 2**31 - 1, 42]


CONVS = [  # (x shape, w shape, ONNX attributes)
    ((1, 3, 7, 7), (4, 3, 3, 3), {"pads": [1, 1, 1, 1]}),
    ((2, 4, 9, 8), (6, 2, 3, 2), {"pads": [0, 1, 2, 1], "strides": [2, 1], "group": 2}),
    ((1, 4, 9, 9), (4, 1, 3, 3), {"pads": [2, 2, 2, 2], "dilations": [2, 2], "group": 4}),
    ((1, 2, 6, 7), (3, 2, 2, 2), {"auto_pad": "SAME_UPPER", "strides": [2, 2]}),
]


def _lite_attrs(attrs: dict, rank: int) -> dict:
    pad_mode = {"NOTSET": "PAD", "SAME_UPPER": "SAME_UPPER"}[attrs.get("auto_pad", "NOTSET")]
    return {"group": attrs.get("group", 1), "stride": attrs.get("strides", [1] * rank),
            "dilation": attrs.get("dilations", [1] * rank), "pad_mode": pad_mode,
            "pad_list": attrs.get("pads", [0] * 2 * rank)}


def _convolve(attrs: dict, rank: int):
    """Conv2DFusion's float64 kernel with ``attrs``' geometry."""
    return lambda x, w: conv(x, w, None, _lite_attrs(attrs, rank))


@pytest.mark.parametrize(("x_shape", "w_shape", "attrs"), CONVS)
@pytest.mark.parametrize("x_dtype", INT8)
@pytest.mark.parametrize("w_dtype", INT8)
@pytest.mark.parametrize("per_channel", [False, True])
def test_conv_matches_the_reference(x_shape, w_shape, attrs, x_dtype, w_dtype, per_channel):
    rng = np.random.default_rng(6)
    x, w = integers(rng, x_dtype, x_shape), integers(rng, w_dtype, w_shape)
    x_zp = _zero_point(rng, x_dtype, ())
    w_zp = _zero_point(rng, w_dtype, (w_shape[0],) if per_channel else ())
    (expected,) = run_reference("ConvInteger", {"x": x, "w": w, "xz": x_zp, "wz": w_zp}, **attrs)
    actual = conv_integer(x, w, x_zp, w_zp, _convolve(attrs, len(x_shape) - 2))
    assert actual.dtype == np.int32
    np.testing.assert_array_equal(actual, expected)


@pytest.mark.parametrize(("x_shape", "w_shape", "attrs"), [
    ((2, 3, 11), (4, 3, 3), {"pads": [2, 1], "strides": [2]}),
    ((1, 2, 5, 4, 6), (2, 1, 2, 3, 2), {"pads": [1, 0, 1, 0, 1, 1], "group": 2, "dilations": [1, 1, 2]}),
])
def test_conv_of_one_and_three_spatial_axes(x_shape, w_shape, attrs):
    rng = np.random.default_rng(7)
    x, w = integers(rng, np.uint8, x_shape), integers(rng, np.int8, w_shape)
    x_zp, w_zp = np.array(120, np.uint8), np.array(-2, np.int8)
    (expected,) = run_reference("ConvInteger", {"x": x, "w": w, "xz": x_zp, "wz": w_zp}, **attrs)
    np.testing.assert_array_equal(conv_integer(x, w, x_zp, w_zp, _convolve(attrs, len(x_shape) - 2)), expected)


def test_conv_without_zero_points():
    rng = np.random.default_rng(8)
    x, w = integers(rng, np.int8, (1, 2, 5, 5)), integers(rng, np.int8, (3, 2, 3, 3))
    (expected,) = run_reference("ConvInteger", {"x": x, "w": w})
    np.testing.assert_array_equal(conv_integer(x, w, None, None, _convolve({}, 2)), expected)
