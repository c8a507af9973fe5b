"""A model with a custom op of a vendor domain (``ScaledTanh`` of com.example), shared by the custom-op tests and
the tools that show such models; the ``native_runs`` fixture (tests/conftest.py) registers its numpy kernel."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

DOMAIN = "com.example"
ALPHA, BETA = 1.75, 0.625  # exact in float32, as ONNX stores float attributes


def vendor_model(rng: np.random.Generator) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """x (N, 8) -> MatMul w -> ScaledTanh (com.example) -> Mul c -> Add (the MatMul output) -> Softmax."""
    weights = {"w": rng.standard_normal((8, 6)).astype(np.float32), "c": rng.standard_normal(6).astype(np.float32)}
    lut = rng.integers(-9, 9, (2, 3)).astype(np.int64)
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["h"], name="matmul"),
        helper.make_node("ScaledTanh", ["h"], ["s"], name="scaled_tanh", domain=DOMAIN, alpha=ALPHA, beta=BETA,
                         mode="fast", taps=[1, 2, 3], lut=numpy_helper.from_array(lut)),
        helper.make_node("Mul", ["s", "c"], ["m"], name="mul"),
        helper.make_node("Add", ["m", "h"], ["a"], name="add"),
        helper.make_node("Softmax", ["a"], ["y"], name="softmax", axis=-1),
    ]
    graph = helper.make_graph(
        nodes, "vendor", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 6])],
        [numpy_helper.from_array(v, k) for k, v in weights.items()],
        value_info=[helper.make_tensor_value_info("s", TensorProto.FLOAT, ["N", 6])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(DOMAIN, 1)])
    return model, {**weights, "lut": lut}


def scaled_tanh(x: np.ndarray, attrs) -> np.ndarray:
    return attrs["alpha"] * np.tanh(attrs["beta"] * x)
