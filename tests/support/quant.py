"""ONNX's reference evaluator on one QuantizeLinear or DequantizeLinear node, for the tests of the
quantization's meaning (tests/ops/test_quant.py) and of its kernels (tests/kernels/test_quant.py)."""

from __future__ import annotations

import numpy as np
from onnx import helper
from onnx.helper import np_dtype_to_tensor_dtype
from onnx.reference import ReferenceEvaluator


def quant_reference(op_type: str, inputs: list[np.ndarray], opset: int = 21, **attrs) -> np.ndarray:
    """The reference evaluator's output for ``op_type`` on inputs x, scale and (optional) zero point."""
    names = ["x", "s", "z"][: len(inputs)]
    node = helper.make_node(op_type, names, ["y"], **attrs)
    graph = helper.make_graph([node], "t", [helper.make_tensor_value_info(n, np_dtype_to_tensor_dtype(a.dtype), a.shape)
                                             for n, a in zip(names, inputs, strict=True)],
                              [helper.make_tensor_value_info("y", 0, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    return ReferenceEvaluator(model).run(None, dict(zip(names, inputs, strict=True)))[0]
