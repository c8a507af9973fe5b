"""Oracles for the pure op semantics: one ONNX node run by onnxruntime or by the ONNX reference evaluator.

Pools, Pad, Slice and LRN are checked against onnxruntime, the oracle of the native kernels:
the reference evaluator of onnx 1.23 ignores ceil_mode with VALID pads, shrinks SAME_LOWER
pool outputs, rejects negative pads and sums LRN windows differently.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper
from onnx.reference import ReferenceEvaluator

from tests.support.oracle import onnx_type, run_onnxruntime


def node_model(op_type: str, inputs: dict[str, np.ndarray], n_outputs: int = 1, opset: int = 18,
               node_inputs: list[str] | None = None, **attrs) -> onnx.ModelProto:
    """A model of one ``op_type`` node reading ``node_inputs`` ("" for an absent optional one; default:
    ``inputs`` in order); its outputs are typed as the first input."""
    outputs = [f"y{j}" for j in range(n_outputs)]
    elem_type = onnx_type(next(iter(inputs.values())).dtype)
    names = list(inputs) if node_inputs is None else node_inputs
    graph = helper.make_graph(
        [helper.make_node(op_type, names, outputs, **attrs)], op_type,
        [helper.make_tensor_value_info(k, onnx_type(v.dtype), v.shape) for k, v in inputs.items()],
        [helper.make_tensor_value_info(o, elem_type, None) for o in outputs])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = min(model.ir_version, 9)
    return model


def run_reference(op_type: str, inputs: dict[str, np.ndarray], n_outputs: int = 1, opset: int = 18,
                  **attrs) -> list[np.ndarray]:
    """One node in the ONNX reference evaluator."""
    return ReferenceEvaluator(node_model(op_type, inputs, n_outputs, opset, **attrs)).run(None, inputs)


def run_ort(op_type: str, inputs: dict[str, np.ndarray], n_outputs: int = 1, opset: int = 18,
            **attrs) -> list[np.ndarray]:
    """One node in onnxruntime (CPU, no graph optimisations)."""
    return run_onnxruntime(node_model(op_type, inputs, n_outputs, opset, **attrs), inputs)
