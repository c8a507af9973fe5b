"""The compiled integer path of quantized convolutions and products (``lite.kernels.fast.int8``)
against the float64 reference path on fresh random data: bit-identical outputs."""

from __future__ import annotations

import numpy as np
import pytest

from lite.kernels import fast
from lite.kernels.fast.int8_plans import ConvPlan, ProductPlan
from lite.kernels.parallel import KernelThreads
from tests.support.quantized_kernels import params, random_q, run_arithmetic, run_both

pytestmark = pytest.mark.skipif(not fast.enabled(), reason="compiled kernels are off")
RNG = np.random.default_rng(8)


def _conv_attrs(kernel: int, stride: int = 1, pad: int = 0, group: int = 1, dilation: int = 1) -> dict:
    return {"kernel_size": (kernel, kernel), "stride": (stride, stride), "dilation": (dilation, dilation),
            "pad_list": (pad,) * 4, "group": group}


def _weight_params(channels: int, per_channel: bool, zero_point: bool, axis: int = 0):
    count = channels if per_channel else 1
    scale = RNG.uniform(0.002, 0.02, count)
    return params(scale, RNG.integers(-20, 21, count) if zero_point else np.zeros(count, np.int64), axis)


CONVS = {  # x shape, out channels, attrs
    "3x3_pad": ((1, 8, 9, 9), 16, _conv_attrs(3, pad=1)),
    "3x3_stride2_pad": ((2, 6, 11, 10), 12, _conv_attrs(3, stride=2, pad=1)),
    "1x1": ((1, 16, 5, 7), 24, _conv_attrs(1)),
    "1x1_whole_tiles": ((1, 15, 12, 12), 40, _conv_attrs(1)),
    "3x3_pad_whole_tiles": ((1, 6, 14, 20), 16, _conv_attrs(3, pad=1)),
    "1x1_stride2": ((1, 16, 8, 8), 20, _conv_attrs(1, stride=2)),
    "7x7_stride2": ((1, 3, 20, 20), 8, _conv_attrs(7, stride=2, pad=3)),
    "depthwise_3x3": ((1, 12, 8, 8), 12, _conv_attrs(3, pad=1, group=12)),
    "depthwise_5x5_stride2": ((1, 10, 13, 13), 10, _conv_attrs(5, stride=2, pad=2, group=10)),
    "grouped": ((1, 8, 7, 7), 8, _conv_attrs(3, pad=1, group=2)),
    "dilated": ((1, 5, 11, 11), 9, _conv_attrs(3, dilation=2, pad=2)),
}


@pytest.mark.parametrize("zero_point", [False, True], ids=["w_zp0", "w_zp"])
@pytest.mark.parametrize("per_channel", [False, True], ids=["tensor", "channel"])
@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
@pytest.mark.parametrize("case", sorted(CONVS))
def test_a_quantized_convolution_is_bit_identical(case, dtype, per_channel, zero_point):
    shape, out_c, attrs = CONVS[case]
    w = random_q(RNG, (out_c, shape[1] // attrs["group"], *attrs["kernel_size"]), np.int8)
    x = random_q(RNG, shape, dtype)
    bias = RNG.integers(-3000, 3000, out_c).astype(np.int32)
    x_zp = 131 if dtype == np.uint8 else -7
    actual, expected, kernel = run_both("Conv2DFusion", attrs, x, params(0.03, x_zp), w,
                                        _weight_params(out_c, per_channel, zero_point), bias, dtype,
                                        params(0.4, 3 if dtype == np.int8 else 125))
    assert kernel.compiled is not None or kernel.exact32
    np.testing.assert_array_equal(actual, expected)


@pytest.mark.parametrize("activation", ["RELU", "RELU6"])
@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_a_fused_activation_bounds_the_output(activation, dtype):
    x, w = random_q(RNG, (1, 8, 6, 6), dtype), random_q(RNG, (8, 8, 3, 3), np.int8)
    attrs = {**_conv_attrs(3, pad=1), "activation_type": activation}
    actual, expected, kernel = run_both("Conv2DFusion", attrs, x, params(0.05, 10), w, _weight_params(8, True, False),
                                        None, dtype, params(0.03, 0 if dtype == np.uint8 else -128))
    assert isinstance(kernel.compiled, ConvPlan)
    np.testing.assert_array_equal(actual, expected)
    low, high = kernel.bounds
    assert actual.min() == low and actual.max() == high
    assert high < np.iinfo(dtype).max or activation == "RELU"


PRODUCTS = {  # rows, K, N, transpose_b
    "one_row": (1, 37, 20, False),
    "one_row_transposed": (1, 37, 20, True),
    "rows_64": (64, 33, 70, False),
    "rows_64_transposed": (64, 50, 49, True),
    "batched_rows": ((3, 5), 16, 9, False),
}


@pytest.mark.parametrize("zero_point", [False, True], ids=["w_zp0", "w_zp"])
@pytest.mark.parametrize("per_channel", [False, True], ids=["tensor", "channel"])
@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
@pytest.mark.parametrize("case", sorted(PRODUCTS))
def test_a_quantized_product_is_bit_identical(case, dtype, per_channel, zero_point):
    rows, k, n, transpose_b = PRODUCTS[case]
    x = random_q(RNG, (*np.atleast_1d(rows), k), dtype)
    w = random_q(RNG, (n, k) if transpose_b else (k, n), np.int8)
    w_params = _weight_params(n, per_channel, zero_point, axis=0 if transpose_b else 1)
    attrs = {"transpose_b": transpose_b, "activation_type": "RELU6"}
    actual, expected, kernel = run_both("MatMulFusion", attrs, x, params(0.05, 100 if dtype == np.uint8 else 5), w,
                                        w_params, RNG.integers(-9000, 9000, n).astype(np.int32), dtype,
                                        params(0.3, 20))
    assert isinstance(kernel.compiled, ProductPlan)
    np.testing.assert_array_equal(actual, expected)


def test_the_worst_case_sum_neither_overflows_nor_saturates():
    """All terms 255 * -255 (uint8 x of 255 with zero point 0, int8 w of -128 with zero point 127)
    over K = 4097: -266 million, far outside int16, exact in int32."""
    k = 4097
    x = np.full((2, k), 255, np.uint8)
    w = np.full((k, 3), -128, np.int8)
    w_params = params([1e-7, 1e-7, 1e-7], [127, 127, 127], axis=1)
    actual, expected, kernel = run_both("MatMulFusion", {}, x, params(1.0, 0), w, w_params, None, np.int8,
                                        params(1.0, 0))
    assert isinstance(kernel.compiled, ProductPlan)
    np.testing.assert_array_equal(actual, expected)
    assert (expected == -27).all()  # -267,911,400 * 1e-7, rounded


def test_the_worst_case_convolution_sum_is_exact():
    x = np.full((1, 512, 3, 3), 255, np.uint8)
    w = np.full((4, 512, 3, 3), -128, np.int8)
    out_params = params(5000.0, 0)  # the sum (-300 million) lands inside int8 after requantization
    actual, expected, kernel = run_both("Conv2DFusion", _conv_attrs(3, pad=1), x, params(1.0, 0), w,
                                        params(np.full(4, 0.001), np.full(4, 127)), None, np.int8, out_params)
    assert isinstance(kernel.compiled, ConvPlan)
    np.testing.assert_array_equal(actual, expected)
    assert -128 < expected.min() < 0


@pytest.mark.parametrize("dynamic", [False, True], ids=["crew", "python_threads"])
def test_threads_split_the_work_with_the_same_result(dynamic):
    threads = KernelThreads(2)
    threads.dynamic = dynamic
    x, w = random_q(RNG, (1, 8, 20, 20), np.uint8), random_q(RNG, (32, 8, 3, 3), np.int8)
    actual, expected, _ = run_both("Conv2DFusion", _conv_attrs(3, pad=1), x, params(0.03, 128), w,
                                   _weight_params(32, True, True), None, np.uint8, params(0.5, 128), threads)
    np.testing.assert_array_equal(actual, expected)


ARITHMETIC = {"AddFusion": np.add, "SubFusion": np.subtract, "MulFusion": np.multiply}


@pytest.mark.parametrize("dtypes", [(np.int8, np.int8, np.int8), (np.uint8, np.int8, np.uint8)], ids=["int8", "mixed"])
@pytest.mark.parametrize("op", sorted(ARITHMETIC))
def test_compiled_quantized_arithmetic_is_bit_identical(op, dtypes):
    """The compiled Add/Sub/Mul against the numpy path (``dequantize``, op, ``quantize`` in float32),
    on values whose quotients land on rounding ties too."""
    a, b = random_q(RNG, (2, 5, 7, 9), dtypes[0]), random_q(RNG, (2, 5, 7, 9), dtypes[1])
    scales = {"AddFusion": (0.5, 0.25, 0.5), "SubFusion": (0.031, 0.017, 0.043), "MulFusion": (0.1, 0.07, 0.2)}[op]
    zero_points = (3, -5, 1) if dtypes[2] == np.int8 else (128, -5, 120)
    actual, expected, kernel = run_arithmetic(op, a, b, [params(s, z) for s, z in zip(scales, zero_points,
                                                                                          strict=True)], dtypes[2])
    assert kernel.compiled is not None
    np.testing.assert_array_equal(actual, expected)
