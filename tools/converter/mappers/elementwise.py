"""Element-wise ops with numpy broadcasting, variadic ops and unary math."""

from __future__ import annotations

import numpy as np

from lite.ops.broadcast import legacy_broadcast_shape
from lite.tools.converter.context import NodeContext
from lite.tools.converter.mappers.common import same
from lite.tools.converter.registry import mapper

_BINARY = {"Add": "AddFusion", "Sub": "SubFusion", "Mul": "MulFusion", "Div": "DivFusion",
           "Pow": "PowFusion", "Equal": "Equal", "Less": "Less", "Greater": "Greater"}


@mapper("Add", since=7)
@mapper("Sub", since=7)
@mapper("Mul", since=7)
@mapper("Div", since=7)
@mapper("Pow", since=7)
@mapper("Equal", since=7)
@mapper("Less", since=7)
@mapper("Greater", since=7)
def binary_v7(ctx: NodeContext) -> None:
    ctx.emit(_BINARY[ctx.node.op_type], {}, [ctx.input(0), ctx.input(1)])


@mapper("Add", since=1)
@mapper("Sub", since=1)
@mapper("Mul", since=1)
@mapper("Div", since=1)
@mapper("Pow", since=1)
@mapper("Equal", since=1)
@mapper("Less", since=1)
@mapper("Greater", since=1)
def binary_v1(ctx: NodeContext) -> None:
    """Opset < 7: with broadcast=1 and ``axis``, B lines up with A from ``axis`` on."""
    b = ctx.input(1)
    if ctx.attr("broadcast", 0) and ctx.has_attr("axis"):
        b = _align(ctx, b)
    ctx.emit(_BINARY[ctx.node.op_type], {}, [ctx.input(0), b])


def _align(ctx: NodeContext, b: int) -> int:
    """B reshaped with trailing 1s so numpy broadcasting puts it at ``axis``."""
    a_rank, b_shape = ctx.rank(0), ctx.shape(1)
    if a_rank is None or b_shape is None:
        ctx.unsupported("legacy broadcast with axis needs the ranks of both inputs; set --input-shape")
    shape = legacy_broadcast_shape(b_shape, a_rank, int(ctx.attr("axis")) % a_rank)
    if len(shape) == len(b_shape):
        return b
    value = ctx.const(1)
    if value is not None:
        return ctx.add_const(f"{ctx.node.input[1]}_aligned", value.reshape(shape))
    if -1 in shape:
        ctx.unsupported(f"legacy broadcast of a computed B with dynamic shape {b_shape} is not supported")
    aligned = ctx.add_tensor(f"{ctx.node.input[1]}_aligned", ctx.builder.graph.tensors[b].dtype, shape)
    target = ctx.add_const(f"{ctx.name}_shape", np.array(shape, dtype=np.int64))
    ctx.emit("Reshape", {}, [b, target], [aligned])
    return aligned


@mapper("Sum", since=1)
def sum_v1(ctx: NodeContext) -> None:
    same(ctx, "AddN")


@mapper("Max", since=1)
def max_v1(ctx: NodeContext) -> None:
    same(ctx, "Maximum")


@mapper("Min", since=1)
def min_v1(ctx: NodeContext) -> None:
    same(ctx, "Minimum")


@mapper("Where", since=9)
def where_v9(ctx: NodeContext) -> None:
    same(ctx, "Where")


@mapper("Exp", since=1)
def exp_v1(ctx: NodeContext) -> None:
    same(ctx, "ExpFusion")


@mapper("Log", since=1)
def log_v1(ctx: NodeContext) -> None:
    same(ctx, "Log")


@mapper("Sqrt", since=1)
def sqrt_v1(ctx: NodeContext) -> None:
    same(ctx, "Sqrt")


@mapper("Neg", since=1)
def neg_v1(ctx: NodeContext) -> None:
    same(ctx, "Neg")


@mapper("Abs", since=1)
def abs_v1(ctx: NodeContext) -> None:
    same(ctx, "Abs")


@mapper("Erf", since=9)
def erf_v9(ctx: NodeContext) -> None:
    same(ctx, "Erf")
