"""Small ONNX model builders and accessors shared by the converter tests (tests/tools/converter/,
tests/test_shapes.py)."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from lite.schema.graph import GraphDef, NodeDef
from lite.tools.converter import convert_to_graph
from lite.tools.converter.onnx_graph import OnnxGraph
from tests.support.oracle import single_node_model


def graph_model(nodes: list[onnx.NodeProto], inputs: dict[str, tuple], outputs: list[str],
                initializers: dict[str, np.ndarray] | None = None, opset: int = 17,
                input_type: int = TensorProto.FLOAT, domains: dict[str, int] | None = None) -> onnx.ModelProto:
    """A model of ``nodes`` with inferred types; ``inputs`` maps graph input names to shapes (str dims are
    dynamic)."""
    graph = helper.make_graph(
        nodes, "test",
        [helper.make_tensor_value_info(k, input_type, list(v)) for k, v in inputs.items()],
        [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None) for o in outputs],
        [numpy_helper.from_array(v, k) for k, v in (initializers or {}).items()])
    opsets = {"": opset, **(domains or {})}
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid(k, v) for k, v in opsets.items()])
    model.ir_version = 8
    return onnx.shape_inference.infer_shapes(model)


def convert_node(op_type: str, inputs: dict[str, np.ndarray], opset: int = 17,
                 initializers: dict[str, np.ndarray] | None = None, n_outputs: int = 1,
                 input_names: list[str] | None = None, **attrs) -> GraphDef:
    """Converts a one-node model (graph inputs from ``inputs``, constants from ``initializers``)."""
    model = single_node_model(op_type, inputs, n_outputs, opset, initializers, input_names, **attrs)
    graph, _ = convert_to_graph(model, fusion=False)
    return graph


def only_node(graph: GraphDef) -> NodeDef:
    assert len(graph.nodes) == 1, [n.op_type for n in graph.nodes]
    return graph.nodes[0]


def const(graph: GraphDef, index: int) -> np.ndarray:
    """The data of constant tensor ``index``."""
    data = graph.tensors[index].data
    assert data is not None, f"tensor {graph.tensors[index].name!r} is not a constant"
    return data


def to_model(g: OnnxGraph) -> onnx.ModelProto:
    """An ONNX model of a (rewritten) OnnxGraph, to run it in onnxruntime."""
    graph = helper.make_graph(g.nodes, "rewritten", g.inputs, g.outputs,
                              [numpy_helper.from_array(v, k) for k, v in g.consts.items()])
    model = helper.make_model(graph, opset_imports=g.model.opset_import, ir_version=max(g.model.ir_version, 4))
    return onnx.shape_inference.infer_shapes(model)


def random(*shape: int, dtype=np.float32, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=shape).astype(dtype)


def three_unsupported_model() -> onnx.ModelProto:
    """Det (no mapper), an op of a custom domain, and a training-mode Dropout (unsupported value)."""
    nodes = [helper.make_node("Det", ["x"], ["a"], name="det"),
             helper.make_node("FancyOp", ["a"], ["b"], name="custom", domain="com.example"),
             helper.make_node("Dropout", ["b", "ratio", "training"], ["y"], name="dropout")]
    return graph_model(nodes, {"x": [1, 1, 4, 4]}, ["y"], {"ratio": np.float32(0.5), "training": np.bool_(True)},
                       domains={"com.example": 1})


def fill_and_sum(count: int) -> onnx.ModelProto:
    """ReduceSum(ConstantOfShape([count])) of float32 ones, named "fill" and "sum": a few bytes computable
    from constants, whose intermediate needs 4 * count bytes (1 GiB at 2**28)."""
    ones = numpy_helper.from_array(np.ones(1, np.float32))
    nodes = [helper.make_node("ConstantOfShape", ["s"], ["ones"], name="fill", value=ones),
             helper.make_node("ReduceSum", ["ones"], ["y"], name="sum", keepdims=0)]
    return graph_model(nodes, {}, ["y"], {"s": np.array([count], np.int64)})
