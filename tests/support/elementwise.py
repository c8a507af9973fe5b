"""Element-wise kernel checks on every dtype ONNX allows, against onnxruntime, else the ONNX reference evaluator
(tests/kernels/test_elementwise.py, test_activation.py)."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper
from onnx.reference import ReferenceEvaluator
from onnxruntime.capi.onnxruntime_pybind11_state import InvalidGraph, NotImplemented

from tests.support.kernel_harness import assert_matches, run_kernel
from tests.support.oracle import run_onnxruntime


def random(rng: np.random.Generator, shape: tuple[int, ...], dtype, low: float = -5, high: float = 5):
    """Fresh random values of ``dtype`` in [low, high)."""
    if np.dtype(dtype).kind == "f":
        return np.asarray(rng.uniform(low, high, shape), dtype)
    if np.dtype(dtype) == np.bool_:
        return np.asarray(rng.random(shape) < 0.5)
    return np.asarray(rng.integers(low, high, shape), dtype)


FLOAT_DTYPES = [np.float32, np.float64, np.float16]
INT_DTYPES = [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64]
NUMBER_DTYPES = FLOAT_DTYPES + INT_DTYPES


def typed_model(op: str, arrays: list[np.ndarray | None], opset: int, **attrs) -> onnx.ModelProto:
    """One ``op`` node on inputs x0, x1, ... of any dtype (None: an absent optional input)."""
    names = ["" if a is None else f"x{i}" for i, a in enumerate(arrays)]
    graph = helper.make_graph(
        [helper.make_node(op, names, ["y"], **attrs)], op,
        [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
         for n, a in zip(names, arrays, strict=True) if a is not None],
        [onnx.ValueInfoProto(name="y")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 9
    return model


def oracle(op: str, arrays: list[np.ndarray | None], opset: int, **attrs) -> np.ndarray:
    """onnxruntime's output, or the ONNX reference evaluator's where onnxruntime has no kernel for the types."""
    model = typed_model(op, arrays, opset, **attrs)
    feeds = {f"x{i}": a for i, a in enumerate(arrays) if a is not None}
    try:
        return run_onnxruntime(model, feeds)[0]
    except (NotImplemented, InvalidGraph):
        return ReferenceEvaluator(model).run(None, feeds)[0]


def check_typed(op_type: str, onnx_op: str, arrays: list[np.ndarray | None], opset: int, attrs: dict | None = None,
                **onnx_attrs) -> None:
    """The kernel against ``oracle`` (float16 within 2e-3 relative, float32 and float64 as ``assert_matches``)."""
    [actual] = run_kernel(op_type, attrs or {}, arrays)
    expected = np.asarray(oracle(onnx_op, arrays, opset, **onnx_attrs))
    assert actual.dtype == expected.dtype and actual.shape == expected.shape, (actual.dtype, expected.dtype)
    if actual.dtype == np.float16:
        np.testing.assert_allclose(actual, expected, rtol=2e-3, atol=1e-3)
    else:
        assert_matches(actual, expected)


def operands(rng: np.random.Generator, dtype, shapes, low: float = -20, high: float = 20) -> list[np.ndarray]:
    """Fresh values of ``dtype`` in [low, high) (unsigned: [0, high)) for each shape."""
    low = max(low, 0) if np.dtype(dtype).kind == "u" else low
    return [random(rng, shape, dtype, low, high) for shape in shapes]
