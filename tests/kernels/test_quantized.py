"""Quantized ops on the native backend against ONNX's reference evaluator running the same QDQ
group (DequantizeLinear -> op -> QuantizeLinear) on fresh random data.

The reference computes the op in float32 between the dequantized inputs and the quantized
output; Delite accumulates convolutions and products exactly. Results that lie within float32
rounding of a tie may differ by one step; everything else must be equal.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx.reference import ReferenceEvaluator

import lite
from lite.kernels.parallel import KernelThreads
from lite.kernels.quantized import QuantizedOp
from lite.tools import converter
from lite.tools.inspector import format_table
from tests.support.e2e import build_lite, predict
from tests.support.quantized import microsoft_op_model, qdq_op_model
from tests.support.quantized_kernels import compiled_kernels

RNG = np.random.default_rng(2026)


def _normal(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


CASES = {
    "conv3x3_padded": ("Conv", {"x": _normal(1, 8, 9, 9)}, {"w": _normal(16, 8, 3, 3)}, _normal(16),
                       {"pads": [1, 1, 1, 1]}),
    "conv_strided_7x7": ("Conv", {"x": _normal(1, 3, 20, 20)}, {"w": _normal(8, 3, 7, 7)}, _normal(8),
                         {"pads": [3, 3, 3, 3], "strides": [2, 2]}),
    "conv_pointwise": ("Conv", {"x": _normal(2, 16, 5, 5)}, {"w": _normal(24, 16, 1, 1)}, None, {}),
    "conv_depthwise": ("Conv", {"x": _normal(1, 12, 8, 8)}, {"w": _normal(12, 1, 3, 3)}, _normal(12),
                       {"group": 12, "pads": [1, 1, 1, 1]}),
    "conv_grouped_dilated": ("Conv", {"x": _normal(1, 8, 11, 11)}, {"w": _normal(8, 4, 3, 3)}, _normal(8),
                             {"group": 2, "dilations": [2, 2]}),
    "gemm_transposed": ("Gemm", {"x": _normal(5, 32)}, {"w": _normal(10, 32)}, _normal(10), {"transB": 1}),
    "add": ("Add", {"a": _normal(1, 8, 4, 4), "b": _normal(1, 8, 4, 4) * 3}, {}, None, {}),
    "mul_broadcast": ("Mul", {"a": _normal(1, 8, 4, 4), "b": _normal(1, 8, 1, 1)}, {}, None, {}),
    "add_constant": ("Add", {"a": _normal(1, 8, 4, 4)}, {"c": np.array([1.5], np.float32)}, None, {}),
    "sub_constant": ("Sub", {"a": _normal(2, 40)}, {"c": np.array([-0.7], np.float32)}, None, {}),
    "maxpool": ("MaxPool", {"x": _normal(1, 4, 8, 8)}, {}, None, {"kernel_shape": [3, 3], "strides": [2, 2]}),
    "averagepool": ("AveragePool", {"x": _normal(1, 4, 8, 8)}, {}, None, {"kernel_shape": [2, 2]}),
    "global_averagepool": ("GlobalAveragePool", {"x": _normal(1, 16, 7, 7)}, {}, None, {}),
    "concat_two_scales": ("Concat", {"a": _normal(1, 4, 3, 3), "b": _normal(1, 2, 3, 3) * 5}, {}, None, {"axis": 1}),
    "sigmoid": ("Sigmoid", {"x": _normal(2, 64) * 4}, {}, None, {}),
    "softmax": ("Softmax", {"x": _normal(3, 17) * 2}, {}, None, {"axis": -1}),
    "layernorm": ("LayerNormalization", {"x": _normal(2, 5, 48) * 3 + 1}, {"g": _normal(48)}, None, {"axis": -1}),
    "transpose": ("Transpose", {"x": _normal(2, 3, 4)}, {}, None, {"perm": [2, 0, 1]}),
}


@pytest.mark.parametrize("dtype", [np.int8, np.uint8])
@pytest.mark.parametrize("case", sorted(CASES))
def test_a_quantized_op_matches_the_reference_evaluator(case, dtype):
    op_type, inputs, weights, bias, attrs = CASES[case]
    model = qdq_op_model(op_type, inputs, weights, dtype=dtype, bias=bias, **attrs)
    graph, report = converter.convert_to_graph(model)
    assert len(report.quantized_ops) == 1, [n.op_type for n in graph.nodes]
    expected = ReferenceEvaluator(model).run(None, inputs)[0]
    actual = predict(build_lite(converter.convert(model)), inputs)[0]
    step = _initializer(model, "y_s")
    steps = np.abs(actual - expected) / step
    assert steps.max() <= 1.0001, f"{case}: {steps.max():.3f} steps"
    assert np.mean(steps > 0.5) <= 0.01, f"{case}: {np.mean(steps > 0.5):.2%} of the results differ by a step"


def _initializer(model, name: str) -> float:
    from onnx import numpy_helper

    return float(next(numpy_helper.to_array(t) for t in model.graph.initializer if t.name == name))


def test_a_quantized_op_is_marked_quantized_for_delegates_and_reports():
    op_type, inputs, weights, bias, attrs = CASES["conv3x3_padded"]
    lite_model = build_lite(converter.convert(qdq_op_model(op_type, inputs, weights, bias=bias, **attrs)))
    rows = {row.op_type: row for row in lite_model.partition_report()}
    assert rows["Conv2DFusion"].quantized == "int8" and rows["QuantizeLinear"].quantized == ""
    conv = next(k for k in lite_model._engine.kernels if k.type == "Conv2DFusion")
    assert conv.quantized and conv.inputs[1].quant_params.scale.size == 16
    assert "Conv2DFusion int8" in format_table(lite_model.partition_report())


def _arithmetic_meaning(kernel) -> np.ndarray:
    """``lite.ops.quantized_arithmetic`` of the kernel's current inputs (8-bit Add and Mul as
    onnxruntime computes them, which ``QuantizedOp``'s dequantize, op, quantize is not)."""
    from lite.ops.quantized_arithmetic import quantized_arithmetic

    (a, b), y = kernel.inputs, kernel.outputs[0]
    return quantized_arithmetic(kernel.type, a.data, a.quant_params, b.data, b.quant_params, y.quant_params, y.dtype)


def _twin_run(kernel) -> np.ndarray:
    """The output of ``QuantizedOp`` (dequantize, float op, quantize) on the kernel's current inputs."""
    out = lite.Tensor(kernel.outputs[0].name, kernel.outputs[0].dtype, kernel.outputs[0].shape,
                      quant_params=kernel.outputs[0].quant_params)
    out.data = np.empty(out.shape, out.dtype)
    general = QuantizedOp(kernel.inputs, [out], kernel.primitive, kernel.name)
    general.infer_shapes()
    general.prepare()
    general.resize()
    general.execute()
    return out.data


@pytest.mark.parametrize("case, kind", [("sigmoid", "QuantizedTable"), ("add", "QuantizedArithmetic"),
                                        ("mul_broadcast", "QuantizedArithmetic"), ("maxpool", "QuantizedMovement"),
                                        ("transpose", "QuantizedMovement"), ("add_constant", "QuantizedArithmetic"),
                                        ("sub_constant", "QuantizedArithmetic")])
@pytest.mark.parametrize("dtype", [np.int8, np.uint8])
def test_the_copy_free_quantized_kernels_equal_the_general_one(case, kind, dtype):
    op_type, inputs, weights, bias, attrs = CASES[case]
    model = qdq_op_model(op_type, inputs, weights, dtype=dtype, bias=bias, output_like_input=kind.endswith("Movement"),
                         **attrs)
    lite_model = build_lite(converter.convert(model))
    predict(lite_model, inputs)
    kernel = next(k for k in lite_model._engine.kernels if k.quantized)
    assert type(kernel).__name__ == kind and not isinstance(kernel.inner, QuantizedOp)
    meaning = _arithmetic_meaning if kind == "QuantizedArithmetic" else _twin_run
    np.testing.assert_array_equal(kernel.outputs[0].data, meaning(kernel))


@pytest.mark.parametrize("op_type", ["AddFusion", "SubFusion", "MulFusion"])
@pytest.mark.parametrize("dtype", [np.int8, np.uint8])
def test_an_op_with_a_one_value_constant_is_a_table_in_either_operand_order(op_type, dtype):
    """A constant of one value turns Add, Sub or Mul into a one-input op: a table of the other
    input's 256 values, each computed as ``lite.ops.quantized_arithmetic`` computes it (every value
    of the type, the constant first or second, its rank below the other input's)."""
    from lite.kernels.quantized_elementwise import QuantizedArithmetic
    from lite.schema.primitives import default_attrs

    low, high = np.iinfo(dtype).min, np.iinfo(dtype).max
    x = lite.Tensor("x", dtype, (2, 128), quant_params=lite.QuantParams(np.float32([0.05]), np.int64([low + 90])))
    x.data = np.arange(low, high + 1, dtype=dtype).reshape(2, 128)
    constant = lite.Tensor("c", dtype, (1,), quant_params=lite.QuantParams(np.float32([0.02]), np.int64([low + 3])),
                           is_const=True)
    constant.data = np.array([low + 60], dtype)
    for inputs in ([constant, x], [x, constant]):
        out_params = lite.QuantParams(np.float32([0.04]), np.int64([low + 128]))
        out = lite.Tensor("y", dtype, (2, 128), quant_params=out_params)
        out.data = np.zeros(out.shape, dtype)
        kernel = QuantizedArithmetic(inputs, [out], lite.Primitive(op_type, default_attrs(op_type)), "node")
        kernel.prepare()
        kernel.resize()
        kernel.execute()
        assert type(kernel.inner).__name__ == "_ConstantArithmetic"
        np.testing.assert_array_equal(out.data, _arithmetic_meaning(kernel))
        assert len(np.unique(out.data)) > 50


def _assert_two_threads_give_the_same_bytes(kernel, out: lite.Tensor) -> None:
    """The kernel run again on two threads (the crew's jobs, then Python threads, the rows shared
    out) writes the bytes it wrote on one."""
    one_thread = out.data.copy()
    for dynamic in (False, True):
        threads = KernelThreads(2)
        threads.dynamic = dynamic
        kernel.threads = threads
        kernel.prepare()
        kernel.resize()
        out.data[...] = 0
        kernel.execute()
        np.testing.assert_array_equal(out.data, one_thread)


@pytest.mark.parametrize("shape, axes, rows", [((2, 12, 20, 33), [-1], True), ((3, 5, 7), [1, 2], True),
                                               ((2, 6, 9), [1], True), ((2, 6, 9), [0, 1], False)])
@pytest.mark.parametrize("dtype", [np.int8, np.uint8])
def test_a_quantized_softmax_over_rows_is_within_a_step_of_the_general_kernel(shape, axes, rows, dtype):
    """Exponentials from a table of offsets below each row's largest value (onnxruntime's
    QLinearSoftmax), against the float32 softmax between dequantize and quantize: within one
    step, nearly all equal, and equal to ``lite.ops.quantized_softmax`` over the trailing axes or
    one other axis moved last; several axes that are not the trailing ones run the general kernel."""
    from lite.kernels import fast
    from lite.kernels.quantized_elementwise import QuantizedSoftmax
    from lite.ops.quantized_softmax import quantized_softmax
    from lite.schema.primitives import default_attrs

    if not fast.enabled():
        pytest.skip("compiled kernels are off")
    low, high = np.iinfo(dtype).min, np.iinfo(dtype).max
    x = lite.Tensor("x", dtype, shape, quant_params=lite.QuantParams(np.float32([0.06]), np.int64([low + 100])))
    x.data = RNG.integers(low, high + 1, shape).astype(dtype)
    out = lite.Tensor("y", dtype, shape, quant_params=lite.QuantParams(np.float32([1 / 256]), np.int64([low])))
    out.data = np.zeros(shape, dtype)
    kernel = QuantizedSoftmax([x], [out], lite.Primitive("Softmax", {**default_attrs("Softmax"), "axis": axes}),
                              "node")
    kernel.infer_shapes()
    kernel.prepare()
    kernel.resize()
    kernel.execute()
    assert type(kernel.inner).__name__ == "_Softmax" and kernel.inner.trailing == rows
    steps = np.abs(out.data.astype(np.int64) - _twin_run(kernel))
    assert steps.max() <= 1 and np.mean(steps > 0) < 0.01
    if rows:  # bit for bit what lite.ops.quantized_softmax computes
        moved = axes[0] if len(axes) == 1 and axes[0] % len(shape) != len(shape) - 1 else None
        data = x.data if moved is None else np.moveaxis(x.data, moved, -1)
        width = data.shape[-1] if moved is not None else int(np.prod(shape[len(shape) - len(axes):]))
        expected = quantized_softmax(data, 0.06, 1 / 256, low, dtype, width)
        np.testing.assert_array_equal(out.data, expected if moved is None else np.moveaxis(expected, -1, moved))
    assert len(np.unique(out.data)) > 10
    _assert_two_threads_give_the_same_bytes(kernel, out)


def _qlinear_softmax_model(dtype, axis: int, opset: int):
    """A com.microsoft QLinearSoftmax over ``axis`` of a (3, 24, 10) tensor, its ``opset`` attribute and
    the model's opset ``opset``; output scale 1/255."""
    from onnx import TensorProto, helper, numpy_helper

    kind = TensorProto.INT8 if dtype == np.int8 else TensorProto.UINT8
    low = int(np.iinfo(dtype).min)
    values = (("x_s", 0.07, np.float32), ("y_s", 1 / 255, np.float32), ("x_z", low + 9, dtype), ("y_z", low, dtype))
    constants = [numpy_helper.from_array(np.array(v, t), n) for n, v, t in values]
    return microsoft_op_model("QLinearSoftmax", ["x", "x_s", "x_z", "y_s", "y_z"],
                              [helper.make_tensor_value_info("x", kind, [3, 24, 10])],
                              helper.make_tensor_value_info("y", kind, [3, 24, 10]), constants, model_opset=opset,
                              axis=axis, opset=opset)


@pytest.mark.parametrize("dtype", [np.int8, np.uint8])
def test_a_qlinear_softmax_over_a_middle_axis_gives_onnxruntimes_values(dtype):
    """com.microsoft QLinearSoftmax over axis 1 of a rank-3 tensor (onnxruntime moves the axis
    last), converted and run with compiled kernels on and off: onnxruntime's values."""
    from tests.support.quantized import onnxruntime_session

    model = _qlinear_softmax_model(dtype, 1, 17)
    low = int(np.iinfo(dtype).min)
    feeds = {"x": RNG.integers(low, low + 256, (3, 24, 10)).astype(dtype)}
    [expected] = onnxruntime_session(model).run(None, feeds)
    for compiled in (True, False):
        with compiled_kernels(compiled):
            np.testing.assert_array_equal(predict(build_lite(converter.convert(model)), feeds)[0], expected)


def test_a_qlinear_softmax_over_a_middle_axis_before_opset_13_is_refused_with_the_reason():
    """Before opset 13 an axis flattens every axis after it; only the last axis converts."""
    from lite.errors import UnsupportedOpError

    with pytest.raises(UnsupportedOpError, match="axis 1 before opset 13"):
        converter.convert(_qlinear_softmax_model(np.uint8, 1, 12))
    converter.convert(_qlinear_softmax_model(np.uint8, -1, 12))


@pytest.mark.parametrize("dtype", [np.int8, np.uint8])
def test_the_compiled_softmax_rounds_near_ties_as_the_reference(dtype):
    """Rows picked from 300000 random ones because a quotient lies within 1e-5 of a tie (in
    float64): the compiled kernel's float32 operations, in their order, round them as
    ``lite.ops.quantized_softmax`` does, and so does the numpy path where compiled kernels are off."""
    from lite.kernels import fast
    from lite.kernels.quantized_elementwise import QuantizedSoftmax
    from lite.ops.quantized_softmax import exponent_table, output_multiplier, quantized_softmax
    from lite.schema.primitives import default_attrs

    if not fast.enabled():
        pytest.skip("compiled kernels are off")
    low, high = np.iinfo(dtype).min, np.iinfo(dtype).max
    width, x_scale, y_scale = 16, 0.0629, 1 / 256
    rows = RNG.integers(low, high + 1, (300000, width))
    exps = exponent_table(x_scale, width)[rows.max(axis=1, keepdims=True) - rows].astype(np.float64)
    quotients = exps * float(output_multiplier(y_scale)) / exps.sum(axis=1, keepdims=True)
    near = rows[(np.abs(quotients - np.floor(quotients) - 0.5) < 1e-5).any(axis=1)].astype(dtype)
    assert len(near) >= 20
    x = lite.Tensor("x", dtype, near.shape, quant_params=lite.QuantParams(np.float32([x_scale]), np.int64([low])))
    x.data = near
    out = lite.Tensor("y", dtype, near.shape, quant_params=lite.QuantParams(np.float32([y_scale]), np.int64([low])))
    expected = quantized_softmax(near, x_scale, y_scale, low, dtype, width)
    for compiled in (True, False):  # the numpy path where compiled kernels are off
        with compiled_kernels(compiled):
            out.data = np.zeros(near.shape, dtype)
            kernel = QuantizedSoftmax([x], [out], lite.Primitive("Softmax", {**default_attrs("Softmax"), "axis": [1]}),
                                      "n")
            for step in (kernel.infer_shapes, kernel.prepare, kernel.resize, kernel.execute):
                step()
            assert kernel.inner.compiled == compiled
            np.testing.assert_array_equal(out.data, expected)


@pytest.mark.parametrize("dtype", [np.int8, np.uint8])
def test_a_quantized_layer_norm_is_within_a_step_of_the_general_kernel(dtype):
    """Each row dequantized, normalized and quantized in one compiled pass, against the general
    kernel's three passes: within one step, nearly all equal; rows shared on two threads (the
    crew's jobs, then Python threads) give the one thread's bytes."""
    from lite.kernels import fast
    from lite.kernels.quantized_elementwise import QuantizedLayerNorm
    from lite.schema.primitives import default_attrs

    if not fast.enabled():
        pytest.skip("compiled kernels are off")
    low, high = np.iinfo(dtype).min, np.iinfo(dtype).max
    shape = (3, 40, 96)
    x = lite.Tensor("x", dtype, shape, quant_params=lite.QuantParams(np.float32([0.05]), np.int64([low + 120])))
    x.data = RNG.integers(low, high + 1, shape).astype(dtype)
    scale = lite.Tensor("g", np.float32, (96,), is_const=True)
    scale.data = RNG.uniform(0.5, 1.5, 96).astype(np.float32)
    bias = lite.Tensor("b", np.float32, (96,), is_const=True)
    bias.data = RNG.uniform(-0.5, 0.5, 96).astype(np.float32)
    out = lite.Tensor("y", dtype, shape, quant_params=lite.QuantParams(np.float32([0.03]), np.int64([low + 128])))
    out.data = np.zeros(shape, dtype)
    primitive = lite.Primitive("LayerNormFusion", {**default_attrs("LayerNormFusion"), "begin_norm_axis": -1})
    kernel = QuantizedLayerNorm([x, scale, bias], [out], primitive, "node")
    kernel.infer_shapes()
    kernel.prepare()
    kernel.resize()
    kernel.execute()
    assert type(kernel.inner).__name__ == "_LayerNorm"
    steps = np.abs(out.data.astype(np.int64) - _twin_run(kernel))
    assert steps.max() <= 1 and np.mean(steps > 0) < 0.01
    assert len(np.unique(out.data)) > 100
    _assert_two_threads_give_the_same_bytes(kernel, out)


def test_a_table_covers_every_int8_value():
    model = qdq_op_model("Sigmoid", {"x": np.linspace(-6, 6, 256, dtype=np.float32).reshape(1, 256)}, {})
    lite_model = build_lite(converter.convert(model))
    kernel = next(k for k in lite_model._engine.kernels if k.quantized)
    kernel.inputs[0].data[...] = np.arange(-128, 128, dtype=np.int8).reshape(1, 256)
    kernel.execute()
    np.testing.assert_array_equal(kernel.outputs[0].data, _twin_run(kernel))


def test_concat_of_different_scales_requantizes_through_the_general_kernel():
    op_type, inputs, weights, bias, attrs = CASES["concat_two_scales"]
    lite_model = build_lite(converter.convert(qdq_op_model(op_type, inputs, weights, **attrs)))
    kernel = next(k for k in lite_model._engine.kernels if k.quantized)
    assert isinstance(kernel.inner, QuantizedOp)
