"""DynamicQuantizeLinear, MatMulInteger and ConvInteger (what onnxruntime's ``quantize_dynamic``
writes) -> the primitives of the same names; their meaning is ``lite.ops.integer``.

ConvInteger takes Conv's attributes (``conv._conv_attrs``). Zero points that are constants are
checked here against their operand; computed ones are checked by the kernel when it runs.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from lite.ops.integer import INTEGER_DTYPES, channel_zero_point, row_zero_point, tensor_zero_point
from lite.tools.converter.context import NodeContext
from lite.tools.converter.mappers.common import same
from lite.tools.converter.mappers.conv import _conv_attrs, _weight_shape
from lite.tools.converter.registry import mapper

ZeroPointShaper = Callable[[np.ndarray, tuple[int, ...]], np.ndarray | None]


@mapper("DynamicQuantizeLinear", since=11)
def dynamic_quantize_linear_v11(ctx: NodeContext) -> None:
    """float32 x -> uint8 y, its float32 scale and uint8 zero point (three outputs, all required)."""
    if ctx.dtype(0) not in (None, np.dtype(np.float32)):
        ctx.invalid(f"x is {ctx.dtype(0).name}; DynamicQuantizeLinear takes float32")
    outputs = [ctx.output(j) for j in range(3)]
    ctx.emit("DynamicQuantizeLinear", {}, [ctx.input(0)], outputs)


@mapper("MatMulInteger", since=10)
def matmul_integer_v10(ctx: NodeContext) -> None:
    """a_zero_point per tensor or per row of a, b_zero_point per tensor or per column of b."""
    _check_operands(ctx, {0: row_zero_point, 1: _as_given})
    same(ctx, "MatMulInteger")


@mapper("ConvInteger", since=10)
def conv_integer_v10(ctx: NodeContext) -> None:
    """Conv's attributes; x_zero_point per tensor, w_zero_point per tensor or per output channel."""
    _check_operands(ctx, {0: lambda value, _shape: tensor_zero_point(value), 1: channel_zero_point})
    w = _weight_shape(ctx)
    attrs = _conv_attrs(ctx, w)
    attrs.update(in_channel=w[1] * attrs["group"], out_channel=w[0])
    same(ctx, "ConvInteger", attrs)


def _as_given(value: np.ndarray, _shape: tuple[int, ...]) -> np.ndarray:
    return value


def _check_operands(ctx: NodeContext, shapers: dict[int, ZeroPointShaper]) -> None:
    """Each operand is int8 or uint8 and its zero point (input ``i + 2``) has its type and, where
    both are known, fits its shape (``shapers[i]`` shapes it, raising ValueError where it does not)."""
    for i, shaper in shapers.items():
        dtype = ctx.dtype(i)
        if dtype is not None and dtype not in INTEGER_DTYPES:
            ctx.invalid(f"input #{i} is {dtype.name}; {ctx.node.op_type} takes int8 or uint8")
        if not ctx.has_input(i + 2):
            continue
        zero_dtype = ctx.dtype(i + 2)
        if None not in (dtype, zero_dtype) and zero_dtype != dtype:
            ctx.invalid(f"input #{i + 2}, the zero point of input #{i}, is {zero_dtype.name}, but input #{i} "
                        f"is {dtype.name}")
        _check_zero_point_shape(ctx, i, shaper)


def _check_zero_point_shape(ctx: NodeContext, i: int, shaper: ZeroPointShaper) -> None:
    shape, zero_shape = ctx.shape(i), ctx.shape(i + 2)
    if shape is None or zero_shape is None or -1 in shape or -1 in zero_shape:
        return
    try:
        shaped = shaper(np.zeros(zero_shape, np.int8), shape)
        fits = np.broadcast_shapes(shaped.shape, shape) == tuple(shape)
    except ValueError as exc:
        ctx.invalid(str(exc))
    if not fits:
        ctx.invalid(f"the zero point of input #{i} has shape {list(zero_shape)}, which does not broadcast to "
                    f"the input's shape {list(shape)}")
