"""Resize and Upsample -> Resize(x, roi=-1, scales, sizes), nearest or linear."""

from __future__ import annotations

import numpy as np

from lite.tools.converter.context import NodeContext
from lite.tools.converter.registry import mapper

_METHODS = {"nearest": "NEAREST", "linear": "LINEAR"}
_COORDINATES = {"half_pixel": "HALF_PIXEL", "asymmetric": "ASYMMETRIC", "align_corners": "ALIGN_CORNERS",
                "pytorch_half_pixel": "PYTORCH_HALF_PIXEL"}
_NEAREST = {"round_prefer_floor": "ROUND_PREFER_FLOOR", "round_prefer_ceil": "ROUND_PREFER_CEIL",
            "floor": "FLOOR", "ceil": "CEIL"}


def _pick(ctx: NodeContext, name: str, default: str, table: dict[str, str]) -> str:
    value = ctx.attr(name, default)
    if value not in table:
        ctx.unsupported(f"{name}={value!r} is not supported; use one of {sorted(table)}")
    return table[value]


def _legacy(ctx: NodeContext, scales: int) -> None:
    """Upsample and Resize-10: asymmetric coordinates; nearest rounds down, or up when downsampling
    (onnxruntime's rule)."""
    method = _pick(ctx, "mode", "nearest", _METHODS)
    values = ctx.builder.graph.tensors[scales].data
    down = values is not None and bool(np.any(values < 1))
    if down and np.any(values > 1):
        ctx.unsupported("nearest resize that enlarges some axes and shrinks others is not supported at "
                        "opset < 11; upgrade the model to opset 11+")
    attrs = {"method": method, "coordinate_transform_mode": "ASYMMETRIC",
             "nearest_mode": "CEIL" if down else "FLOOR"}
    ctx.emit("Resize", attrs, [ctx.input(0), -1, scales])


@mapper("Upsample", since=7)
def upsample_v7(ctx: NodeContext) -> None:
    """Opset 7-8: ``scales`` is an attribute."""
    scales = np.asarray(ctx.attr("scales"), dtype=np.float32)
    _legacy(ctx, ctx.add_const(f"{ctx.name}_scales", scales))


@mapper("Upsample", since=9)
@mapper("Resize", since=10)
def upsample_v9(ctx: NodeContext) -> None:
    _legacy(ctx, ctx.input(1))


@mapper("Resize", since=11)
def resize_v11(ctx: NodeContext) -> None:
    """Opset 11+: roi (unused) is dropped, an empty scales input means sizes are given."""
    _check_supported(ctx)
    attrs = {
        "method": _pick(ctx, "mode", "nearest", _METHODS),
        "coordinate_transform_mode": _pick(ctx, "coordinate_transformation_mode", "half_pixel", _COORDINATES),
        "nearest_mode": _pick(ctx, "nearest_mode", "round_prefer_floor", _NEAREST),
    }
    scales, sizes = _given(ctx, 2), _given(ctx, 3)
    if ctx.has_attr("axes"):
        scales, sizes = _full_rank(ctx, scales, 1.0), _full_rank(ctx, sizes, None)
    ctx.emit("Resize", attrs, [ctx.input(0), -1, scales] + ([sizes] if sizes >= 0 else []))


def _check_supported(ctx: NodeContext) -> None:
    if ctx.attr("antialias", 0):
        ctx.unsupported("antialias=1 is not supported")
    policy = ctx.attr("keep_aspect_ratio_policy", "stretch")
    if policy != "stretch":
        ctx.unsupported(f"keep_aspect_ratio_policy={policy!r} is not supported (only 'stretch')")


def _given(ctx: NodeContext, i: int) -> int:
    """Input ``i``, or -1 when absent or an empty constant."""
    value = ctx.const(i)
    return -1 if value is not None and value.size == 0 else ctx.input(i, optional=True)


def _full_rank(ctx: NodeContext, index: int, fill: float | None) -> int:
    """Opset 18 ``axes``: scales (fill 1) or sizes (fill the input dims) for every axis."""
    if index < 0:
        return index
    rank, shape, values = ctx.rank(0), ctx.shape(0), ctx.builder.graph.tensors[index].data
    if rank is None or values is None or (fill is None and -1 in shape):
        ctx.unsupported("axes needs constant scales/sizes and a known input rank (sizes: a static shape)")
    full = np.array([fill] * rank if fill is not None else shape, dtype=values.dtype)
    for axis, value in zip(np.asarray(ctx.attr("axes")) % rank, values, strict=True):
        full[axis] = value
    return ctx.add_const(f"{ctx.name}_{'scales' if fill else 'sizes'}", full)
