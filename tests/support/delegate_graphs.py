"""ONNX graphs, random inputs and builds shared by the delegate tests (TVM, the example NPU, saved partitions)."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import lite
from lite.tools.converter import convert

RNG = np.random.default_rng(2024)


def build(onnx_model: onnx.ModelProto, *delegates: lite.Delegate | None, thread_num: int = 1,
          **convert_args) -> lite.Model:
    """Converts ``onnx_model`` and builds it with ``delegates`` (None entries are skipped)."""
    model = lite.Model()
    context = lite.Context(thread_num=thread_num, delegates=[d for d in delegates if d is not None])
    model.build(convert(onnx_model, **convert_args), lite.ModelType.LITE, context)
    return model


def feeds_for(onnx_model: onnx.ModelProto, shapes: dict[str, tuple] | None = None) -> dict[str, np.ndarray]:
    """Fresh random inputs (never zeros or ones), scaled to exercise RELU6/CLIP bounds."""
    shapes = shapes or {i.name: tuple(d.dim_value for d in i.type.tensor_type.shape.dim)
                        for i in onnx_model.graph.input}
    return {name: np.asarray(3 * RNG.standard_normal(shape), np.float32) for name, shape in shapes.items()}


def onnx_graph(nodes: list, inputs: dict[str, list], outputs: list[str],
               initializers: dict[str, np.ndarray] | None = None, opset: int = 17) -> onnx.ModelProto:
    """A float32 ONNX model; input dims may be names (dynamic)."""
    graph = helper.make_graph(
        nodes, "delegate_test", [helper.make_tensor_value_info(k, TensorProto.FLOAT, v) for k, v in inputs.items()],
        [onnx.ValueInfoProto(name=o) for o in outputs],
        [numpy_helper.from_array(v, k) for k, v in (initializers or {}).items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=9)


def node(op_type: str, inputs: list[str], output: str = "y", **attrs) -> onnx.NodeProto:
    return helper.make_node(op_type, inputs, [output], name=f"{op_type.lower()}_{output}", **attrs)


def weight(*shape: int) -> np.ndarray:
    fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else 1
    return (RNG.standard_normal(shape) / np.sqrt(fan_in)).astype(np.float32)


def mixed_model(batch: int | str = 2) -> onnx.ModelProto:
    """conv -> relu -> [Greater, Where] -> conv -> sigmoid -> global pool -> flatten -> gemm -> softmax."""
    inits = {"w0": weight(8, 3, 3, 3), "b0": weight(8), "w1": weight(8, 8, 3, 3), "zero": np.zeros((), np.float32),
             "fc": weight(4, 8), "fb": weight(4)}
    nodes = [
        node("Conv", ["x", "w0", "b0"], "c0", pads=[1, 1, 1, 1]), node("Relu", ["c0"], "r0"),
        node("Greater", ["r0", "zero"], "mask"), node("Where", ["mask", "c0", "zero"], "w"),
        node("Conv", ["w", "w1"], "c1", pads=[1, 1, 1, 1], strides=[2, 2]), node("Sigmoid", ["c1"], "s1"),
        node("GlobalAveragePool", ["s1"], "p"), node("Flatten", ["p"], "f"),
        node("Gemm", ["f", "fc", "fb"], "g", transB=1), node("Softmax", ["g"], "y", axis=-1),
    ]
    return onnx_graph(nodes, {"x": [batch, 3, 12, 12]}, ["y", "r0"], inits)
