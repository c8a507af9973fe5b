"""QuantizeLinear / DequantizeLinear mappers: each opset, constant scales become QuantParams."""

from __future__ import annotations

import numpy as np
import pytest

from lite.errors import UnsupportedOpError
from tests.support.converter import convert_node, only_node, random


@pytest.mark.parametrize("opset", [10, 13, 19, 21, 23])
def test_quantize_with_constant_scale_attaches_quant_params(opset):
    init = {"s": np.float32(0.05), "z": np.int8(-3)}
    graph = convert_node("QuantizeLinear", {"x": random(2, 3)}, opset=opset, initializers=init,
                         input_names=["x", "s", "z"])
    node = only_node(graph)
    assert node.op_type == "QuantizeLinear" and node.attrs["output_type"] == "INT8"
    out = graph.tensors[node.outputs[0]]
    assert out.dtype == np.int8 and out.quant.per_tensor
    assert out.quant.scale.tolist() == [np.float32(0.05)] and out.quant.zero_point.tolist() == [-3]


@pytest.mark.parametrize("opset", [13, 21])
def test_dequantize_per_axis_attaches_to_its_input(opset):
    init = {"s": np.array([0.1, 0.2, 0.3], np.float32), "z": np.array([1, 2, 3], np.uint8)}
    graph = convert_node("DequantizeLinear", {"x": np.zeros((2, 3), np.uint8)}, opset=opset, initializers=init,
                         input_names=["x", "s", "z"], axis=-1)
    node = only_node(graph)
    assert node.attrs["axis"] == 1 and node.attrs["output_type"] == "FLOAT32"
    quant = graph.tensors[node.inputs[0]].quant
    assert quant.axis == 1 and quant.zero_point.tolist() == [1, 2, 3]


def test_blocked_and_output_dtype_at_opset_21():
    init = {"s": np.full((2, 2), 0.5, np.float32)}
    graph = convert_node("QuantizeLinear", {"x": random(2, 4)}, opset=21, initializers=init,
                         input_names=["x", "s"], axis=1, block_size=2, output_dtype=3)  # INT8
    node = only_node(graph)
    assert (node.attrs["block_size"], node.attrs["output_type"]) == (2, "INT8")
    assert graph.tensors[node.outputs[0]].quant.block_size == 2


def test_runtime_scales_stay_inputs_without_quant_params():
    graph = convert_node("QuantizeLinear", {"x": random(4), "s": np.float32(0.1), "z": np.uint8(0)}, opset=13)
    node = only_node(graph)
    assert len(node.inputs) == 3 and graph.tensors[node.outputs[0]].quant is None


def test_int4_is_unsupported_with_a_reason():
    with pytest.raises(UnsupportedOpError, match="int4"):
        convert_node("QuantizeLinear", {"x": random(4)}, opset=21, initializers={"s": np.float32(0.1)},
                     input_names=["x", "s"], output_dtype=22)  # INT4
