"""Each mapper: the primitive, attributes and inputs it emits for representative ONNX nodes."""

import math

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.shape_inference import infer_shapes

from lite.errors import ModelFormatError, UnsupportedOpError
from lite.schema.primitives import default_attrs
from lite.tools.converter import convert_to_graph
from tests.support.converter import const, convert_node, graph_model, only_node, random
from tests.support.oracle import run_onnxruntime, single_node_model

X4 = random(1, 4, 8, 8)


def unsupported_reason(op_type, inputs, opset=17, **kwargs) -> str:
    with pytest.raises(UnsupportedOpError) as info:
        convert_node(op_type, inputs, opset, **kwargs)
    assert len(info.value.unsupported) == 1
    op, _, model_opset, reason = info.value.unsupported[0]
    assert (op, model_opset) == (op_type, opset)
    return reason


# ---- conv --------------------------------------------------------------------------


@pytest.mark.parametrize("opset", [1, 11, 17])
def test_conv_attributes_and_bias(opset):
    w, b = random(6, 2, 3, 3), random(6)
    graph = convert_node("Conv", {"x": X4}, opset, {"w": w, "b": b}, pads=[1, 0, 2, 1], strides=[2, 1],
                         dilations=[1, 2], group=2)
    node = only_node(graph)
    assert node.op_type == "Conv2DFusion" and node.name == "conv_0"
    expected = {"kernel_size": [3, 3], "stride": [2, 1], "dilation": [1, 2], "pad_list": [1, 0, 2, 1],
                "pad_mode": "PAD", "group": 2, "in_channel": 4, "out_channel": 6, "activation_type": "NO_ACTIVATION"}
    assert node.attrs == expected
    assert [graph.tensors[i].name for i in node.inputs] == ["x", "w", "b"]
    np.testing.assert_array_equal(const(graph, node.inputs[1]), w)
    assert graph.tensors[node.outputs[0]].shape == (1, 6, 5, 5)


@pytest.mark.parametrize("auto_pad", ["SAME_UPPER", "SAME_LOWER", "VALID"])
def test_conv_auto_pad_and_no_bias(auto_pad):
    node = only_node(convert_node("Conv", {"x": X4}, 13, {"w": random(4, 1, 3, 3)}, auto_pad=auto_pad, group=4))
    assert node.attrs["pad_mode"] == auto_pad and node.attrs["pad_list"] == [0, 0, 0, 0]
    assert len(node.inputs) == 2 and node.attrs["in_channel"] == 4


@pytest.mark.parametrize(("x_shape", "w_shape", "attrs", "expected"), [
    ((1, 4, 9), (6, 2, 3), {"pads": [1, 2], "strides": [2], "dilations": [2], "group": 2},
     {"kernel_size": [3], "stride": [2], "dilation": [2], "pad_list": [1, 2]}),
    ((1, 4, 5, 6, 7), (6, 4, 3, 1, 2), {"auto_pad": "SAME_UPPER", "strides": [1, 2, 1]},
     {"kernel_size": [3, 1, 2], "stride": [1, 2, 1], "dilation": [1, 1, 1], "pad_list": [0] * 6}),
])
def test_conv_1d_and_3d_lists_have_one_value_per_spatial_axis(x_shape, w_shape, attrs, expected):
    node = only_node(convert_node("Conv", {"x": random(*x_shape)}, 17, {"w": random(*w_shape)}, **attrs))
    assert node.op_type == "Conv2DFusion" and {k: node.attrs[k] for k in expected} == expected


def test_conv_of_rank_2_is_unsupported():
    reason = unsupported_reason("Conv", {"x": random(4, 8)}, initializers={"w": random(2, 4)})
    assert "rank 3 or more" in reason and "rank 2" in reason


def test_conv_pads_of_the_wrong_length_are_malformed():
    with pytest.raises(ModelFormatError, match="'pads' has 4 values, expected 2"):
        convert_node("Conv", {"x": random(1, 4, 8)}, 17, {"w": random(2, 4, 3)}, pads=[1, 1, 1, 1])


def test_conv_transpose_channels_and_output_padding():
    node = only_node(convert_node("ConvTranspose", {"x": X4}, 17, {"w": random(4, 3, 3, 3)}, group=2,
                                  strides=[2, 2], output_padding=[1, 1]))
    assert node.op_type == "Conv2dTransposeFusion"
    assert (node.attrs["in_channel"], node.attrs["out_channel"]) == (4, 6)
    assert node.attrs["output_paddings"] == [1, 1] and node.attrs["stride"] == [2, 2]


@pytest.mark.parametrize("auto_pad", ["NOTSET", "SAME_UPPER"])
def test_conv_transpose_output_shape_becomes_pads(auto_pad):
    x, w = random(1, 2, 5, 5), random(2, 3, 3, 3, seed=1)
    node = only_node(convert_node("ConvTranspose", {"x": x}, 17, {"w": w}, strides=[2, 2], output_shape=[10, 9],
                                  auto_pad=auto_pad))
    assert node.attrs["pad_mode"] == "PAD"
    explicit = single_node_model("ConvTranspose", {"x": x}, initializers={"w": w}, strides=[2, 2],
                                 pads=node.attrs["pad_list"])
    implicit = single_node_model("ConvTranspose", {"x": x}, initializers={"w": w}, strides=[2, 2],
                                 output_shape=[10, 9], auto_pad=auto_pad)
    expected = run_onnxruntime(infer_shapes(implicit), {"x": x})[0]
    np.testing.assert_allclose(run_onnxruntime(infer_shapes(explicit), {"x": x})[0], expected, rtol=1e-6)


def test_conv_transpose_output_shape_past_the_taps_becomes_output_padding():
    """The ONNX backend case convtranspose_output_shape: a negative end pad grows the output."""
    node = only_node(convert_node("ConvTranspose", {"x": random(1, 1, 3, 3)}, 17, {"w": random(1, 2, 3, 3)},
                                  strides=[3, 2], output_shape=[10, 8]))
    assert node.attrs["pad_list"] == [0, 0, 0, 0] and node.attrs["output_paddings"] == [1, 1]


def test_conv_transpose_output_shape_padding_the_start_is_unsupported():
    reason = unsupported_reason("ConvTranspose", {"x": random(1, 1, 3)}, initializers={"w": random(1, 2, 3)},
                                strides=[2], output_shape=[9])
    assert "pad the start" in reason


# ---- pool --------------------------------------------------------------------------


@pytest.mark.parametrize("opset", [8, 12, 17])
def test_max_pool(opset):
    extra = {"ceil_mode": 1, "dilations": [1, 2]} if opset >= 10 else {}
    node = only_node(convert_node("MaxPool", {"x": X4}, opset, kernel_shape=[3, 2], strides=[2, 2],
                                  pads=[1, 1, 0, 0], **extra))
    assert node.op_type == "MaxPoolFusion"
    assert node.attrs["kernel_size"] == [3, 2] and node.attrs["strides"] == [2, 2]
    assert node.attrs["pad_list"] == [1, 1, 0, 0] and node.attrs["pad_mode"] == "PAD"
    assert node.attrs["round_mode"] == ("CEIL" if opset >= 10 else "FLOOR")
    assert node.attrs["dilation"] == ([1, 2] if opset >= 10 else [1, 1])


def test_max_pool_indices_output():
    model = single_node_model("MaxPool", {"x": X4}, n_outputs=2, kernel_shape=[2, 2])
    model.graph.output[1].type.tensor_type.elem_type = TensorProto.INT64
    node = only_node(convert_to_graph(model)[0])
    assert node.op_type == "MaxPoolFusion" and len(node.outputs) == 2


def test_max_pool_column_major_indices_are_unsupported():
    model = single_node_model("MaxPool", {"x": X4}, n_outputs=2, kernel_shape=[2, 2], storage_order=1)
    model.graph.output[1].type.tensor_type.elem_type = TensorProto.INT64
    with pytest.raises(UnsupportedOpError, match="storage_order=1"):
        convert_to_graph(model)


@pytest.mark.parametrize(("op_type", "primitive"), [("MaxPool", "MaxPoolFusion"), ("AveragePool", "AvgPoolFusion")])
@pytest.mark.parametrize(("shape", "attrs", "expected"), [
    ((1, 3, 9), {"kernel_shape": [3], "strides": [2], "pads": [1, 0]},
     {"kernel_size": [3], "strides": [2], "pad_list": [1, 0]}),
    ((1, 3, 6, 7, 8), {"kernel_shape": [2, 3, 2], "ceil_mode": 1},
     {"kernel_size": [2, 3, 2], "strides": [1, 1, 1], "pad_list": [0] * 6, "round_mode": "CEIL"}),
])
def test_pools_of_1_and_3_spatial_axes(op_type, primitive, shape, attrs, expected):
    node = only_node(convert_node(op_type, {"x": random(*shape)}, 17, **attrs))
    assert node.op_type == primitive and {k: node.attrs[k] for k in expected} == expected


def test_max_pool_missing_kernel_shape_is_malformed():
    with pytest.raises(ModelFormatError, match="kernel_shape"):
        convert_node("MaxPool", {"x": X4})


def test_average_pool():
    node = only_node(convert_node("AveragePool", {"x": X4}, 11, kernel_shape=[2, 2], auto_pad="SAME_LOWER",
                                  count_include_pad=1))
    assert node.op_type == "AvgPoolFusion"
    assert node.attrs["count_include_pad"] is True and node.attrs["pad_mode"] == "SAME_LOWER"


def test_average_pool_dilation_needs_the_schema_field():
    if "dilation" in default_attrs("AvgPoolFusion"):
        node = only_node(convert_node("AveragePool", {"x": X4}, 19, kernel_shape=[2, 2], dilations=[2, 2]))
        assert node.attrs["dilation"] == [2, 2]
    else:
        reason = unsupported_reason("AveragePool", {"x": X4}, 19, kernel_shape=[2, 2], dilations=[2, 2])
        assert "dilations=[2, 2]" in reason and "AvgPoolFusion.dilation" in reason


@pytest.mark.parametrize(("op_type", "primitive"), [("GlobalAveragePool", "AvgPoolFusion"),
                                                    ("GlobalMaxPool", "MaxPoolFusion")])
def test_global_pool(op_type, primitive):
    node = only_node(convert_node(op_type, {"x": X4}))
    assert node.op_type == primitive and node.attrs["is_global"] is True
    for shape in [(2, 3, 7), (2, 3, 4, 5, 6)]:
        node = only_node(convert_node(op_type, {"x": random(*shape)}))
        assert node.op_type == primitive and node.attrs["is_global"] is True


# ---- matmul ------------------------------------------------------------------------


def test_matmul():
    node = only_node(convert_node("MatMul", {"a": random(2, 3, 4), "b": random(4, 5)}))
    assert node.op_type == "MatMulFusion" and len(node.inputs) == 2
    assert node.attrs["transpose_a"] is False and node.attrs["transpose_b"] is False


@pytest.mark.parametrize("opset", [6, 9, 13])
def test_gemm_folds_alpha_and_beta_into_constants(opset):
    b, c = random(5, 4), random(5)
    graph = convert_node("Gemm", {"a": random(3, 4)}, opset, {"b": b, "c": c}, alpha=2.0, beta=0.5, transB=1)
    node = only_node(graph)
    assert node.op_type == "MatMulFusion" and node.attrs["transpose_b"] is True
    np.testing.assert_allclose(const(graph, node.inputs[1]), 2 * b)
    np.testing.assert_allclose(const(graph, node.inputs[2]), 0.5 * c)


def test_gemm_with_computed_operands_scales_them_with_mul_nodes():
    graph = convert_node("Gemm", {"a": random(3, 4), "b": random(4, 5), "c": random(3, 5)}, alpha=3.0, beta=2.0)
    muls, matmul = graph.nodes[:2], graph.nodes[2]
    assert [n.op_type for n in muls] == ["MulFusion", "MulFusion"] and matmul.name == "gemm_0"
    assert [float(const(graph, n.inputs[1])) for n in muls] == [3.0, 2.0]
    assert matmul.inputs[1:] == [muls[0].outputs[0], muls[1].outputs[0]]


def test_gemm_beta_zero_drops_bias_and_c_is_optional():
    graph = convert_node("Gemm", {"a": random(3, 4)}, 13, {"b": random(4, 5), "c": random(5)}, beta=0.0)
    assert len(only_node(graph).inputs) == 2
    assert len(only_node(convert_node("Gemm", {"a": random(3, 4)}, 13, {"b": random(4, 5)})).inputs) == 2


# ---- norm --------------------------------------------------------------------------


def test_batch_normalization_without_conv():
    params = {k: np.abs(random(4, seed=i)) + 0.1 for i, k in enumerate(["s", "b", "m", "v"])}
    node = only_node(convert_node("BatchNormalization", {"x": X4}, 9, params, epsilon=1e-3))
    assert node.op_type == "BatchNorm" and node.attrs == {"epsilon": pytest.approx(1e-3)}
    assert len(node.inputs) == 5


def test_batch_normalization_training_mode_is_unsupported():
    params = {k: np.ones(4, np.float32) for k in ["s", "b", "m", "v"]}
    assert "training mode" in unsupported_reason("BatchNormalization", {"x": X4}, 15, initializers=params,
                                                 training_mode=1)


def test_lrn():
    node = only_node(convert_node("LRN", {"x": X4}, 13, size=5, alpha=2e-4, beta=0.5, bias=2.0))
    assert node.attrs == {"size": 5, "alpha": pytest.approx(2e-4), "beta": 0.5, "bias": 2.0}


# ---- elementwise -------------------------------------------------------------------


@pytest.mark.parametrize(("op_type", "primitive"), [("Add", "AddFusion"), ("Sub", "SubFusion"),
                                                    ("Mul", "MulFusion"), ("Div", "DivFusion"),
                                                    ("Pow", "PowFusion")])
@pytest.mark.parametrize("opset", [7, 14])
def test_binary(op_type, primitive, opset):
    node = only_node(convert_node(op_type, {"a": random(2, 3), "b": random(3)}, opset))
    assert node.op_type == primitive and len(node.inputs) == 2


@pytest.mark.parametrize("op_type", ["Equal", "Less", "Greater"])
def test_comparison_outputs_bool(op_type):
    graph = convert_node(op_type, {"a": random(2, 3), "b": random(2, 3)}, 13)
    node = only_node(graph)
    assert node.op_type == op_type and graph.tensors[node.outputs[0]].dtype == np.bool_


def test_legacy_broadcast_axis_reshapes_constant_b():
    graph = convert_node("Add", {"a": random(2, 3, 4, 5)}, 6, {"b": random(3)}, broadcast=1, axis=1)
    node = only_node(graph)
    assert const(graph, node.inputs[1]).shape == (3, 1, 1)


def test_legacy_broadcast_axis_reshapes_computed_b():
    graph = convert_node("Mul", {"a": random(2, 3, 4, 5), "b": random(3, 4)}, 1, broadcast=1, axis=1)
    reshape, mul = graph.nodes
    assert reshape.op_type == "Reshape" and const(graph, reshape.inputs[1]).tolist() == [3, 4, 1]
    assert mul.op_type == "MulFusion" and mul.inputs[1] == reshape.outputs[0]


@pytest.mark.parametrize(("op_type", "primitive"), [("Sum", "AddN"), ("Max", "Maximum"), ("Min", "Minimum")])
def test_variadic(op_type, primitive):
    node = only_node(convert_node(op_type, {"a": random(2, 3), "b": random(3), "c": random(2, 1)}, 13))
    assert node.op_type == primitive and len(node.inputs) == 3


def test_where():
    inputs = {"c": np.array([True, False]), "x": random(2), "y": random(2)}
    assert only_node(convert_node("Where", inputs, 16)).op_type == "Where"


@pytest.mark.parametrize(("op_type", "primitive"), [("Exp", "ExpFusion"), ("Log", "Log"), ("Sqrt", "Sqrt"),
                                                    ("Neg", "Neg"), ("Abs", "Abs"), ("Erf", "Erf")])
def test_unary(op_type, primitive):
    node = only_node(convert_node(op_type, {"x": random(2, 3)}, 13))
    assert node.op_type == primitive and node.attrs == {}


# ---- activation --------------------------------------------------------------------


@pytest.mark.parametrize(("op_type", "attrs", "expected"), [
    ("Relu", {}, {"activation_type": "RELU"}),
    ("LeakyRelu", {"alpha": 0.2}, {"activation_type": "LEAKY_RELU", "alpha": pytest.approx(0.2)}),
    ("Sigmoid", {}, {"activation_type": "SIGMOID"}),
    ("Tanh", {}, {"activation_type": "TANH"}),
    ("HardSigmoid", {"alpha": 0.25}, {"activation_type": "HARD_SIGMOID", "alpha": 0.25, "beta": 0.5}),
    ("HardSwish", {}, {"activation_type": "HARD_SWISH"}),
])
def test_activation(op_type, attrs, expected):
    node = only_node(convert_node(op_type, {"x": random(2, 3)}, 14, **attrs))
    assert node.op_type == "Activation"
    assert {k: node.attrs[k] for k in expected} == expected


@pytest.mark.parametrize(("low", "high", "kind"), [(0.0, 6.0, "RELU6"), (0.0, None, "RELU"), (-1.0, 1.0, "CLIP")])
def test_clip_attribute_form(low, high, kind):
    attrs = {"min": low} | ({"max": high} if high is not None else {})
    node = only_node(convert_node("Clip", {"x": random(2, 3)}, 6, **attrs))
    assert node.attrs["activation_type"] == kind
    if kind == "CLIP":
        assert (node.attrs["min_val"], node.attrs["max_val"]) == (low, high)


@pytest.mark.parametrize(("bounds", "kind"), [((0.0, 6.0), "RELU6"), ((0.0, None), "RELU"),
                                              ((None, 2.5), "CLIP")])
def test_clip_input_form(bounds, kind):
    inits = {n: np.array(v, np.float32) for n, v in zip(["lo", "hi"], bounds, strict=True) if v is not None}
    names = ["x"] + [n if v is not None else "" for n, v in zip(["lo", "hi"], bounds, strict=True)]
    node = only_node(convert_node("Clip", {"x": random(2, 3)}, 13, inits, input_names=names))
    assert node.attrs["activation_type"] == kind and len(node.inputs) == 1
    if kind == "CLIP":
        assert node.attrs["min_val"] == -math.inf and node.attrs["max_val"] == 2.5


@pytest.mark.parametrize(("inputs", "inits", "names"), [
    ({"x": random(2, 3), "lo": np.zeros((), np.float32)}, {}, ["x", "lo"]),
    ({"x": random(2, 3), "hi": np.ones((), np.float32)}, {}, ["x", "", "hi"]),
    ({"x": random(2, 3), "hi": np.ones((), np.float32)}, {"lo": np.zeros((), np.float32)}, ["x", "lo", "hi"]),
    ({"x": random(2, 3, dtype=np.int32)}, {"lo": np.array(-1, np.int32), "hi": np.array(1, np.int32)},
     ["x", "lo", "hi"]),
    ({"x": random(2, 3, dtype=np.float64)}, {"lo": np.array(0.1, np.float64)}, ["x", "lo"]),  # not a float32
])
def test_clip_computed_integer_or_float64_bounds_make_a_clip(inputs, inits, names):
    """Bounds computed at run time, integer ones, or ones a float32 attribute cannot hold stay inputs."""
    graph = convert_node("Clip", inputs, 13, inits, input_names=names)
    node = only_node(graph)
    assert node.op_type == "Clip" and node.attrs == {}
    assert [graph.tensors[i].name if i >= 0 else "" for i in node.inputs] == names


# ---- elementwise: logic, bits, unary maths, Mod, Mean ------------------------------


@pytest.mark.parametrize(("op_type", "primitive", "opset"), [
    ("And", "LogicalAnd", 7), ("Or", "LogicalOr", 7), ("Xor", "LogicalXor", 1), ("LessOrEqual", "LessEqual", 12),
    ("GreaterOrEqual", "GreaterEqual", 16), ("BitwiseAnd", "BitwiseAnd", 18), ("BitwiseOr", "BitwiseOr", 18),
    ("BitwiseXor", "BitwiseXor", 18)])
def test_logic_bits_and_comparisons(op_type, primitive, opset):
    dtype = np.bool_ if primitive.startswith("Logical") else np.int32 if primitive.startswith("Bit") else np.float32
    graph = convert_node(op_type, {"a": random(2, 3).astype(dtype), "b": random(3).astype(dtype)}, opset)
    node = only_node(graph)
    assert node.op_type == primitive and node.attrs == {} and len(node.inputs) == 2
    assert graph.tensors[node.outputs[0]].dtype == (np.int32 if primitive.startswith("Bit") else np.bool_)


def test_legacy_and_with_axis_reshapes_constant_b():
    graph = convert_node("And", {"a": np.zeros((2, 3, 4), np.bool_)}, 1, {"b": np.ones(3, np.bool_)}, broadcast=1,
                         axis=1)
    node = only_node(graph)
    assert node.op_type == "LogicalAnd" and const(graph, node.inputs[1]).shape == (3, 1)


@pytest.mark.parametrize(("op_type", "opset"), [
    ("Floor", 6), ("Ceil", 13), ("Round", 11), ("Sin", 7), ("Cos", 7), ("Tan", 7), ("Asin", 7), ("Acos", 7),
    ("Atan", 22), ("Sinh", 9), ("Cosh", 9), ("Asinh", 9), ("Acosh", 9), ("Atanh", 9), ("Reciprocal", 13),
    ("Sign", 13), ("IsNaN", 20)])
def test_unary_maths(op_type, opset):
    graph = convert_node(op_type, {"x": random(2, 3)}, opset)
    node = only_node(graph)
    assert node.op_type == op_type and node.attrs == {}
    assert graph.tensors[node.outputs[0]].dtype == (np.bool_ if op_type == "IsNaN" else np.float32)


@pytest.mark.parametrize(("op_type", "primitive", "dtype"), [("Not", "LogicalNot", np.bool_),
                                                              ("BitwiseNot", "BitwiseNot", np.int32)])
def test_not(op_type, primitive, dtype):
    node = only_node(convert_node(op_type, {"x": random(2, 3).astype(dtype)}, 18))
    assert node.op_type == primitive


@pytest.mark.parametrize("attrs", [{}, {"detect_positive": 0}, {"detect_negative": 0}])
def test_is_inf(attrs):
    node = only_node(convert_node("IsInf", {"x": random(2, 3)}, 10, **attrs))
    assert node.op_type == "IsInf"
    assert node.attrs == {"detect_positive": bool(attrs.get("detect_positive", 1)),
                          "detect_negative": bool(attrs.get("detect_negative", 1))}


@pytest.mark.parametrize("fmod", [None, 0, 1])
def test_mod(fmod):
    attrs = {} if fmod is None else {"fmod": fmod}
    node = only_node(convert_node("Mod", {"a": random(2, 3), "b": random(3)}, 13, **attrs))
    assert node.op_type == "Mod" and node.attrs == {"fmod": bool(fmod)}


@pytest.mark.parametrize(("direction", "opset"), [("LEFT", 11), ("RIGHT", 28)])
def test_bit_shift(direction, opset):
    inputs = {"a": random(2, 3).astype(np.uint8), "b": random(3).astype(np.uint8)}
    node = only_node(convert_node("BitShift", inputs, opset, direction=direction))
    assert node.op_type == "BitShift" and node.attrs == {"left": direction == "LEFT"}


def test_bit_shift_bad_direction_is_malformed():
    with pytest.raises(ModelFormatError, match="direction"):
        convert_node("BitShift", {"a": random(2).astype(np.uint8), "b": random(2).astype(np.uint8)}, 11,
                     direction="UP")


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_mean_is_a_sum_divided_by_the_count(dtype):
    graph = convert_node("Mean", {"a": random(2, 3, dtype=dtype), "b": random(3, dtype=dtype),
                                  "c": random(2, 1, dtype=dtype)}, 13)
    total, divide = graph.nodes
    assert total.op_type == "AddN" and len(total.inputs) == 3
    assert divide.op_type == "DivFusion" and divide.inputs[0] == total.outputs[0]
    count = const(graph, divide.inputs[1])
    assert count.dtype == dtype and count.shape == () and count == 3
    assert graph.tensors[divide.outputs[0]].name == "y0"


def test_mean_of_one_input_is_a_copy():
    assert only_node(convert_node("Mean", {"a": random(2, 3)}, 8)).op_type == "AddN"


# ---- activation: PRelu, Shrink and the newer activations ------------------------------


@pytest.mark.parametrize(("op_type", "opset", "attrs", "expected"), [
    ("Elu", 6, {}, {"activation_type": "ELU", "alpha": 1.0}),
    ("Elu", 1, {"alpha": 0.5}, {"activation_type": "ELU", "alpha": 0.5}),
    ("Selu", 6, {}, {"activation_type": "SELU", "alpha": pytest.approx(1.6732632), "beta": pytest.approx(1.050701)}),
    ("Selu", 1, {}, {"activation_type": "SELU", "alpha": pytest.approx(1.6732), "beta": pytest.approx(1.0507)}),
    ("Selu", 22, {"alpha": 2.0, "gamma": 3.0}, {"activation_type": "SELU", "alpha": 2.0, "beta": 3.0}),
    ("Softplus", 1, {}, {"activation_type": "SOFTPLUS"}),
    ("Softsign", 22, {}, {"activation_type": "SOFTSIGN"}),
    ("Gelu", 20, {}, {"activation_type": "GELU"}),
    ("Gelu", 20, {"approximate": "tanh"}, {"activation_type": "GELU_TANH"}),
    ("Mish", 18, {}, {"activation_type": "MISH"}),
    ("Celu", 12, {"alpha": 0.5}, {"activation_type": "CELU", "alpha": 0.5}),
    ("ThresholdedRelu", 10, {}, {"activation_type": "THRESHOLDED_RELU", "alpha": 1.0}),
    ("Swish", 24, {"alpha": 0.5}, {"activation_type": "SWISH", "alpha": 0.5}),
])
def test_newer_activations(op_type, opset, attrs, expected):
    node = only_node(convert_node(op_type, {"x": random(2, 3)}, opset, **attrs))
    assert node.op_type == "Activation"
    assert {k: node.attrs[k] for k in expected} == expected


def test_selu_defaults_changed_at_opset_6():
    v1, v6 = (only_node(convert_node("Selu", {"x": random(2)}, opset)).attrs for opset in (1, 6))
    assert v1["alpha"] != v6["alpha"] and v1["beta"] != v6["beta"]


def test_gelu_unknown_approximation_is_malformed():
    with pytest.raises(ModelFormatError, match="approximate"):
        convert_node("Gelu", {"x": random(2, 3)}, 20, approximate="sigmoid")


@pytest.mark.parametrize("opset", [9, 16])
def test_prelu(opset):
    node = only_node(convert_node("PRelu", {"x": X4}, opset, {"slope": random(4, 1, 1)}))
    assert node.op_type == "PReLUFusion" and len(node.inputs) == 2


@pytest.mark.parametrize(("slope_shape", "aligned"), [((4,), (4, 1, 1)), ((1,), (1,))])
def test_prelu_before_opset_7_has_one_slope_per_channel(slope_shape, aligned):
    graph = convert_node("PRelu", {"x": X4}, 6, {"slope": random(*slope_shape)})
    assert const(graph, only_node(graph).inputs[1]).shape == aligned


def test_shrink():
    node = only_node(convert_node("Shrink", {"x": random(2, 3)}, 9, bias=0.25, lambd=1.5))
    assert node.op_type == "Shrink" and node.attrs == {"bias": 0.25, "lambd": 1.5}


# ---- shape -------------------------------------------------------------------------


@pytest.mark.parametrize("opset", [1, 4, 13])
def test_concat(opset):
    node = only_node(convert_node("Concat", {"a": random(2, 3), "b": random(2, 4)}, opset, axis=-1))
    assert node.op_type == "Concat" and node.attrs == {"axis": -1} and len(node.inputs) == 2


def test_concat_missing_axis_is_malformed_from_opset_4():
    with pytest.raises(ModelFormatError, match="axis"):
        convert_node("Concat", {"a": random(2, 3)}, 11)


def test_reshape_attribute_form_becomes_shape_input():
    graph = convert_node("Reshape", {"x": random(2, 3, 4)}, 1, shape=[2, -1])
    node = only_node(graph)
    assert node.op_type == "Reshape" and const(graph, node.inputs[1]).tolist() == [2, -1]


def test_reshape_input_form_and_allowzero():
    graph = convert_node("Reshape", {"x": random(2, 3, 4)}, 14, initializers={"s": np.array([2, 12])}, allowzero=1)
    node = only_node(graph)
    assert node.attrs == {"allowzero": True} and graph.tensors[node.inputs[1]].dtype == np.int64


def test_reshape_to_a_shape_computed_from_input_data_keeps_it_an_input():
    graph = convert_node("Reshape", {"x": random(2, 3, 4), "s": np.array([2, 12])}, 14)
    node = only_node(graph)
    assert [graph.tensors[i].name for i in node.inputs] == ["x", "s"]


@pytest.mark.parametrize("op", ["Squeeze", "Unsqueeze"])
def test_computed_axes_stay_an_input(op):
    graph = convert_node(op, {"x": random(1, 3, 1), "a": np.array([0])}, 13)
    node = only_node(graph)
    assert [graph.tensors[i].name for i in node.inputs] == ["x", "a"] and node.attrs == {"axis": ()}


def test_flatten_and_transpose():
    assert only_node(convert_node("Flatten", {"x": X4}, 13, axis=2)).attrs == {"axis": 2}
    assert only_node(convert_node("Transpose", {"x": X4}, 13, perm=[0, 2, 3, 1])).attrs == {"perm": [0, 2, 3, 1]}
    assert only_node(convert_node("Transpose", {"x": X4}, 13)).attrs == {"perm": []}


def test_squeeze_and_unsqueeze_attribute_form():
    assert only_node(convert_node("Squeeze", {"x": random(1, 3, 1)}, 11, axes=[0])).attrs == {"axis": [0]}
    assert only_node(convert_node("Squeeze", {"x": random(1, 3, 1)}, 11)).attrs == {"axis": []}
    assert only_node(convert_node("Unsqueeze", {"x": random(3)}, 11, axes=[0, -1])).attrs == {"axis": [0, -1]}


def test_squeeze_and_unsqueeze_input_form():
    axes = {"axes": np.array([0, 2])}
    assert only_node(convert_node("Squeeze", {"x": random(1, 3, 1)}, 13, axes)).attrs == {"axis": [0, 2]}
    assert only_node(convert_node("Unsqueeze", {"x": random(3)}, 13, axes)).attrs == {"axis": [0, 2]}
    assert only_node(convert_node("Squeeze", {"x": random(1, 3, 1)}, 13)).inputs == [0]


def test_pad_attribute_forms_become_inputs():
    graph = convert_node("Pad", {"x": random(2, 3)}, 2, pads=[0, 1, 1, 0], value=1.5)
    node = only_node(graph)
    assert node.op_type == "PadFusion" and node.attrs == {"padding_mode": "CONSTANT"}
    assert const(graph, node.inputs[1]).tolist() == [0, 1, 1, 0] and float(const(graph, node.inputs[2])) == 1.5
    node = only_node(convert_node("Pad", {"x": random(2, 3)}, 1, paddings=[1, 1, 1, 1], mode="edge"))
    assert node.attrs == {"padding_mode": "EDGE"} and len(node.inputs) == 2


def test_pad_input_form():
    graph = convert_node("Pad", {"x": random(2, 3)}, 13, {"pads": np.array([1, 0, 0, 1]),
                                                         "v": np.array(2.0, np.float32)}, mode="reflect")
    node = only_node(graph)
    assert node.attrs == {"padding_mode": "REFLECT"} and len(node.inputs) == 3


def test_pad_opset18_axes_expand_to_full_rank():
    inits = {"pads": np.array([1, 2, 3, 4]), "axes": np.array([-1, 1])}
    graph = convert_node("Pad", {"x": random(2, 3, 4)}, 18, inits, input_names=["x", "pads", "", "axes"])
    node = only_node(graph)
    assert const(graph, node.inputs[1]).tolist() == [0, 2, 1, 0, 4, 3]


def test_pad_wrap_mode():
    graph = convert_node("Pad", {"x": random(2, 3)}, 19, initializers={"pads": np.array([1, 0, 0, 1])}, mode="wrap")
    assert only_node(graph).attrs == {"padding_mode": "WRAP"}


def test_pad_computed_axes_stay_an_input():
    graph = convert_node("Pad", {"x": random(2, 3), "pads": np.array([1, 2]), "axes": np.array([1])}, 19,
                         input_names=["x", "pads", "", "axes"])
    assert [graph.tensors[i].name if i >= 0 else None for i in only_node(graph).inputs] == ["x", "pads", None, "axes"]


def test_slice_attribute_form_becomes_inputs():
    graph = convert_node("Slice", {"x": random(4, 5)}, 1, starts=[1], ends=[3], axes=[1])
    node = only_node(graph)
    assert node.op_type == "StridedSlice"
    assert [const(graph, i).tolist() for i in node.inputs[1:]] == [[1], [3], [1]]


def test_slice_input_form_keeps_absent_axes():
    inits = {"starts": np.array([0]), "ends": np.array([4]), "steps": np.array([2])}
    graph = convert_node("Slice", {"x": random(4, 5)}, 13, inits, input_names=["x", "starts", "ends", "", "steps"])
    assert only_node(graph).inputs[3] == -1 and len(only_node(graph).inputs) == 5


@pytest.mark.parametrize(("opset", "kwargs", "sizes"), [
    (11, {"split": [1, 3]}, [1, 3]),
    (13, {"initializers": {"split": np.array([3, 1])}}, [3, 1]),
    (13, {}, []),
    (18, {"num_outputs": 2}, []),
])
def test_split(opset, kwargs, sizes):
    node = only_node(convert_node("Split", {"x": random(2, 4)}, opset, n_outputs=2, axis=1, **kwargs))
    assert node.attrs == {"axis": 1, "size_splits": sizes} and len(node.outputs) == 2


def test_split_opset18_uneven_num_outputs():
    node = only_node(convert_node("Split", {"x": random(5, 2)}, 18, n_outputs=2, num_outputs=2))
    assert node.attrs["size_splits"] == [3, 2]


def test_gather_expand_shape_constant_of_shape():
    assert only_node(convert_node("Gather", {"x": random(4, 5), "i": np.array([0, 2])}, 13, axis=1)).attrs == {
        "axis": 1}
    assert only_node(convert_node("Expand", {"x": random(3, 1)}, 13, initializers={"s": np.array([2, 3, 4])})
                     ).op_type == "BroadcastTo"
    model = graph_model([helper.make_node("Shape", ["x"], ["s"], name="shape", start=1, end=-1)],
                        {"x": ["batch", 3, 4]}, ["s"], opset=15)
    graph, _ = convert_to_graph(model)
    node = only_node(graph)
    assert node.attrs == {"start": 1, "end": -1} and graph.tensors[node.outputs[0]].dtype == np.int64
    value = helper.make_tensor("v", TensorProto.INT32, [1], [7])
    model = graph_model([helper.make_node("Shape", ["x"], ["s"], name="shape"),
                         helper.make_node("ConstantOfShape", ["s"], ["y"], name="fill", value=value)],
                        {"x": ["batch", 3]}, ["y"], opset=13)  # a dynamic shape, so nothing folds
    graph, _ = convert_to_graph(model)
    fill = graph.nodes[1]
    assert fill.op_type == "ConstantOfShape" and fill.attrs == {"data_type": "INT32", "value": 7.0}
    assert graph.tensors[fill.outputs[0]].dtype == np.int32


@pytest.mark.parametrize(("opset", "to", "expected"), [(1, "FLOAT16", "FLOAT16"), (6, TensorProto.INT32, "INT32"),
                                                       (19, TensorProto.BOOL, "BOOL")])
def test_cast(opset, to, expected):
    graph = convert_node("Cast", {"x": random(2)}, opset, to=to)
    assert only_node(graph).attrs == {"to": expected, "saturate": True}


@pytest.mark.parametrize(("to", "expected"), [(TensorProto.FLOAT8E5M2, "FLOAT8E5M2"), (TensorProto.INT4, "INT4")])
def test_cast_to_a_narrow_type_keeps_saturate(to, expected):
    graph = convert_node("Cast", {"x": random(2)}, 21, to=to, saturate=0)
    assert only_node(graph).attrs == {"to": expected, "saturate": False}


def test_cast_like_takes_the_second_inputs_type():
    graph = convert_node("CastLike", {"x": random(2), "like": np.array([1], np.int32)}, 15)
    assert only_node(graph).op_type == "Cast" and only_node(graph).attrs == {"to": "INT32", "saturate": True}


def test_cast_to_string_is_unsupported():
    assert "Cast to STRING" in unsupported_reason("Cast", {"x": random(2)}, 13, to=TensorProto.STRING)


def test_identity_from_input_to_output_is_kept():
    node = only_node(convert_node("Identity", {"x": random(2)}, 13))
    assert node.op_type == "Identity"


@pytest.mark.parametrize(("opset", "mask_dtype"), [(13, "BOOL"), (7, "FLOAT32")])
def test_dropout_mask_is_all_true_from_the_input_shape(opset, mask_dtype):
    graph, _ = convert_to_graph(single_node_model("Dropout", {"x": random(2, 3)}, n_outputs=2, opset=opset))
    assert [n.op_type for n in graph.nodes] == ["Identity", "Shape", "ConstantOfShape"]
    assert graph.nodes[-1].attrs == {"data_type": mask_dtype, "value": 1.0}


# ---- reduce ------------------------------------------------------------------------


@pytest.mark.parametrize(("op_type", "mode"), [("ReduceMean", "MEAN"), ("ReduceMax", "MAX"), ("ReduceSum", "SUM")])
def test_reduce_attribute_axes(op_type, mode):
    node = only_node(convert_node(op_type, {"x": X4}, 11, axes=[2, 3], keepdims=0))
    assert node.attrs == {"reduce_mode": mode, "axes": [2, 3], "keep_dims": False, "noop_with_empty_axes": False}


@pytest.mark.parametrize(("op_type", "opset"), [("ReduceSum", 13), ("ReduceMean", 18), ("ReduceMax", 18)])
def test_reduce_input_axes(op_type, opset):
    node = only_node(convert_node(op_type, {"x": X4}, opset, {"axes": np.array([1])}, noop_with_empty_axes=1))
    assert node.attrs["axes"] == [1] and node.attrs["noop_with_empty_axes"] is True and node.inputs == [0]
    assert only_node(convert_node(op_type, {"x": X4}, opset)).attrs["axes"] == []


def test_reduce_computed_axes_stay_an_input():
    graph = convert_node("ReduceSum", {"x": X4, "axes": np.array([1])}, 13)
    assert [graph.tensors[i].name for i in only_node(graph).inputs] == ["x", "axes"]


@pytest.mark.parametrize("op_type", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize(("opset", "axis", "axes"), [(11, 1, [1, 2, 3]), (11, -2, [2, 3]), (13, 1, [1]),
                                                     (13, None, [-1])])
def test_softmax_axes(op_type, opset, axis, axes):
    attrs = {} if axis is None else {"axis": axis}
    node = only_node(convert_node(op_type, {"x": X4}, opset, **attrs))
    assert node.op_type == op_type and node.attrs == {"axis": axes}


# ---- resize ------------------------------------------------------------------------

RESIZE_DEFAULTS = {"cubic_coeff_a": -0.75, "exclude_outside": False, "extrapolation_value": 0.0, "antialias": False}


def test_upsample_opset7_scales_attribute():
    graph = convert_node("Upsample", {"x": X4}, 7, scales=[1.0, 1.0, 2.0, 2.0], mode="linear")
    node = only_node(graph)
    assert node.op_type == "Resize" and node.inputs[1] == -1
    assert const(graph, node.inputs[2]).tolist() == [1, 1, 2, 2]
    assert node.attrs == {"method": "LINEAR", "coordinate_transform_mode": "ASYMMETRIC", "nearest_mode": "FLOOR",
                          **RESIZE_DEFAULTS}


@pytest.mark.parametrize(("op_type", "opset"), [("Upsample", 9), ("Resize", 10)])
def test_legacy_resize_scales_input(op_type, opset):
    down = {"scales": np.array([1, 1, 0.5, 0.5], np.float32)}
    node = only_node(convert_node(op_type, {"x": X4}, opset, down))
    assert node.attrs["nearest_mode"] == "CEIL" and len(node.inputs) == 3


def test_resize_opset11_sizes_with_empty_scales():
    inits = {"roi": np.zeros(0, np.float32), "scales": np.zeros(0, np.float32),
             "sizes": np.array([1, 4, 16, 12])}
    graph = convert_node("Resize", {"x": X4}, 11, inits, coordinate_transformation_mode="align_corners",
                         mode="linear")
    node = only_node(graph)
    assert node.inputs[1:3] == [-1, -1] and const(graph, node.inputs[3]).tolist() == [1, 4, 16, 12]
    assert node.attrs == {"method": "LINEAR", "coordinate_transform_mode": "ALIGN_CORNERS",
                          "nearest_mode": "ROUND_PREFER_FLOOR", **RESIZE_DEFAULTS}
    assert graph.tensors[node.outputs[0]].shape == (1, 4, 16, 12)


def test_resize_opset13_scales_and_nearest_mode():
    inits = {"scales": np.array([1, 1, 2, 2], np.float32)}
    node = only_node(convert_node("Resize", {"x": X4}, 13, inits, input_names=["x", "", "scales"],
                                  nearest_mode="floor", coordinate_transformation_mode="pytorch_half_pixel"))
    assert node.attrs["nearest_mode"] == "FLOOR" and node.attrs["coordinate_transform_mode"] == "PYTORCH_HALF_PIXEL"
    assert len(node.inputs) == 3


def test_resize_cubic_attributes():
    inits = {"scales": np.array([1, 1, 2, 2], np.float32)}
    node = only_node(convert_node("Resize", {"x": X4}, 13, inits, input_names=["x", "", "scales"], mode="cubic",
                                  cubic_coeff_a=-0.5, exclude_outside=1))
    assert node.attrs["method"] == "CUBIC" and node.attrs["cubic_coeff_a"] == -0.5
    assert node.attrs["exclude_outside"] is True


def test_resize_tf_crop_and_resize_keeps_the_roi_and_other_modes_drop_it():
    inits = {"roi": np.array([0, 0, 0.2, 0.3, 1, 1, 0.9, 0.8], np.float32), "sizes": np.array([1, 4, 5, 5])}
    graph = convert_node("Resize", {"x": X4}, 13, inits, input_names=["x", "roi", "", "sizes"], mode="linear",
                         coordinate_transformation_mode="tf_crop_and_resize", extrapolation_value=2.5)
    node = only_node(graph)
    assert const(graph, node.inputs[1]).tolist() == inits["roi"].tolist()
    assert node.attrs["extrapolation_value"] == 2.5 and node.inputs[2] == -1
    node = only_node(convert_node("Resize", {"x": X4}, 13, inits, input_names=["x", "roi", "", "sizes"]))
    assert node.inputs[1] == -1


def test_resize_opset18_axes_expand_scales():
    inits = {"scales": np.array([3, 2], np.float32)}
    graph = convert_node("Resize", {"x": X4}, 18, inits, input_names=["x", "", "scales"], axes=[3, 2])
    assert const(graph, only_node(graph).inputs[2]).tolist() == [1, 1, 2, 3]


def test_resize_opset18_axes_expand_sizes_and_roi():
    inits = {"roi": np.array([0.1, 0.2, 0.7, 0.9], np.float32), "sizes": np.array([5, 6])}
    graph = convert_node("Resize", {"x": X4}, 18, inits, input_names=["x", "roi", "", "sizes"], axes=[3, 2],
                         coordinate_transformation_mode="tf_crop_and_resize")
    node = only_node(graph)
    np.testing.assert_allclose(const(graph, node.inputs[1]), [0, 0, 0.2, 0.1, 1, 1, 0.9, 0.7])
    assert const(graph, node.inputs[3]).tolist() == [1, 4, 6, 5]


def test_resize_opset18_axes_of_computed_scales_gather_them_at_run_time():
    graph = convert_node("Resize", {"x": X4, "scales": np.array([3, 2], np.float32)}, 18,
                         input_names=["x", "", "scales"], axes=[3, 2])
    assert [n.op_type for n in graph.nodes] == ["Concat", "Gather", "Resize"]
    concat, gather, _ = graph.nodes
    assert const(graph, concat.inputs[1]).tolist() == [1, 1, 1, 1]
    assert const(graph, gather.inputs[1]).tolist() == [2, 3, 1, 0]


@pytest.mark.parametrize(("policy", "sizes", "dims", "scales"), [
    ("not_larger", [4, 9], [1, 4, 4, 4], None),  # 8x8 -> scale 0.5 on both axes: sizes alone say it
    ("not_larger", [4, 6], [1, 4, 4, 5], [1, 1, 4 / 7, 4 / 7]),  # 7x9 -> 4x5.14: the dims round
    ("not_smaller", [4, 6], [1, 4, 5, 6], [1, 1, 6 / 9, 6 / 9]),
])
def test_resize_keep_aspect_ratio_policy_is_resolved(policy, sizes, dims, scales):
    x = X4 if scales is None else random(1, 4, 7, 9)
    graph = convert_node("Resize", {"x": x}, 18, {"sizes": np.array(sizes)}, input_names=["x", "", "", "sizes"],
                         axes=[2, 3], keep_aspect_ratio_policy=policy)
    node = only_node(graph)
    assert const(graph, node.inputs[3]).tolist() == dims
    if scales is None:
        assert node.inputs[2] == -1
    else:
        np.testing.assert_allclose(const(graph, node.inputs[2]), scales, rtol=1e-6)


@pytest.mark.parametrize(("attrs", "message"), [
    ({"coordinate_transformation_mode": "tf_half_pixel_for_nn"}, "tf_half_pixel_for_nn"),
    ({"coordinate_transformation_mode": "tf_crop_and_resize"}, "needs the roi"),
    ({"keep_aspect_ratio_policy": "fit"}, "keep_aspect_ratio_policy"),
    ({"mode": "area"}, "mode='area'"),
])
def test_resize_unsupported_modes(attrs, message):
    inits = {"scales": np.array([1, 1, 2, 2], np.float32)}
    reason = unsupported_reason("Resize", {"x": X4}, 18, initializers=inits, input_names=["x", "", "scales"],
                                **attrs)
    assert message in reason


def test_resize_antialias_needs_the_schema_field():
    inits = {"scales": np.array([1, 1, 0.5, 0.5], np.float32)}
    args = ({"x": X4}, 18)
    kwargs = {"input_names": ["x", "", "scales"], "mode": "linear", "antialias": 1}
    if "antialias" in default_attrs("Resize"):
        assert only_node(convert_node("Resize", *args, inits, **kwargs)).attrs["antialias"] is True
    else:
        assert "Resize.antialias" in unsupported_reason("Resize", *args, initializers=inits, **kwargs)


def test_resize_keep_aspect_ratio_policy_of_computed_sizes_is_unsupported():
    reason = unsupported_reason("Resize", {"x": X4, "sizes": np.array([4, 6])}, 18, input_names=["x", "", "", "sizes"],
                                axes=[2, 3], keep_aspect_ratio_policy="not_larger")
    assert "constant sizes" in reason
