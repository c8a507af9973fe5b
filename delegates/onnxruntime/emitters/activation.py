"""Activation (every ActivationType), fused activations emitted as a real node, PReLUFusion, Clip, Shrink.

Opset 17 has no Gelu, Mish or Swish: they are emitted as the nodes of their formulas.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from lite.delegates.onnxruntime.emitters.registry import emitter
from lite.ops.activation import FUSED_ACTIVATIONS, FUSED_CLIPS, GELU_TANH_CUBIC, SQRT_2_OVER_PI, SQRT_HALF
from lite.ops.dtypes import FLOAT32, FLOATS, NUMBERS

if TYPE_CHECKING:
    from lite.delegates.onnxruntime.context import NodeContext

# onnxruntime's Clip with bounds, and its Relu, lack some integer types.
CLIP_DTYPES = tuple(d for d in NUMBERS if d not in (np.dtype(np.int16), np.dtype(np.uint16)))
RELU_DTYPES = (*FLOATS, np.dtype(np.int8), np.dtype(np.int32))

Emit = Callable[["NodeContext", str, str, Mapping[str, Any]], None]


def _clip(ctx: NodeContext, x: str, y: str, low: float, high: float) -> None:
    """x clipped to [low, high]; an infinite bound is left out (an integer type cannot hold it)."""
    dtype = ctx.out_dtype()
    bounds = [ctx.const(v, what, dtype) if np.isfinite(v) else "" for v, what in ((low, "min"), (high, "max"))]
    while bounds and not bounds[-1]:
        bounds.pop()
    ctx.op("Clip", [x, *bounds], y)


def _relu(ctx: NodeContext, x: str, y: str, params: Mapping[str, Any]) -> None:
    if ctx.out_dtype() in RELU_DTYPES:
        ctx.op("Relu", [x], y)
    else:
        _clip(ctx, x, y, *FUSED_CLIPS["RELU"])


def _plain(op_type: str, *attrs: str, **renamed: str) -> Emit:
    """``op_type`` of x with float ``attrs`` read from the primitive (``renamed``: ONNX name -> ours)."""
    names = {**{a: a for a in attrs}, **renamed}
    return lambda ctx, x, y, params: ctx.op(op_type, [x], y, **{k: float(params[v]) for k, v in names.items()})


def _times_x(ctx: NodeContext, x: str, y: str, gate: str) -> None:
    ctx.op("Mul", [x, gate], y)


def _gelu(ctx: NodeContext, x: str, y: str, params: Mapping[str, Any]) -> None:
    """x * (1 + erf(x / sqrt(2))) / 2."""
    dtype = ctx.out_dtype()
    erf = ctx.op("Erf", [ctx.op("Mul", [x, ctx.const(SQRT_HALF, "sqrt_half", dtype)])])
    _half_x_times_one_plus(ctx, x, y, erf)


def _gelu_tanh(ctx: NodeContext, x: str, y: str, params: Mapping[str, Any]) -> None:
    """x * (1 + tanh(sqrt(2 / pi) * x * (1 + 0.044715 x^2))) / 2."""
    dtype = ctx.out_dtype()
    cubic = ctx.op("Mul", [ctx.op("Mul", [x, x]), ctx.const(GELU_TANH_CUBIC, "cubic", dtype)])
    inner = ctx.op("Mul", [ctx.op("Add", [cubic, ctx.const(1, "one", dtype)]), x])
    tanh = ctx.op("Tanh", [ctx.op("Mul", [inner, ctx.const(SQRT_2_OVER_PI, "sqrt_2_over_pi", dtype)])])
    _half_x_times_one_plus(ctx, x, y, tanh)


def _half_x_times_one_plus(ctx: NodeContext, x: str, y: str, t: str) -> None:
    """y = x * (1 + t) / 2, in the order the native kernel computes it."""
    dtype = ctx.out_dtype()
    scaled = ctx.op("Mul", [ctx.op("Add", [t, ctx.const(1, "one", dtype)]), x])
    ctx.op("Mul", [scaled, ctx.const(0.5, "half", dtype)], y)


def _mish(ctx: NodeContext, x: str, y: str, params: Mapping[str, Any]) -> None:
    _times_x(ctx, x, y, ctx.op("Tanh", [ctx.op("Softplus", [x])]))


def _swish(ctx: NodeContext, x: str, y: str, params: Mapping[str, Any]) -> None:
    scaled = ctx.op("Mul", [x, ctx.const(params["alpha"], "alpha", ctx.out_dtype())])
    _times_x(ctx, x, y, ctx.op("Sigmoid", [scaled]))


ACTIVATIONS: dict[str, Emit] = {
    "NO_ACTIVATION": _plain("Identity"),
    "RELU": _relu,
    "RELU6": lambda ctx, x, y, params: _clip(ctx, x, y, *FUSED_CLIPS["RELU6"]),
    "LEAKY_RELU": _plain("LeakyRelu", "alpha"),
    "SIGMOID": _plain("Sigmoid"),
    "TANH": _plain("Tanh"),
    "HARD_SIGMOID": _plain("HardSigmoid", "alpha", "beta"),
    "HARD_SWISH": _plain("HardSwish"),
    "CLIP": lambda ctx, x, y, params: _clip(ctx, x, y, float(params["min_val"]), float(params["max_val"])),
    "ELU": _plain("Elu", "alpha"),
    "SELU": _plain("Selu", "alpha", gamma="beta"),
    "SOFTPLUS": _plain("Softplus"),
    "SOFTSIGN": _plain("Softsign"),
    "GELU": _gelu,
    "GELU_TANH": _gelu_tanh,
    "MISH": _mish,
    "CELU": _plain("Celu", "alpha"),
    "THRESHOLDED_RELU": _plain("ThresholdedRelu", "alpha"),
    "SWISH": _swish,
}


def emit_activation(ctx: NodeContext, kind: str, x: str, y: str) -> None:
    """Writes activation ``kind`` of ``x`` to ``y`` (parameters from ``ctx.attrs``)."""
    if kind not in ACTIVATIONS:
        ctx.unsupported(f"activation_type {kind!r} is not one of {sorted(ACTIVATIONS)}")
    ACTIVATIONS[kind](ctx, x, y, ctx.attrs)


def with_activation(ctx: NodeContext, op_type: str, inputs: Sequence[str], **attrs: Any) -> None:
    """``op_type`` writing the kernel's output, through a Relu / Clip node for a fused activation."""
    kind = ctx.attrs.get("activation_type", "NO_ACTIVATION")
    if kind not in FUSED_ACTIVATIONS:
        ctx.unsupported(f"fused activation_type {kind!r} is not one of {FUSED_ACTIVATIONS}")
    if kind == "NO_ACTIVATION":
        ctx.op(op_type, inputs, ctx.output(), **attrs)
        return
    if ctx.out_dtype() not in CLIP_DTYPES:
        ctx.unsupported(f"fused {kind} on {ctx.out_dtype().name}: onnxruntime has no Relu or Clip kernel for it")
    emit_activation(ctx, kind, ctx.op(op_type, inputs, **attrs), ctx.output())


@emitter("Activation", FLOAT32)
def activation(ctx: NodeContext) -> None:
    emit_activation(ctx, ctx.attrs["activation_type"], ctx.input(0), ctx.output())


@emitter("PReLUFusion", (*FLOATS, np.int32, np.int64, np.uint32))
def prelu(ctx: NodeContext) -> None:
    ctx.op("PRelu", ctx.inputs(), ctx.output())


@emitter("Clip", CLIP_DTYPES)
def clip(ctx: NodeContext) -> None:
    """Bounds read at run time stay inputs ("" for an absent min)."""
    ctx.op("Clip", ctx.inputs(), ctx.output())


@emitter("Shrink", NUMBERS)
def shrink(ctx: NodeContext) -> None:
    ctx.op("Shrink", [ctx.input(0)], ctx.output(), bias=float(ctx.attrs["bias"]), lambd=float(ctx.attrs["lambd"]))
