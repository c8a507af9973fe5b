"""Indexing kernels against the ONNX reference evaluator on the equivalent single node, per dtype,
and their refusals of bad attributes and indices."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper
from onnx.reference import ReferenceEvaluator

from lite.errors import ModelFormatError
from tests.support.kernel_harness import assert_matches, run_kernel
from tests.support.oracle import onnx_type, run_onnxruntime, single_node_model

RNG = np.random.default_rng(17)


def reference(op: str, inputs: list[np.ndarray | None], n_outputs: int = 1, opset: int = 18, **attrs):
    names = [f"x{i}" if a is not None else "" for i, a in enumerate(inputs)]
    feeds = {n: a for n, a in zip(names, inputs, strict=True) if n}
    node = helper.make_node(op, names, [f"y{j}" for j in range(n_outputs)], **attrs)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(k, onnx_type(v.dtype), v.shape)
                                            for k, v in feeds.items()],
                              [helper.make_tensor_value_info(o, 0, None) for o in node.output])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    return ReferenceEvaluator(model).run(None, feeds)


def values(shape, dtype=np.float32) -> np.ndarray:
    if np.dtype(dtype).kind == "f":
        return np.asarray(RNG.standard_normal(shape), dtype)
    return np.asarray(RNG.integers(-5, 6, shape), dtype)


def check(primitive: str, attrs: dict, inputs: list, op: str, n_outputs: int = 1, **onnx_attrs) -> None:
    actual = run_kernel(primitive, attrs, inputs, n_outputs)
    if op == "LpNormalization":  # NOTE: the reference evaluator sums x^p without |x|; onnxruntime takes the Lp norm
        feeds = {"x": inputs[0]}
        expected = run_onnxruntime(single_node_model(op, feeds, **onnx_attrs), feeds)
    else:
        expected = reference(op, inputs, n_outputs, **onnx_attrs)
    for got, want in zip(actual, expected, strict=True):
        assert_matches(got, np.asarray(want))


I64 = np.int64
CASES = {  # name: (primitive, attrs, inputs, onnx op, outputs, onnx attrs)
    "gather_elements": ("GatherElements", {"axis": 1}, [values((3, 4)), RNG.integers(-4, 4, (3, 6))],
                        "GatherElements", 1, {"axis": 1}),
    "gather_nd": ("GatherNd", {}, [values((4, 5, 3), I64), RNG.integers(0, 4, (6, 2))], "GatherND", 1, {}),
    "gather_nd_batch": ("GatherNd", {"batch_dims": 1}, [values((2, 5, 3)), RNG.integers(0, 5, (2, 4, 1))],
                        "GatherND", 1, {"batch_dims": 1}),
    "scatter_nd_mul": ("ScatterNd", {"reduction": "MUL"}, [values((5, 4)), np.array([[1], [1], [3]]),
                                                           values((3, 4))], "ScatterND", 1, {"reduction": "mul"}),
    "scatter_elements_max": ("ScatterElements", {"axis": 0, "reduction": "MAX"},
                             [values((3, 4), I64), RNG.integers(0, 3, (2, 4)), values((2, 4), I64)],
                             "ScatterElements", 1, {"axis": 0, "reduction": "max"}),
    "cumsum": ("CumSum", {"exclusive": True}, [values((3, 5)), np.array(0, I64)], "CumSum", 1, {"exclusive": 1}),
    "cumsum_reverse_int": ("CumSum", {"reverse": True}, [values((3, 5), np.int32), np.array(-1, I64)], "CumSum", 1,
                           {"reverse": 1}),
    "range": ("Range", {}, [np.array(7, I64), np.array(-5, I64), np.array(-3, I64)], "Range", 1, {}),
    "range_float": ("Range", {}, [np.array(0.5, np.float32), np.array(3, np.float32), np.array(0.3, np.float32)],
                    "Range", 1, {}),
    "tile": ("TileFusion", {}, [values((2, 3), np.uint8), np.array([2, 0], I64)], "Tile", 1, {}),
    "trilu": ("Trilu", {"upper": False}, [values((2, 4, 5)), np.array(-1, I64)], "Trilu", 1, {"upper": 0}),
    "one_hot": ("OneHot", {"axis": 1}, [RNG.integers(-4, 6, (2, 3)), np.array(4, I64), np.array([1, 9], np.int32)],
                "OneHot", 1, {"axis": 1}),
    "arg_max_last": ("ArgMaxFusion", {"axis": 1, "select_last_index": True}, [values((3, 6), np.int8)], "ArgMax", 1,
                     {"axis": 1, "select_last_index": 1}),
    "arg_min": ("ArgMinFusion", {"axis": 0, "keep_dims": False}, [values((3, 6))], "ArgMin", 1,
                {"axis": 0, "keepdims": 0}),
    "top_k_largest_ties": ("TopKFusion", {}, [values((4, 7), I64), np.array([3], I64)], "TopK", 2, {}),
    "top_k_smallest": ("TopKFusion", {"axis": 0, "largest": False}, [values((4, 7)), np.array([2], I64)], "TopK", 2,
                       {"axis": 0, "largest": 0}),
    "einsum": ("Einsum", {"equation": "...ij,...jk"}, [values((2, 3, 4)), values((4, 5))], "Einsum", 1,
               {"equation": "...ij,...jk"}),
    "depth_to_space": ("DepthToSpace", {"block_size": 2, "mode_crd": True}, [values((2, 8, 3, 2))], "DepthToSpace", 1,
                       {"blocksize": 2, "mode": "CRD"}),
    "space_to_depth": ("SpaceToDepth", {"block_size": 2}, [values((1, 3, 4, 6))], "SpaceToDepth", 1, {"blocksize": 2}),
    "non_zero": ("NonZero", {}, [values((3, 4), np.int16)], "NonZero", 1, {}),
    "hardmax": ("Hardmax", {"axis": 0}, [np.round(values((4, 3)))], "Hardmax", 1, {"axis": 0}),
    "lp_normalization": ("LpNormalization", {"axis": 1, "p": 1}, [values((3, 4))], "LpNormalization", 1,
                         {"axis": 1, "p": 1}),
    "eye_like": ("EyeLike", {"k": -1, "data_type": "INT32"}, [values((3, 5))], "EyeLike", 1, {"k": -1, "dtype": 6}),
}


@pytest.mark.parametrize("case", list(CASES))
def test_matches_the_reference(case):
    primitive, attrs, inputs, op, n_outputs, onnx_attrs = CASES[case]
    check(primitive, attrs, inputs, op, n_outputs, **onnx_attrs)


def test_size_is_the_element_count():
    [size] = run_kernel("Size", {}, [values((3, 0, 4))])
    assert size.dtype == np.int64 and size.shape == () and size == 0


@pytest.mark.parametrize(("primitive", "attrs", "inputs", "message"), [
    ("GatherElements", {"axis": 0}, [values((3, 4)), np.array([[3, 0, 0, 0]])], "out of range"),
    ("GatherElements", {"axis": 2}, [values((3, 4)), np.zeros((3, 4), I64)], "out of range"),
    ("GatherNd", {"batch_dims": 2}, [values((3, 4)), np.zeros((3, 1), I64)], "batch_dims"),
    ("ScatterNd", {}, [values((3, 4)), np.array([[5]]), values((1, 4))], "out of range"),
    ("Range", {}, [np.array(0, I64), np.array(5, I64), np.array(0, I64)], "non-zero"),
    ("Range", {}, [np.array(0.0), np.array(1e30), np.array(1e-30)], "absurd"),
    ("TileFusion", {}, [values((2, 3)), np.array([2], I64)], "repeats"),
    ("OneHot", {}, [np.zeros(3, I64), np.array(-1, I64), np.array([0, 1.0])], "depth"),
    ("TopKFusion", {}, [values((2, 3)), np.array([4], I64)], "k=4"),
    ("Einsum", {"equation": "ij,jk->ik"}, [values((2, 3)), values((4, 5))], "sizes"),
    ("Einsum", {"equation": "ij->q"}, [values((2, 3))], "label"),
    ("DepthToSpace", {"block_size": 3}, [values((1, 8, 2, 2))], "block_size"),
    ("LpNormalization", {"p": 3}, [values((2, 3))], "p must be"),
    ("CumSum", {}, [values((2, 3)), np.array(0.5)], "integers"),
])
def test_rejects(primitive, attrs, inputs, message):
    with pytest.raises(ModelFormatError, match=message):
        run_kernel(primitive, attrs, inputs, 2 if primitive == "TopKFusion" else 1)
