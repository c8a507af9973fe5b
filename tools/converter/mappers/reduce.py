"""Reductions -> ReduceFusion; Softmax and LogSoftmax with the axes they normalise over."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from lite.ops.reduce import ONNX_REDUCTIONS
from lite.tools.converter.context import NodeContext
from lite.tools.converter.registry import Mapper, mapper

_MODES = {op: mode for mode, op in ONNX_REDUCTIONS.items()}


def _reduce(ctx: NodeContext, axes: list[int], noop_with_empty_axes: bool = False, axes_input: int = -1) -> None:
    attrs = {"reduce_mode": _MODES[ctx.node.op_type], "axes": [int(a) for a in axes],
             "keep_dims": bool(ctx.attr("keepdims", 1)), "noop_with_empty_axes": noop_with_empty_axes}
    ctx.emit("ReduceFusion", attrs, [ctx.input(0)] + ([axes_input] if axes_input >= 0 else []))


def _mapper_for_each(ops: Iterable[str], since: int) -> Callable[[Mapper], Mapper]:
    """``@mapper(op, since=since)`` for every op of ``ops``."""
    def decorate(fn: Mapper) -> Mapper:
        for op in ops:
            mapper(op, since=since)(fn)
        return fn

    return decorate


@_mapper_for_each(ONNX_REDUCTIONS.values(), since=1)
def reduce_v1(ctx: NodeContext) -> None:
    """``axes`` attribute (ReduceSum before 13, the others before 18); empty = every axis."""
    _reduce(ctx, ctx.attr("axes", []))


@mapper("ReduceSum", since=13)
@_mapper_for_each([op for op in ONNX_REDUCTIONS.values() if op != "ReduceSum"], since=18)
def reduce_v13(ctx: NodeContext) -> None:
    """``axes`` is an optional input: constant axes become the attribute, computed ones stay an input."""
    axes = ctx.const(1)
    noop = bool(ctx.attr("noop_with_empty_axes", 0))
    if ctx.has_input(1) and axes is None:
        _reduce(ctx, [], noop, ctx.input(1))
    else:
        _reduce(ctx, [] if axes is None else axes.reshape(-1).tolist(), noop)


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
