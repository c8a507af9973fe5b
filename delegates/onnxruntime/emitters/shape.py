"""Shape and data-movement ops: Concat, Reshape, Flatten, Transpose, Squeeze, Unsqueeze, Pad, Slice,
Split, Gather, Expand, Shape, ConstantOfShape, Cast, Identity."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from onnx import numpy_helper

from lite.delegates.onnxruntime.emitters.common import ONNX_TYPES
from lite.delegates.onnxruntime.emitters.registry import emitter
from lite.ops.dtypes import ALL, BFLOAT16, NARROW_FLOATS, NARROW_INTS
from lite.ops.padding import PADDING_MODES
from lite.ops.slicing import INT64_MAX
from lite.ops.split import explicit_split_sizes
from lite.schema.graph import DTYPES

if TYPE_CHECKING:
    from lite.delegates.onnxruntime.context import NodeContext

# ONNX's names are lower case; WRAP is Pad-19, newer than the opset partitions are written at
_PADDING_MODES = {mode: mode.lower() for mode in PADDING_MODES if mode != "WRAP"}


def _axes(ctx: NodeContext) -> list[str]:
    """The axes input (opset 13+): input 1 when the kernel has one, else the ``axis`` list as an
    int64 constant; none when empty."""
    if ctx.has_input(1):
        return [ctx.input(1)]
    axes = [int(a) for a in ctx.attrs["axis"]]
    return [ctx.const(axes, "axes", np.int64)] if axes else []


@emitter("Concat", ALL)
def concat(ctx: NodeContext) -> None:
    ctx.op("Concat", ctx.inputs(), ctx.output(), axis=int(ctx.attrs["axis"]))


@emitter("Reshape", ALL)
def reshape(ctx: NodeContext) -> None:
    ctx.op("Reshape", ctx.inputs(), ctx.output(), allowzero=int(bool(ctx.attrs["allowzero"])))


@emitter("Flatten", ALL)
def flatten(ctx: NodeContext) -> None:
    ctx.op("Flatten", [ctx.input(0)], ctx.output(), axis=int(ctx.attrs["axis"]))


@emitter("Transpose", ALL)
def transpose(ctx: NodeContext) -> None:
    perm = [int(p) for p in ctx.attrs["perm"]]
    ctx.op("Transpose", [ctx.input(0)], ctx.output(), **({"perm": perm} if perm else {}))


@emitter("Squeeze", ALL)
def squeeze(ctx: NodeContext) -> None:
    ctx.op("Squeeze", [ctx.input(0), *_axes(ctx)], ctx.output())


@emitter("Unsqueeze", ALL)
def unsqueeze(ctx: NodeContext) -> None:
    ctx.op("Unsqueeze", [ctx.input(0), *_axes(ctx)], ctx.output())


@emitter("PadFusion", ALL)
def pad(ctx: NodeContext) -> None:
    mode = ctx.attrs["padding_mode"]
    if mode not in _PADDING_MODES:
        ctx.unsupported(f"padding_mode {mode!r} is not one of {sorted(_PADDING_MODES)}")
    if ctx.has_input(3):
        ctx.unsupported("pads for some axes only (Pad-18 axes) are newer than opset 17")
    ctx.op("Pad", ctx.inputs(), ctx.output(), mode=_PADDING_MODES[mode])


@emitter("StridedSlice", ALL)
def strided_slice(ctx: NodeContext) -> None:
    ctx.op("Slice", ctx.inputs(), ctx.output())


@emitter("Split", ALL)
def split(ctx: NodeContext) -> None:
    if ctx.has_input(1):
        inputs = [ctx.input(0), ctx.input(1)]
    else:
        sizes = [int(s) for s in ctx.attrs["size_splits"]] or _uneven_sizes(ctx)
        inputs = [ctx.input(0)] + ([ctx.const(sizes, "split", np.int64)] if sizes else [])
    ctx.node("Split", inputs, ctx.outputs(), axis=int(ctx.attrs["axis"]))


def _uneven_sizes(ctx: NodeContext) -> list[int]:
    """Equal parts with a smaller last one (opset 18's rule) as explicit sizes; [] when the dim
    divides evenly or is not known yet (ONNX Split then divides it at run time)."""
    n, axis = len(ctx.kernel.outputs), int(ctx.attrs["axis"])
    dim = ctx.dim(0, axis) if -ctx.rank(0) <= axis < ctx.rank(0) else -1
    return explicit_split_sizes(dim, n)


@emitter("Gather", ALL)
def gather(ctx: NodeContext) -> None:
    ctx.op("Gather", ctx.inputs(), ctx.output(), axis=int(ctx.attrs["axis"]))


@emitter("BroadcastTo", ALL)
def broadcast_to(ctx: NodeContext) -> None:
    ctx.op("Expand", ctx.inputs(), ctx.output())


@emitter("Shape", ALL)
def shape(ctx: NodeContext) -> None:
    start, end = int(ctx.attrs["start"]), int(ctx.attrs["end"])
    ctx.op("Shape", [ctx.input(0)], ctx.output(), start=start, **({} if end == INT64_MAX else {"end": end}))


@emitter("ConstantOfShape", (np.int64,))
def constant_of_shape(ctx: NodeContext) -> None:
    dtype = DTYPES[ctx.attrs["data_type"]]
    value = numpy_helper.from_array(np.array([ctx.attrs["value"]]).astype(dtype), "value")
    ctx.op("ConstantOfShape", [ctx.input(0)], ctx.output(), value=value)


@emitter("Cast", ALL)
def cast(ctx: NodeContext) -> None:
    ml_types = [d.name for d in (ctx.in_dtype(0), ctx.out_dtype()) if d in (BFLOAT16, *NARROW_INTS, *NARROW_FLOATS)]
    if ml_types:
        ctx.unsupported(f"onnxruntime's Python binding makes no OrtValue from a {ml_types[0]} array")
    ctx.op("Cast", [ctx.input(0)], ctx.output(), to=ONNX_TYPES[DTYPES[ctx.attrs["to"]]])


@emitter("Identity", ALL)
def identity(ctx: NodeContext) -> None:
    ctx.op("Identity", [ctx.input(0)], ctx.output())
