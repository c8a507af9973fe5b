"""Small ONNX models shared by the runtime tests (tests/test_model.py, tests/test_runner.py,
tests/test_loader.py, tests/test_conversion.py)."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def small_cnn(batch="N"):
    """Conv -> Relu -> GlobalAveragePool -> Flatten -> Gemm, with a dynamic or fixed batch (same weights)."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((8, 3, 3, 3)).astype(np.float32), "w")
    fc = numpy_helper.from_array(rng.standard_normal((5, 8)).astype(np.float32), "fc")
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"], name="relu"),
        helper.make_node("GlobalAveragePool", ["r"], ["p"], name="gap"),
        helper.make_node("Flatten", ["p"], ["f"], name="flatten"),
        helper.make_node("Gemm", ["f", "fc"], ["y"], name="gemm", transB=1),
    ]
    graph = helper.make_graph(nodes, "cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 5])], [w, fc])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


_MATMUL_RNG = np.random.default_rng(11)


def matmul_model() -> onnx.ModelProto:
    """x[N, 16] @ w[16, 8] + b -> Relu -> Tanh -> y (two kernels once fused, so it splits in two stages)."""
    w = numpy_helper.from_array(_MATMUL_RNG.standard_normal((16, 8)).astype(np.float32), "w")
    b = numpy_helper.from_array(_MATMUL_RNG.standard_normal(8).astype(np.float32), "b")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Add", ["m", "b"], ["a"]),
             helper.make_node("Relu", ["a"], ["r"]), helper.make_node("Tanh", ["r"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 8])], [w, b])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
