"""Reductions -> ReduceFusion; Softmax and LogSoftmax with the axes they normalise over."""

from __future__ import annotations

from lite.tools.converter.context import NodeContext
from lite.tools.converter.registry import mapper

_MODES = {"ReduceMean": "MEAN", "ReduceMax": "MAX", "ReduceMin": "MIN", "ReduceSum": "SUM",
          "ReduceProd": "PROD"}


def _reduce(ctx: NodeContext, axes: list[int], noop_with_empty_axes: bool = False) -> None:
    attrs = {"reduce_mode": _MODES[ctx.node.op_type], "axes": [int(a) for a in axes],
             "keep_dims": bool(ctx.attr("keepdims", 1)), "noop_with_empty_axes": noop_with_empty_axes}
    ctx.emit("ReduceFusion", attrs, [ctx.input(0)])


@mapper("ReduceMean", since=1)
@mapper("ReduceMax", since=1)
@mapper("ReduceMin", since=1)
@mapper("ReduceSum", since=1)
@mapper("ReduceProd", since=1)
def reduce_v1(ctx: NodeContext) -> None:
    """``axes`` attribute (ReduceSum before 13, the others before 18); empty = every axis."""
    _reduce(ctx, ctx.attr("axes", []))


@mapper("ReduceSum", since=13)
@mapper("ReduceMean", since=18)
@mapper("ReduceMax", since=18)
@mapper("ReduceMin", since=18)
@mapper("ReduceProd", since=18)
def reduce_v13(ctx: NodeContext) -> None:
    """``axes`` is an optional input, which must be a constant."""
    axes = ctx.const_input(1, "reduction axes").reshape(-1).tolist() if ctx.has_input(1) else []
    _reduce(ctx, axes, bool(ctx.attr("noop_with_empty_axes", 0)))


@mapper("Softmax", since=1)
@mapper("LogSoftmax", since=1)
def softmax_v1(ctx: NodeContext) -> None:
    """Opset < 13 flattens at ``axis`` (default 1): normalise over every axis from it on."""
    rank = ctx.rank(0)
    if rank is None:
        ctx.unsupported("opset < 13 Softmax needs the input rank; set --input-shape or use opset 13+")
    axis = int(ctx.attr("axis", 1))
    if rank and not -rank <= axis < rank:
        ctx.invalid(f"axis={axis} is out of range for rank {rank}")
    start = axis % rank if rank else 0
    ctx.emit(ctx.node.op_type, {"axis": list(range(start, rank))}, [ctx.input(0)])


@mapper("Softmax", since=13)
@mapper("LogSoftmax", since=13)
def softmax_v13(ctx: NodeContext) -> None:
    ctx.emit(ctx.node.op_type, {"axis": [int(ctx.attr("axis", -1))]}, [ctx.input(0)])
