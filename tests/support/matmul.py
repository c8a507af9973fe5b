"""Matrix-product kernel references shared by tests/kernels/test_matmul.py and tests/kernels/fast/."""

from __future__ import annotations

import numpy as np
from onnx import helper
from onnx.reference import ReferenceEvaluator

from tests.support.oracle import onnx_type, run_onnxruntime, single_node_model


def onnx_reference(op_type: str, inputs: dict[str, np.ndarray], **attrs) -> np.ndarray:
    model = single_node_model(op_type, inputs, **attrs)
    model.graph.output[0].type.tensor_type.elem_type = onnx_type(np.float32)  # onnxruntime needs a typed output
    return run_onnxruntime(model, inputs)[0]


def attention_reference(q, k, v, mask, scale):
    """softmax(q @ k * scale + mask) @ v by the ONNX reference evaluator, one op at a time."""
    nodes = [helper.make_node("MatMul", ["q", "k"], ["s"]), helper.make_node("Mul", ["s", "scale"], ["t"]),
             helper.make_node("Add", ["t", "mask"], ["u"]), helper.make_node("Softmax", ["u"], ["p"], axis=-1),
             helper.make_node("MatMul", ["p", "v"], ["y"])]
    feeds = {"q": q, "k": k, "v": v, "mask": mask, "scale": np.array(scale, q.dtype)}
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, onnx_type(a.dtype), a.shape)
                                           for n, a in feeds.items()], [helper.make_tensor_value_info("y", 0, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return ReferenceEvaluator(model).run(None, feeds)[0]
