"""Element-wise ops: binary arithmetic with a fused activation, variadic, comparisons, logic, bits, unary math.

``dtypes`` are those onnxruntime's CPU kernels run at opset 17 (its trigonometry beyond Sin and Cos, for
one, has no float64 kernel). The Bitwise ops arrive in opset 18, so they stay native.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from lite.delegates.onnxruntime.emitters.activation import with_activation
from lite.delegates.onnxruntime.emitters.registry import emitter
from lite.ops.dtypes import ALL, BOOL, FLOAT32, FLOATS, FLOATS_32_64, NUMBERS, NUMBERS_32_64, UNSIGNED_INTS

if TYPE_CHECKING:
    from lite.delegates.onnxruntime.context import NodeContext

FLOAT32_16 = (np.dtype(np.float32), np.dtype(np.float16))
MIN_MAX_DTYPES = tuple(d for d in NUMBERS if d not in (np.dtype(np.int16), np.dtype(np.uint16)))

_FUSED = {"AddFusion": "Add", "SubFusion": "Sub", "MulFusion": "Mul", "DivFusion": "Div"}
_SAME = {"AddN": "Sum", "Maximum": "Max", "Minimum": "Min", "PowFusion": "Pow", "Equal": "Equal",
         "Less": "Less", "Greater": "Greater", "ExpFusion": "Exp", "Log": "Log", "Sqrt": "Sqrt", "Neg": "Neg",
         "Abs": "Abs", "Erf": "Erf", "Where": "Where", "LessEqual": "LessOrEqual", "GreaterEqual": "GreaterOrEqual",
         "LogicalAnd": "And", "LogicalOr": "Or", "LogicalXor": "Xor", "LogicalNot": "Not", "Floor": "Floor",
         "Ceil": "Ceil", "Round": "Round", "Sin": "Sin", "Cos": "Cos", "Tan": "Tan", "Asin": "Asin", "Acos": "Acos",
         "Atan": "Atan", "Sinh": "Sinh", "Cosh": "Cosh", "Asinh": "Asinh", "Acosh": "Acosh", "Atanh": "Atanh",
         "Reciprocal": "Reciprocal", "Sign": "Sign", "IsNaN": "IsNaN"}


@emitter("AddFusion", NUMBERS)
@emitter("SubFusion", NUMBERS)
@emitter("MulFusion", NUMBERS)
@emitter("DivFusion", NUMBERS)
def arithmetic(ctx: NodeContext) -> None:
    with_activation(ctx, _FUSED[ctx.kernel.type], ctx.inputs())


@emitter("AddN", FLOATS)
@emitter("Maximum", MIN_MAX_DTYPES)
@emitter("Minimum", MIN_MAX_DTYPES)
@emitter("PowFusion", NUMBERS_32_64)
@emitter("Equal", ALL)
@emitter("Less", NUMBERS)
@emitter("Greater", NUMBERS)
@emitter("LessEqual", NUMBERS)
@emitter("GreaterEqual", NUMBERS)
@emitter("LogicalAnd", BOOL)
@emitter("LogicalOr", BOOL)
@emitter("LogicalXor", BOOL)
@emitter("LogicalNot", BOOL)
@emitter("ExpFusion", FLOATS_32_64)
@emitter("Log", FLOATS_32_64)
@emitter("Sqrt", FLOATS_32_64)
@emitter("Neg", NUMBERS_32_64)
@emitter("Abs", NUMBERS_32_64)
@emitter("Erf", FLOAT32)
@emitter("Where", BOOL)  # the condition's dtype
@emitter("Floor", FLOATS)
@emitter("Ceil", FLOATS)
@emitter("Round", FLOATS)
@emitter("Sin", FLOATS)
@emitter("Cos", FLOATS)
@emitter("Tan", FLOAT32_16)
@emitter("Asin", FLOAT32_16)
@emitter("Acos", FLOAT32_16)
@emitter("Atan", FLOAT32_16)
@emitter("Sinh", FLOAT32_16)
@emitter("Cosh", FLOAT32_16)
@emitter("Asinh", FLOAT32_16)
@emitter("Acosh", FLOAT32_16)
@emitter("Atanh", FLOAT32_16)
@emitter("Reciprocal", FLOATS)
@emitter("Sign", NUMBERS)
@emitter("IsNaN", FLOATS)
def same(ctx: NodeContext) -> None:
    """Ops with ONNX's meaning under another name (or the same one)."""
    if ctx.kernel.type == "PowFusion" and ctx.in_dtype(1).kind == "u":
        ctx.unsupported("onnxruntime's CPU provider has no Pow with an unsigned exponent")
    ctx.op(_SAME[ctx.kernel.type], ctx.inputs(), ctx.output())


@emitter("IsInf", FLOATS_32_64)
def is_inf(ctx: NodeContext) -> None:
    ctx.op("IsInf", ctx.inputs(), ctx.output(), detect_positive=int(bool(ctx.attrs["detect_positive"])),
           detect_negative=int(bool(ctx.attrs["detect_negative"])))


@emitter("Mod", NUMBERS)
def mod(ctx: NodeContext) -> None:
    fmod = bool(ctx.attrs["fmod"])
    if not fmod and ctx.in_dtype(0).kind == "f":
        ctx.unsupported("Mod with fmod=0 on floats is defined from opset 28 only; this delegate emits opset 17")
    ctx.op("Mod", ctx.inputs(), ctx.output(), fmod=int(fmod))


@emitter("BitShift", UNSIGNED_INTS)
def bit_shift(ctx: NodeContext) -> None:
    """Opset 17's BitShift shifts unsigned integers only."""
    ctx.op("BitShift", ctx.inputs(), ctx.output(), direction="LEFT" if ctx.attrs["left"] else "RIGHT")

