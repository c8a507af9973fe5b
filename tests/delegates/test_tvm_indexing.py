"""TVM lowerings of the indexing primitives against onnxruntime, and the reasons for the rest."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from tests.support.delegate_graphs import build, node, onnx_graph

tvm = pytest.importorskip("tvm")

from tests.support.tvm_delegate import TVM, check_lowering, tvm_delegate  # noqa: E402


def ids(*values) -> np.ndarray:
    return np.array(values, np.int64)


LOWERED = {  # name: (nodes, input shapes, initializers, primitive)
    "gather_elements": ([node("GatherElements", ["x", "i"], axis=-1)], {"x": [3, 4]},
                        {"i": ids([0, 3, -1], [1, 1, 2], [3, 2, 0])}, "GatherElements"),
    "gather_nd": ([node("GatherND", ["x", "i"])], {"x": [4, 5, 3]}, {"i": ids([0, 1], [3, -1], [2, 2])}, "GatherNd"),
    "cumsum": ([node("CumSum", ["x", "a"], exclusive=1, reverse=1)], {"x": [3, 5]}, {"a": np.array(1, np.int64)},
               "CumSum"),
    "tile": ([node("Tile", ["x", "r"])], {"x": [2, 3]}, {"r": ids(2, 2)}, "TileFusion"),
    "trilu": ([node("Trilu", ["x", "k"])], {"x": [2, 4, 5]}, {"k": np.array(1, np.int64)}, "Trilu"),
    "einsum": ([node("Einsum", ["x", "b"], equation="bij,bkj->bik")], {"x": [2, 3, 4]},
               {"b": np.random.default_rng(2).standard_normal((2, 5, 4)).astype(np.float32)}, "Einsum"),
}


CASES = {k: (onnx_graph(nodes, shapes, ["y"], inits), [primitive])  # as in test_tvm.py
         for k, (nodes, shapes, inits, primitive) in LOWERED.items()}


@pytest.mark.parametrize("case", list(CASES))
def test_lowering(case):
    check_lowering(*CASES[case])


def test_integer_outputs_stay_native_with_a_reason():
    graph = onnx_graph([helper.make_node("ArgMax", ["x"], ["y"], axis=1)], {"x": [3, 4]}, ["y"])
    [row] = build(graph, tvm_delegate()).partition_report()
    assert row.runs_on == "native" and row.reason.startswith(f"{TVM}: ArgMaxFusion: it produces or reads integer")
