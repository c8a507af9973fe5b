"""Element-wise ops with numpy broadcasting: arithmetic with fused activations, variadic ops, unary math."""

from __future__ import annotations

import functools

from tvm import relax

from lite.delegates.tvm.ops import Node, activate, emitter, fused_activation

BINARY = {"AddFusion": relax.op.add, "SubFusion": relax.op.subtract, "MulFusion": relax.op.multiply,
          "DivFusion": relax.op.divide}
VARIADIC = {"AddN": relax.op.add, "Maximum": relax.op.maximum, "Minimum": relax.op.minimum}
UNARY = {"ExpFusion": relax.op.exp, "Log": relax.op.log, "Sqrt": relax.op.sqrt, "Neg": relax.op.negative,
         "Abs": relax.op.abs, "Erf": relax.op.erf}


@emitter(*BINARY, check=fused_activation)
def binary(node: Node) -> relax.Expr:
    """a op b (float division for DivFusion: this delegate compiles float tensors only)."""
    y = BINARY[node.kernel.type](node.x(0), node.x(1))
    return activate(y, node.attrs["activation_type"])


@emitter(*VARIADIC)
def variadic(node: Node) -> relax.Expr:
    """Folds the op over one or more broadcast inputs, left to right as the native kernel does."""
    return functools.reduce(VARIADIC[node.kernel.type], node.inputs)


@emitter(*UNARY)
def unary(node: Node) -> relax.Expr:
    return UNARY[node.kernel.type](node.x(0))


@emitter("PowFusion")
def power(node: Node) -> relax.Expr:
    return relax.op.power(node.x(0), node.x(1))


@emitter("Identity")
def identity(node: Node) -> relax.Expr:
    return node.x(0)
