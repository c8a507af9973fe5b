"""MaxPool, AveragePool, GlobalAveragePool, GlobalMaxPool -> MaxPoolFusion / AvgPoolFusion (2-D)."""

from __future__ import annotations

from typing import Any

from lite.tools.converter.context import NodeContext
from lite.tools.converter.mappers.common import ints, pad_attrs, require_2d
from lite.tools.converter.registry import mapper


def _pool_attrs(ctx: NodeContext) -> dict[str, Any]:
    require_2d(ctx, ctx.rank(0), "input")
    return {
        "kernel_size": ints(ctx, "kernel_shape", None, 2),
        "strides": ints(ctx, "strides", [1, 1], 2),
        "round_mode": "CEIL" if ctx.attr("ceil_mode", 0) else "FLOOR",
        **pad_attrs(ctx),
    }


@mapper("MaxPool", since=1)
def max_pool_v1(ctx: NodeContext) -> None:
    if ctx.output_used(1):
        ctx.unsupported("the Indices output (opset 8+) is not supported; use only the pooled values")
    attrs = _pool_attrs(ctx)
    attrs["dilation"] = ints(ctx, "dilations", [1, 1], 2)
    ctx.emit("MaxPoolFusion", attrs, [ctx.input(0)], [ctx.output(0)])


@mapper("AveragePool", since=1)
def average_pool_v1(ctx: NodeContext) -> None:
    attrs = _pool_attrs(ctx)
    dilations = ints(ctx, "dilations", [1, 1], 2)
    if dilations != [1, 1]:
        ctx.unsupported(f"dilations={dilations} is not supported (AvgPoolFusion has no dilation)")
    attrs["count_include_pad"] = bool(ctx.attr("count_include_pad", 0))
    ctx.emit("AvgPoolFusion", attrs, [ctx.input(0)])


def _global_pool(ctx: NodeContext, pool_type: str, reduce_mode: str) -> None:
    """4-D: a global pool; other ranks: a reduction over every spatial axis."""
    rank = ctx.rank(0)
    if rank is None or rank < 3:
        ctx.unsupported(f"the input rank is {rank}; {ctx.node.op_type} needs a known rank >= 3")
    if rank == 4:
        ctx.emit(pool_type, {"is_global": True}, [ctx.input(0)])
    else:
        attrs = {"reduce_mode": reduce_mode, "axes": list(range(2, rank)), "keep_dims": True}
        ctx.emit("ReduceFusion", attrs, [ctx.input(0)])


@mapper("GlobalAveragePool", since=1)
def global_average_pool_v1(ctx: NodeContext) -> None:
    _global_pool(ctx, "AvgPoolFusion", "MEAN")


@mapper("GlobalMaxPool", since=1)
def global_max_pool_v1(ctx: NodeContext) -> None:
    _global_pool(ctx, "MaxPoolFusion", "MAX")
