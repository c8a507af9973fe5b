"""Conv2DFusion and Conv2dTransposeFusion against onnxruntime's Conv and ConvTranspose, of 1, 2 and 3
spatial axes."""

from __future__ import annotations

import numpy as np
import pytest

from lite.errors import ModelFormatError
from lite.kernels import conv_plans, fast
from tests.support.conv import ACTIVATIONS, build, onnx_attrs, onnx_reference
from tests.support.kernel_harness import run_kernel


def conv_inputs(seed: int, x_shape, w_shape, out_channels: int, bias: bool):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(x_shape).astype(np.float32)
    w = (rng.standard_normal(w_shape) / np.sqrt(np.prod(w_shape[1:]))).astype(np.float32)
    b = rng.standard_normal(out_channels).astype(np.float32) if bias else None
    return x, w, b




def check(op_type: str, onnx_op: str, x, w, b, attrs: dict) -> None:
    initializers = {"w": w} if b is None else {"w": w, "b": b}
    expected = ACTIVATIONS[attrs.get("activation_type", "NO_ACTIVATION")](
        onnx_reference(onnx_op, x, initializers, **onnx_attrs(attrs)))
    actual = run_kernel(op_type, attrs, [x, w] if b is None else [x, w, b])[0]
    assert actual.shape == expected.shape
    np.testing.assert_allclose(actual, expected, rtol=1e-4, atol=1e-5)


CONV_CASES = [
    # (x shape, weight shape, attrs)
    ((1, 3, 8, 8), (4, 3, 3, 3), {"pad_list": (1, 1, 1, 1)}),
    ((1, 16, 7, 9), (8, 16, 1, 1), {}),
    ((2, 16, 7, 9), (8, 16, 1, 1), {"stride": (2, 2)}),
    ((1, 5, 10, 11), (7, 5, 1, 1), {"stride": (3, 2)}),  # the unpadded input is read in place
    ((1, 4, 9, 8), (6, 4, 3, 3), {}),
    ((2, 6, 8, 7), (4, 3, 2, 3), {"group": 2, "dilation": (2, 1)}),
    ((1, 3, 23, 23), (8, 3, 7, 7), {"stride": (2, 2), "pad_list": (3, 3, 3, 3)}),
    ((1, 4, 9, 7), (6, 4, 3, 2), {"stride": (2, 1), "pad_list": (0, 1, 2, 1)}),
    ((1, 4, 12, 11), (5, 4, 3, 3), {"dilation": (2, 3), "pad_list": (2, 1, 0, 3)}),
    ((1, 3, 12, 11), (4, 3, 3, 2), {"stride": (3, 2), "pad_list": (1, 0, 1, 1)}),
    ((1, 3, 12, 11), (4, 3, 2, 2), {"stride": (2, 2), "dilation": (2, 3), "pad_list": (1, 1, 0, 0)}),
    ((1, 4, 11, 10), (6, 4, 4, 4), {"stride": (2, 2), "pad_mode": "SAME_UPPER"}),
    ((1, 4, 11, 10), (6, 4, 4, 4), {"stride": (2, 2), "pad_mode": "SAME_LOWER"}),
    ((1, 4, 11, 10), (6, 4, 3, 3), {"stride": (3, 2), "pad_mode": "SAME_UPPER"}),
    ((1, 4, 11, 10), (6, 4, 3, 3), {"stride": (2, 2), "pad_mode": "VALID", "pad_list": (1, 1, 1, 1)}),
    ((3, 6, 8, 8), (4, 3, 3, 3), {"group": 2, "pad_list": (1, 1, 1, 1)}),
    ((2, 8, 9, 9), (12, 2, 3, 3), {"group": 4, "stride": (2, 2), "pad_list": (1, 0, 1, 0)}),
    ((1, 8, 10, 10), (8, 1, 3, 3), {"group": 8, "pad_list": (1, 1, 1, 1)}),
    ((2, 8, 10, 10), (8, 1, 3, 3), {"group": 8, "stride": (2, 2), "pad_list": (1, 1, 1, 1)}),
    ((1, 8, 10, 10), (16, 1, 3, 3), {"group": 8, "dilation": (2, 2), "pad_list": (2, 2, 2, 2)}),
    ((1, 6, 9, 9), (6, 1, 5, 5), {"group": 6, "stride": (2, 2), "pad_mode": "SAME_LOWER"}),
    ((2, 4, 9, 8), (8, 1, 3, 3), {"group": 4, "stride": (2, 1), "dilation": (1, 2), "pad_list": (0, 1, 1, 0)}),
    ((1, 5, 7, 7), (5, 1, 3, 3), {"group": 5}),
    ((1, 3, 8, 8), (4, 3, 3, 3), {"kernel_size": (3, 3), "pad_list": (1, 1, 1, 1), "activation_type": "RELU"}),
    ((1, 8, 6, 6), (8, 1, 3, 3), {"group": 8, "pad_list": (1, 1, 1, 1), "activation_type": "RELU6"}),
]


@pytest.fixture(params=["numpy", "compiled"])
def kernels(request, monkeypatch):
    """Runs a test with the numpy kernels and again with the compiled ones (where numba imports)."""
    if request.param == "compiled" and fast.numba_module() is None:
        pytest.skip("numba is not importable here")
    monkeypatch.setenv("DELITE_FAST_KERNELS", "1" if request.param == "compiled" else "0")
    return request.param


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize(("x_shape", "w_shape", "attrs"), CONV_CASES)
def test_conv2d_matches_onnxruntime(kernels, x_shape, w_shape, attrs, bias):
    x, w, b = conv_inputs(len(x_shape) + sum(w_shape), x_shape, w_shape, w_shape[0], bias)
    check("Conv2DFusion", "Conv", x, w, b, attrs)


@pytest.mark.parametrize(("x_shape", "w_shape", "attrs"),
                         [case for case in CONV_CASES if case[2].get("group", 1) < case[0][1]])
def test_conv2d_in_bands_of_rows(kernels, monkeypatch, x_shape, w_shape, attrs):
    """Columns gathered and multiplied two output rows at a time (a shorter last band where the rows are odd)."""
    monkeypatch.setattr(conv_plans, "row_bands", lambda taps, out, itemsize: [
        (first, min(first + 2, out[0])) for first in range(0, out[0], 2)] if len(out) > 1 else [(0, out[0])])
    x, w, b = conv_inputs(sum(x_shape) + 7, x_shape, w_shape, w_shape[0], True)
    check("Conv2DFusion", "Conv", x, w, b, attrs)


def test_row_bands():
    assert conv_plans.row_bands(147, (112, 112), 4) == [(first, min(first + 15, 112)) for first in range(0, 112, 15)]
    assert conv_plans.row_bands(1152, (28, 28), 4) == [(0, 28)]  # 3.6 MB of columns: one band
    assert conv_plans.row_bands(147, (12544,), 4) == [(0, 12544)]  # 1-D: no rows to band


def test_a_stem_convolution_in_bands_matches_onnxruntime(kernels, monkeypatch):
    """A 7x7 stride-2 stem on a 224 x 224 image: 7.4 MB of columns, in 8 bands (the im2col plan,
    which the compiled direct kernels replace)."""
    if kernels == "compiled":
        monkeypatch.setattr("lite.kernels.fast.direct.MAX_TERMS", 0)
        monkeypatch.setattr("lite.kernels.fast.blocked_direct.fits", lambda geometry, group: False)
    x, w, b = conv_inputs(224, (1, 3, 224, 224), (64, 3, 7, 7), 64, True)
    kernel = build("Conv2DFusion", {"stride": (2, 2), "pad_list": (3, 3, 3, 3), "activation_type": "RELU"}, [x, w, b])
    kernel.prepare()
    kernel.resize()
    assert kernel.algorithm == "im2col" and len(kernel.plan.bands) == 8
    kernel.execute()
    expected = np.maximum(onnx_reference("Conv", x, {"w": w, "b": b}, strides=[2, 2], pads=[3, 3, 3, 3]), 0)
    np.testing.assert_allclose(kernel.outputs[0].data, expected, rtol=1e-4, atol=1e-5)
    assert [a for a, _ in kernel.matmul_shapes()] == [(1, 64, 147)] * 8


DEPTHWISE_CASES = [case for case in CONV_CASES if case[2].get("group") == case[0][1]]


@pytest.mark.parametrize(("x_shape", "w_shape", "attrs"), DEPTHWISE_CASES)
def test_depthwise_conv_one_channel_per_chunk(monkeypatch, x_shape, w_shape, attrs):
    monkeypatch.setenv("DELITE_FAST_KERNELS", "0")  # the numpy plan's chunks
    monkeypatch.setattr(conv_plans, "DEPTHWISE_CHUNK_BYTES", 1)
    x, w, b = conv_inputs(sum(x_shape), x_shape, w_shape, w_shape[0], True)
    check("Conv2DFusion", "Conv", x, w, b, attrs)


@pytest.mark.parametrize("activation", ["RELU", "RELU6"])
def test_conv2d_fused_activation_scaled(activation):
    x, w, b = conv_inputs(7, (2, 4, 8, 8), (6, 4, 3, 3), 6, True)
    check("Conv2DFusion", "Conv", x * 8, w, b * 4, {"pad_list": (1, 1, 1, 1), "activation_type": activation})


TRANSPOSE_CASES = [
    ((1, 4, 5, 6), (4, 3, 3, 3), {}),
    ((1, 4, 5, 6), (4, 3, 3, 3), {"stride": (2, 2), "pad_list": (1, 0, 1, 2)}),
    ((2, 4, 5, 6), (4, 3, 3, 3), {"group": 2, "stride": (2, 3), "pad_list": (1, 0, 0, 2), "output_paddings": (1, 1)}),
    ((1, 4, 5, 6), (4, 2, 4, 4), {"stride": (2, 2), "pad_list": (1, 1, 1, 1), "output_paddings": (1, 0)}),
    ((1, 4, 5, 6), (4, 3, 3, 3), {"stride": (2, 2), "dilation": (2, 1)}),
    ((1, 4, 5, 6), (4, 3, 3, 3), {"stride": (2, 2), "pad_mode": "SAME_UPPER"}),
    ((1, 4, 5, 6), (4, 3, 3, 3), {"stride": (2, 2), "pad_mode": "SAME_LOWER"}),
    ((1, 4, 5, 6), (4, 3, 3, 2), {"stride": (1, 2), "pad_mode": "VALID"}),
    ((1, 6, 4, 4), (6, 1, 3, 3), {"group": 6, "stride": (2, 2), "pad_list": (1, 1, 1, 1)}),
    ((1, 4, 5, 6), (4, 3, 2, 2), {"stride": (2, 2), "activation_type": "RELU"}),
    ((1, 4, 5, 6), (4, 3, 2, 2), {"stride": (2, 2), "activation_type": "RELU6"}),
]


CONV_ND_CASES = [
    ((2, 4, 11), (6, 4, 3), {"pad_list": (1, 1)}),
    ((1, 6, 16), (4, 6, 1), {}),  # direct: one matmul on the input
    ((1, 4, 17), (5, 4, 4), {"stride": (3,), "pad_list": (2, 0)}),
    ((1, 4, 15), (6, 2, 3), {"group": 2, "dilation": (3,), "pad_list": (0, 2)}),
    ((1, 4, 12), (5, 4, 3), {"stride": (2,), "pad_mode": "SAME_UPPER"}),
    ((1, 4, 12), (5, 4, 4), {"pad_mode": "SAME_LOWER"}),
    ((1, 4, 12), (5, 4, 3), {"stride": (2,), "pad_mode": "VALID", "activation_type": "RELU"}),
    ((2, 8, 20), (8, 1, 5), {"group": 8, "pad_list": (2, 2)}),  # depthwise, run as 2-D of height 1
    ((1, 6, 19), (12, 1, 3), {"group": 6, "stride": (2,), "dilation": (2,), "pad_list": (1, 2)}),
    ((2, 3, 6, 7, 5), (4, 3, 3, 3, 3), {"pad_list": (1, 1, 1, 1, 1, 1)}),
    ((1, 6, 4, 5, 6), (4, 6, 1, 1, 1), {}),
    ((1, 4, 7, 8, 9), (6, 2, 2, 3, 2), {"group": 2, "stride": (2, 1, 3), "dilation": (1, 2, 1),
                                        "pad_list": (0, 1, 2, 1, 0, 1)}),
    ((1, 4, 6, 7, 8), (4, 1, 3, 3, 3), {"group": 4, "stride": (2, 2, 2), "pad_mode": "SAME_UPPER"}),
    ((1, 3, 5, 6, 7), (2, 3, 2, 2, 2), {"stride": (2, 2, 2), "pad_mode": "SAME_LOWER", "activation_type": "RELU6"}),
    ((1, 2, 4, 5, 3, 4), (3, 2, 2, 3, 2, 2), {"stride": (1, 2, 1, 2), "pad_list": (1, 0, 0, 1, 0, 1, 1, 0)}),
]


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize(("x_shape", "w_shape", "attrs"), CONV_ND_CASES)
def test_conv_1d_3d_4d_match_onnxruntime(x_shape, w_shape, attrs, bias):
    x, w, b = conv_inputs(sum(x_shape) + sum(w_shape), x_shape, w_shape, w_shape[0], bias)
    check("Conv2DFusion", "Conv", x * 3, w, b, attrs)


@pytest.mark.parametrize(("x_shape", "w_shape", "attrs"), [c for c in CONV_ND_CASES if c[2].get("group") == c[0][1]])
def test_depthwise_conv_1d_and_3d_one_channel_per_chunk(monkeypatch, x_shape, w_shape, attrs):
    monkeypatch.setattr(conv_plans, "DEPTHWISE_CHUNK_BYTES", 1)
    x, w, b = conv_inputs(sum(x_shape), x_shape, w_shape, w_shape[0], True)
    check("Conv2DFusion", "Conv", x, w, b, attrs)


TRANSPOSE_ND_CASES = [
    ((1, 4, 7), (4, 3, 3), {}),
    ((2, 4, 6), (4, 2, 4), {"group": 2, "stride": (3,), "pad_list": (1, 2), "output_paddings": (1,)}),
    ((1, 4, 6), (4, 3, 3), {"stride": (2,), "dilation": (2,), "pad_mode": "SAME_UPPER"}),
    ((1, 2, 3, 4, 5), (2, 3, 3, 3, 3), {}),
    ((1, 4, 3, 4, 3), (4, 2, 2, 3, 2), {"group": 2, "stride": (2, 1, 3), "pad_list": (1, 0, 0, 0, 1, 1),
                                        "output_paddings": (1, 0, 2)}),
    ((1, 2, 3, 3, 4), (2, 3, 3, 2, 2), {"stride": (2, 2, 2), "pad_mode": "SAME_LOWER", "activation_type": "RELU"}),
    ((1, 2, 2, 3, 2, 3), (2, 2, 2, 2, 3, 2), {"stride": (2, 1, 2, 1), "pad_list": (0, 1, 0, 0, 1, 0, 1, 0)}),
]


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize(("x_shape", "w_shape", "attrs"), TRANSPOSE_ND_CASES)
def test_conv_transpose_1d_3d_4d_match_onnxruntime(x_shape, w_shape, attrs, bias):
    x, w, b = conv_inputs(sum(x_shape) + sum(w_shape), x_shape, w_shape, w_shape[1] * attrs.get("group", 1), bias)
    check("Conv2dTransposeFusion", "ConvTranspose", x, w, b, attrs)


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize(("x_shape", "w_shape", "attrs"), TRANSPOSE_CASES)
def test_conv_transpose_matches_onnxruntime(x_shape, w_shape, attrs, bias):
    group = attrs.get("group", 1)
    x, w, b = conv_inputs(sum(w_shape), x_shape, w_shape, w_shape[1] * group, bias)
    check("Conv2dTransposeFusion", "ConvTranspose", x, w, b, attrs)




@pytest.mark.parametrize(("op_type", "onnx_op", "w_shape"), [
    ("Conv2DFusion", "Conv", (6, 4, 3, 3)), ("Conv2DFusion", "Conv", (4, 1, 3, 3)),
    ("Conv2dTransposeFusion", "ConvTranspose", (4, 6, 3, 3))])
@pytest.mark.parametrize("call_resize", [True, False])
def test_const_weights_repeated_runs_and_new_shapes(op_type, onnx_op, w_shape, call_resize):
    rng = np.random.default_rng(3)
    attrs = {"stride": (2, 2), "pad_list": (1, 1, 1, 1), "group": 4 if w_shape[1] == 1 else 1}
    w = rng.standard_normal(w_shape).astype(np.float32)
    b = rng.standard_normal(4 if w_shape[1] == 1 else 6).astype(np.float32)
    kernel = build(op_type, attrs, [rng.standard_normal((1, 4, 9, 9)).astype(np.float32), w, b])
    kernel.prepare()
    for shape in [(1, 4, 9, 9), (1, 4, 9, 9), (2, 4, 12, 7)]:
        x = rng.standard_normal(shape).astype(np.float32)
        kernel.inputs[0].data, kernel.inputs[0].shape = x, shape
        kernel.outputs[0].shape = kernel.infer_shapes()[0]
        kernel.outputs[0].data = np.empty(kernel.outputs[0].shape, np.float32)
        if call_resize:
            kernel.resize()
        kernel.execute()
        expected = onnx_reference(onnx_op, x, {"w": w, "b": b}, **onnx_attrs(attrs))
        np.testing.assert_allclose(kernel.outputs[0].data, expected, rtol=1e-4, atol=1e-5)



@pytest.mark.parametrize(("w_shape", "attrs"), [
    ((6, 4, 1, 1), {}), ((6, 4, 3, 3), {"pad_list": (1, 1, 1, 1), "activation_type": "RELU"}),
    ((4, 1, 3, 3), {"group": 4, "stride": (2, 2), "pad_list": (1, 1, 1, 1), "activation_type": "RELU6"})])
@pytest.mark.parametrize("const_weight", [True, False])
def test_bound_calls_read_each_runs_values(w_shape, attrs, const_weight):
    """Conv2DFusion binds its numpy calls to array views once: new values in the same arrays, new
    arrays (a computed weight is a new array on every run) and a regrown scratch buffer must all
    show up in the next run."""
    rng = np.random.default_rng(11)
    arrays = [rng.standard_normal(shape).astype(np.float32) for shape in ((1, 4, 8, 8), w_shape, w_shape[:1])]
    kernel = build("Conv2DFusion", attrs, arrays)
    kernel.inputs[1].is_const = const_weight
    kernel.prepare()
    kernel.resize()
    for run in range(4):
        if run % 2:
            kernel.inputs[0].data = np.empty_like(kernel.inputs[0].data)
        if not const_weight:
            kernel.inputs[1].data = rng.standard_normal(w_shape).astype(np.float32)
        x, w, b = (t.data for t in kernel.inputs)
        x[...] = rng.standard_normal(x.shape)
        if run == 2:
            kernel.workspace.array((1 << 20,), np.float32)  # another kernel grows the shared scratch
        kernel.execute()
        expected = ACTIVATIONS[attrs.get("activation_type", "NO_ACTIVATION")](
            onnx_reference("Conv", x, {"w": w, "b": b}, **onnx_attrs(attrs)))
        np.testing.assert_allclose(kernel.outputs[0].data, expected, rtol=1e-4, atol=1e-5)



@pytest.mark.parametrize(("w_shape", "attrs", "expected"), [
    ((6, 4, 1, 1), {}, [((1, 6, 4), (2, 1, 4, 64))]),
    ((6, 2, 3, 3), {"group": 2, "pad_list": (1, 1, 1, 1)}, [((2, 3, 18), (2, 2, 18, 64))]),
    ((4, 1, 3, 3), {"group": 4, "pad_list": (1, 1, 1, 1)}, [((2, 1, 10), (2, 2, 10, 80))] * 2)])
def test_matmul_shapes_are_those_execute_runs(monkeypatch, w_shape, attrs, expected):
    """Direct, im2col and depthwise plans (two chunks of two channels; taps plus the bias row)."""
    monkeypatch.setenv("DELITE_FAST_KERNELS", "0")  # the numpy depthwise plan
    monkeypatch.setattr(conv_plans, "DEPTHWISE_CHUNK_BYTES", 2 * 10 * 80 * 4 * 2)
    rng = np.random.default_rng(5)
    kernel = build("Conv2DFusion", attrs, [rng.standard_normal(s).astype(np.float32)
                                           for s in ((2, 4, 8, 8), w_shape, w_shape[:1])])
    kernel.prepare()
    kernel.resize()
    assert kernel.matmul_shapes() == []  # nothing has run yet
    kernel.execute()
    assert kernel.matmul_shapes() == expected

def test_conv2d_float64_matches_float32_reference():
    x, w, b = conv_inputs(5, (1, 4, 7, 7), (6, 2, 3, 3), 6, True)
    attrs = {"group": 2, "pad_list": (1, 1, 1, 1)}
    expected = onnx_reference("Conv", x, {"w": w, "b": b}, **onnx_attrs(attrs))
    actual = run_kernel("Conv2DFusion", attrs, [a.astype(np.float64) for a in (x, w, b)])[0]
    assert actual.dtype == np.float64
    np.testing.assert_allclose(actual, expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(("op_type", "w_shape", "attrs", "out_shape"), [
    ("Conv2DFusion", (6, 4, 3), {"pad_list": (1, 1)}, (0, 6, 5)),
    ("Conv2DFusion", (4, 1, 3), {"group": 4}, (0, 4, 3)),
    ("Conv2DFusion", (6, 4, 3, 3, 3), {"pad_list": (1,) * 6}, (0, 6, 5, 5, 5)),
    ("Conv2dTransposeFusion", (4, 3, 2), {"stride": (2,)}, (0, 3, 10)),
    ("Conv2DFusion", (6, 4, 3, 3), {"pad_list": (1, 1, 1, 1)}, (0, 6, 5, 5)),
    ("Conv2DFusion", (8, 1, 3, 3), {"group": 4, "stride": (2, 2)}, (0, 8, 2, 2)),
    ("Conv2DFusion", (6, 4, 1, 1), {}, (0, 6, 5, 5)),
    ("Conv2dTransposeFusion", (4, 3, 2, 2), {"stride": (2, 2)}, (0, 3, 10, 10)),
])
def test_empty_batch(op_type, w_shape, attrs, out_shape):
    x, w, b = conv_inputs(0, (0, 4, *(5,) * (len(w_shape) - 2)), w_shape, out_shape[1], True)
    assert run_kernel(op_type, attrs, [x, w, b])[0].shape == out_shape


@pytest.mark.parametrize(("x_shape", "w_shape", "attrs", "message"), [
    ((1, 6, 8, 8), (4, 4, 3, 3), {"group": 4}, "group"),
    ((1, 6, 8, 8), (6, 4, 3, 3), {"group": 1}, "channels"),
    ((1, 6, 8, 8), (6, 3, 3, 3), {"group": 0}, "group"),
    ((1, 4, 8, 8), (6, 4, 3, 3), {"stride": (0, 1)}, "stride"),
    ((1, 4, 8, 8), (6, 4, 3, 3), {"stride": (1, 1, 1), "pad_list": (0, 0, 0, 0)}, "one value per spatial axis"),
    ((1, 4, 8, 8), (6, 4, 3, 3), {"stride": (1, 1, 1)}, "5-D"),
    ((1, 4, 8), (6, 4, 3, 3), {}, "3-D weight for its 1-D window"),
    ((1, 4, 8, 8), (6, 4, 3), {}, "4-D weight"),
    ((1, 4, 8, 8), (6, 4, 3, 3), {"dilation": (-1, 1)}, "dilation"),
    ((1, 4, 8, 8), (6, 4, 3, 3), {"pad_list": (1, 1, 1)}, "pad_list"),
    ((1, 4, 8, 8), (6, 4, 3, 3), {"pad_list": (1, -1, 1, 1)}, "pad_list"),
    ((1, 4, 8, 8), (6, 4, 3, 3), {"pad_mode": "REFLECT"}, "pad_mode"),
    ((1, 4, 8, 8), (6, 4, 3, 3), {"kernel_size": (5, 5)}, "kernel_size"),
    ((1, 4, 8, 8), (6, 4, 3, 3), {"activation_type": "SIGMOID"}, "activation"),
    ((1, 4, 2, 2), (6, 4, 3, 3), {}, "smaller"),
    ((4, 8, 8), (6, 4, 3, 3), {}, "3-D weight"),
    ((4, 8), (6, 4), {}, "at least one spatial axis"),
])
def test_conv_rejects_invalid_attributes(x_shape, w_shape, attrs, message):
    x, w, b = conv_inputs(0, x_shape, w_shape, w_shape[0], True)
    with pytest.raises(ModelFormatError, match=message):
        run_kernel("Conv2DFusion", attrs, [x, w, b])


@pytest.mark.parametrize(("w_shape", "bias", "attrs", "message"), [
    ((4, 3, 3, 3), 5, {}, "bias"),
    ((4, 3, 3, 3), 3, {"group": 3}, "group"),
    ((4, 3, 3, 3), 3, {"output_paddings": (-1, 0)}, "output_paddings"),
    ((4, 3, 3, 3), 3, {"pad_list": (5, 5, 5, 5)}, "pads exceed"),
])
def test_conv_transpose_rejects_invalid_attributes(w_shape, bias, attrs, message):
    x, w, b = conv_inputs(0, (1, 4, 3, 3), w_shape, bias, True)
    with pytest.raises(ModelFormatError, match=message):
        run_kernel("Conv2dTransposeFusion", attrs, [x, w, b])
