"""Shape and data-movement ops: Concat, Reshape, Flatten, Transpose, Squeeze, Unsqueeze, Pad,
Slice, Split, Gather, Expand, Shape, ConstantOfShape, Cast, CastLike, Identity, Dropout."""

from __future__ import annotations

import numpy as np

from lite.ops.padding import PADDING_MODES, full_rank_pads
from lite.ops.slicing import INT64_MAX
from lite.ops.split import explicit_split_sizes
from lite.schema.graph import DTYPE_NAMES
from lite.tools.converter.context import NodeContext
from lite.tools.converter.mappers.common import attr_choice, same
from lite.tools.converter.onnx_graph import LITE_DTYPES, ONNX_TYPE_NAMES
from lite.tools.converter.registry import mapper

_PADDING_MODES = {mode.lower(): mode for mode in PADDING_MODES}  # ONNX's names are lower case


def _int64(values) -> np.ndarray:
    return np.asarray(values, dtype=np.int64)


@mapper("Concat", since=1)
def concat_v1(ctx: NodeContext) -> None:
    """Opset 1-3: ``axis`` defaults to 1."""
    same(ctx, "Concat", {"axis": int(ctx.attr("axis", 1))})


@mapper("Concat", since=4)
def concat_v4(ctx: NodeContext) -> None:
    same(ctx, "Concat", {"axis": int(ctx.attr("axis"))})


@mapper("Reshape", since=1)
def reshape_v1(ctx: NodeContext) -> None:
    """Opset 1-4: the target shape is the ``shape`` attribute."""
    target = ctx.add_const(f"{ctx.name}_shape", _int64(ctx.attr("shape")))
    ctx.emit("Reshape", {}, [ctx.input(0), target])


@mapper("Reshape", since=5)
def reshape_v5(ctx: NodeContext) -> None:
    ctx.emit("Reshape", {"allowzero": bool(ctx.attr("allowzero", 0))}, [ctx.input(0), ctx.input(1)])


@mapper("Flatten", since=1)
def flatten_v1(ctx: NodeContext) -> None:
    ctx.emit("Flatten", {"axis": int(ctx.attr("axis", 1))}, [ctx.input(0)])


@mapper("Transpose", since=1)
def transpose_v1(ctx: NodeContext) -> None:
    ctx.emit("Transpose", {"perm": [int(p) for p in ctx.attr("perm", [])]}, [ctx.input(0)])


@mapper("Squeeze", since=1)
def squeeze_v1(ctx: NodeContext) -> None:
    """Opset < 13: ``axes`` attribute, empty = every size-1 dim."""
    ctx.emit("Squeeze", {"axis": [int(a) for a in ctx.attr("axes", [])]}, [ctx.input(0)])


@mapper("Squeeze", since=13)
def squeeze_v13(ctx: NodeContext) -> None:
    """Opset 13+: optional ``axes`` input (an attribute when constant)."""
    _axes_op(ctx, "Squeeze")


@mapper("Unsqueeze", since=1)
def unsqueeze_v1(ctx: NodeContext) -> None:
    ctx.emit("Unsqueeze", {"axis": [int(a) for a in ctx.attr("axes")]}, [ctx.input(0)])


@mapper("Unsqueeze", since=13)
def unsqueeze_v13(ctx: NodeContext) -> None:
    _axes_op(ctx, "Unsqueeze")


def _axes_op(ctx: NodeContext, op_type: str) -> None:
    """Constant axes become the ``axis`` attribute; computed ones stay input 1."""
    axes = ctx.const(1)
    if ctx.has_input(1) and axes is None:
        ctx.emit(op_type, {}, [ctx.input(0), ctx.input(1)])
    else:
        ctx.emit(op_type, {"axis": [] if axes is None else axes.reshape(-1).tolist()}, [ctx.input(0)])


@mapper("Pad", since=1)
@mapper("Pad", since=2)
def pad_v1(ctx: NodeContext) -> None:
    """Opset < 11: pads (``paddings`` in opset 1) and ``value`` are attributes."""
    mode = attr_choice(ctx, "mode", "constant", _PADDING_MODES)
    pads = ctx.add_const(f"{ctx.name}_pads", _int64(ctx.attr("pads" if ctx.opset >= 2 else "paddings")))
    inputs = [ctx.input(0), pads]
    value = float(ctx.attr("value", 0.0))
    if mode == "CONSTANT" and value != 0.0:
        inputs.append(ctx.add_const(f"{ctx.name}_value", np.asarray(value, ctx.dtype(0) or np.float32)))
    ctx.emit("PadFusion", {"padding_mode": mode}, inputs)


@mapper("Pad", since=11)
def pad_v11(ctx: NodeContext) -> None:
    """Opset 11+: pads and constant_value are inputs; opset 18's ``axes`` are expanded to every
    axis when they and the pads are constants, else passed on as input 3."""
    mode = attr_choice(ctx, "mode", "constant", _PADDING_MODES)
    inputs = [ctx.input(0), _full_rank_pads(ctx) if ctx.has_input(3) else ctx.input(1), ctx.input(2, optional=True)]
    if ctx.has_input(3) and inputs[1] == ctx.input(1):
        inputs.append(ctx.input(3))
    while inputs[-1] < 0:
        inputs.pop()
    ctx.emit("PadFusion", {"padding_mode": mode}, inputs)


def _full_rank_pads(ctx: NodeContext) -> int:
    """The pads of every axis as a new constant, or input 1 itself when pads or axes are computed."""
    axes, pads, rank = ctx.const(3), ctx.const(1), ctx.rank(0)
    if axes is None or pads is None or rank is None:
        return ctx.input(1)
    try:
        full = full_rank_pads(pads.reshape(-1).tolist(), axes.reshape(-1).tolist(), rank)
    except ValueError as exc:
        ctx.invalid(str(exc))
    return ctx.add_const(f"{ctx.name}_pads", _int64(full))


@mapper("Slice", since=1)
def slice_v1(ctx: NodeContext) -> None:
    """Opset < 10: starts, ends and axes are attributes; they become constant inputs."""
    inputs = [ctx.input(0)]
    for name in ("starts", "ends", "axes"):
        if name != "axes" or ctx.has_attr(name):
            inputs.append(ctx.add_const(f"{ctx.name}_{name}", _int64(ctx.attr(name))))
    ctx.emit("StridedSlice", {}, inputs)


@mapper("Slice", since=10)
def slice_v10(ctx: NodeContext) -> None:
    same(ctx, "StridedSlice")


@mapper("Split", since=1)
def split_v1(ctx: NodeContext) -> None:
    """Opset 1: sizes come from the optional second input or the ``split`` attribute."""
    if ctx.has_input(1):
        _split_by_input(ctx)
    else:
        _split(ctx, ctx.attr("split", []))


@mapper("Split", since=2)
def split_v2(ctx: NodeContext) -> None:
    _split(ctx, ctx.attr("split", []))


@mapper("Split", since=13)
def split_v13(ctx: NodeContext) -> None:
    """Opset 13+: sizes are an optional input; opset 18 adds ``num_outputs``."""
    if ctx.has_input(1):
        _split_by_input(ctx)
    elif ctx.has_attr("num_outputs"):
        _split(ctx, _uneven_sizes(ctx, int(ctx.attr("num_outputs"))))
    else:
        _split(ctx, [])


def _uneven_sizes(ctx: NodeContext, n: int) -> list[int]:
    """Opset 18: ceil(dim / n) per output, the last ones smaller ([] when equal or unknown)."""
    if n != len(ctx.node.output):
        ctx.invalid(f"num_outputs={n} but the node has {len(ctx.node.output)} outputs")
    shape, axis = ctx.shape(0), int(ctx.attr("axis", 0))
    dim = shape[axis] if shape is not None and -len(shape) <= axis < len(shape) else -1
    return explicit_split_sizes(dim, n)


def _split_by_input(ctx: NodeContext) -> None:
    """Constant sizes become ``size_splits``; computed ones stay input 1."""
    sizes = ctx.const(1)
    if sizes is None:
        ctx.emit("Split", {"axis": int(ctx.attr("axis", 0))}, [ctx.input(0), ctx.input(1)])
    else:
        _split(ctx, sizes.reshape(-1).tolist())


def _split(ctx: NodeContext, sizes: list[int]) -> None:
    ctx.emit("Split", {"axis": int(ctx.attr("axis", 0)), "size_splits": [int(s) for s in sizes]},
             [ctx.input(0)])


@mapper("Gather", since=1)
def gather_v1(ctx: NodeContext) -> None:
    ctx.emit("Gather", {"axis": int(ctx.attr("axis", 0))}, [ctx.input(0), ctx.input(1)])


@mapper("Expand", since=8)
def expand_v8(ctx: NodeContext) -> None:
    ctx.emit("BroadcastTo", {}, [ctx.input(0), ctx.input(1)])


@mapper("Shape", since=1)
def shape_v1(ctx: NodeContext) -> None:
    attrs = {"start": int(ctx.attr("start", 0)), "end": int(ctx.attr("end", INT64_MAX))}
    ctx.emit("Shape", attrs, [ctx.input(0)])


@mapper("ConstantOfShape", since=9)
def constant_of_shape_v9(ctx: NodeContext) -> None:
    value = np.asarray(ctx.attr("value", np.zeros(1, np.float32)))
    if value.size != 1:
        ctx.invalid(f"value must hold one element, got shape {value.shape}")
    if value.dtype not in DTYPE_NAMES:
        ctx.unsupported(f"value of dtype {value.dtype} is not supported")
    attrs = {"data_type": DTYPE_NAMES[value.dtype], "value": float(value.reshape(-1)[0])}
    ctx.emit("ConstantOfShape", attrs, [ctx.input(0)])


@mapper("Cast", since=1)
def cast_v1(ctx: NodeContext) -> None:
    """Opset 1-5: ``to`` is a type name such as "FLOAT"."""
    name = ctx.attr("to")
    if name not in ONNX_TYPE_NAMES:
        ctx.invalid(f"to={name!r} is not an ONNX type name")
    _cast(ctx, ONNX_TYPE_NAMES[name])


@mapper("Cast", since=6)
def cast_v6(ctx: NodeContext) -> None:
    _cast(ctx, int(ctx.attr("to")))


@mapper("Cast", since=19)
def cast_v19(ctx: NodeContext) -> None:
    """Adds ``saturate`` (casts to float8; from 23 float4 too)."""
    _cast(ctx, int(ctx.attr("to")), bool(ctx.attr("saturate", 1)))


@mapper("CastLike", since=15)
def cast_like_v15(ctx: NodeContext) -> None:
    """Cast to the element type of the second input."""
    _cast_like(ctx, saturate=True)


@mapper("CastLike", since=19)
def cast_like_v19(ctx: NodeContext) -> None:
    """Adds ``saturate``, as Cast's."""
    _cast_like(ctx, bool(ctx.attr("saturate", 1)))


def _cast_like(ctx: NodeContext, saturate: bool) -> None:
    dtype = ctx.dtype(1)
    if dtype is None:
        ctx.unsupported("the element type of the target input is unknown or not storable")
    ctx.emit("Cast", {"to": DTYPE_NAMES[dtype], "saturate": saturate}, [ctx.input(0)])


def _cast(ctx: NodeContext, to: int, saturate: bool = True) -> None:
    if to not in LITE_DTYPES:
        type_name = next((k for k, v in ONNX_TYPE_NAMES.items() if v == to), str(to))
        stored = ", ".join(k for k, v in ONNX_TYPE_NAMES.items() if v in LITE_DTYPES)
        ctx.unsupported(f"Cast to {type_name} is not supported; .lite stores {stored}")
    ctx.emit("Cast", {"to": DTYPE_NAMES[LITE_DTYPES[to]], "saturate": saturate}, [ctx.input(0)])


@mapper("Identity", since=1)
def identity_v1(ctx: NodeContext) -> None:
    ctx.emit("Identity", {}, [ctx.input(0)])


@mapper("Dropout", since=1)
def dropout_v1(ctx: NodeContext) -> None:
    """Dropout is an Identity at inference (its mask all true); the passes usually remove it before mapping."""
    training = ctx.const(2)
    if ctx.has_input(2) and (training is None or bool(training)):
        ctx.unsupported("training_mode must be a constant false for inference")
    ctx.emit("Identity", {}, [ctx.input(0)], [ctx.output(0)])
    if ctx.output_used(1):
        _all_true_mask(ctx)


def _all_true_mask(ctx: NodeContext) -> None:
    """Dropout's mask at inference: every element kept, in x's shape (bool from opset 10, x's type before)."""
    dtype = np.dtype(np.bool_) if ctx.opset >= 10 else ctx.dtype(0)
    if dtype is None:
        ctx.unsupported("the mask's element type (the input's, before opset 10) is unknown")
    shape = ctx.add_tensor(f"{ctx.name}_shape", np.int64, (-1,))
    ctx.emit("Shape", {}, [ctx.input(0)], [shape])
    ctx.emit("ConstantOfShape", {"data_type": DTYPE_NAMES[dtype], "value": 1.0}, [shape], [ctx.output(1)])
