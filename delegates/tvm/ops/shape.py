"""Shape and data-movement ops: Concat, Reshape, BroadcastTo, Flatten, Transpose, Squeeze, Unsqueeze,
PadFusion, StridedSlice, Split, Gather.

Target shapes, pads, slice bounds and gather indices are baked in at compile time (``values``):
they are constants or values the runtime computed from shapes. Only the batch dim may be
symbolic; an op whose meaning would change with it raises NeedsStaticShapes.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
from tvm import relax, tirx, topi

from lite.delegates.tvm.ops.common import Dim, Node, emitter
from lite.kernel import Kernel
from lite.ops.broadcast import expand_shape
from lite.ops.padding import begins_ends, kept
from lite.ops.slicing import clamped_slice
from lite.ops.split import split_offsets, split_sizes


def is_batch(node: Node, dim: Dim) -> bool:
    return node.g.batch is not None and isinstance(dim, tirx.Var) and dim.same_as(node.g.batch)


def product(dims: list[Dim]) -> Dim:
    result: Dim = 1
    for d in dims:
        result = result * d
    return result


@emitter("Concat")
def concat(node: Node) -> relax.Expr:
    return relax.op.concat(list(node.inputs), axis=int(node.attrs["axis"]) % len(node.shape(0)))


@emitter("Reshape", shapes=(1,))
def reshape(node: Node) -> relax.Expr:
    """ONNX Reshape: 0 copies the input dim (unless allowzero), -1 is inferred.

    A literal first dim equal to the current batch size follows the symbolic batch when the
    rest keeps the per-sample size (``x.view(x.size(0), -1)`` exported at a fixed batch).
    """
    shape, target = node.shape(0), node.ints(1)
    allowzero = bool(node.attrs["allowzero"])
    dims: list[Dim] = [shape[i] if d == 0 and not allowzero else d for i, d in enumerate(target)]
    if dims and shape and is_batch(node, shape[0]) and isinstance(dims[0], int) and dims[0] == node.g.batch_value:
        rest = dims[1:]
        per_sample = [node.g.static(d, "a reshaped dim") for d in shape[1:]] if -1 not in rest else None
        if per_sample is None or all(isinstance(d, int) for d in rest) and math.prod(rest) == math.prod(per_sample):
            dims[0] = node.g.batch
    return relax.op.reshape(node.x(0), dims)


@emitter("BroadcastTo", shapes=(1,))
def broadcast_to(node: Node) -> relax.Expr:
    """ONNX Expand: the input broadcast with the target shape (both ways, numpy rules)."""
    dims = expand_shape(node.shape(0), node.ints(1), lambda s, t: is_batch(node, s) and t == node.g.batch_value)
    return relax.op.broadcast_to(node.x(0), dims)


@emitter("Flatten")
def flatten(node: Node) -> relax.Expr:
    shape = node.shape(0)
    axis = int(node.attrs["axis"])
    axis += len(shape) if axis < 0 else 0
    return relax.op.reshape(node.x(0), (product(shape[:axis]), product(shape[axis:])))


@emitter("Transpose")
def transpose(node: Node) -> relax.Expr:
    perm = [int(p) for p in node.attrs["perm"]]
    return relax.op.permute_dims(node.x(0), perm or None)


def check_axes_attribute(kernel: Kernel, attrs: Mapping[str, Any]) -> str | None:
    if len(kernel.inputs) > 1 and kernel.inputs[1] is not None:
        return f"{kernel.type}: its axes or sizes arrive as a tensor; this delegate compiles them from attributes"
    return None


@emitter("Squeeze", check=check_axes_attribute)
def squeeze(node: Node) -> relax.Expr:
    """The listed axes, or every dim of size 1 (a symbolic batch of size 1 now would change that)."""
    shape = node.shape(0)
    axes = [int(a) % len(shape) for a in node.attrs["axis"]]
    if not axes:
        if any(is_batch(node, d) for d in shape) and node.g.batch_value == 1:
            node.g.static(node.g.batch, "Squeeze without axes")
        axes = [a for a, d in enumerate(shape) if isinstance(d, int) and d == 1]
    for a in axes:
        node.g.static(shape[a], "a squeezed dim")
    return relax.op.squeeze(node.x(0), axes) if axes else node.x(0)


@emitter("Unsqueeze", check=check_axes_attribute)
def unsqueeze(node: Node) -> relax.Expr:
    rank = len(node.shape(0)) + len(node.attrs["axis"])
    return relax.op.expand_dims(node.x(0), sorted(int(a) % rank for a in node.attrs["axis"]))


def check_pad(kernel: Kernel, attrs: Mapping[str, Any]) -> str | None:
    if attrs["padding_mode"] == "WRAP":
        return "PadFusion: WRAP padding has no Relax lowering"
    if len(kernel.inputs) > 3 and kernel.inputs[3] is not None:
        return "PadFusion: pads for some axes only (an axes input) are not lowered"
    if len(kernel.inputs) > 2 and kernel.inputs[2] is not None and not kernel.inputs[2].value_known:
        return "PadFusion: the constant value is computed from the data; TVM needs it at compile time"
    return None


@emitter("PadFusion", check=check_pad, values=(1, 2))
def pad(node: Node) -> relax.Expr:
    """CONSTANT, REFLECT or EDGE; negative pads crop first."""
    shape, pads = node.shape(0), node.ints(1)
    rank = len(shape)
    begins, ends = begins_ends(pads, rank)
    x = node.x(0)
    if min(pads) < 0:
        axes = [a for a in range(rank) if begins[a] < 0 or ends[a] < 0]
        spans = [kept(node.g.static(shape[a], "a cropped dim"), begins[a], ends[a]) for a in axes]
        x = node.g.bb.emit(relax.op.strided_slice(x, axes, [s.start for s in spans], [s.stop for s in spans],
                                                  assume_inbound=True))
        begins, ends = [max(b, 0) for b in begins], [max(e, 0) for e in ends]
    if not any(begins) and not any(ends):
        return x
    mode = node.attrs["padding_mode"]
    if mode == "REFLECT":
        return node.g.bb.emit_te(topi.nn.mirror_pad, x, begins, ends, "REFLECT")
    if mode == "EDGE":
        return node.g.bb.emit_te(topi.nn.replicate_pad, x, begins, ends)
    value = node.value(2) if node.has(2) else None
    fill = float(np.asarray(value).reshape(-1)[0]) if value is not None and np.size(value) else 0.0
    return relax.op.nn.pad(x, [p for pair in zip(begins, ends, strict=True) for p in pair], "constant", fill)


@emitter("StridedSlice", values=(1, 2, 3, 4))
def strided_slice(node: Node) -> relax.Expr:
    """ONNX Slice, clamped as the native kernel clamps; a step other than 1 gathers the indices."""
    shape = node.shape(0)
    starts, ends, axes, steps = (node.ints(i) if node.has(i) else None for i in range(1, 5))
    axes = [a % len(shape) for a in (range(len(starts)) if axes is None else axes)]
    steps = steps or [1] * len(starts)
    x = node.x(0)
    for start, end, axis, step in zip(starts, ends, axes, steps, strict=True):
        dim = node.g.static(shape[axis], "a sliced dim")
        picked = range(dim)[clamped_slice(start, end, step, dim)]
        if picked.step == 1 and len(picked):
            x = relax.op.strided_slice(x, [axis], [picked.start], [picked.stop], assume_inbound=True)
        else:
            x = relax.op.take(x, node.g.const(np.array(picked, np.int64), "int64"), axis=axis, mode="clip")
        x = node.g.bb.emit(x)
    return x


@emitter("Split", check=check_axes_attribute)
def split(node: Node) -> list[relax.Expr]:
    shape = node.shape(0)
    axis = int(node.attrs["axis"]) % len(shape)
    dim = node.g.static(shape[axis], "a split dim")
    sizes = [int(s) for s in node.attrs["size_splits"]] or split_sizes(dim, len(node.kernel.outputs))
    parts = node.g.bb.emit(relax.op.split(node.x(0), split_offsets(sizes)[1:-1], axis=axis))
    return [relax.TupleGetItem(parts, i) for i in range(len(sizes))]


@emitter("Gather", values=(1,))
def gather(node: Node) -> relax.Expr:
    """Entries along ``axis`` by constant indices (negative ones count from the end)."""
    shape = node.shape(0)
    axis = int(node.attrs["axis"]) % len(shape)
    dim = node.g.static(shape[axis], "a gathered dim")
    indices = np.asarray(node.value(1)).astype(np.int64)
    if indices.size and (indices.min() < -dim or indices.max() >= dim):
        raise ValueError(f"Gather indices out of range for dim {dim}")
    return relax.op.take(node.x(0), node.g.const(indices % dim, "int64"), axis=axis, mode="clip")
