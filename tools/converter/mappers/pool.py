"""MaxPool, AveragePool, GlobalAveragePool, GlobalMaxPool -> MaxPoolFusion / AvgPoolFusion, of any
number of spatial axes (the length of kernel_shape; a global pool: the input's rank - 2)."""

from __future__ import annotations

from typing import Any

from lite.schema.primitives import default_attrs
from lite.tools.converter.context import NodeContext
from lite.tools.converter.mappers.common import ints, pad_attrs, spatial_rank
from lite.tools.converter.registry import mapper


def _pool_attrs(ctx: NodeContext) -> dict[str, Any]:
    rank = spatial_rank(ctx, ctx.rank(0), "input")
    return {
        "kernel_size": ints(ctx, "kernel_shape", None, rank),
        "strides": ints(ctx, "strides", [1] * rank, rank),
        "round_mode": "CEIL" if ctx.attr("ceil_mode", 0) else "FLOOR",
        "dilation": ints(ctx, "dilations", [1] * rank, rank),
        **pad_attrs(ctx, rank),
    }


@mapper("MaxPool", since=1)
def max_pool_v1(ctx: NodeContext) -> None:
    """Opset 8+: the optional Indices output (flat indices, storage_order 0 only)."""
    attrs = _pool_attrs(ctx)
    outputs = [ctx.output(0)]
    if ctx.output_used(1):
        if ctx.attr("storage_order", 0):
            ctx.unsupported("storage_order=1 (column-major Indices) is not supported; use storage_order=0 "
                            "(row-major, the default)")
        outputs.append(ctx.output(1))
    ctx.emit("MaxPoolFusion", attrs, [ctx.input(0)], outputs)


@mapper("AveragePool", since=1)
def average_pool_v1(ctx: NodeContext) -> None:
    """Opset 19 adds dilations (emitted when AvgPoolFusion has the field)."""
    attrs = _pool_attrs(ctx)
    dilations = attrs.pop("dilation")
    if any(d != 1 for d in dilations):
        if "dilation" not in default_attrs("AvgPoolFusion"):
            ctx.unsupported(f"dilations={dilations} needs AvgPoolFusion.dilation, which this schema lacks")
        attrs["dilation"] = dilations
    attrs["count_include_pad"] = bool(ctx.attr("count_include_pad", 0))
    ctx.emit("AvgPoolFusion", attrs, [ctx.input(0)])


def _global_pool(ctx: NodeContext, pool_type: str) -> None:
    spatial_rank(ctx, ctx.rank(0), "input")
    ctx.emit(pool_type, {"is_global": True}, [ctx.input(0)])


@mapper("GlobalAveragePool", since=1)
def global_average_pool_v1(ctx: NodeContext) -> None:
    _global_pool(ctx, "AvgPoolFusion")


@mapper("GlobalMaxPool", since=1)
def global_max_pool_v1(ctx: NodeContext) -> None:
    _global_pool(ctx, "MaxPoolFusion")
