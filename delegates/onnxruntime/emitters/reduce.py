"""ReduceFusion -> the ONNX Reduce op of its mode; Softmax / LogSoftmax over one axis, or several
(decomposed: x - max, Exp, ReduceSum, then Div or Log + Sub, as the native kernels compute it)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from lite.delegates.onnxruntime.emitters.registry import emitter
from lite.ops.dtypes import FLOATS_32_64
from lite.ops.reduce import ONNX_REDUCTIONS

if TYPE_CHECKING:
    from lite.delegates.onnxruntime.context import NodeContext

@emitter("ReduceFusion", FLOATS_32_64)
def reduce(ctx: NodeContext) -> None:
    """Opset 17: ReduceSum takes its axes as an input, the others as an attribute."""
    mode, axes = ctx.attrs["reduce_mode"], [int(a) for a in ctx.attrs["axes"]]
    op_type, keepdims = ONNX_REDUCTIONS[mode], int(bool(ctx.attrs["keep_dims"]))
    if ctx.has_input(1):
        if mode != "SUM":
            ctx.unsupported(f"{op_type} with axes given as a tensor is newer than opset 17")
        ctx.op("ReduceSum", [ctx.input(0), ctx.input(1)], ctx.output(), keepdims=keepdims,
               noop_with_empty_axes=int(bool(ctx.attrs["noop_with_empty_axes"])))
    elif not axes and ctx.attrs["noop_with_empty_axes"]:
        ctx.op("Identity", [ctx.input(0)], ctx.output())
    elif mode == "SUM":
        inputs = [ctx.input(0)] + ([ctx.const(axes, "axes", np.int64)] if axes else [])
        ctx.op("ReduceSum", inputs, ctx.output(), keepdims=keepdims)
    else:
        ctx.op(op_type, [ctx.input(0)], ctx.output(), keepdims=keepdims, **({"axes": axes} if axes else {}))


def _normalization(ctx: NodeContext, log: bool) -> None:
    axes = [int(a) for a in ctx.attrs["axis"]]
    if not axes:
        ctx.unsupported("axis lists no axis to normalise over")
    op_type = "LogSoftmax" if log else "Softmax"
    if len(axes) == 1:
        ctx.op(op_type, [ctx.input(0)], ctx.output(), axis=axes[0])
        return
    shifted = ctx.op("Sub", [ctx.input(0), ctx.op("ReduceMax", [ctx.input(0)], axes=axes, keepdims=1)])
    exps = ctx.op("Exp", [shifted])
    total = ctx.op("ReduceSum", [exps, ctx.const(axes, "axes", np.int64)], keepdims=1)
    if log:
        ctx.op("Sub", [shifted, ctx.op("Log", [total])], ctx.output())
    else:
        ctx.op("Div", [exps, total], ctx.output())


@emitter("Softmax", FLOATS_32_64)
def softmax(ctx: NodeContext) -> None:
    _normalization(ctx, log=False)


@emitter("LogSoftmax", FLOATS_32_64)
def log_softmax(ctx: NodeContext) -> None:
    _normalization(ctx, log=True)
