"""Element-wise ops: binary arithmetic with a fused activation, variadic, comparisons, unary math."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from lite.delegates.onnxruntime.emitters.activation import with_activation
from lite.delegates.onnxruntime.emitters.registry import emitter
from lite.ops.dtypes import FLOAT32, FLOATS_32_64, NUMBERS_32_64

if TYPE_CHECKING:
    from lite.delegates.onnxruntime.builder import NodeContext

_FUSED = {"AddFusion": "Add", "SubFusion": "Sub", "MulFusion": "Mul", "DivFusion": "Div"}
_SAME = {"AddN": "Sum", "Maximum": "Max", "Minimum": "Min", "PowFusion": "Pow", "Equal": "Equal",
         "Less": "Less", "Greater": "Greater", "ExpFusion": "Exp", "Log": "Log", "Sqrt": "Sqrt", "Neg": "Neg",
         "Abs": "Abs", "Erf": "Erf", "Where": "Where"}


@emitter("AddFusion", NUMBERS_32_64)
@emitter("SubFusion", NUMBERS_32_64)
@emitter("MulFusion", NUMBERS_32_64)
@emitter("DivFusion", NUMBERS_32_64)
def arithmetic(ctx: NodeContext) -> None:
    with_activation(ctx, _FUSED[ctx.kernel.type], ctx.inputs())


@emitter("AddN", FLOATS_32_64)
@emitter("Maximum", NUMBERS_32_64)
@emitter("Minimum", NUMBERS_32_64)
@emitter("PowFusion", NUMBERS_32_64)
@emitter("Equal", (*NUMBERS_32_64, np.bool_))
@emitter("Less", NUMBERS_32_64)
@emitter("Greater", NUMBERS_32_64)
@emitter("ExpFusion", FLOATS_32_64)
@emitter("Log", FLOATS_32_64)
@emitter("Sqrt", FLOATS_32_64)
@emitter("Neg", NUMBERS_32_64)
@emitter("Abs", NUMBERS_32_64)
@emitter("Erf", FLOAT32)
@emitter("Where", (np.bool_,))  # the condition's dtype
def same(ctx: NodeContext) -> None:
    """Ops with ONNX's meaning under another name (or the same one)."""
    ctx.op(_SAME[ctx.kernel.type], ctx.inputs(), ctx.output())

