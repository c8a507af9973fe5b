"""Test oracles: onnxruntime on single-node or whole ONNX models, and ONNX's reference evaluator
where onnxruntime's integer products are not exact on this CPU."""

from __future__ import annotations

import functools

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper, numpy_helper


def onnx_type(dtype) -> int:
    """The ONNX element type of a numpy dtype (bfloat16 included)."""
    return helper.np_dtype_to_tensor_dtype(np.dtype(dtype))


def single_node_model(op_type: str, inputs: dict[str, np.ndarray], n_outputs: int = 1,
                      opset: int = 17, initializers: dict[str, np.ndarray] | None = None,
                      input_names: list[str] | None = None, **attrs) -> onnx.ModelProto:
    """A model of one ONNX node. ``inputs`` become graph inputs, ``initializers`` constants.

    ``input_names`` gives the node's input order ("" for an absent optional input);
    by default graph inputs then initializers in dict order.
    """
    initializers = initializers or {}
    names = input_names if input_names is not None else [*inputs, *initializers]
    outputs = [f"y{j}" for j in range(n_outputs)]
    node = helper.make_node(op_type, names, outputs, name=f"{op_type.lower()}_0", **attrs)
    graph = helper.make_graph(
        [node], f"{op_type}_test",
        [helper.make_tensor_value_info(k, onnx_type(v.dtype), v.shape) for k, v in inputs.items()],
        [onnx.ValueInfoProto(name=o) for o in outputs],
        [numpy_helper.from_array(v, k) for k, v in initializers.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = min(model.ir_version, 9)
    return model


def run_onnxruntime(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    """Runs ``model`` in onnxruntime on the CPU with graph optimisations off."""
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


INTEGER_PRODUCTS = {"MatMulInteger", "ConvInteger", "QLinearMatMul", "QLinearConv"}


@functools.cache
def onnxruntime_saturates() -> bool:
    """Whether onnxruntime's uint8 x int8 products saturate on this CPU. Without VNNI its x86
    kernels add two neighbouring byte products in int16 (``vpmaddubsw``), so 255 * 127 + 255 * 127
    reads 32767: its results are then no oracle for exact integer sums."""
    x, w = np.full((1, 2), 255, np.uint8), np.full((2, 1), 127, np.int8)
    model = single_node_model("MatMulInteger", {"x": x}, opset=13, initializers={"w": w})
    [sums] = run_onnxruntime(model, {"x": x})
    return int(sums[0, 0]) != 2 * 255 * 127


def run_exact_oracle(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    """``run_onnxruntime``, or ONNX's reference evaluator where the model has integer products
    and onnxruntime's saturate here (``onnxruntime_saturates``)."""
    if onnxruntime_saturates() and any(node.op_type in INTEGER_PRODUCTS for node in model.graph.node):
        return reference_evaluator(model).run(None, feeds)
    return run_onnxruntime(model, feeds)


def reference_evaluator(model: onnx.ModelProto):
    """ONNX's reference evaluator on ``model``, DequantizeLinear of opsets 10-18 included (the
    evaluator has it from 19 on; the newest one means the same for 8-bit and int32 inputs)."""
    from onnx.reference import ReferenceEvaluator
    from onnx.reference.ops.op_dequantize_linear import DequantizeLinear_25

    class DequantizeLinear(DequantizeLinear_25):
        op_domain = ""

    return ReferenceEvaluator(model, new_ops=[DequantizeLinear])


def relative_l2(actual: np.ndarray, expected: np.ndarray) -> float:
    """||actual - expected|| / ||expected|| in float64 (0 when both are zero)."""
    a, e = np.asarray(actual, np.float64), np.asarray(expected, np.float64)
    norm = np.linalg.norm(e)
    return float(np.linalg.norm(a - e) / norm) if norm else float(np.linalg.norm(a - e))
