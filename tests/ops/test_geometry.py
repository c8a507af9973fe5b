"""lite.ops.geometry against the ONNX reference evaluator: pads, output sizes, divisors."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from lite.ops.geometry import (
    ceil_rounds,
    effective,
    output_size,
    per_axis,
    split_total,
    transposed_extent,
    transposed_pads,
    window_counts,
    window_pads,
)
from tests.support.op_reference import run_ort, run_reference

RNG = np.random.default_rng(7)
AUTO_PADS = ["SAME_UPPER", "SAME_LOWER", "VALID"]


def image(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def sizes(x: np.ndarray, w: np.ndarray, strides, dilations, begins, ends, ceil=False) -> tuple[int, ...]:
    return tuple(output_size(*args, ceil=ceil) for args in zip(x.shape[2:], w.shape[2:], strides, dilations,
                                                                 begins, ends, strict=True))


def test_per_axis_and_effective():
    assert per_axis(None) == per_axis([]) == (1, 1) and per_axis([], rank=3) == (1, 1, 1)
    assert per_axis([2, 3.0]) == (2, 3)
    assert [effective(k, d) for k, d in [(1, 4), (3, 1), (3, 2), (5, 3)]] == [1, 3, 5, 13]


@pytest.mark.parametrize("total", range(6))
def test_split_total_puts_the_odd_unit_where_onnx_does(total):
    upper, lower = split_total(total, "SAME_UPPER"), split_total(total, "SAME_LOWER")
    assert sum(upper) == sum(lower) == total
    assert upper == (total // 2, total - total // 2) and lower == upper[::-1]


@pytest.mark.parametrize("auto_pad", AUTO_PADS)
@pytest.mark.parametrize("size, kernel, stride, dilation", [
    ((7, 8), (3, 3), (2, 2), (1, 1)), ((9, 6), (3, 2), (3, 1), (2, 1)), ((5, 5), (1, 4), (1, 2), (1, 1)),
    ((6, 11), (5, 3), (2, 3), (1, 2))])
def test_conv_pads_and_sizes_match_auto_pad(auto_pad, size, kernel, stride, dilation):
    x, w = image(1, 2, *size), image(3, 2, *kernel)
    [expected] = run_reference("Conv", {"x": x, "w": w}, strides=stride, dilations=dilation, auto_pad=auto_pad)
    begins, ends = window_pads(auto_pad, [], size, kernel, stride, dilation)
    [explicit] = run_reference("Conv", {"x": x, "w": w}, strides=stride, dilations=dilation, pads=[*begins, *ends])
    np.testing.assert_allclose(explicit, expected, rtol=1e-5, atol=1e-6)
    assert expected.shape[2:] == sizes(x, w, stride, dilation, begins, ends)


def test_explicit_pads_pass_through():
    assert window_pads("PAD", [1, 2, 3, 4], (9, 9), (3, 3), (1, 1), (1, 1)) == ((1, 2), (3, 4))
    assert window_pads("PAD", [], (9, 9), (3, 3), (1, 1), (1, 1)) == ((0, 0), (0, 0))
    assert window_pads("VALID", [1, 2, 3, 4], (9, 9), (3, 3), (1, 1), (1, 1)) == ((0, 0), (0, 0))


@pytest.mark.parametrize("size, kernel, stride, pads", [
    (7, 3, 2, (0, 0)), (8, 3, 3, (1, 1)), (5, 2, 2, (0, 1)), (10, 3, 3, (1, 0)), (6, 4, 3, (2, 2))])
@pytest.mark.parametrize("ceil", [False, True])
def test_pool_output_sizes_follow_ceil_mode(size, kernel, stride, pads, ceil):
    x = image(1, 1, size, size + 1)
    [y] = run_ort("MaxPool", {"x": x}, kernel_shape=[kernel, kernel], strides=[stride, stride],
                        pads=[pads[0], pads[0], pads[1], pads[1]], ceil_mode=int(ceil))
    expected = tuple(output_size(n, kernel, stride, 1, *pads, ceil=ceil) for n in (size, size + 1))
    assert y.shape[2:] == expected


@pytest.mark.parametrize("auto_pad", AUTO_PADS)
def test_same_pads_ignore_ceil_mode(auto_pad):
    x = image(1, 1, 7, 10)
    begins, ends = window_pads(auto_pad, [], (7, 10), (3, 3), (2, 3), (1, 1))
    ceil = ceil_rounds("CEIL", auto_pad)
    [y] = run_ort("MaxPool", {"x": x}, kernel_shape=[3, 3], strides=[2, 3], auto_pad=auto_pad, ceil_mode=1)
    assert y.shape[2:] == tuple(output_size(n, 3, s, 1, b, e, ceil=ceil)
                                for n, s, b, e in zip((7, 10), (2, 3), begins, ends, strict=True))
    assert ceil == (auto_pad == "VALID") and ceil_rounds("CEIL", "PAD") and not ceil_rounds("FLOOR", "PAD")


@pytest.mark.parametrize("auto_pad", ["SAME_UPPER", "SAME_LOWER"])
@pytest.mark.parametrize("size, kernel, stride, dilation, output_padding", [
    ((4, 5), (3, 3), (2, 2), (1, 1), (0, 0)), ((3, 6), (3, 2), (3, 2), (2, 1), (1, 1)),
    ((5, 5), (1, 4), (1, 3), (1, 1), (0, 2))])
def test_transposed_same_pads_make_the_output_input_times_stride(auto_pad, size, kernel, stride, dilation,
                                                                 output_padding):
    x, w = image(1, 2, *size), image(2, 3, *kernel)
    attrs = {"strides": stride, "dilations": dilation, "output_padding": output_padding}
    [expected] = run_reference("ConvTranspose", {"x": x, "w": w}, auto_pad=auto_pad, **attrs)
    begins, ends = transposed_pads(auto_pad, [], size, kernel, stride, dilation, output_padding)
    [explicit] = run_reference("ConvTranspose", {"x": x, "w": w}, pads=[*begins, *ends], **attrs)
    np.testing.assert_allclose(explicit, expected, rtol=1e-5, atol=1e-6)
    extents = [transposed_extent(*args) for args in zip(size, kernel, stride, dilation, output_padding, strict=True)]
    out = tuple(e - b - f for e, b, f in zip(extents, begins, ends, strict=True))
    assert expected.shape[2:] == out == tuple(n * s for n, s in zip(size, stride, strict=True))


def test_transposed_explicit_pads_crop_the_extent():
    x, w = image(1, 2, 4, 3), image(2, 1, 3, 3)
    begins, ends = transposed_pads("PAD", [1, 0, 2, 1], (4, 3), (3, 3), (2, 2), (1, 1), (0, 0))
    [y] = run_reference("ConvTranspose", {"x": x, "w": w}, strides=[2, 2], pads=[1, 0, 2, 1])
    assert (begins, ends) == ((1, 0), (2, 1))
    assert y.shape[2:] == tuple(transposed_extent(n, 3, 2, 1, 0) - b - e
                                for n, b, e in zip((4, 3), begins, ends, strict=True))


@pytest.mark.parametrize("count_include_pad", [False, True])
@pytest.mark.parametrize("pads, ceil", [((0, 0, 0, 0), False), ((1, 2, 1, 0), False), ((1, 1, 2, 2), True),
                                        ((0, 1, 0, 1), True)])
def test_window_counts_are_average_pool_divisors(count_include_pad, pads, ceil):
    x, kernel, strides = image(1, 2, 7, 9), (3, 4), (2, 3)
    [y] = run_ort("AveragePool", {"x": x}, kernel_shape=kernel, strides=strides, pads=pads,
                        ceil_mode=int(ceil), count_include_pad=int(count_include_pad))
    counts = [window_counts(x.shape[2 + a], y.shape[2 + a], kernel[a], strides[a], pads[a], pads[a + 2],
                            count_include_pad) for a in (0, 1)]
    padded = np.pad(x, [(0, 0), (0, 0), (pads[0], pads[2] + kernel[0]), (pads[1], pads[3] + kernel[1])])
    sums = np.zeros_like(y)
    for i, j in itertools.product(range(y.shape[2]), range(y.shape[3])):
        top, left = i * strides[0], j * strides[1]
        sums[..., i, j] = padded[..., top:top + kernel[0], left:left + kernel[1]].sum(axis=(2, 3))
    np.testing.assert_allclose(sums / np.multiply.outer(*counts), y, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("count_include_pad", [False, True])
@pytest.mark.parametrize("kernel, stride, dilation, pads, ceil", [
    (3, 2, 2, (1, 1), False), (2, 3, 3, (0, 1), True), (3, 1, 2, (2, 0), True), (3, 2, 1, (1, 2), True)])
def test_dilated_window_counts_are_average_pool_19_divisors(count_include_pad, kernel, stride, dilation, pads, ceil):
    """The window sums (over zero pads) divided by the divisors are onnxruntime's AveragePool-19."""
    size = 11
    x = image(1, 1, size)
    attrs = {"kernel_shape": [kernel], "strides": [stride], "dilations": [dilation], "pads": list(pads),
             "ceil_mode": int(ceil)}
    [y] = run_ort("AveragePool", {"x": x}, opset=19, count_include_pad=int(count_include_pad), **attrs)
    counts = window_counts(size, y.shape[2], kernel, stride, *pads, count_include_pad, dilation)
    padded = np.pad(x[0, 0], (pads[0], pads[1] + kernel * dilation))
    sums = [padded[i * stride:i * stride + (kernel - 1) * dilation + 1:dilation].sum() for i in range(y.shape[2])]
    np.testing.assert_allclose(np.array(sums) / counts, y[0, 0], rtol=1e-5, atol=1e-6)
