"""The DynamicQuantizeLinear, MatMulInteger and ConvInteger kernels through converted models against
ONNX's reference evaluator, hostile attributes, and a model onnxruntime's quantize_dynamic made."""

from __future__ import annotations

import numpy as np
import pytest

import lite
from lite.tools.converter import convert
from tests.support.e2e import build_lite
from tests.support.integer import (
    dynamic_quantized,
    integer_model,
    integers,
    reference,
    run_converted,
    run_ort_file,
)
from tests.support.kernel_harness import run_kernel, run_kernel_and_keep

INT8 = [np.int8, np.uint8]


def _assert_same(actual: list[np.ndarray], expected: list[np.ndarray]) -> None:
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected, strict=True):
        assert a.dtype == e.dtype and a.shape == e.shape
        np.testing.assert_array_equal(a, e)


def test_dynamic_quantize_linear():
    x = np.random.default_rng(0).normal(1, 3, (2, 3, 5)).astype(np.float32)
    model = integer_model("DynamicQuantizeLinear", {"x": x}, n_outputs=3)
    _assert_same(run_converted(model, {"x": x}), reference(model, {"x": x}))


def _many_chunks(rng: np.random.Generator, kind: str) -> np.ndarray:
    """Float32 values over several of the compiled passes' chunks, the extremes in a late one."""
    from lite.kernels.fast.int8_dynamic import CHUNK

    x = rng.normal(0, 1, (3, CHUNK + 7)).astype(np.float32)
    if kind == "positive":
        x = np.abs(x) + 0.5
    elif kind == "negative":
        x = -np.abs(x) - 0.5
    elif kind == "zeros":
        x[...] = 0.0
        x[1, ::3] = -0.0
    if kind in ("mixed", "positive", "negative"):
        x[2, -3], x[2, -2] = x.max() * 1.5 + 1, x.min() * 1.5 - 1  # NOTE: in the last chunk, the second thread's
    return x


@pytest.mark.parametrize("kind", ["mixed", "positive", "negative", "zeros"])
@pytest.mark.parametrize("threads", [1, 2, "python_threads"])
def test_dynamic_quantize_linear_over_many_chunks_is_the_reference_bit_for_bit(kind, threads):
    from lite.kernels.parallel import KernelThreads
    from lite.ops.integer import dynamic_quantize

    team = None if threads == 1 else KernelThreads(2)
    if threads == "python_threads":
        team.dynamic = True
    rng = np.random.default_rng(11)
    x = _many_chunks(rng, kind)
    actual, kernel = run_kernel_and_keep("DynamicQuantizeLinear", {}, [x], n_outputs=3, threads=team)
    assert kernel.compiled is not None
    _assert_same(actual, list(dynamic_quantize(x)))
    kernel.inputs[0].data[...] = x * np.float32(0.25) - np.float32(0.125)  # the same arrays, another range
    with (team or KernelThreads(1)).lent():
        kernel.execute()
    _assert_same([t.data for t in kernel.outputs], list(dynamic_quantize(kernel.inputs[0].data)))


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf, "denormal", "overflowing"])
def test_dynamic_quantize_linear_with_a_nan_an_infinity_or_an_extreme_range_gives_the_ieee_result(bad):
    from lite.kernels.parallel import KernelThreads
    from lite.ops.integer import dynamic_quantize

    x = _many_chunks(np.random.default_rng(12), "mixed")
    if bad == "denormal":  # NOTE: a scale of 0
        x *= np.float32(1e-44)
    elif bad == "overflowing":  # NOTE: max - min is infinite
        x[2, -1], x[2, -2] = np.float32(3e38), np.float32(-3e38)
    else:
        x[2, -1] = bad
    actual, _ = run_kernel_and_keep("DynamicQuantizeLinear", {}, [x], n_outputs=3, threads=KernelThreads(2))
    with np.errstate(all="ignore"):
        _assert_same(actual, list(dynamic_quantize(x)))


@pytest.mark.parametrize("a_dtype", INT8)
@pytest.mark.parametrize("b_dtype", INT8)
@pytest.mark.parametrize("const_b", [True, False])
def test_matmul_integer(a_dtype, b_dtype, const_b):
    rng = np.random.default_rng(1)
    a, b = integers(rng, a_dtype, (2, 3, 7)), integers(rng, b_dtype, (7, 4))
    az, bz = integers(rng, a_dtype, (3, 1)) // 4, integers(rng, b_dtype, (4,)) // 4
    inputs, consts = ({"a": a}, {"b": b, "az": az, "bz": bz}) if const_b else ({"a": a, "b": b, "bz": bz}, {"az": az})
    model = integer_model("MatMulInteger", inputs, consts, node_inputs=["a", "b", "az", "bz"])
    _assert_same(run_converted(model, inputs), reference(model, inputs))


def test_matmul_integer_without_zero_points_and_with_a_row_vector():
    rng = np.random.default_rng(2)
    a, b = integers(rng, np.uint8, (5, 6)), integers(rng, np.int8, (6, 3))
    model = integer_model("MatMulInteger", {"a": a}, {"b": b})
    _assert_same(run_converted(model, {"a": a}), reference(model, {"a": a}))
    az = np.arange(5, dtype=np.uint8) * 40
    model = integer_model("MatMulInteger", {"a": a}, {"b": b, "az": az})
    expected = (a.astype(np.int64) - az[:, None]) @ b.astype(np.int64)  # one zero point per row of a
    _assert_same(run_converted(model, {"a": a}), [expected.astype(np.int32)])


CONVS = [  # (x shape, w shape, ONNX attributes)
    ((1, 3, 8, 8), (4, 3, 3, 3), {"pads": [1, 1, 1, 1]}),
    ((2, 4, 9, 7), (6, 2, 3, 3), {"pads": [0, 1, 2, 1], "strides": [2, 1], "group": 2}),
    ((1, 4, 9, 9), (4, 1, 3, 3), {"pads": [2, 2, 2, 2], "dilations": [2, 2], "group": 4}),
    ((1, 16, 12, 12), (16, 16, 3, 3), {"pads": [1, 1, 1, 1]}),
]


@pytest.mark.parametrize(("x_shape", "w_shape", "attrs"), CONVS)
@pytest.mark.parametrize("x_dtype", INT8)
@pytest.mark.parametrize("per_channel", [False, True])
def test_conv_integer(x_shape, w_shape, attrs, x_dtype, per_channel):
    rng = np.random.default_rng(3)
    x, w = integers(rng, x_dtype, x_shape), integers(rng, np.int8, w_shape)
    xz = integers(rng, x_dtype, ()) // 4
    wz = integers(rng, np.int8, (w_shape[0],) if per_channel else ()) // 4
    model = integer_model("ConvInteger", {"x": x}, {"w": w, "xz": xz, "wz": wz}, **attrs)
    _assert_same(run_converted(model, {"x": x}), reference(model, {"x": x}))


COMPILED_CONVS = [  # (x shape, w shape, Conv2DFusion attributes): tiles past whole panels and row tiles
    ((1, 20, 9, 11), (13, 20, 3, 3), {"pad_list": (1, 1, 1, 1)}),
    ((2, 7, 12, 12), (9, 7, 3, 3), {"stride": (2, 2), "pad_list": (0, 1, 1, 0)}),
    ((1, 6, 10, 10), (6, 1, 3, 3), {"group": 6, "pad_list": (1, 1, 1, 1)}),
    ((1, 8, 9, 9), (10, 4, 1, 1), {"group": 2}),
    ((1, 5, 13, 13), (8, 5, 3, 3), {"dilation": (2, 2), "pad_list": (2, 2, 2, 2)}),
    ((1, 32, 14, 14), (24, 32, 1, 1), {"stride": (2, 2)}),
    ((1, 3, 32, 32), (8, 3, 16, 16), {"stride": (16, 16)}),  # NOTE: a ViT's patches: 256 phases, past int64's bits
]


def _conv_integer_both(x, w, xz, wz, attrs, threads=None):
    """(the compiled plan's output, the float64 path's, the compiled kernel)."""
    from tests.support.quantized_kernels import compiled_kernels

    outputs = []
    for on in (True, False):
        with compiled_kernels(on):
            [out], kernel = run_kernel_and_keep("ConvInteger", attrs, [x, w, xz, wz], threads=threads)
            outputs.append((out, kernel))
    return outputs[0][0], outputs[1][0], outputs[0][1]


@pytest.mark.parametrize(("x_shape", "w_shape", "attrs"), COMPILED_CONVS)
@pytest.mark.parametrize("x_dtype", INT8)
@pytest.mark.parametrize("threads", [1, "crew", "python_threads"])
@pytest.mark.parametrize("words", ["pairs", "quads"])
def test_conv_integer_runs_compiled_tiles_bit_for_bit(x_shape, w_shape, attrs, x_dtype, threads, words):
    """Weight offsets past int8 (uint8 weights, zero points a channel) take the pairs; within int8 the
    quads where VNNI runs."""
    from lite.kernels.fast.int8_plans import IntegerConvPlan, quads_run
    from lite.kernels.parallel import KernelThreads

    team = None if threads == 1 else KernelThreads(2)
    if team is not None:
        team.dynamic = threads == "python_threads"
    rng = np.random.default_rng([len(w_shape), *w_shape])
    x = integers(rng, x_dtype, x_shape)
    if words == "pairs":
        w = integers(rng, np.uint8, w_shape)
        wz = integers(rng, np.uint8, (w_shape[0],))
    else:
        w = rng.integers(-108, 108, w_shape).astype(np.int8)
        wz = rng.integers(-20, 20, w_shape[0]).astype(np.int8)
    actual, expected, kernel = _conv_integer_both(x, w, integers(rng, x_dtype, ()), wz, attrs, team)
    if w_shape[1] == 1:  # NOTE: depthwise: the float32 kernels, exact for a 3x3 window
        assert kernel.compiled is None and kernel.inner.inputs[0].dtype == np.float32
    else:
        assert isinstance(kernel.compiled, IntegerConvPlan)
        assert kernel.compiled.quads == (words == "quads" and quads_run())
    np.testing.assert_array_equal(actual, expected)
    assert np.abs(expected).max() > 20000


@pytest.mark.parametrize("w_shape", [(4, 1, 3, 3), (8, 1, 5, 5), (4, 1, 17, 17)])
def test_depthwise_conv_integer_is_exact_at_the_extremes(w_shape):
    """float32 where the window's sums stay below 2 ** 24 (3x3, 5x5), float64 past it (17 x 17)."""
    x = np.full((1, 4, 20, 20), 255, np.uint8)
    w = np.full(w_shape, -128, np.int8)
    pads = {"pad_list": (w_shape[2] // 2,) * 4, "group": 4}
    actual, expected, kernel = _conv_integer_both(x, w, np.array(0, np.uint8), np.array(127, np.int8), pads)
    assert expected.min() == -255 * 255 * w_shape[2] * w_shape[3]
    assert kernel.inner.inputs[0].dtype == (np.float32 if w_shape[2] < 17 else np.float64)
    np.testing.assert_array_equal(actual, expected)


@pytest.mark.parametrize(("channels", "w_dtype", "product"), [(4096, np.uint8, 255 * 255), (8192, np.int8, 255 * 127)])
def test_conv_integer_sums_wrap_as_32_bit_accumulation(channels, w_dtype, product):
    """On pairs (uint8 weights) and on quads where they run (int8 weights of offsets within int8)."""
    x = np.full((1, channels, 3, 3), 255, np.uint8)
    w = np.full((2, channels, 3, 3), np.iinfo(w_dtype).max, w_dtype)
    actual, expected, _ = _conv_integer_both(x, w, np.array(0, np.uint8), np.array(0, w_dtype), {})
    assert expected[0, 0, 0, 0] == np.int64(channels * 9 * product - 2 ** 32)
    np.testing.assert_array_equal(actual, expected)


def test_conv_integer_reads_its_input_zero_point_at_each_call():
    from lite.kernels.fast.int8_plans import IntegerConvPlan

    rng = np.random.default_rng(8)
    x, w = integers(rng, np.uint8, (1, 4, 6, 6)), integers(rng, np.int8, (3, 4, 3, 3))
    [first], kernel = run_kernel_and_keep("ConvInteger", {"pad_list": (1, 1, 1, 1)}, [x, w, np.array(7, np.uint8)])
    assert isinstance(kernel.compiled, IntegerConvPlan)
    first = first.copy()
    kernel.inputs[2].data[...] = 200
    kernel.execute()
    _, expected, _ = _conv_integer_both(x, w, np.array(200, np.uint8), None, {"pad_list": (1, 1, 1, 1)})
    np.testing.assert_array_equal(kernel.outputs[0].data, expected)
    assert not np.array_equal(first, expected)


def test_conv_integer_with_a_computed_weight_and_a_new_batch():
    rng = np.random.default_rng(4)
    x, w = integers(rng, np.uint8, (1, 2, 6, 6)), integers(rng, np.uint8, (3, 2, 2, 2))
    feeds = {"x": x, "w": w, "wz": np.array([3, 100, 250], np.uint8)}
    model = integer_model("ConvInteger", feeds, {"xz": np.uint8(128)}, node_inputs=["x", "w", "xz", "wz"],
                          strides=[2, 2])
    lite_model = build_lite(convert(model))
    for batch in (1, 3):
        feeds["x"] = integers(rng, np.uint8, (batch, 2, 6, 6))
        lite_model.resize(lite_model.get_inputs()[:1], [[batch, 2, 6, 6]])
        outputs = [t.get_data_to_numpy() for t in lite_model.predict([feeds[t.name] for t in lite_model.get_inputs()])]
        _assert_same(outputs, reference(model, feeds))


@pytest.mark.parametrize(("op", "attrs", "inputs", "match"), [
    ("ConvInteger", {"group": 0}, [np.ones((1, 2, 3, 3), np.uint8), np.ones((2, 2, 1, 1), np.uint8)], "group"),
    ("ConvInteger", {"stride": (0, 1)}, [np.ones((1, 2, 3, 3), np.uint8), np.ones((2, 2, 1, 1), np.uint8)], "stride"),
    ("ConvInteger", {"pad_list": (-1, 0, 0, 0)}, [np.ones((1, 2, 3, 3), np.uint8), np.ones((2, 2, 1, 1), np.uint8)],
     "pad_list"),
    ("ConvInteger", {"pad_mode": "MIRROR"}, [np.ones((1, 2, 3, 3), np.uint8), np.ones((2, 2, 1, 1), np.uint8)],
     "pad_mode"),
    ("ConvInteger", {"kernel_size": (3, 3)}, [np.ones((1, 2, 3, 3), np.uint8), np.ones((2, 2, 1, 1), np.uint8)],
     "kernel_size"),
    ("ConvInteger", {}, [np.ones((1, 2, 3, 3), np.uint8), np.ones((2, 2, 1, 1), np.int16)], "int8 or uint8"),
    ("ConvInteger", {}, [np.ones((1, 2, 3, 3), np.uint8), np.ones((2, 2, 1, 1), np.uint8), np.ones(2, np.uint8)],
     "scalar"),
    ("ConvInteger", {}, [np.ones((1, 2, 3, 3), np.uint8), np.ones((2, 2, 1, 1), np.uint8), None, np.ones(3, np.uint8)],
     "output channel"),
    ("MatMulInteger", {}, [np.ones((2, 3), np.int8), np.ones((3, 4), np.int8), np.ones(1, np.uint8)], "zero point"),
    ("MatMulInteger", {}, [np.ones((2, 3), np.int8), np.ones((4, 4), np.int8)], "inner dims"),
    ("MatMulInteger", {}, [np.ones((2, 3), np.int8), np.ones((3, 4), np.int8), None, np.ones((2, 4), np.int8)],
     "broadcast"),
    ("MatMulInteger", {}, [np.ones((2, 3), np.int8), np.ones((3, 4), np.int8), np.ones(3, np.int8)], "rows"),
    ("DynamicQuantizeLinear", {}, [np.ones(3, np.float32)], "output"),
])
def test_hostile_nodes_fail_naming_the_node(op, attrs, inputs, match):
    with pytest.raises(lite.LiteError, match=match) as caught:
        run_kernel(op, attrs, inputs)
    assert f"({op})" in str(caught.value)


@pytest.mark.parametrize(("per_channel", "signed_weights"), [(False, True), (True, False)])
def test_a_dynamically_quantized_model_matches_onnxruntime(tmp_path, per_channel, signed_weights):
    path = dynamic_quantized(tmp_path, per_channel, signed_weights)
    x = np.random.default_rng(5).normal(size=(2, 3, 8, 8)).astype(np.float32)
    (expected,) = run_ort_file(path, {"x": x})
    (actual,) = run_converted(path, {"x": x})
    assert actual.dtype == expected.dtype and actual.shape == expected.shape
    np.testing.assert_allclose(actual, expected, rtol=1e-4, atol=1e-4 * np.abs(expected).max())


QUAD_INTEGER_PRODUCTS = {  # a shape, b shape, a zero point: "input" (a graph input, as DynamicQuantizeLinear gives
    # it), "const", "none"; b zero point per "tensor" or per "column"
    "dynamic_rows_past_the_tiles": ((1, 13, 70), (70, 100), "input", "column"),
    "one_row": ((1, 33), (33, 50), "const", "tensor"),
    "whole_tiles": ((16, 64), (64, 96), "none", "tensor"),
}


@pytest.mark.parametrize("a_dtype", INT8)
@pytest.mark.parametrize("case", sorted(QUAD_INTEGER_PRODUCTS))
def test_matmul_integer_with_a_constant_int8_weight_runs_on_byte_quads_where_they_run(case, a_dtype):
    """The int32 sums on VNNI's byte quads (a's rows signed, b's offsets unsigned, a's zero point
    read at each call) equal ONNX's reference; where the quads do not run, the float64 product."""
    from lite.kernels.fast import int8_quads

    a_shape, b_shape, a_zero, b_zero = QUAD_INTEGER_PRODUCTS[case]
    rng = np.random.default_rng(5)
    a, b = integers(rng, a_dtype, a_shape), integers(rng, np.int8, b_shape)
    bz = rng.integers(-60, 60, b_shape[1] if b_zero == "column" else ()).astype(np.int8)
    b = np.clip(b.astype(np.int64), bz.astype(np.int64) - 128, bz.astype(np.int64) + 127).astype(np.int8)
    az = np.array(integers(rng, a_dtype, ()))
    inputs, consts, names = {"a": a}, {"b": b, "bz": bz}, ["a", "b", "az", "bz"]
    if a_zero == "input":
        inputs["az"] = az
    elif a_zero == "const":
        consts["az"] = az
    else:
        names[2] = ""
    model = integer_model("MatMulInteger", inputs, consts, node_inputs=names)
    lite_model = build_lite(convert(model))
    actual = [t.get_data_to_numpy() for t in lite_model.predict([inputs[n] for n in inputs])]
    _assert_same(actual, reference(model, inputs))
    [kernel] = [k for k in lite_model._engine.kernels if k.type == "MatMulInteger"]
    assert (type(kernel.compiled).__name__ == "IntegerProductPlan") == int8_quads.available()
    assert np.abs(actual[0]).max() > 1000


def test_matmul_integer_leaves_weight_offsets_past_int8_to_the_float64_product():
    rng = np.random.default_rng(6)
    a, b = integers(rng, np.uint8, (4, 20)), np.full((20, 3), 120, np.int8)
    model = integer_model("MatMulInteger", {"a": a}, {"b": b, "az": np.array(3, np.uint8),
                                                       "bz": np.array(-100, np.int8)})
    lite_model = build_lite(convert(model))
    actual = [t.get_data_to_numpy() for t in lite_model.predict([a])]
    _assert_same(actual, reference(model, {"a": a}))
    [kernel] = [k for k in lite_model._engine.kernels if k.type == "MatMulInteger"]
    assert kernel.compiled is None


TILE_INTEGER_PRODUCTS = {  # a shape, b shape (K, N): rows, K and columns past whole tiles, and whole ones
    "rows_k_and_columns_past_the_tiles": ((1, 40, 100), (100, 33)),
    "whole_tiles": ((64, 128), (128, 64)),
}


@pytest.mark.parametrize("a_dtype", INT8)
@pytest.mark.parametrize("case", sorted(TILE_INTEGER_PRODUCTS))
def test_matmul_integer_runs_on_amx_tiles_where_they_run(case, a_dtype):
    """The int32 sums on AMX tiles (rows of 16 or more, K of 64 or more) equal the exact product,
    a's zero point an input (DynamicQuantizeLinear's) and b's per column; on two threads too."""
    from lite.kernels.fast import int8_amx
    from lite.kernels.parallel import KernelThreads

    if not int8_amx.available():
        pytest.skip("AMX tiles need AMX-INT8 and Linux's permission to use them")
    a_shape, b_shape = TILE_INTEGER_PRODUCTS[case]
    rng = np.random.default_rng(8)
    a, b = integers(rng, a_dtype, a_shape), integers(rng, np.int8, b_shape) // 2
    az, bz = np.array(integers(rng, a_dtype, ())), rng.integers(-60, 60, b_shape[1]).astype(np.int8)
    expected = ((a.astype(np.int64) - az.astype(np.int64)) @ (b.astype(np.int64) - bz.astype(np.int64)))
    for threads in (None, KernelThreads(2)):
        [actual], kernel = run_kernel_and_keep("MatMulInteger", {}, [a, b, az, bz], threads=threads)
        assert kernel.compiled.amx
        np.testing.assert_array_equal(actual, expected.astype(np.int32))
        assert np.abs(expected).max() > 1000


@pytest.mark.parametrize("dynamic", [False, True], ids=["crew", "python_threads"])
def test_two_threads_share_the_panels_of_matmul_integer(dynamic):
    from lite.kernels.parallel import KernelThreads

    threads = KernelThreads(2)
    threads.dynamic = dynamic
    rng = np.random.default_rng(7)
    a, b = integers(rng, np.uint8, (11, 90)), integers(rng, np.int8, (90, 200)) // 2
    az, bz = np.array(131, np.uint8), np.array(-3, np.int8)
    [actual] = run_kernel("MatMulInteger", {}, [a, b, az, bz], threads=threads)
    expected = (a.astype(np.int64) - 131) @ (b.astype(np.int64) + 3)
    np.testing.assert_array_equal(actual, expected.astype(np.int32))
