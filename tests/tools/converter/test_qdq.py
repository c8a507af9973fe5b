"""DequantizeLinear -> op -> QuantizeLinear groups become quantized ops; QOperator forms expand
into the same groups; hostile quantization parameters are refused naming the tensor."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

import lite
from lite.tools import converter
from tests.support.quantized import qdq_op_model

RNG = np.random.default_rng(7)
X = RNG.standard_normal((1, 3, 6, 6)).astype(np.float32)
W = RNG.standard_normal((4, 3, 3, 3)).astype(np.float32)


def _conv_model(**attrs) -> onnx.ModelProto:
    return qdq_op_model("Conv", {"x": X}, {"w": W}, bias=RNG.standard_normal(4).astype(np.float32), **attrs)


def _set_initializer(model: onnx.ModelProto, name: str, value: np.ndarray) -> onnx.ModelProto:
    for k, tensor in enumerate(model.graph.initializer):
        if tensor.name == name:
            model.graph.initializer[k].CopyFrom(numpy_helper.from_array(value, name))
    return model


def test_a_qdq_group_becomes_one_quantized_op_with_its_parameters():
    graph, report = converter.convert_to_graph(_conv_model(pads=[1, 1, 1, 1]))
    assert [n.op_type for n in graph.nodes] == ["QuantizeLinear", "Conv2DFusion", "DequantizeLinear"]
    conv = graph.nodes[1]
    x, w, b, y = (graph.tensors[i] for i in (*conv.inputs, conv.outputs[0]))
    assert (x.dtype, w.dtype, b.dtype, y.dtype) == (np.int8, np.int8, np.int32, np.int8)
    assert w.quant.scale.size == 4 and w.quant.axis == 0 and not w.quant.zero_point.any()
    np.testing.assert_allclose(b.quant.scale, x.quant.scale * w.quant.scale, rtol=1e-6)
    assert report.quantized_ops == [conv.name]


def test_a_float_bias_becomes_int32_in_the_accumulators_units():
    model = _conv_model()
    bias = RNG.standard_normal(4).astype(np.float32)
    for k, node in enumerate(model.graph.node):  # the bias read as a float constant, not through a DequantizeLinear
        if node.op_type == "Conv":
            model.graph.node[k].input[2] = "b_float"
    model.graph.initializer.append(numpy_helper.from_array(bias, "b_float"))
    graph, _ = converter.convert_to_graph(model)
    conv = next(n for n in graph.nodes if n.op_type == "Conv2DFusion")
    b = graph.tensors[conv.inputs[2]]
    assert b.dtype == np.int32
    np.testing.assert_allclose(b.data * b.quant.scale, bias, atol=float(b.quant.scale.max()))


def test_a_dequantized_tensor_that_a_float_op_also_reads_keeps_its_dequantizer():
    model = _conv_model()
    model.graph.node.append(helper.make_node("Relu", ["x_dq"], ["side"]))
    model.graph.output.append(helper.make_tensor_value_info("side", onnx.TensorProto.FLOAT, None))
    graph, _ = converter.convert_to_graph(model)
    kinds = [n.op_type for n in graph.nodes]
    assert "Conv2DFusion" in kinds and kinds.count("DequantizeLinear") == 2


def test_an_op_whose_float_output_is_also_a_graph_output_stays_float():
    model = _conv_model()
    model.graph.output.append(helper.make_tensor_value_info("y_float", onnx.TensorProto.FLOAT, None))
    graph, report = converter.convert_to_graph(model)
    assert report.quantized_ops == [] and "QuantizeLinear" in [n.op_type for n in graph.nodes]


def test_the_qoperator_form_converts_to_the_same_quantized_op():
    qdq = _conv_model()
    consts = {t.name: numpy_helper.to_array(t) for t in qdq.graph.initializer}
    inits = [numpy_helper.from_array(consts[n], n) for n in
             ("x_s", "x_z", "w_q", "w_s", "w_z", "y_s", "y_z", "b_q")]
    nodes = [helper.make_node("QuantizeLinear", ["x", "x_s", "x_z"], ["x_q"]),
             helper.make_node("QLinearConv", ["x_q", "x_s", "x_z", "w_q", "w_s", "w_z", "y_s", "y_z", "b_q"], ["y_q"]),
             helper.make_node("DequantizeLinear", ["y_q", "y_s", "y_z"], ["y"])]
    graph = helper.make_graph(nodes, "qlinear", [helper.make_tensor_value_info("x", 1, X.shape)],
                              [helper.make_tensor_value_info("y", 1, None)], inits)
    qoperator = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    ops = [[n.op_type for n in converter.convert_to_graph(m)[0].nodes] for m in (qdq, qoperator)]
    assert ops[0] == ops[1]
    outputs = [lite_run(m) for m in (qdq, qoperator)]
    np.testing.assert_array_equal(*outputs)


def lite_run(model: onnx.ModelProto) -> np.ndarray:
    built = lite.Model()
    built.build(converter.convert(model), lite.ModelType.LITE, lite.Context())
    return built.predict([X])[0].get_data_to_numpy()


def test_a_microsoft_op_that_does_not_expand_says_why():
    node = helper.make_node("QLinearGlobalAveragePool", ["x_q", "s", "z", "s", "z"], ["y_q"], domain="com.microsoft",
                            channels_last=1)
    graph = helper.make_graph([helper.make_node("QuantizeLinear", ["x", "s", "z"], ["x_q"]), node,
                               helper.make_node("DequantizeLinear", ["y_q", "s", "z"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", 1, [1, 4, 4, 3])],
                              [helper.make_tensor_value_info("y", 1, None)],
                              [numpy_helper.from_array(np.float32(0.1), "s"),
                               numpy_helper.from_array(np.uint8(128), "z")])
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    model = helper.make_model(graph, opset_imports=opsets)
    with pytest.raises(lite.UnsupportedOpError, match="channels_last=1"):
        converter.convert(model)


HOSTILE = {
    "zero scale": ("w_s", np.zeros(4, np.float32), "w_q"),
    "negative scale": ("x_s", np.float32(-0.5), "x_q"),
    "NaN scale": ("y_s", np.float32(np.nan), "y_q"),
    "infinite scale": ("w_s", np.full(4, np.inf, np.float32), "w_q"),
    "subnormal scale": ("x_s", np.float32(1e-45), "x_q"),
    "per-axis scales one short": ("w_s", np.ones(3, np.float32), "w"),
    "zero point of another type": ("w_z", np.zeros(4, np.int16), "w_z"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_quantization_parameters_are_refused_naming_the_tensor(case):
    name, value, named = HOSTILE[case]
    model = _set_initializer(_conv_model(), name, value)
    with pytest.raises(lite.LiteError, match=named):
        converter.convert(model)


def test_an_axis_out_of_range_is_refused():
    model = _conv_model()
    for node in model.graph.node:
        if node.op_type == "DequantizeLinear" and node.input[0] == "w_q":
            node.attribute[0].i = 7
    with pytest.raises(lite.LiteError, match="axis"):
        converter.convert(model)


def test_a_scale_claiming_two_to_the_31_elements_is_refused():
    model = _conv_model()
    for tensor in model.graph.initializer:
        if tensor.name == "w_s":
            tensor.dims[:] = [2**31]
    with pytest.raises(lite.LiteError, match="w_s"):
        converter.convert(model)
