"""E2E cases: indexing ops (gathers, scatters, CumSum, Range, Tile, TopK, ...)."""

from __future__ import annotations

import numpy as np

from tests.e2e.cases import B, F, I, R, case, graph_case, i64, n, node_model


def idx(*shape, high: int, low: int = 0) -> np.ndarray:
    """Constant int64 indices in [low, high) (drawn once, at import)."""
    return np.random.default_rng(sum(shape) + high).integers(low, high, shape).astype(np.int64)


case("GatherElements", {"x": F(3, 4)}, 11, "axis1", {"i": idx(3, 5, high=4, low=-4)}, axis=1)
case("GatherElements", {"x": F(3, 4), "i": I(2, 4, low=0, high=3)}, 13, "axis0-input", axis=0)
case("GatherND", {"x": F(4, 5, 3)}, 11, "pairs", {"i": idx(6, 2, high=4)})
case("GatherND", {"x": F(2, 5, 3)}, 12, "batch-dims", {"i": idx(2, 4, 1, high=5)}, batch_dims=1)
case("ScatterND", {"x": F(5, 4), "u": F(2, 4)}, 11, "rows", {"i": np.array([[1], [3]], np.int64)},
     names=["x", "i", "u"])
case("ScatterND", {"x": F(5, 4), "u": F(3)}, 16, "add-dup", {"i": np.array([[1, 2], [1, 2], [0, 3]], np.int64)},
     names=["x", "i", "u"], reduction="add")
case("ScatterElements", {"x": F(3, 5), "u": F(3, 2)}, 11, "axis1", {"i": np.array([[0, 4], [1, 2], [3, 3]])},
     names=["x", "i", "u"], axis=1)
case("ScatterElements", {"x": F(3, 5), "u": F(2, 5)}, 16, "mul", {"i": idx(2, 5, high=3)}, names=["x", "i", "u"],
     reduction="mul")
SCATTER = ({"x": F(3, 5), "u": F(3, 2)}, {"i": np.array([[0, 4], [1, 2], [3, 0]])})
case("Scatter", SCATTER[0], 9, "old-name", SCATTER[1], names=["x", "i", "u"], axis=1,
     oracle=node_model("ScatterElements", *SCATTER[:1], 11, SCATTER[1], ["x", "i", "u"], axis=1))
case("CumSum", {"x": F(3, 5)}, 11, "axis1", {"a": i64(1)})
case("CumSum", {"x": I(4, 3)}, 14, "exclusive-reverse", {"a": i64(0)}, exclusive=1, reverse=1)
graph_case("runtime-limit", ("Range", "Shape", "Gather"), [
    n("Shape", ["x"], ["s"]), n("Gather", ["s", "one"], ["len"], axis=0), n("Range", ["zero", "len", "step"], ["y"]),
], {"x": F("N", 7)}, ["y"], {"one": i64(0), "zero": np.array(0, np.int64), "step": np.array(2, np.int64)},
    batches=(3, 8))
case("Range", {"a": I(low=0, high=3), "b": I(low=5, high=9), "c": I(low=1, high=3)}, 11, "data")
case("Range", {}, 11, "float-descending", {"a": np.array(3.5, np.float32), "b": np.array(-1.0, np.float32),
                                             "c": np.array(-0.75, np.float32)})
case("Tile", {"x": F(2, 3)}, 13, "repeats", {"r": i64(3, 2)})
case("Trilu", {"x": F(4, 5)}, 14, "upper-k1", {"k": np.array(1, np.int64)})
case("Trilu", {"x": F(2, 4, 5)}, 14, "lower", upper=0)
case("OneHot", {"i": I(2, 3, low=-4, high=6)}, 11, "axis-last", {"d": np.array(5, np.int64),
                                                                 "v": np.array([0.5, 2.0], np.float32)})
case("OneHot", {"i": I(4, low=0, high=3)}, 11, "axis0", {"d": np.array(3, np.int64),
                                                         "v": np.array([0, 1], np.int64)}, axis=0)
for op in ("ArgMax", "ArgMin"):
    case(op, {"x": F(3, 4, 5)}, 11, "axis1-keep", axis=1)
    case(op, {"x": I(3, 6, low=0, high=3)}, 12, "last-index", axis=-1, keepdims=0, select_last_index=1)
case("TopK", {"x": F(3, 8)}, 1, "attr-k", n_out=2, k=3)
case("TopK", {"x": F(3, 8)}, 11, "smallest-axis0", {"k": i64(2)}, n_out=2, axis=0, largest=0)
case("TopK", {"x": I(4, 6, low=0, high=3)}, 11, "ties", {"k": i64(4)}, n_out=2)
case("Einsum", {"a": F(2, 3, 4), "b": F(2, 4, 5)}, 12, "batch-matmul", equation="bij,bjk->bik")
case("Einsum", {"a": F(2, 2, 3, 4), "b": F(2, 2, 5, 4)}, 12, "attention", equation="bhid,bhjd->bhij")
case("Einsum", {"a": F(3, 4)}, 12, "transpose-implicit", equation="ji")
case("DepthToSpace", {"x": F(1, 8, 2, 3)}, 11, "dcr", blocksize=2)
case("DepthToSpace", {"x": F(2, 8, 2, 3)}, 11, "crd", blocksize=2, mode="CRD")
case("SpaceToDepth", {"x": F(1, 2, 4, 6)}, 13, "block2", blocksize=2)
case("NonZero", {"x": B(3, 4)}, 13, "bool")
case("NonZero", {"x": I(5, low=-1, high=2)}, 13, "int64")
case("Size", {"x": F("N", 5)}, 13, "dyn", batches=(1, 3))
case("Hardmax", {"x": R(3, 5)}, 13, "ties")
case("Hardmax", {"x": F(2, 3, 4)}, 11, "last-axis-old", axis=2)
case("LpNormalization", {"x": F(3, 4)}, 1, "l2")
case("LpNormalization", {"x": F(3, 4)}, 1, "l1-axis0", axis=0, p=1)
case("EyeLike", {"x": F(3, 5)}, 9, "k1", k=1)
case("EyeLike", {"x": I(4, 4)}, 9, "float-out", dtype=1, k=-1)
