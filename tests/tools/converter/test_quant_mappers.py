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


@pytest.mark.parametrize(("output_dtype", "name", "bits"), [(22, "INT4", 4), (21, "UINT4", 4), (26, "INT2", 2),
                                                           (25, "UINT2", 2)])
def test_narrow_integer_outputs_carry_their_bits(output_dtype, name, bits):
    graph = convert_node("QuantizeLinear", {"x": random(4)}, opset=21, initializers={"s": np.float32(0.1)},
                         input_names=["x", "s"], output_dtype=output_dtype)
    node = only_node(graph)
    assert node.attrs["output_type"] == name and graph.tensors[node.outputs[0]].quant.bits == bits


def test_float8_outputs_keep_saturate_and_carry_no_quant_params():
    graph = convert_node("QuantizeLinear", {"x": random(4)}, opset=21, initializers={"s": np.float32(0.1)},
                         input_names=["x", "s"], output_dtype=17, saturate=0)  # FLOAT8E4M3FN
    node = only_node(graph)
    assert (node.attrs["output_type"], node.attrs["saturate"]) == ("FLOAT8E4M3FN", False)
    assert graph.tensors[node.outputs[0]].quant is None


def test_float8_fnuz_is_unsupported_with_a_reason():
    with pytest.raises(UnsupportedOpError, match="fnuz"):
        convert_node("QuantizeLinear", {"x": random(4)}, opset=21, initializers={"s": np.float32(0.1)},
                     input_names=["x", "s"], output_dtype=18)  # FLOAT8E4M3FNUZ
