"""Activations -> the Activation primitive (a Clip that is a fused activation, such as Clip(0, 6),
becomes that one: RELU6); PRelu -> PReLUFusion; Clip with bounds computed at run time, or on integers,
-> Clip; Shrink -> Shrink."""

from __future__ import annotations

import math

import numpy as np

from lite.ops.activation import clip_activation
from lite.tools.converter.context import NodeContext
from lite.tools.converter.mappers.elementwise import align
from lite.tools.converter.registry import mapper

# ONNX Selu's default (alpha, gamma) from opset 6, and before it.
SELU_DEFAULTS = (1.6732631921768188, 1.0507010221481323)
SELU_DEFAULTS_V1 = (1.673200011253357, 1.0506999492645264)
FLOAT32_MAX = float(np.finfo(np.float32).max)


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
    """Opset < 11: bounds are the ``min``/``max`` attributes (float tensors only)."""
    _clip(ctx, float(ctx.attr("min", -math.inf)), float(ctx.attr("max", math.inf)))


@mapper("Clip", since=11)
def clip_v11(ctx: NodeContext) -> None:
    """Opset 11+: bounds are optional inputs. Constant float bounds a float32 holds make an Activation (a
    fused one when they are RELU's or RELU6's); bounds computed at run time, or on integers, a Clip."""
    bounds = [_bound(ctx, 1, "min", -math.inf), _bound(ctx, 2, "max", math.inf)]
    if _is_float(ctx) and all(_float32_holds(b) for b in bounds):
        _clip(ctx, *bounds)
    else:
        inputs = [ctx.input(0), ctx.input(1, optional=True), ctx.input(2, optional=True)]
        while inputs[-1] == -1:
            inputs.pop()
        ctx.emit("Clip", {}, inputs)


def _float32_holds(value: float | None) -> bool:
    """Whether ``value`` is known and an Activation's float32 attribute holds it exactly."""
    if value is None or math.isnan(value):
        return False
    return math.isinf(value) or (abs(value) <= FLOAT32_MAX and float(np.float32(value)) == value)


def _is_float(ctx: NodeContext) -> bool:
    dtype = ctx.dtype(0)
    return dtype is not None and dtype.kind == "f"


def _bound(ctx: NodeContext, i: int, what: str, default: float) -> float | None:
    """A constant bound's value (``default`` when absent), None when it is computed at run time."""
    if not ctx.has_input(i):
        return default
    value = ctx.const(i)
    if value is None:
        return None
    if value.size != 1:
        ctx.invalid(f"Clip {what} must be a scalar, got shape {value.shape}")
    return float(np.asarray(value).reshape(-1)[0])


def _clip(ctx: NodeContext, low: float, high: float) -> None:
    kind = clip_activation(low, high)
    if kind is not None:
        _activation(ctx, kind)
    else:
        _activation(ctx, "CLIP", min_val=low, max_val=high)


@mapper("PRelu", since=7)
def prelu_v7(ctx: NodeContext) -> None:
    """The slope broadcasts to x (unidirectionally)."""
    ctx.emit("PReLUFusion", {}, [ctx.input(0), ctx.input(1)])


@mapper("PRelu", since=1)
def prelu_v1(ctx: NodeContext) -> None:
    """Opset < 7: a slope of one value is shared by every channel, a 1-D one is per channel (axis 1)."""
    shape = ctx.shape(1)
    slope = align(ctx, 1, 1) if shape is not None and len(shape) == 1 and shape[0] != 1 else ctx.input(1)
    ctx.emit("PReLUFusion", {}, [ctx.input(0), slope])


@mapper("Shrink", since=9)
def shrink_v9(ctx: NodeContext) -> None:
    ctx.emit("Shrink", {"bias": float(ctx.attr("bias", 0.0)), "lambd": float(ctx.attr("lambd", 0.5))},
             [ctx.input(0)])


@mapper("Elu", since=1)
def elu_v1(ctx: NodeContext) -> None:
    _activation(ctx, "ELU", alpha=float(ctx.attr("alpha", 1.0)))


@mapper("Selu", since=1)
def selu_v1(ctx: NodeContext) -> None:
    _selu(ctx, *SELU_DEFAULTS_V1)


@mapper("Selu", since=6)
def selu_v6(ctx: NodeContext) -> None:
    """Opset 6 changed the default alpha and gamma."""
    _selu(ctx, *SELU_DEFAULTS)


def _selu(ctx: NodeContext, alpha: float, gamma: float) -> None:
    """ONNX's gamma is SELU's beta."""
    _activation(ctx, "SELU", alpha=float(ctx.attr("alpha", alpha)), beta=float(ctx.attr("gamma", gamma)))


@mapper("Softplus", since=1)
def softplus_v1(ctx: NodeContext) -> None:
    _activation(ctx, "SOFTPLUS")


@mapper("Softsign", since=1)
def softsign_v1(ctx: NodeContext) -> None:
    _activation(ctx, "SOFTSIGN")


@mapper("ThresholdedRelu", since=10)
def thresholded_relu_v10(ctx: NodeContext) -> None:
    _activation(ctx, "THRESHOLDED_RELU", alpha=float(ctx.attr("alpha", 1.0)))


@mapper("Celu", since=12)
def celu_v12(ctx: NodeContext) -> None:
    _activation(ctx, "CELU", alpha=float(ctx.attr("alpha", 1.0)))


@mapper("Mish", since=18)
def mish_v18(ctx: NodeContext) -> None:
    _activation(ctx, "MISH")


@mapper("Gelu", since=20)
def gelu_v20(ctx: NodeContext) -> None:
    approximate = ctx.attr("approximate", "none")
    if approximate not in ("none", "tanh"):
        ctx.invalid(f"approximate must be 'none' or 'tanh', got {approximate!r}")
    _activation(ctx, "GELU" if approximate == "none" else "GELU_TANH")


@mapper("Swish", since=24)
def swish_v24(ctx: NodeContext) -> None:
    _activation(ctx, "SWISH", alpha=float(ctx.attr("alpha", 1.0)))
