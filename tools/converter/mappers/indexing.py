"""Indexing ops: GatherElements, GatherND, ScatterND, ScatterElements (and Scatter), CumSum, Range,
Tile, Trilu, OneHot, ArgMax/ArgMin, TopK, Einsum, DepthToSpace, SpaceToDepth, NonZero, Size,
Hardmax, LpNormalization, EyeLike."""

from __future__ import annotations

import numpy as np

from lite.schema.graph import DTYPE_NAMES
from lite.tools.converter.context import NodeContext
from lite.tools.converter.mappers.common import attr_choice, same
from lite.tools.converter.onnx_graph import LITE_DTYPES
from lite.tools.converter.registry import mapper

_REDUCTIONS = {"none": "NONE", "add": "ADD", "mul": "MUL", "max": "MAX", "min": "MIN"}


@mapper("GatherElements", since=11)
def gather_elements_v11(ctx: NodeContext) -> None:
    same(ctx, "GatherElements", {"axis": int(ctx.attr("axis", 0))})


@mapper("GatherND", since=11)
def gather_nd_v11(ctx: NodeContext) -> None:
    """Opset 12 adds ``batch_dims``."""
    same(ctx, "GatherNd", {"batch_dims": int(ctx.attr("batch_dims", 0))})


@mapper("ScatterND", since=11)
def scatter_nd_v11(ctx: NodeContext) -> None:
    """Opset 16 adds reduction add/mul, 18 max/min."""
    same(ctx, "ScatterNd", {"reduction": attr_choice(ctx, "reduction", "none", _REDUCTIONS)})


@mapper("Scatter", since=9)
@mapper("ScatterElements", since=11)
def scatter_elements_v11(ctx: NodeContext) -> None:
    """Scatter (opset 9-10) is ScatterElements by its old name; reduction from opset 16."""
    reduction = attr_choice(ctx, "reduction", "none", _REDUCTIONS)
    same(ctx, "ScatterElements", {"axis": int(ctx.attr("axis", 0)), "reduction": reduction})


@mapper("CumSum", since=11)
def cum_sum_v11(ctx: NodeContext) -> None:
    same(ctx, "CumSum", {"exclusive": bool(ctx.attr("exclusive", 0)), "reverse": bool(ctx.attr("reverse", 0))})


@mapper("Range", since=11)
def range_v11(ctx: NodeContext) -> None:
    same(ctx, "Range")


@mapper("Tile", since=6)
def tile_v6(ctx: NodeContext) -> None:
    same(ctx, "TileFusion")


@mapper("Trilu", since=14)
def trilu_v14(ctx: NodeContext) -> None:
    same(ctx, "Trilu", {"upper": bool(ctx.attr("upper", 1))})


@mapper("OneHot", since=9)
def one_hot_v9(ctx: NodeContext) -> None:
    same(ctx, "OneHot", {"axis": int(ctx.attr("axis", -1))})


@mapper("ArgMax", since=1)
@mapper("ArgMin", since=1)
def arg_reduce_v1(ctx: NodeContext) -> None:
    """Opset 12 adds select_last_index (default 0 before)."""
    attrs = {"axis": int(ctx.attr("axis", 0)), "keep_dims": bool(ctx.attr("keepdims", 1)),
             "select_last_index": bool(ctx.attr("select_last_index", 0))}
    ctx.emit("ArgMaxFusion" if ctx.node.op_type == "ArgMax" else "ArgMinFusion", attrs, [ctx.input(0)])


@mapper("TopK", since=1)
def top_k_v1(ctx: NodeContext) -> None:
    """Opset 1: ``k`` is an attribute (it becomes a constant input)."""
    k = ctx.add_const(f"{ctx.name}_k", np.array([int(ctx.attr("k"))], np.int64))
    ctx.emit("TopKFusion", {"axis": int(ctx.attr("axis", -1))}, [ctx.input(0), k])


@mapper("TopK", since=10)
def top_k_v10(ctx: NodeContext) -> None:
    """Opset 10: ``k`` is an input; opset 11 adds largest and sorted (the kernel always sorts)."""
    attrs = {"axis": int(ctx.attr("axis", -1)), "largest": bool(ctx.attr("largest", 1)),
             "sorted": bool(ctx.attr("sorted", 1))}
    ctx.emit("TopKFusion", attrs, [ctx.input(0), ctx.input(1)])


@mapper("Einsum", since=12)
def einsum_v12(ctx: NodeContext) -> None:
    same(ctx, "Einsum", {"equation": str(ctx.attr("equation"))})


@mapper("DepthToSpace", since=1)
@mapper("SpaceToDepth", since=1)
def depth_to_space_v1(ctx: NodeContext) -> None:
    """DepthToSpace-11 and SpaceToDepth-28 add mode (DCR, the old behaviour, or CRD)."""
    mode = ctx.attr("mode", "DCR")
    if mode not in ("DCR", "CRD"):
        ctx.invalid(f"mode={mode!r} is not DCR or CRD")
    same(ctx, ctx.node.op_type, {"block_size": int(ctx.attr("blocksize")), "mode_crd": mode == "CRD"})


@mapper("NonZero", since=9)
def non_zero_v9(ctx: NodeContext) -> None:
    same(ctx, "NonZero")


@mapper("Size", since=1)
def size_v1(ctx: NodeContext) -> None:
    same(ctx, "Size")


@mapper("Hardmax", since=1)
def hardmax_v1(ctx: NodeContext) -> None:
    """Opset < 13 flattens from ``axis`` (default 1): one axis only when it is the last one."""
    rank, axis = ctx.rank(0), int(ctx.attr("axis", 1))
    if rank is None or axis % max(rank, 1) != rank - 1:
        ctx.unsupported(f"opset < 13 Hardmax over the flattened axes from {axis} is supported only for the "
                        "last axis; re-export at opset 13+")
    same(ctx, "Hardmax", {"axis": -1})


@mapper("Hardmax", since=13)
def hardmax_v13(ctx: NodeContext) -> None:
    same(ctx, "Hardmax", {"axis": int(ctx.attr("axis", -1))})


@mapper("LpNormalization", since=1)
def lp_normalization_v1(ctx: NodeContext) -> None:
    same(ctx, "LpNormalization", {"axis": int(ctx.attr("axis", -1)), "p": int(ctx.attr("p", 2))})


@mapper("EyeLike", since=9)
def eye_like_v9(ctx: NodeContext) -> None:
    dtype = LITE_DTYPES.get(int(ctx.attr("dtype", 0)))
    if ctx.has_attr("dtype") and dtype is None:
        ctx.unsupported(f"dtype {ctx.attr('dtype')} is not one .lite stores")
    same(ctx, "EyeLike", {"k": int(ctx.attr("k", 0)), "data_type": DTYPE_NAMES[dtype] if dtype else "UNKNOWN"})
