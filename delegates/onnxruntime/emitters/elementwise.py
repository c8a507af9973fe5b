"""Element-wise ops: binary arithmetic with a fused activation, variadic, comparisons, unary math."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from lite.delegates.onnxruntime.emitters.activation import with_activation
from lite.delegates.onnxruntime.emitters.registry import FLOAT32, FLOATS, NUMBERS, emitter

if TYPE_CHECKING:
    from lite.delegates.onnxruntime.builder import NodeContext

_FUSED = {"AddFusion": "Add", "SubFusion": "Sub", "MulFusion": "Mul", "DivFusion": "Div"}
_SAME = {"AddN": "Sum", "Maximum": "Max", "Minimum": "Min", "PowFusion": "Pow", "Equal": "Equal",
         "Less": "Less", "Greater": "Greater", "ExpFusion": "Exp", "Log": "Log", "Sqrt": "Sqrt", "Neg": "Neg",
         "Abs": "Abs", "Erf": "Erf", "Where": "Where"}


@emitter("AddFusion", NUMBERS)
@emitter("SubFusion", NUMBERS)
@emitter("MulFusion", NUMBERS)
@emitter("DivFusion", NUMBERS)
def arithmetic(ctx: NodeContext) -> None:
    with_activation(ctx, _FUSED[ctx.kernel.type], ctx.inputs())


@emitter("AddN", FLOATS)
@emitter("Maximum", NUMBERS)
@emitter("Minimum", NUMBERS)
@emitter("PowFusion", NUMBERS)
@emitter("Equal", (*NUMBERS, np.bool_))
@emitter("Less", NUMBERS)
@emitter("Greater", NUMBERS)
@emitter("ExpFusion", FLOATS)
@emitter("Log", FLOATS)
@emitter("Sqrt", FLOATS)
@emitter("Neg", NUMBERS)
@emitter("Abs", NUMBERS)
@emitter("Erf", FLOAT32)
@emitter("Where", (np.bool_,))  # the condition's dtype
def same(ctx: NodeContext) -> None:
    """Ops with ONNX's meaning under another name (or the same one)."""
    ctx.op(_SAME[ctx.kernel.type], ctx.inputs(), ctx.output())

