"""The Activation primitive: every ActivationType of schema/ops.fbs."""

from __future__ import annotations

from collections.abc import Callable

from tvm import relax

from lite.delegates.tvm.ops import Node, activate, clip, emitter
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


ACTIVATIONS: dict[str, Lower] = {
    **{kind: _fused(kind) for kind in FUSED_ACTIVATIONS},
    "LEAKY_RELU": _leaky_relu,
    "SIGMOID": lambda node, x: relax.op.sigmoid(x),
    "TANH": lambda node, x: relax.op.tanh(x),
    "HARD_SIGMOID": _hard_sigmoid,
    "HARD_SWISH": _hard_swish,
    "CLIP": lambda node, x: clip(x, float(node.attrs["min_val"]), float(node.attrs["max_val"])),
}


def check_activation(kernel, attrs) -> str | None:
    kind = attrs["activation_type"]
    return None if kind in ACTIVATIONS else f"Activation {kind}: unknown activation type"


@emitter("Activation", check=check_activation)
def activation(node: Node) -> relax.Expr:
    return ACTIVATIONS[node.attrs["activation_type"]](node, node.x(0))
