"""The Activation primitive (every ActivationType of schema/ops.fbs), PReLUFusion, Clip, Shrink."""

from __future__ import annotations

from collections.abc import Callable

from tvm import relax

from lite.delegates.tvm.ops.common import Node, activate, clip, emitter
from lite.ops.activation import FUSED_ACTIVATIONS

Lower = Callable[[Node, relax.Expr], relax.Expr]


def _fused(kind: str) -> Lower:
    """A fused activation type as an Activation of its own: the same clip."""
    return lambda node, x: activate(x, kind)


def _leaky_relu(node: Node, x: relax.Expr) -> relax.Expr:
    # NOTE: max(x, alpha x) for alpha <= 1 and min(x, alpha x) above both equal x >= 0 ? x : alpha x.
    return relax.op.nn.leakyrelu(x, float(node.attrs["alpha"]))


def _hard_sigmoid(node: Node, x: relax.Expr) -> relax.Expr:
    g, attrs = node.g, node.attrs
    return relax.op.clip(relax.op.add(relax.op.multiply(x, g.const(attrs["alpha"])), g.const(attrs["beta"])), 0.0, 1.0)


def _hard_swish(node: Node, x: relax.Expr) -> relax.Expr:
    g = node.g
    gate = relax.op.clip(relax.op.add(relax.op.divide(x, g.const(6.0)), g.const(0.5)), 0.0, 1.0)
    return relax.op.multiply(gate, x)


def _elu(node: Node, x: relax.Expr) -> relax.Expr:
    """alpha * (exp(min(x, 0)) - 1) + max(x, 0), as the native kernel computes it."""
    g, alpha = node.g, float(node.attrs["alpha"])
    negative = relax.op.subtract(relax.op.exp(relax.op.minimum(x, g.const(0.0))), g.const(1.0))
    return relax.op.add(relax.op.multiply(negative, g.const(alpha)), relax.op.maximum(x, g.const(0.0)))


def _celu(node: Node, x: relax.Expr) -> relax.Expr:
    """max(x, 0) + min(0, alpha * (exp(min(x, 0) / alpha) - 1)), as the native kernel computes it."""
    g, alpha = node.g, float(node.attrs["alpha"])
    scaled = relax.op.divide(relax.op.minimum(x, g.const(0.0)), g.const(alpha))
    negative = relax.op.multiply(relax.op.subtract(relax.op.exp(scaled), g.const(1.0)), g.const(alpha))
    return relax.op.add(relax.op.minimum(negative, g.const(0.0)), relax.op.maximum(x, g.const(0.0)))


def _thresholded_relu(node: Node, x: relax.Expr) -> relax.Expr:
    g = node.g
    return relax.op.where(relax.op.greater(x, g.const(node.attrs["alpha"])), x, g.const(0.0))


def _swish(node: Node, x: relax.Expr) -> relax.Expr:
    return relax.op.multiply(x, relax.op.sigmoid(relax.op.multiply(x, node.g.const(node.attrs["alpha"]))))


ACTIVATIONS: dict[str, Lower] = {
    **{kind: _fused(kind) for kind in FUSED_ACTIVATIONS},
    "LEAKY_RELU": _leaky_relu,
    "SIGMOID": lambda node, x: relax.op.sigmoid(x),
    "TANH": lambda node, x: relax.op.tanh(x),
    "HARD_SIGMOID": _hard_sigmoid,
    "HARD_SWISH": _hard_swish,
    "CLIP": lambda node, x: clip(x, float(node.attrs["min_val"]), float(node.attrs["max_val"])),
    "ELU": _elu,
    "SELU": lambda node, x: relax.op.multiply(_elu(node, x), node.g.const(node.attrs["beta"])),
    "SOFTPLUS": lambda node, x: relax.op.nn.softplus(x),
    "SOFTSIGN": lambda node, x: relax.op.divide(x, relax.op.add(relax.op.abs(x), node.g.const(1.0))),
    "GELU": lambda node, x: relax.op.nn.gelu(x),
    "GELU_TANH": lambda node, x: relax.op.nn.gelu_tanh(x),
    "MISH": lambda node, x: relax.op.multiply(x, relax.op.tanh(relax.op.nn.softplus(x))),
    "CELU": _celu,
    "THRESHOLDED_RELU": _thresholded_relu,
    "SWISH": _swish,
}


def check_activation(kernel, attrs) -> str | None:
    kind = attrs["activation_type"]
    return None if kind in ACTIVATIONS else f"Activation {kind}: unknown activation type"


@emitter("Activation", check=check_activation)
def activation(node: Node) -> relax.Expr:
    return ACTIVATIONS[node.attrs["activation_type"]](node, node.x(0))


@emitter("PReLUFusion")
def prelu(node: Node) -> relax.Expr:
    """x where x >= 0, slope * x below (the slope broadcasts to x)."""
    x = node.x(0)
    return relax.op.where(relax.op.less(x, node.g.const(0.0)), relax.op.multiply(x, node.x(1)), x)


@emitter("Clip")
def clip_inputs(node: Node) -> relax.Expr:
    """min(max(x, min), max) with the bounds as tensors (an absent one is no bound)."""
    y = node.x(0)
    for index, op in ((1, relax.op.maximum), (2, relax.op.minimum)):
        if node.has(index):
            y = op(y, relax.op.reshape(node.x(index), []))
    return y


@emitter("Shrink")
def shrink(node: Node) -> relax.Expr:
    """x + bias below -lambd, x - bias above lambd, 0 between."""
    g, x = node.g, node.x(0)
    bias, lambd = g.const(node.attrs["bias"]), float(node.attrs["lambd"])
    above = relax.op.where(relax.op.greater(x, g.const(lambd)), relax.op.subtract(x, bias), g.const(0.0))
    return relax.op.where(relax.op.less(x, g.const(-lambd)), relax.op.add(x, bias), above)
