"""Activations -> the Activation primitive (a Clip that is a fused activation, such as Clip(0, 6),
becomes that one: RELU6)."""

from __future__ import annotations

import math

import numpy as np

from lite.ops.activation import clip_activation
from lite.tools.converter.context import NodeContext
from lite.tools.converter.registry import mapper


def _activation(ctx: NodeContext, activation_type: str, **params: float) -> None:
    ctx.emit("Activation", {"activation_type": activation_type, **params}, [ctx.input(0)])


@mapper("Relu", since=1)
def relu_v1(ctx: NodeContext) -> None:
    _activation(ctx, "RELU")


@mapper("LeakyRelu", since=1)
def leaky_relu_v1(ctx: NodeContext) -> None:
    _activation(ctx, "LEAKY_RELU", alpha=float(ctx.attr("alpha", 0.01)))


@mapper("Sigmoid", since=1)
def sigmoid_v1(ctx: NodeContext) -> None:
    _activation(ctx, "SIGMOID")


@mapper("Tanh", since=1)
def tanh_v1(ctx: NodeContext) -> None:
    _activation(ctx, "TANH")


@mapper("HardSigmoid", since=1)
def hard_sigmoid_v1(ctx: NodeContext) -> None:
    _activation(ctx, "HARD_SIGMOID", alpha=float(ctx.attr("alpha", 0.2)), beta=float(ctx.attr("beta", 0.5)))


@mapper("HardSwish", since=14)
def hard_swish_v14(ctx: NodeContext) -> None:
    _activation(ctx, "HARD_SWISH")


@mapper("Clip", since=1)
def clip_v1(ctx: NodeContext) -> None:
    """Opset < 11: bounds are the ``min``/``max`` attributes."""
    _clip(ctx, float(ctx.attr("min", -math.inf)), float(ctx.attr("max", math.inf)))


@mapper("Clip", since=11)
def clip_v11(ctx: NodeContext) -> None:
    """Opset 11+: bounds are optional inputs, which must be constants."""
    low = _bound(ctx, 1, "min", -math.inf)
    _clip(ctx, low, _bound(ctx, 2, "max", math.inf))


def _bound(ctx: NodeContext, i: int, what: str, default: float) -> float:
    if not ctx.has_input(i):
        return default
    value = ctx.const_input(i, f"Clip {what}")
    if value.size != 1:
        ctx.invalid(f"Clip {what} must be a scalar, got shape {value.shape}")
    return float(np.asarray(value).reshape(-1)[0])


def _clip(ctx: NodeContext, low: float, high: float) -> None:
    kind = clip_activation(low, high)
    if kind is not None:
        _activation(ctx, kind)
    else:
        _activation(ctx, "CLIP", min_val=low, max_val=high)
