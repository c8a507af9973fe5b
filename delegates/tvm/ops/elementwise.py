"""Element-wise ops with numpy broadcasting: arithmetic with fused activations, variadic ops, Mod, unary math.

Ops on bool or integer tensors (comparisons, logic, bits) have no emitter: this delegate compiles float32
partitions only.
"""

from __future__ import annotations

import functools

from tvm import relax

from lite.delegates.tvm.ops.common import UNSUPPORTED, Node, activate, emitter, fused_activation

BINARY = {"AddFusion": relax.op.add, "SubFusion": relax.op.subtract, "MulFusion": relax.op.multiply,
          "DivFusion": relax.op.divide}
VARIADIC = {"AddN": relax.op.add, "Maximum": relax.op.maximum, "Minimum": relax.op.minimum}
UNARY = {"ExpFusion": relax.op.exp, "Log": relax.op.log, "Sqrt": relax.op.sqrt, "Neg": relax.op.negative,
         "Abs": relax.op.abs, "Erf": relax.op.erf, "Floor": relax.op.floor, "Ceil": relax.op.ceil,
         "Round": relax.op.round, "Sin": relax.op.sin, "Cos": relax.op.cos, "Tan": relax.op.tan,
         "Asin": relax.op.asin, "Acos": relax.op.acos, "Atan": relax.op.atan, "Sinh": relax.op.sinh,
         "Cosh": relax.op.cosh, "Asinh": relax.op.asinh, "Acosh": relax.op.acosh, "Atanh": relax.op.atanh,
         "Sign": relax.op.sign}  # NOTE: Relax's round, as ONNX's, takes halves to even

_BOOL = "its {} tensors are bool; this delegate compiles float32 partitions"
_INTEGER = "it works on integer tensors; this delegate compiles float32 partitions"
UNSUPPORTED.update({
    "LessEqual": _BOOL.format("output"), "GreaterEqual": _BOOL.format("output"), "IsNaN": _BOOL.format("output"),
    "IsInf": _BOOL.format("output"), "LogicalNot": _BOOL.format("input and output"),
    "LogicalAnd": _BOOL.format("input and output"), "LogicalOr": _BOOL.format("input and output"),
    "LogicalXor": _BOOL.format("input and output"), "BitShift": _INTEGER, "BitwiseAnd": _INTEGER,
    "BitwiseOr": _INTEGER, "BitwiseXor": _INTEGER, "BitwiseNot": _INTEGER,
})


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


@emitter("Reciprocal")
def reciprocal(node: Node) -> relax.Expr:
    return relax.op.divide(node.g.const(1.0), node.x(0))


@emitter("Mod")
def mod(node: Node) -> relax.Expr:
    """With fmod the dividend's sign (Relax's mod truncates, as C's fmod); else the divisor's, as numpy's mod."""
    x, d = node.x(0), node.x(1)
    rest = node.g.bb.emit(relax.op.mod(x, d))
    return rest if node.attrs["fmod"] else floor_mod(node.g, rest, d)


def floor_mod(g, rest: relax.Expr, d: relax.Expr) -> relax.Expr:
    """numpy's mod from the truncated remainder ``rest``: a nonzero one whose sign differs from the divisor's
    gets the divisor added, a zero one takes the divisor's sign."""
    # NOTE: not Relax's floor_mod: its x - floor(x / d) * d is NaN for an infinite divisor (3 mod inf is 3).
    zero, d_negative = g.const(0.0), g.bb.emit(relax.op.less(d, g.const(0.0)))
    flip = relax.op.logical_and(relax.op.not_equal(rest, zero),
                                relax.op.logical_xor(relax.op.less(rest, zero), d_negative))
    shifted = g.bb.emit(relax.op.where(flip, relax.op.add(rest, d), rest))
    signed_zero = relax.op.where(d_negative, g.const(-0.0), zero)
    return relax.op.where(relax.op.equal(shifted, zero), signed_zero, shifted)


@emitter("PowFusion")
def power(node: Node) -> relax.Expr:
    return relax.op.power(node.x(0), node.x(1))


@emitter("Identity")
def identity(node: Node) -> relax.Expr:
    return node.x(0)
