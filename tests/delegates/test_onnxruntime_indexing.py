"""ORTDelegate round trips of the indexing primitives: every node on ORTDelegate, every output
equal to onnxruntime on the original ONNX."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from tests.support.ort_delegate import check_on_ort, integers, node, normal, onnx_model, outputs_of


def ids(*values) -> np.ndarray:
    return np.array(values, np.int64)


CASES = {  # name: (nodes, feeds, initializers[, opset])
    "gather_elements": ([node("GatherElements", ["x", "i"], axis=1)], {"x": normal(3, 4)},
                        {"i": integers(3, 5, low=-4, high=4)}),
    "gather_nd": ([node("GatherND", ["x", "i"], batch_dims=1)], {"x": normal(2, 5, 3)},
                  {"i": integers(2, 4, 1, low=0, high=5)}),
    "scatter_nd_add": ([node("ScatterND", ["x", "i", "u"], reduction="add")], {"x": normal(5, 4), "u": normal(2, 4)},
                       {"i": ids([1], [3])}),
    "scatter_elements": ([node("ScatterElements", ["x", "i", "u"], axis=1)], {"x": normal(3, 5), "u": normal(3, 2)},
                         {"i": ids([0, 4], [1, 2], [3, 3])}),
    "cumsum_reverse": ([node("CumSum", ["x", "a"], reverse=1)], {"x": normal(3, 5)}, {"a": np.array(1, np.int64)}),
    "tile": ([node("Tile", ["x", "r"])], {"x": normal(2, 3)}, {"r": ids(2, 3)}),
    "trilu": ([node("Trilu", ["x", "k"], upper=0)], {"x": normal(4, 5)}, {"k": np.array(-1, np.int64)}),
    "one_hot": ([node("OneHot", ["i", "d", "v"])], {"i": integers(2, 3, low=0, high=5)},
                {"d": np.array(5, np.int64), "v": np.array([0.0, 3.0], np.float32)}),
    "arg_max_min": ([node("ArgMax", ["x"], "a", axis=1), node("ArgMin", ["x"], "b", axis=0, keepdims=0)],
                    {"x": normal(3, 4)}, {}),
    "top_k": ([helper.make_node("TopK", ["x", "k"], ["v", "i"], largest=0)], {"x": normal(3, 8)}, {"k": ids(3)}),
    "einsum": ([node("Einsum", ["a", "b"], equation="bhid,bhjd->bhij")],
               {"a": normal(2, 2, 3, 4), "b": normal(2, 2, 5, 4)}, {}),
    "depth_to_space_crd": ([node("DepthToSpace", ["x"], blocksize=2, mode="CRD")], {"x": normal(1, 8, 2, 3)}, {}),
    "space_to_depth": ([node("SpaceToDepth", ["x"], blocksize=2)], {"x": normal(1, 2, 4, 6)}, {}),
    "hardmax": ([node("Hardmax", ["x"])], {"x": normal(3, 5)}, {}),
    "lp_normalization": ([node("LpNormalization", ["x"], axis=0, p=1)], {"x": normal(3, 4)}, {}),
}


@pytest.mark.parametrize("case", list(CASES))
def test_emitter_round_trip(case):
    nodes, feeds, inits, *opset = CASES[case]
    check_on_ort(onnx_model(nodes, feeds, outputs_of(nodes), inits, *opset), feeds)
