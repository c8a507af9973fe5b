"""Activation (every ActivationType), and fused activations emitted as a real node."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from lite.delegates.onnxruntime.emitters.registry import emitter
from lite.ops.activation import FUSED_ACTIVATIONS, FUSED_CLIPS
from lite.ops.dtypes import FLOAT32

if TYPE_CHECKING:
    from lite.delegates.onnxruntime.builder import NodeContext


def _clip(ctx: NodeContext, x: str, y: str, low: float, high: float) -> None:
    dtype = ctx.out_dtype()
    ctx.op("Clip", [x, ctx.const(low, "min", dtype), ctx.const(high, "max", dtype)], y)


def _plain(op_type: str) -> Callable[[NodeContext, str, str, Mapping[str, Any]], None]:
    return lambda ctx, x, y, params: ctx.op(op_type, [x], y)


ACTIVATIONS: dict[str, Callable[[NodeContext, str, str, Mapping[str, Any]], None]] = {
    "NO_ACTIVATION": _plain("Identity"),
    "RELU": _plain("Relu"),
    "RELU6": lambda ctx, x, y, params: _clip(ctx, x, y, *FUSED_CLIPS["RELU6"]),
    "LEAKY_RELU": lambda ctx, x, y, params: ctx.op("LeakyRelu", [x], y, alpha=float(params["alpha"])),
    "SIGMOID": _plain("Sigmoid"),
    "TANH": _plain("Tanh"),
    "HARD_SIGMOID": lambda ctx, x, y, params: ctx.op("HardSigmoid", [x], y, alpha=float(params["alpha"]),
                                                     beta=float(params["beta"])),
    "HARD_SWISH": _plain("HardSwish"),
    "CLIP": lambda ctx, x, y, params: _clip(ctx, x, y, float(params["min_val"]), float(params["max_val"])),
}


def emit_activation(ctx: NodeContext, kind: str, x: str, y: str) -> None:
    """Writes activation ``kind`` of ``x`` to ``y`` as one ONNX node (parameters from ``ctx.attrs``)."""
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
    else:
        emit_activation(ctx, kind, ctx.op(op_type, inputs, **attrs), ctx.output())


@emitter("Activation", FLOAT32)
def activation(ctx: NodeContext) -> None:
    emit_activation(ctx, ctx.attrs["activation_type"], ctx.input(0), ctx.output())
