"""Element-wise ops with numpy broadcasting, variadic ops and unary math."""

from __future__ import annotations

import numpy as np

from lite.ops.broadcast import legacy_broadcast_shape
from lite.tools.converter.context import NodeContext
from lite.tools.converter.mappers.common import same
from lite.tools.converter.registry import mapper

_BINARY = {"Add": "AddFusion", "Sub": "SubFusion", "Mul": "MulFusion", "Div": "DivFusion",
           "Pow": "PowFusion", "Equal": "Equal", "Less": "Less", "Greater": "Greater", "And": "LogicalAnd",
           "Or": "LogicalOr", "Xor": "LogicalXor", "LessOrEqual": "LessEqual", "GreaterOrEqual": "GreaterEqual",
           "BitwiseAnd": "BitwiseAnd", "BitwiseOr": "BitwiseOr", "BitwiseXor": "BitwiseXor"}


@mapper("Add", since=7)
@mapper("Sub", since=7)
@mapper("Mul", since=7)
@mapper("Div", since=7)
@mapper("Pow", since=7)
@mapper("Equal", since=7)
@mapper("Less", since=7)
@mapper("Greater", since=7)
@mapper("And", since=7)
@mapper("Or", since=7)
@mapper("Xor", since=7)
@mapper("LessOrEqual", since=12)
@mapper("GreaterOrEqual", since=12)
@mapper("BitwiseAnd", since=18)
@mapper("BitwiseOr", since=18)
@mapper("BitwiseXor", since=18)
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
@mapper("And", since=1)
@mapper("Or", since=1)
@mapper("Xor", since=1)
def binary_v1(ctx: NodeContext) -> None:
    """Opset < 7: with broadcast=1 and ``axis``, B lines up with A from ``axis`` on."""
    b = ctx.input(1)
    if ctx.attr("broadcast", 0) and ctx.has_attr("axis"):
        b = align(ctx, 1, int(ctx.attr("axis")))
    ctx.emit(_BINARY[ctx.node.op_type], {}, [ctx.input(0), b])


@mapper("Mod", since=10)
def mod_v10(ctx: NodeContext) -> None:
    ctx.emit("Mod", {"fmod": bool(ctx.attr("fmod", 0))}, [ctx.input(0), ctx.input(1)])


@mapper("BitShift", since=11)
def bit_shift_v11(ctx: NodeContext) -> None:
    """Opset 11 shifts unsigned integers; opset 28 adds signed ones (the meaning is the same)."""
    direction = ctx.attr("direction")
    if direction not in ("LEFT", "RIGHT"):
        ctx.invalid(f"direction must be 'LEFT' or 'RIGHT', got {direction!r}")
    ctx.emit("BitShift", {"left": direction == "LEFT"}, [ctx.input(0), ctx.input(1)])


def align(ctx: NodeContext, i: int, axis: int) -> int:
    """Input ``i`` reshaped with trailing 1s so numpy broadcasting lines it up with input 0 from ``axis``
    on (the legacy broadcast of opset < 7)."""
    b = ctx.input(i)
    a_rank, b_shape = ctx.rank(0), ctx.shape(i)
    if a_rank is None or b_shape is None:
        ctx.unsupported("legacy broadcast with axis needs the ranks of both inputs; set --input-shape")
    shape = legacy_broadcast_shape(b_shape, a_rank, axis % a_rank)
    if len(shape) == len(b_shape):
        return b
    value = ctx.const(i)
    if value is not None:
        return ctx.add_const(f"{ctx.node.input[i]}_aligned", value.reshape(shape))
    if -1 in shape:
        ctx.unsupported(f"legacy broadcast of a computed input with dynamic shape {b_shape} is not supported")
    aligned = ctx.add_tensor(f"{ctx.node.input[i]}_aligned", ctx.builder.graph.tensors[b].dtype, shape)
    target = ctx.add_const(f"{ctx.name}_shape", np.array(shape, dtype=np.int64))
    ctx.emit("Reshape", {}, [b, target], [aligned])
    return aligned


@mapper("Sum", since=1)
def sum_v1(ctx: NodeContext) -> None:
    same(ctx, "AddN")


@mapper("Mean", since=1)
def mean_v1(ctx: NodeContext) -> None:
    """The sum of the inputs (AddN) divided by their count (DivFusion)."""
    inputs = [i for i in ctx.inputs() if i >= 0]
    out = ctx.output(0)
    if len(inputs) == 1:
        ctx.emit("AddN", {}, inputs)
        return
    dtype, shape = ctx.builder.graph.tensors[out].dtype, ctx.builder.graph.tensors[out].shape
    total = ctx.add_tensor(f"{ctx.node.output[0]}_sum", dtype, shape)
    ctx.emit("AddN", {}, inputs, [total])
    ctx.emit("DivFusion", {}, [total, ctx.add_const(f"{ctx.name}_count", np.asarray(len(inputs), dtype))])


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


# ONNX unary op -> primitive, for ops with the same meaning at every opset (new opsets only added types).
_UNARY = {"Floor": "Floor", "Ceil": "Ceil", "Reciprocal": "Reciprocal", "Not": "LogicalNot", "Sin": "Sin",
          "Cos": "Cos", "Tan": "Tan", "Asin": "Asin", "Acos": "Acos", "Atan": "Atan", "Sinh": "Sinh", "Cosh": "Cosh",
          "Asinh": "Asinh", "Acosh": "Acosh", "Atanh": "Atanh", "Sign": "Sign", "IsNaN": "IsNaN", "Round": "Round",
          "BitwiseNot": "BitwiseNot"}


@mapper("Floor", since=1)
@mapper("Ceil", since=1)
@mapper("Reciprocal", since=1)
@mapper("Not", since=1)
@mapper("Sin", since=7)
@mapper("Cos", since=7)
@mapper("Tan", since=7)
@mapper("Asin", since=7)
@mapper("Acos", since=7)
@mapper("Atan", since=7)
@mapper("Sinh", since=9)
@mapper("Cosh", since=9)
@mapper("Asinh", since=9)
@mapper("Acosh", since=9)
@mapper("Atanh", since=9)
@mapper("Sign", since=9)
@mapper("IsNaN", since=9)
@mapper("Round", since=11)
@mapper("BitwiseNot", since=18)
def unary_v1(ctx: NodeContext) -> None:
    ctx.emit(_UNARY[ctx.node.op_type], {}, [ctx.input(0)])


@mapper("IsInf", since=10)
def is_inf_v10(ctx: NodeContext) -> None:
    attrs = {"detect_positive": bool(ctx.attr("detect_positive", 1)),
             "detect_negative": bool(ctx.attr("detect_negative", 1))}
    ctx.emit("IsInf", attrs, [ctx.input(0)])
