"""com.microsoft MatMulNBits -> DequantizeLinear of a constant [K, N] uint4 (uint8 for 8 bits)
weight with blocked scales along K, then MatMul (+ Add bias): against onnxruntime's own kernel."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from lite.errors import UnsupportedOpError
from lite.schema.reader import read_model
from lite.tools import converter
from tests.support.e2e import build_lite, predict

MICROSOFT = helper.make_opsetid("com.microsoft", 1)


def nbits_model(k: int, n: int, bits: int = 4, block: int = 32, zero_points: bool = True, bias: bool = True,
                opset: int = 14, seed: int = 0, **attrs):
    """A [batch, 3, K] @ MatMulNBits(B) model with random packed codes, scales and zero points."""
    rng = np.random.default_rng(seed)
    blocks = -(-k // block)
    weights = {"B": rng.integers(0, 256, (n, blocks, block * bits // 8), dtype=np.uint8),
               "scales": (rng.random(n * blocks) + 0.5).astype(np.float32) / 20}
    if zero_points:
        weights["zero_points"] = rng.integers(0, 256, n * -(-blocks * bits // 8), dtype=np.uint8)
    if bias:
        weights["bias"] = rng.standard_normal(n).astype(np.float32)
    names = ["A", "B", "scales", "zero_points" if zero_points else "", "", "bias" if bias else ""]
    node = helper.make_node("MatMulNBits", names, ["Y"], domain="com.microsoft",
                            **({"K": k, "N": n, "bits": bits, "block_size": block} | attrs))
    graph = helper.make_graph([node], "nbits", [helper.make_tensor_value_info("A", TensorProto.FLOAT, [None, 3, k])],
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [None, 3, n])],
                              [numpy_helper.from_array(v, name) for name, v in weights.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset), MICROSOFT])


def _onnxruntime(model, a: np.ndarray) -> np.ndarray:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"A": a})[0]


@pytest.mark.parametrize(("k", "bits", "zero_points", "bias", "opset"), [
    (70, 4, True, True, 14),  # K not a multiple of block_size: the last block is partial
    (70, 4, False, False, 21),  # default zero point 8
    (64, 4, True, False, 17),
    (45, 8, True, True, 14),
    (45, 8, False, True, 21),  # default zero point 128
])
def test_matmul_nbits_agrees_with_onnxruntime(k, bits, zero_points, bias, opset):
    model = nbits_model(k, 12, bits, zero_points=zero_points, bias=bias, opset=opset)
    a = np.random.default_rng(1).standard_normal((2, 3, k)).astype(np.float32)
    expected = _onnxruntime(model, a)
    actual = predict(build_lite(converter.convert(model), 1), {"A": a})[0]
    # NOTE: the same dequantized weights multiplied in float32 on both sides (measured: equal)
    np.testing.assert_allclose(actual, expected, rtol=1e-5, atol=1e-5 * np.abs(expected).max())


def test_the_weight_becomes_a_k_by_n_uint4_constant_blocked_along_k():
    graph = read_model(converter.convert(nbits_model(70, 12)))
    assert [n.op_type for n in graph.nodes] == ["DequantizeLinear", "MatMulFusion"]
    dequantize = graph.nodes[0]
    weight, scale = (graph.tensors[t] for t in dequantize.inputs[:2])
    assert (weight.dtype.name, weight.shape, weight.is_const) == ("uint4", (70, 12), True)
    assert scale.shape == (3, 12) and (dequantize.attrs["axis"], dequantize.attrs["block_size"]) == (0, 32)
    assert (weight.quant.bits, weight.quant.block_size, weight.quant.axis) == (4, 32, 0)


@pytest.mark.parametrize(("change", "reason"), [
    ({"bits": 2}, "only 4 and 8 bits"),
    ({"block_size": 24}, "power of 2"),
    ({"K": 64}, "layout is uint8"),  # B was packed for K=70: 3 blocks, not 2
])
def test_unsupported_forms_are_refused_with_the_reason(change, reason):
    model = nbits_model(70, 12)
    for attr in model.graph.node[0].attribute:
        if attr.name in change:
            attr.i = change[attr.name]
    with pytest.raises(UnsupportedOpError, match=reason):
        converter.convert(model)


def test_g_idx_is_refused():
    model = nbits_model(70, 12)
    model.graph.initializer.append(numpy_helper.from_array(np.arange(70, dtype=np.int32) // 32, "g_idx"))
    model.graph.node[0].input[4] = "g_idx"
    with pytest.raises(UnsupportedOpError, match="g_idx"):
        converter.convert(model)
