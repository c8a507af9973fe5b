"""The compiled integer path of quantized convolutions and products (``lite.kernels.fast.int8``)
against the float64 reference path on fresh random data: bit-identical outputs."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

from lite.kernels import fast
from lite.kernels.fast import int8_quads, int8_winograd
from lite.kernels.fast.int8_plans import (
    ActivationQuadPlan,
    ConvPlan,
    DepthwiseInt8Plan,
    PointwisePlan,
    ProductPlan,
    WinogradPlan,
)
from lite.kernels.parallel import KernelThreads
from tests.support.quantized_kernels import (
    build,
    layer_tensors,
    params,
    random_q,
    run_arithmetic,
    run_both,
    run_quantized,
)

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
    "depthwise_3x3_stride2": ((2, 6, 14, 15), 6, _conv_attrs(3, stride=2, pad=1, group=6)),
    "depthwise_5x5_flat": ((1, 4, 9, 11), 4, _conv_attrs(5, pad=2, group=4)),
    "depthwise_3x3_unpadded": ((1, 5, 9, 9), 5, _conv_attrs(3, group=5)),
    "depthwise_3x3_7x7_plane": ((2, 20, 7, 7), 20, _conv_attrs(3, pad=1, group=20)),
    "depthwise_multiplier_2": ((1, 3, 8, 8), 6, _conv_attrs(3, pad=1, group=3)),
    "depthwise_dilated_stride3": ((1, 4, 17, 17), 4, _conv_attrs(3, stride=3, pad=2, group=4, dilation=2)),
    "depthwise_3x3_14x14_plane": ((1, 24, 14, 14), 24, _conv_attrs(3, pad=1, group=24)),
    "depthwise_3x3_stride2_block_tails": ((2, 40, 23, 21), 40, _conv_attrs(3, stride=2, pad=1, group=40)),
    "depthwise_3x3_7x7_five_blocks": ((1, 80, 7, 7), 80, _conv_attrs(3, pad=1, group=80)),
    "depthwise_3x3_stride2_block_a_pass": ((1, 32, 48, 48), 32, _conv_attrs(3, stride=2, pad=1, group=32)),
    "depthwise_3x3_stride2_large_plane": ((1, 16, 60, 60), 16, _conv_attrs(3, stride=2, pad=1, group=16)),
    "1x1_7x7_plane": ((1, 20, 7, 7), 24, _conv_attrs(1)),
    "1x1_two_vector_tail": ((1, 17, 8, 10), 9, _conv_attrs(1)),
    "grouped": ((1, 8, 7, 7), 8, _conv_attrs(3, pad=1, group=2)),
    "dilated": ((1, 5, 11, 11), 9, _conv_attrs(3, dilation=2, pad=2)),
    "16x16_stride16": ((1, 3, 32, 32), 8, _conv_attrs(16, stride=16)),  # NOTE: a ViT's patches: 256 stride phases
}


# the depthwise cases on 16-channel blocks (int8_blocked_depthwise: stride 2 or more, or at most
# 64 output positions, from at most 56 x 56 input positions); the others plane by plane
BLOCKED_DEPTHWISE = {"depthwise_3x3", "depthwise_5x5_stride2", "depthwise_3x3_stride2", "depthwise_3x3_unpadded",
                     "depthwise_3x3_7x7_plane", "depthwise_dilated_stride3", "depthwise_3x3_stride2_block_tails",
                     "depthwise_3x3_7x7_five_blocks", "depthwise_3x3_stride2_block_a_pass"}


def _expected_plan(case: str) -> tuple[type, ...]:
    """The plans a case may run on: depthwise; pointwise (1x1, stride 1, unpadded, one group) on
    int16 pairs, or the phases' plan where byte quads take it (AVX-512 VNNI); else the phases' plan."""
    if case.startswith("depthwise"):
        return (DepthwiseInt8Plan,)
    _, _, attrs = CONVS[case]
    if attrs["kernel_size"] == (1, 1) and attrs["stride"] == (1, 1) and attrs["group"] == 1:
        return (PointwisePlan, ConvPlan) if int8_quads.available() else (PointwisePlan,)
    return (ConvPlan,)


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
    assert isinstance(kernel.compiled, _expected_plan(case))
    if case.startswith("depthwise"):
        assert kernel.compiled.blocked == (case in BLOCKED_DEPTHWISE)
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


@pytest.fixture
def pairs_only(monkeypatch):
    """The int16 pairs alone (no byte quads), as on machines without VNNI: integer Winograd may run."""
    monkeypatch.setattr(int8_quads, "available", lambda: False)


WINOGRAD = {  # x shape, out channels, pad_list: planes of 24 x 24 and more, large enough for either tile width
    "square": ((1, 16, 24, 24), 16, (1, 1, 1, 1)),
    "odd_channels_and_plane": ((2, 33, 26, 23), 20, (1, 1, 1, 1)),
    "pads_on_some_sides": ((1, 20, 25, 27), 17, (0, 2, 1, 0)),
    "unpadded": ((1, 24, 26, 28), 40, (0, 0, 0, 0)),
    "pads_of_two": ((1, 16, 22, 21), 24, (2, 2, 2, 2)),
}


def _winograd_attrs(pads: tuple[int, ...], activation: str = "NO_ACTIVATION") -> dict:
    return {**_conv_attrs(3), "pad_list": pads, "activation_type": activation}


@pytest.mark.parametrize("zero_point", [False, True], ids=["w_zp0", "w_zp"])
@pytest.mark.parametrize("per_channel", [False, True], ids=["tensor", "channel"])
@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
@pytest.mark.parametrize("case", sorted(WINOGRAD))
def test_integer_winograd_is_bit_identical(pairs_only, case, dtype, per_channel, zero_point):
    shape, out_c, pads = WINOGRAD[case]
    x, w = random_q(RNG, shape, dtype), random_q(RNG, (out_c, shape[1], 3, 3), np.int8)
    bias = RNG.integers(-3000, 3000, out_c).astype(np.int32)
    actual, expected, kernel = run_both("Conv2DFusion", _winograd_attrs(pads), x,
                                        params(0.03, 131 if dtype == np.uint8 else -7), w,
                                        _weight_params(out_c, per_channel, zero_point), bias, dtype,
                                        params(0.4, 3 if dtype == np.int8 else 125))
    assert isinstance(kernel.compiled, WinogradPlan)
    np.testing.assert_array_equal(actual, expected)


@pytest.mark.parametrize("activation", ["RELU", "RELU6"])
@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_integer_winograd_applies_a_fused_activations_bounds(pairs_only, activation, dtype):
    x, w = random_q(RNG, (1, 16, 24, 24), dtype), random_q(RNG, (16, 16, 3, 3), np.int8)
    actual, expected, kernel = run_both("Conv2DFusion", _winograd_attrs((1, 1, 1, 1), activation), x,
                                        params(0.05, 10), w, _weight_params(16, True, False), None, dtype,
                                        params(0.03, 0 if dtype == np.uint8 else -128))
    assert isinstance(kernel.compiled, WinogradPlan)
    np.testing.assert_array_equal(actual, expected)
    assert (actual.min(), actual.max()) == kernel.bounds


def test_integer_winograd_is_exact_at_its_bound(pairs_only):
    """Every offset at its extreme (uint8 x of 255 with zero point 0; weight offsets -255) over the
    most channels whose four-fold sums fit int32: the sums (hundreds of millions, past int32 four
    times over and wrapping in the transforms) are the direct kernel's."""
    channels = 2
    while int8_winograd.exact(channels + 2, 255, 255):
        channels += 2
    x, w = np.full((1, channels, 24, 24), 255, np.uint8), np.full((16, channels, 3, 3), -128, np.int8)
    actual, expected, kernel = run_both("Conv2DFusion", _winograd_attrs((1, 1, 1, 1)), x, params(1.0, 0), w,
                                        params(np.full(16, 0.001), np.full(16, 127)), None, np.int8,
                                        params(5000.0, 0))
    assert isinstance(kernel.compiled, WinogradPlan) and channels >= 900
    np.testing.assert_array_equal(actual, expected)
    assert expected.min() < -100


@pytest.mark.parametrize(("shape", "pads", "reason"), [
    ((1, 16, 7, 7), (1, 1, 1, 1), "a 7 x 7 plane: too few multiplies saved"),
    ((1, 8, 24, 24), (1, 1, 1, 1), "too few channels"),
])
def test_integer_winograd_leaves_small_layers_to_the_direct_kernel(pairs_only, shape, pads, reason):
    x, w = random_q(RNG, shape, np.uint8), random_q(RNG, (16, shape[1], 3, 3), np.int8)
    actual, expected, kernel = run_both("Conv2DFusion", _winograd_attrs(pads), x, params(0.03, 128), w,
                                        _weight_params(16, True, False), None, np.uint8, params(0.4, 125))
    assert isinstance(kernel.compiled, ConvPlan), reason
    np.testing.assert_array_equal(actual, expected)


def test_integer_winograd_leaves_sums_past_its_bound_to_the_direct_kernel(pairs_only):
    channels = 2
    while int8_winograd.exact(channels, 255, 255):
        channels += 2
    x, w = np.full((1, channels, 24, 24), 255, np.uint8), np.full((16, channels, 3, 3), -128, np.int8)
    actual, expected, kernel = run_both("Conv2DFusion", _winograd_attrs((1, 1, 1, 1)), x, params(1.0, 0), w,
                                        params(np.full(16, 0.001), np.full(16, 127)), None, np.int8,
                                        params(9000.0, 0))
    assert isinstance(kernel.compiled, ConvPlan)
    np.testing.assert_array_equal(actual, expected)


PRODUCTS = {  # rows, K, N, transpose_b
    "one_row": (1, 37, 20, False),
    "one_row_transposed": (1, 37, 20, True),
    "rows_64": (64, 33, 70, False),
    "rows_64_transposed": (64, 50, 49, True),
    "batched_rows": ((3, 5), 16, 9, False),
    "rows_11_wide": (11, 40, 130, False),
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


def test_the_worst_case_pointwise_sum_is_exact():
    """A 1x1 layer on int16 pairs (weight offsets past int8: no quads) at its extremes: 4097 terms
    of 255 * -255, an odd channel count (the last pair half empty)."""
    x = np.full((1, 4097, 3, 7), 255, np.uint8)
    w = np.full((7, 4097, 1, 1), -128, np.int8)
    actual, expected, kernel = run_both("Conv2DFusion", _conv_attrs(1), x, params(1.0, 0), w,
                                        params(np.full(7, 0.001), np.full(7, 127)), None, np.int8, params(5000.0, 0))
    assert isinstance(kernel.compiled, PointwisePlan)
    np.testing.assert_array_equal(actual, expected)
    assert expected.min() < -20


@pytest.mark.skipif(not int8_quads.available(), reason="byte quads need AVX-512 VNNI")
@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_byte_quads_run_where_every_weight_offset_fits_int8(dtype):
    """The quads (vpdpbusd) take the layer when w - w_zero_point fits int8, the pairs otherwise;
    both bit-identical, the pads (offset zero) and a channel count that is no multiple of four too."""
    x = random_q(RNG, (1, 7, 9, 10), dtype)
    for zero_point, quads in ((0, True), (60, False)):
        w = RNG.integers(-128, 128, (12, 7, 3, 3)).astype(np.int8)
        w_params = params(np.full(12, 0.01), np.full(12, zero_point))
        actual, expected, kernel = run_both("Conv2DFusion", _conv_attrs(3, stride=2, pad=1), x,
                                            params(0.05, 100 if dtype == np.uint8 else -100), w, w_params,
                                            RNG.integers(-5000, 5000, 12).astype(np.int32), dtype, params(0.5, 2))
        assert (kernel.compiled.quad_bias is not None) == quads
        np.testing.assert_array_equal(actual, expected)


@pytest.mark.skipif(not int8_quads.available(), reason="byte quads need AVX-512 VNNI")
def test_byte_quads_sum_the_worst_case_exactly():
    """Every term 255 * -128 over 4608 terms (uint8 255, zero point 0; int8 -128): -150 million,
    the lanes' unsigned-by-signed products at their extremes."""
    x, w = np.full((1, 512, 3, 3), 255, np.uint8), np.full((4, 512, 3, 3), -128, np.int8)
    actual, expected, kernel = run_both("Conv2DFusion", _conv_attrs(3, pad=1), x, params(1.0, 0), w,
                                        params(np.full(4, 0.001), np.zeros(4)), None, np.int8, params(5000.0, 0))
    assert kernel.compiled.quad_bias is not None
    np.testing.assert_array_equal(actual, expected)
    assert expected.min() < -20


THREADED = {  # x shape, w shape, attrs (None: a product), w zero points (0: the quads where they run)
    "conv": ((1, 8, 20, 20), (32, 8, 3, 3), _conv_attrs(3, pad=1), True),
    "conv_shared_fill": ((1, 8, 64, 66), (16, 8, 3, 3), _conv_attrs(3, stride=2, pad=1), True),
    "conv_quads": ((1, 8, 20, 20), (32, 8, 3, 3), _conv_attrs(3, pad=1), False),
    "conv_quads_shared_fill": ((1, 9, 64, 60), (16, 9, 1, 1), _conv_attrs(1), False),
    "pointwise": ((2, 17, 30, 31), (40, 17, 1, 1), _conv_attrs(1), True),
    "depthwise": ((1, 24, 15, 15), (24, 1, 3, 3), _conv_attrs(3, pad=1, group=24), True),
    "depthwise_stride2": ((2, 16, 15, 15), (16, 1, 3, 3), _conv_attrs(3, stride=2, pad=1, group=16), True),
    "depthwise_stride2_blocks": ((1, 72, 16, 17), (72, 1, 3, 3), _conv_attrs(3, stride=2, pad=1, group=72), True),
    "product": ((5, 70), (70, 300), None, True),
    "product_quads": ((5, 70), (70, 300), None, False),
    "winograd": ((2, 24, 24, 26), (32, 24, 3, 3), _conv_attrs(3, pad=1), True),
}


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
@pytest.mark.parametrize("case", sorted(THREADED))
@pytest.mark.parametrize("dynamic", [False, True], ids=["crew", "python_threads"])
def test_threads_split_the_work_with_the_same_result(monkeypatch, dynamic, case, dtype):
    """Two threads (the crew's jobs, or Python threads) split the input copy, the convolution's
    items, the depthwise planes, the product's panels and integer Winograd's three steps (on the
    pairs): the output is the one thread's."""
    if case == "winograd":
        monkeypatch.setattr(int8_quads, "available", lambda: False)
    threads = KernelThreads(2)
    threads.dynamic = dynamic
    x_shape, w_shape, attrs, zero_points = THREADED[case]
    x, w = random_q(RNG, x_shape, dtype), random_q(RNG, w_shape, np.int8)
    op, channels = ("MatMulFusion", w_shape[1]) if attrs is None else ("Conv2DFusion", w_shape[0])
    axis = 1 if attrs is None else 0
    zero = 128 if dtype == np.uint8 else 3
    actual, expected, kernel = run_both(op, attrs or {}, x, params(0.03, zero), w,
                                        _weight_params(channels, True, zero_points, axis), None, dtype,
                                        params(0.5, zero), threads)
    assert kernel.compiled is not None and (case == "winograd") == isinstance(kernel.compiled, WinogradPlan)
    np.testing.assert_array_equal(actual, expected)


ARITHMETIC = {"AddFusion": np.add, "SubFusion": np.subtract, "MulFusion": np.multiply}


@pytest.mark.parametrize("dtypes", [(np.int8, np.int8, np.int8), (np.uint8, np.int8, np.uint8)], ids=["int8", "mixed"])
@pytest.mark.parametrize("op", sorted(ARITHMETIC))
def test_compiled_quantized_arithmetic_is_bit_identical(op, dtypes):
    """The compiled Add/Sub/Mul against the numpy path (``lite.ops.quantized_arithmetic``), on
    values whose quotients land on rounding ties too."""
    a, b = random_q(RNG, (2, 5, 7, 9), dtypes[0]), random_q(RNG, (2, 5, 7, 9), dtypes[1])
    scales = {"AddFusion": (0.5, 0.25, 0.5), "SubFusion": (0.031, 0.017, 0.043), "MulFusion": (0.1, 0.07, 0.2)}[op]
    zero_points = (3, -5, 1) if dtypes[2] == np.int8 else (128, -5, 120)
    actual, expected, kernel = run_arithmetic(op, a, b, [params(s, z) for s, z in zip(scales, zero_points,
                                                                                          strict=True)], dtypes[2])
    assert kernel.compiled is not None
    np.testing.assert_array_equal(actual, expected)


@pytest.mark.parametrize("dtype", [np.int8, np.uint8])
@pytest.mark.parametrize("op", ["AddFusion", "MulFusion"])
def test_compiled_add_and_mul_round_as_the_numpy_path_at_any_scales(op, dtype):
    """Random scales over three decades and any zero points, 40 draws of 4096 values: results
    near a tie round as ``lite.ops.quantized_arithmetic``'s (Add's fused multiply-adds, Mul's
    one ratio) do."""
    rng = np.random.default_rng(44)
    low, high = np.iinfo(dtype).min, np.iinfo(dtype).max
    for _ in range(40):
        a, b = (rng.integers(low, high + 1, (1, 4096)).astype(dtype) for _ in range(2))
        scales = 10 ** rng.uniform(-3, 0, 3)
        if op == "MulFusion":  # products spread over the output's range, few saturated
            scales[2] = scales[0] * scales[1] * 256 * rng.uniform(0.5, 2)
        quant = [params(s, int(z)) for s, z in zip(scales, rng.integers(low, high + 1, 3), strict=True)]
        actual, expected, kernel = run_arithmetic(op, a, b, quant, dtype)
        assert kernel.compiled is not None
        np.testing.assert_array_equal(actual, expected)


@pytest.mark.parametrize("dtypes", [(np.int8, np.int8, np.int8), (np.uint8, np.uint8, np.uint8),
                                    (np.uint8, np.int8, np.uint8)], ids=["int8", "uint8", "mixed"])
@pytest.mark.parametrize("dynamic", [False, True], ids=["crew", "python_threads"])
def test_two_threads_share_a_large_arithmetic_op(dynamic, dtypes):
    """An Add larger than a few chunks (``int8_elementwise.CHUNK``, the last one short) split among
    two threads (the crew's jobs where the three types are one, else the caller's loop)."""
    threads = KernelThreads(2)
    threads.dynamic = dynamic
    a, b = random_q(RNG, (1, 24, 57, 61), dtypes[0]), random_q(RNG, (1, 24, 57, 61), dtypes[1])
    zero_points = (3, -5, 1) if dtypes[2] == np.int8 else (128, 120, 120)
    quant = [params(s, z) for s, z in zip((0.031, 0.017, 0.043), zero_points, strict=True)]
    actual, expected, kernel = run_arithmetic("AddFusion", a, b, quant, dtypes[2], threads)
    assert kernel.compiled is not None
    np.testing.assert_array_equal(actual, expected)


@pytest.mark.parametrize("dtypes", [(np.int8, np.int8), (np.uint8, np.uint8), (np.uint8, np.int8)],
                         ids=["int8", "uint8", "mixed"])
@pytest.mark.parametrize("shape", [(2, 5, 7, 7), (1, 3, 1, 1), (1, 4, 300), (1, 2, 64, 64)])
def test_compiled_global_average_pool_is_bit_identical(shape, dtypes):
    """The compiled global average pool against the float64 reference (``QuantizedOp``), on
    scales whose means land on rounding ties too, and planes of one position to 4,096."""
    from lite.kernels.quantized_elementwise import QuantizedAverage, _GlobalAverage

    x = random_q(RNG, shape, dtypes[0])
    for scales in ((0.5, 0.25), (0.031, 0.043), (0.02, 0.0031)):
        zero_points = [3 if d == np.int8 else 128 for d in dtypes]
        quant = [params(s, z) for s, z in zip(scales, zero_points, strict=True)]
        out_shape = (*shape[:2], *(1 for _ in shape[2:]))
        actual, expected, kernel = run_quantized(QuantizedAverage, "AvgPoolFusion", {"is_global": True}, [x], quant,
                                                 out_shape, dtypes[1])
        assert isinstance(kernel, _GlobalAverage)
        np.testing.assert_array_equal(actual, expected)


def test_compiled_global_average_pool_agrees_with_onnx_reference():
    """The same pool against ONNX's reference evaluator on the DequantizeLinear -> GlobalAveragePool
    -> QuantizeLinear group: within one output step (its float32 sums round)."""
    from onnx import TensorProto, helper, numpy_helper
    from onnx.reference import ReferenceEvaluator

    from lite.kernels.quantized_elementwise import QuantizedAverage

    x = random_q(RNG, (1, 64, 7, 7), np.uint8)
    inits = [numpy_helper.from_array(np.float32(v), n) for v, n in ((0.031, "xs"), (0.017, "ys"))]
    inits += [numpy_helper.from_array(np.uint8(v), n) for v, n in ((128, "xz"), (120, "yz"))]
    graph = helper.make_graph([helper.make_node("DequantizeLinear", ["x", "xs", "xz"], ["d"]),
                               helper.make_node("GlobalAveragePool", ["d"], ["p"]),
                               helper.make_node("QuantizeLinear", ["p", "ys", "yz"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.UINT8, x.shape)],
                              [helper.make_tensor_value_info("y", TensorProto.UINT8, None)], inits)
    expected = ReferenceEvaluator(helper.make_model(graph)).run(None, {"x": x})[0]
    actual, _, _ = run_quantized(QuantizedAverage, "AvgPoolFusion", {"is_global": True}, [x],
                                 [params(0.031, 128), params(0.017, 120)], (1, 64, 1, 1), np.uint8)
    assert np.abs(actual.astype(int) - expected.astype(int)).max() <= 1


QUAD_PRODUCTS = {  # rows, K, N
    "rows_and_columns_past_the_tiles": (13, 70, 100),
    "one_row": (1, 33, 50),
    "whole_tiles": (16, 64, 96),
}


@pytest.mark.skipif(not int8_quads.available(), reason="byte quads need AVX-512 VNNI")
@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
@pytest.mark.parametrize("case", sorted(QUAD_PRODUCTS))
def test_byte_quads_run_a_product_where_every_weight_offset_fits_int8(case, dtype):
    """A product's rows broadcast as signed bytes and its weight as unsigned ones (w - zero point +
    128): bit-identical, rows and columns past the register tile and K no multiple of four too;
    a weight offset past int8 leaves the product to the pairs."""
    rows, k, n = QUAD_PRODUCTS[case]
    x = random_q(RNG, (rows, k), dtype)
    for zero_point, quads in ((0, True), (60, False)):
        w = RNG.integers(-128, 128, (k, n)).astype(np.int8)
        w_params = params(RNG.uniform(0.002, 0.02, n), np.full(n, zero_point), axis=1)
        actual, expected, kernel = run_both("MatMulFusion", {}, x, params(0.05, 100 if dtype == np.uint8 else -100),
                                            w, w_params, RNG.integers(-5000, 5000, n).astype(np.int32), dtype,
                                            params(0.5, 2))
        assert isinstance(kernel.compiled, ProductPlan) and (kernel.compiled.quad_bias is not None) == quads
        np.testing.assert_array_equal(actual, expected)


@pytest.mark.skipif(not int8_quads.available(), reason="byte quads need AVX-512 VNNI")
@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_byte_quads_sum_a_products_worst_case_exactly(dtype):
    """Every term at the offsets' extremes (x - zero point of 255 or -255, w of -128 or 127) over
    4097 terms: -133 million, the rows' and columns' corrections at their largest."""
    x = np.full((9, 4097), 255 if dtype == np.uint8 else -128, dtype)
    x_params = params(1.0, 0 if dtype == np.uint8 else 127)
    for value in (-128, 127):
        w = np.full((4097, 5), value, np.int8)
        actual, expected, kernel = run_both("MatMulFusion", {}, x, x_params, w, params(np.full(5, 0.001), np.zeros(5),
                                                                                       axis=1),
                                            None, np.int8, params(5000.0, 0))
        assert kernel.compiled.quad_bias is not None
        np.testing.assert_array_equal(actual, expected)
        assert np.abs(expected).min() > 20


ACTIVATION_PRODUCTS = {  # x shape, w shape, transpose_b, whether byte quads take it (where they run)
    "attention_scores": ((1, 3, 20, 16), (1, 3, 16, 20), False, True),
    "rows_and_columns_past_the_tiles": ((13, 70), (70, 100), False, True),
    "weights_broadcast": ((2, 5, 30), (30, 7), False, False),
    "transposed": ((4, 6, 40), (4, 8, 40), True, False),
}


def _activation_product(x: np.ndarray, w: np.ndarray, attrs: dict, quant: list, threads=None):
    """A QuantizedProduct of two activations (w no constant) on x and w, executed: (output, kernel)."""
    from lite.tensor import Tensor

    xt, wt = Tensor("x", x.dtype, x.shape, data=x), Tensor("w", w.dtype, w.shape, data=w)
    out = Tensor("y", np.dtype(np.int8), ())
    for tensor, param in zip((xt, wt, out), quant, strict=True):
        tensor.quant_params = param
    kernel = build("MatMulFusion", attrs, xt, wt, None, out, threads)
    kernel.execute()
    return out.data.copy(), kernel


def _integer_product(x, w, attrs: dict, quant: list) -> np.ndarray:
    """What ONNX's QLinearMatMul defines: int32 sums of the offsets, requantized."""
    from lite.ops.quant import requantize, requantize_multiplier

    (xs, xz), (ws, wz), (ys, yz) = ((p.scale[0], int(p.zero_point[0])) for p in quant)
    offsets = w.astype(np.int64) - wz
    acc = np.matmul(x.astype(np.int64) - xz, np.swapaxes(offsets, -1, -2) if attrs.get("transpose_b") else offsets)
    return requantize(acc, requantize_multiplier(xs, ws, ys), yz, np.int8, (-128, 127))


@pytest.mark.parametrize("quads", [True, False], ids=["quads", "float32"])
@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
@pytest.mark.parametrize("case", sorted(ACTIVATION_PRODUCTS))
def test_a_product_of_two_activations_sums_exactly(monkeypatch, case, dtype, quads):
    """On byte quads (both operands packed at each call) where they run and the batch dims agree,
    else on the float32 kernels, whose sums of 8-bit offsets are exact here: ONNX's integer result."""
    if quads and not int8_quads.available():
        pytest.skip("byte quads need AVX-512 VNNI")
    if not quads:
        monkeypatch.setattr(int8_quads, "available", lambda: False)
    x_shape, w_shape, transpose_b, quad_case = ACTIVATION_PRODUCTS[case]
    x, w = random_q(RNG, x_shape, dtype), random_q(RNG, w_shape, np.int8)
    quant = [params(0.02, 130 if dtype == np.uint8 else 9), params(0.03, -4), params(0.7, 3)]
    actual, kernel = _activation_product(x, w, {"transpose_b": transpose_b}, quant)
    assert kernel.layout is not None and kernel.float_dtype == np.float32
    assert isinstance(kernel.compiled, ActivationQuadPlan) == (quads and quad_case)
    np.testing.assert_array_equal(actual, _integer_product(x, w, {"transpose_b": transpose_b}, quant))


@pytest.mark.skipif(not int8_quads.available(), reason="byte quads need AVX-512 VNNI")
@pytest.mark.parametrize("x_dtype", [np.uint8, np.int8])
@pytest.mark.parametrize("w_dtype", [np.uint8, np.int8])
def test_byte_quads_sum_a_product_of_two_activations_at_its_extremes(x_dtype, w_dtype):
    """Offsets of 255 by -255 over 4097 terms (-266 million): the rows' and columns' corrections
    at their largest, for each pair of byte types."""
    low = {np.dtype(np.uint8): (0, 255), np.dtype(np.int8): (-128, 127)}
    (x_low, x_high), (w_low, w_high) = low[np.dtype(x_dtype)], low[np.dtype(w_dtype)]
    x, w = np.full((9, 4097), x_high, x_dtype), np.full((4097, 50), w_low, w_dtype)
    quant = [params(1.0, x_low), params(1.0, w_high), params(1e7, 0)]
    actual, kernel = _activation_product(x, w, {}, quant)
    assert isinstance(kernel.compiled, ActivationQuadPlan)
    np.testing.assert_array_equal(actual, _integer_product(x, w, {}, quant))
    assert (actual == -27).all()


@pytest.mark.skipif(not int8_quads.available(), reason="byte quads need AVX-512 VNNI")
@pytest.mark.parametrize("dynamic", [False, True], ids=["crew", "python_threads"])
def test_two_threads_share_the_batches_of_a_product_of_two_activations(dynamic):
    threads = KernelThreads(2)
    threads.dynamic = dynamic
    x, w = random_q(RNG, (2, 5, 19, 40), np.uint8), random_q(RNG, (2, 5, 40, 53), np.int8)
    quant = [params(0.02, 120), params(0.03, 7), params(0.5, -3)]
    actual, kernel = _activation_product(x, w, {}, quant, threads)
    assert isinstance(kernel.compiled, ActivationQuadPlan)
    np.testing.assert_array_equal(actual, _integer_product(x, w, {}, quant))


def test_a_product_of_two_activations_sums_in_float64_past_float32s_exact_range(pairs_only):
    """K = 300 of 8-bit offsets up to 255 x 255 can pass 2^24: float64 then, chosen again when a
    resize changes K (20 terms: float32 again)."""
    quant = [params(0.01, 0), params(0.001, -128), params(40.0, 3)]
    x, w = np.full((2, 300), 255, np.uint8), np.full((300, 3), 127, np.int8)
    actual, kernel = _activation_product(x, w, {}, quant)
    assert kernel.float_dtype == np.float64
    np.testing.assert_array_equal(actual, _integer_product(x, w, {}, quant))
    x, w = random_q(RNG, (2, 20), np.uint8), random_q(RNG, (20, 3), np.int8)
    kernel.inputs[0].shape, kernel.inputs[0].data = x.shape, x
    kernel.inputs[1].shape, kernel.inputs[1].data = w.shape, w
    kernel.outputs[0].shape = tuple(kernel.infer_shapes()[0])
    kernel.outputs[0].data = np.zeros(kernel.outputs[0].shape, np.int8)
    kernel.resize()
    kernel.execute()
    assert kernel.float_dtype == np.float32
    np.testing.assert_array_equal(kernel.outputs[0].data, _integer_product(x, w, {}, quant))


PLANNED = {  # x shape, out channels, kernel size, the plan, most traced bytes a weight byte while planning
    "direct": ((1, 256, 7, 7), 256, 3, ConvPlan, 6),
    "pointwise": ((1, 256, 7, 7), 1024, 1, (ConvPlan, PointwisePlan), 6),
    "winograd": ((1, 256, 24, 24), 256, 3, WinogradPlan, 14),
}


@pytest.mark.parametrize("case", PLANNED)
def test_planning_a_quantized_convolution_allocates_a_few_times_its_weight(request, case):
    """The plans check and pack an int8 weight through narrow integers: an int64 copy of its offsets
    (eight times its bytes, and more again for their magnitudes) set the int8 build's peak RSS."""
    shape, out_c, size, plan, bound = PLANNED[case]
    if case == "winograd":
        request.getfixturevalue("pairs_only")
    x, w = random_q(RNG, shape, np.uint8), random_q(RNG, (out_c, shape[1], size, size), np.int8)
    pad = size // 2

    def planned():
        tensors = layer_tensors(x, params(0.03, 128), w, _weight_params(w.shape[0], True, False), None, np.uint8,
                                params(0.4, 125))
        return build("Conv2DFusion", _winograd_attrs((pad,) * 4) if size == 3 else _conv_attrs(1), *tensors)

    planned()  # NOTE: the kernels compiled or loaded, outside the count
    tracemalloc.start()
    try:
        kernel = planned()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert isinstance(kernel.compiled, plan), type(kernel.compiled)
    assert peak < bound * w.nbytes, peak / w.nbytes
