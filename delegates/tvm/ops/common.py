"""What the Relax emitters share: the partition's ``Graph``, one kernel's ``Node``, the
``emitter`` decorator and its table ``EMITTERS``, and the reasons an op is declined. The
package ``lite.delegates.tvm.ops`` imports every emitter module to fill the table; the
emitter modules import this one, which imports none of them."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from tvm import relax, tirx

from lite.kernel import Kernel
from lite.ops.activation import FUSED_ACTIVATIONS, FUSED_CLIPS
from lite.ops.dtypes import FLOAT32

DTYPES = FLOAT32  # what the delegate compiles (the data tensors of a partition)

Dim = int | tirx.Expr
Check = Callable[[Kernel, Mapping[str, Any]], str | None]


class NeedsStaticShapes(Exception):
    """Raised by an emitter that cannot express its op with a symbolic batch dim."""


class Graph:
    """What an emitter sees of the function being built: the block builder and the batch dim.

    Attributes:
        bb: the ``relax.BlockBuilder`` inside the function's dataflow block.
        batch: the symbolic batch ``tirx.Var`` (None when shapes are static).
        batch_value: the batch size the partition's tensors have now.
    """

    def __init__(self, bb: relax.BlockBuilder, batch: tirx.Var | None, batch_value: int | None):
        self.bb = bb
        self.batch = batch
        self.batch_value = batch_value

    def const(self, array: np.ndarray | float, dtype: str = "float32") -> relax.Constant:
        """A Relax constant (the array is copied into the module)."""
        return relax.const(np.asarray(array, dtype=dtype))

    def static(self, dim: Dim, what: str) -> int:
        """``dim`` as an int; raises NeedsStaticShapes when it is symbolic."""
        if isinstance(dim, int):
            return dim
        if isinstance(dim, tirx.IntImm):
            return int(dim.value)
        raise NeedsStaticShapes(f"{what} depends on the batch size")


class Node:
    """One kernel being lowered: its attributes, inputs as Relax expressions, known values.

    Attributes:
        kernel: the native kernel.
        attrs: its primitive's attributes.
        inputs: one Relax expression per kernel input (None for an absent optional input).
        g: the Graph being built.
    """

    def __init__(self, kernel: Kernel, inputs: list[relax.Expr | None], g: Graph):
        self.kernel = kernel
        self.attrs = kernel.primitive.attrs
        self.inputs = inputs
        self.g = g

    def x(self, index: int = 0) -> relax.Expr:
        return self.inputs[index]

    def has(self, index: int) -> bool:
        return index < len(self.inputs) and self.inputs[index] is not None

    def shape(self, index: int = 0) -> list[Dim]:
        """The Relax shape of input ``index``: ints, or tirx expressions of the batch."""
        return shape_of(self.inputs[index])

    def value(self, index: int) -> np.ndarray | None:
        """The value of a constant or shape-computed input (None when absent)."""
        tensor = self.kernel.inputs[index] if index < len(self.kernel.inputs) else None
        return None if tensor is None else tensor.data

    def ints(self, index: int) -> list[int] | None:
        value = self.value(index)
        return None if value is None else [int(v) for v in np.asarray(value).reshape(-1)]


def shape_of(expr: relax.Expr) -> list[Dim]:
    """The shape of a tensor expression as ints (static dims) and tirx expressions."""
    dims = expr.ty.shape.values
    return [int(d.value) if isinstance(d, tirx.IntImm) else d for d in dims]


Emit = Callable[[Node], relax.Expr | Sequence[relax.Expr]]


@dataclass(frozen=True)
class Emitter:
    """How one primitive type becomes Relax: ``emit``, its ``check``, the inputs it bakes in."""

    op_type: str
    emit: Emit
    check: Check | None
    values: tuple[int, ...]
    shapes: tuple[int, ...] = ()


EMITTERS: dict[str, Emitter] = {}


def emitter(*op_types: str, check: Check | None = None, values: tuple[int, ...] = (),
            shapes: tuple[int, ...] = ()) -> Callable[[Emit], Emit]:
    """Registers ``fn`` as the Relax emitter of each of ``op_types``.

    Raises:
        ValueError: an op type already has an emitter.
    """

    def register(fn: Emit) -> Emit:
        for op_type in op_types:
            if op_type in EMITTERS:
                raise ValueError(f"{op_type} already has a Relax emitter ({EMITTERS[op_type].emit.__qualname__}); "
                                 f"cannot register {fn.__qualname__}")
            EMITTERS[op_type] = Emitter(op_type, fn, check, tuple(values) + tuple(shapes), tuple(shapes))
        return fn

    return register


def why_not(kernel: Kernel) -> str | None:
    """Why the delegate cannot compile ``kernel`` (None when it can)."""
    op = kernel.type
    entry = EMITTERS.get(op)
    if entry is None:
        return f"{op}: {UNSUPPORTED.get(op, 'no Relax emitter for this op type')}"
    for index in entry.values:
        tensor = kernel.inputs[index] if index < len(kernel.inputs) else None
        if tensor is not None and not tensor.value_known:
            return (f"{op}: input {tensor.name!r} is computed from the data; TVM needs its value "
                    "at compile time (a constant, or a value computed from shapes)")
    problem = tensor_problem(kernel, entry.values)
    if problem:
        return problem
    return entry.check(kernel, kernel.primitive.attrs) if entry.check else None


def tensor_problem(kernel: Kernel, values: tuple[int, ...]) -> str | None:
    """Why the kernel's data tensors cannot live in a compiled partition (dtype), or None."""
    baked = {kernel.inputs[i] for i in values if i < len(kernel.inputs)}
    for tensor in [t for t in kernel.inputs if t is not None and t not in baked] + kernel.outputs:
        if tensor.dtype not in DTYPES:
            return (f"{kernel.type}: tensor {tensor.name!r} is {tensor.dtype.name}; this delegate compiles "
                    f"{', '.join(d.name for d in DTYPES)} tensors")
    return None


def fused_activation(kernel: Kernel, attrs: Mapping[str, Any]) -> str | None:
    """The check shared by ops with a fused activation."""
    kind = attrs.get("activation_type", "NO_ACTIVATION")
    if kind not in FUSED_ACTIVATIONS:
        return f"{kernel.type} with fused {kind}: only {', '.join(FUSED_ACTIVATIONS)} fuse"
    return None


def activate(expr: relax.Expr, kind: str) -> relax.Expr:
    """``expr`` followed by a fused activation (NO_ACTIVATION, or a clip ``FUSED_CLIPS`` bounds)."""
    bounds = FUSED_CLIPS.get(kind)
    return expr if bounds is None else clip(expr, *bounds)


def clip(expr: relax.Expr, low: float, high: float) -> relax.Expr:
    """min(max(expr, low), high), as numpy clips; an infinite bound is no bound."""
    if (low, high) == FUSED_CLIPS["RELU"]:
        return relax.op.nn.relu(expr)
    if -math.inf < low <= high < math.inf:
        return relax.op.clip(expr, low, high)
    if low > -math.inf:
        expr = relax.op.maximum(expr, relax.const(low, "float32"))
    if high < math.inf:
        expr = relax.op.minimum(expr, relax.const(high, "float32"))
    return expr


# Reasons for op types with no emitter, shown in the partition report.
UNSUPPORTED = {
    "Cast": "dtype conversions stay native (this delegate compiles float32 partitions)",
    "Shape": "shape values are computed by the runtime",
    "ConstantOfShape": "shape-driven fills are computed by the runtime",
    "Equal": "comparisons produce bool tensors; this delegate compiles float32 partitions",
    "Less": "comparisons produce bool tensors; this delegate compiles float32 partitions",
    "Greater": "comparisons produce bool tensors; this delegate compiles float32 partitions",
    "Where": "it reads a bool condition; this delegate compiles float32 partitions",
    "QuantizeLinear": "integer outputs; this delegate compiles float32 partitions",
    "DequantizeLinear": "integer inputs; this delegate compiles float32 partitions",
    "DynamicQuantizeLinear": "integer outputs; this delegate compiles float32 partitions",
    "MatMulInteger": "int8/uint8 inputs, an int32 output; this delegate compiles float32 partitions",
    "ConvInteger": "int8/uint8 inputs, an int32 output; this delegate compiles float32 partitions",
}
