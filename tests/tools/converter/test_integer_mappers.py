"""DynamicQuantizeLinear, MatMulInteger and ConvInteger mappers: attributes, absent zero points, and
malformed or unsupported nodes refused with a reason."""

from __future__ import annotations

import numpy as np
import pytest

from lite.errors import ModelFormatError, UnsupportedOpError
from lite.tools.converter import convert_to_graph
from tests.support.integer import integer_model


def _only_node(model):
    graph, _ = convert_to_graph(model, fusion=False)
    assert len(graph.nodes) == 1, [n.op_type for n in graph.nodes]
    return graph, graph.nodes[0]


def test_dynamic_quantize_linear_has_three_typed_outputs():
    graph, node = _only_node(integer_model("DynamicQuantizeLinear", {"x": np.zeros((2, 3), np.float32)},
                                           n_outputs=3))
    assert node.op_type == "DynamicQuantizeLinear" and node.attrs == {}
    assert [graph.tensors[i].dtype for i in node.outputs] == [np.uint8, np.float32, np.uint8]


def test_matmul_integer_keeps_its_zero_points():
    model = integer_model("MatMulInteger", {"a": np.zeros((2, 3), np.uint8)},
                          {"b": np.zeros((3, 4), np.int8), "az": np.uint8(3), "bz": np.zeros(4, np.int8)})
    graph, node = _only_node(model)
    assert node.op_type == "MatMulInteger" and len(node.inputs) == 4
    assert graph.tensors[node.outputs[0]].dtype == np.int32


def test_an_absent_zero_point_stays_absent():
    model = integer_model("ConvInteger", {"x": np.zeros((1, 2, 5, 5), np.uint8)},
                          {"w": np.zeros((3, 2, 3, 3), np.uint8), "wz": np.zeros(3, np.uint8)},
                          node_inputs=["x", "w", "", "wz"])
    _, node = _only_node(model)
    assert node.inputs[2] == -1 and len(node.inputs) == 4


def test_conv_integer_takes_convs_attributes():
    model = integer_model("ConvInteger", {"x": np.zeros((1, 4, 9, 9), np.int8)}, {"w": np.zeros((6, 2, 3, 2), np.int8)},
                          pads=[0, 1, 2, 1], strides=[2, 1], dilations=[1, 2], group=2)
    _, node = _only_node(model)
    assert node.op_type == "ConvInteger"
    assert node.attrs == {"kernel_size": [3, 2], "stride": [2, 1], "dilation": [1, 2], "pad_list": [0, 1, 2, 1],
                          "pad_mode": "PAD", "group": 2, "in_channel": 4, "out_channel": 6}


def test_conv_integer_auto_pad():
    model = integer_model("ConvInteger", {"x": np.zeros((1, 1, 5, 5), np.uint8)},
                          {"w": np.zeros((1, 1, 2, 2), np.uint8)}, auto_pad="SAME_LOWER")
    assert _only_node(model)[1].attrs["pad_mode"] == "SAME_LOWER"


@pytest.mark.parametrize(("op", "inputs", "consts", "match"), [
    ("MatMulInteger", {"a": np.zeros((2, 3), np.uint8)}, {"b": np.zeros((3, 4), np.uint8), "az": np.zeros(3, np.uint8)},
     "rows"),
    ("MatMulInteger", {"a": np.zeros((2, 3), np.uint8)}, {"b": np.zeros((3, 4), np.uint8), "az": np.zeros(1, np.uint8),
                                                          "bz": np.zeros((3, 4, 1), np.uint8)}, "broadcast"),
    ("ConvInteger", {"x": np.zeros((1, 2, 4, 4), np.uint8)}, {"w": np.zeros((3, 2, 1, 1), np.uint8),
                                                              "xz": np.zeros(2, np.uint8)}, "scalar"),
    ("ConvInteger", {"x": np.zeros((1, 2, 4, 4), np.uint8)}, {"w": np.zeros((3, 2, 1, 1), np.uint8),
                                                              "xz": np.uint8(0), "wz": np.zeros(2, np.uint8)},
     "output channel"),
])
def test_zero_points_that_do_not_fit_are_malformed(op, inputs, consts, match):
    with pytest.raises(ModelFormatError, match=match):
        convert_to_graph(integer_model(op, inputs, consts), fusion=False)


def test_mismatched_zero_point_types_are_malformed():
    """ONNX's type constraint is not checked by shape inference with these inputs; the mapper checks it."""
    model = integer_model("MatMulInteger", {"a": np.zeros((2, 3), np.uint8)},
                          {"b": np.zeros((3, 4), np.uint8), "az": np.uint8(0), "bz": np.uint8(0)})
    model.graph.initializer[1].data_type = 3  # az: INT8 where a is UINT8
    with pytest.raises(ModelFormatError, match="zero point"):
        convert_to_graph(model, fusion=False)


def test_an_unknown_auto_pad_is_unsupported():
    model = integer_model("ConvInteger", {"x": np.zeros((1, 1, 5, 5), np.uint8)},
                          {"w": np.zeros((1, 1, 2, 2), np.uint8)})
    model.graph.node[0].attribute.add(name="auto_pad", s=b"WRAP", type=3)  # STRING
    with pytest.raises(UnsupportedOpError, match="auto_pad"):
        convert_to_graph(model, fusion=False)


def test_a_conv_input_without_spatial_axes_is_unsupported():
    model = integer_model("ConvInteger", {"x": np.zeros((1, 2), np.uint8)}, {"w": np.zeros((3, 2), np.uint8)})
    with pytest.raises(UnsupportedOpError, match="spatial"):
        convert_to_graph(model, fusion=False)
