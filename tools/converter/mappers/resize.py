"""Resize and Upsample -> Resize(x, roi, scales, sizes): nearest, linear or cubic, every coordinate mode.

Opset 18's ``axes`` become scales, sizes and roi of every axis (computed at run time when they
are); its ``keep_aspect_ratio_policy`` is resolved here into sizes (and the scale the coordinates
follow), which needs constant sizes and a static input shape.
"""

from __future__ import annotations

import numpy as np

from lite.ops.resize import KEEP_ASPECT_RATIO_POLICIES, keep_aspect_ratio, resize_scale
from lite.schema.primitives import default_attrs
from lite.tools.converter.context import NodeContext
from lite.tools.converter.registry import mapper

_METHODS = {"nearest": "NEAREST", "linear": "LINEAR", "cubic": "CUBIC"}
_COORDINATES = {"half_pixel": "HALF_PIXEL", "asymmetric": "ASYMMETRIC", "align_corners": "ALIGN_CORNERS",
                "pytorch_half_pixel": "PYTORCH_HALF_PIXEL", "tf_crop_and_resize": "TF_CROP_AND_RESIZE",
                "half_pixel_symmetric": "HALF_PIXEL_SYMMETRIC"}
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
    method = _pick(ctx, "mode", "nearest", {k: v for k, v in _METHODS.items() if k != "cubic"})
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
    """Opset 11+ (13: roi optional; 18: antialias, axes, keep_aspect_ratio_policy; 19:
    half_pixel_symmetric): roi is kept for tf_crop_and_resize only; an empty scales input means
    sizes are given."""
    if ctx.attr("coordinate_transformation_mode", "") == "tf_half_pixel_for_nn":
        ctx.unsupported("coordinate_transformation_mode='tf_half_pixel_for_nn' (opset 11 only) is not supported; "
                        "export at opset 13+ (asymmetric or half_pixel)")
    attrs = {
        "method": _pick(ctx, "mode", "nearest", _METHODS),
        "coordinate_transform_mode": _pick(ctx, "coordinate_transformation_mode", "half_pixel", _COORDINATES),
        "nearest_mode": _pick(ctx, "nearest_mode", "round_prefer_floor", _NEAREST),
        "cubic_coeff_a": float(ctx.attr("cubic_coeff_a", -0.75)),
        "exclude_outside": bool(ctx.attr("exclude_outside", 0)),
        "extrapolation_value": float(ctx.attr("extrapolation_value", 0.0)),
    }
    if ctx.attr("antialias", 0):
        if "antialias" not in default_attrs("Resize"):
            ctx.unsupported("antialias=1 needs Resize.antialias, which this schema lacks")
        attrs["antialias"] = True
    roi = _given(ctx, 1) if attrs["coordinate_transform_mode"] == "TF_CROP_AND_RESIZE" else -1
    if attrs["coordinate_transform_mode"] == "TF_CROP_AND_RESIZE" and roi < 0:
        ctx.unsupported("coordinate_transformation_mode='tf_crop_and_resize' needs the roi input")
    scales, sizes = _given(ctx, 2), _given(ctx, 3)
    if ctx.has_attr("axes"):
        scales, sizes, roi = _every_axis(ctx, scales, sizes, roi)
    policy = ctx.attr("keep_aspect_ratio_policy", "stretch")
    if policy not in KEEP_ASPECT_RATIO_POLICIES:
        ctx.unsupported(f"keep_aspect_ratio_policy={policy!r} is not one of {list(KEEP_ASPECT_RATIO_POLICIES)}")
    if policy != "stretch" and sizes >= 0:
        scales, sizes = _keep_aspect_ratio(ctx, sizes, policy)
    ctx.emit("Resize", attrs, [ctx.input(0), roi, scales] + ([sizes] if sizes >= 0 else []))


def _given(ctx: NodeContext, i: int) -> int:
    """Input ``i``, or -1 when absent or an empty constant."""
    value = ctx.const(i)
    return -1 if value is not None and value.size == 0 else ctx.input(i, optional=True)


def _every_axis(ctx: NodeContext, scales: int, sizes: int, roi: int) -> tuple[int, int, int]:
    """Opset 18 ``axes``: scales (1 elsewhere), sizes (the input dims elsewhere) and roi (0 to 1
    elsewhere) of every axis."""
    rank = ctx.rank(0)
    if rank is None:
        ctx.unsupported("axes needs a known input rank; give the input a static rank (--input-shape)")
    axes = [int(a) % rank for a in ctx.attr("axes")]
    if len(set(axes)) != len(axes):
        ctx.invalid(f"axes {ctx.attr('axes')} repeat an axis")
    # position -> (index into the given values, or len(given) + index into the fill)
    pick = [axes.index(a) if a in axes else len(axes) + a for a in range(rank)]
    scales = _scatter(ctx, scales, pick, lambda dtype: np.ones(rank, dtype), "scales")
    sizes = _scatter(ctx, sizes, pick, lambda dtype: _input_dims(ctx), "sizes")
    roi_pick = [half * len(axes) + axes.index(a) if a in axes else 2 * len(axes) + half * rank + a
                for half in (0, 1) for a in range(rank)]
    roi = _scatter(ctx, roi, roi_pick, lambda dtype: np.repeat(np.array([0, 1], dtype), rank), "roi")
    return scales, sizes, roi


def _scatter(ctx: NodeContext, index: int, pick: list[int], fill, hint: str) -> int:
    """A tensor whose element j is element pick[j] of concat(the tensor ``index``, fill(dtype)):
    computed here when both are constants, else a Concat and a Gather; -1 stays -1."""
    if index < 0:
        return index
    tensor = ctx.builder.graph.tensors[index]
    values, dtype, filler = tensor.data, tensor.dtype, fill(tensor.dtype)
    if values is not None and not isinstance(filler, int):
        given = np.asarray(values).reshape(-1)
        if len(given) + len(filler) <= max(pick):
            ctx.invalid(f"{hint} has {len(given)} values for axes {ctx.attr('axes')}")
        return ctx.add_const(f"{ctx.name}_{hint}", np.concatenate([given, filler])[pick].astype(dtype))
    fill_index = filler if isinstance(filler, int) else ctx.add_const(f"{ctx.name}_{hint}_fill", filler)
    joined = ctx.add_tensor(f"{ctx.name}_{hint}_joined", dtype, (-1,))
    ctx.emit("Concat", {"axis": 0}, [index, fill_index], [joined])
    full = ctx.add_tensor(f"{ctx.name}_{hint}", dtype, (len(pick),))
    ctx.emit("Gather", {"axis": 0}, [joined, ctx.add_const(f"{ctx.name}_{hint}_pick", np.array(pick, np.int64))],
             [full])
    return full


def _input_dims(ctx: NodeContext) -> np.ndarray | int:
    """The input's dims: a constant when static, else the index of a Shape node's output."""
    shape = ctx.shape(0)
    if shape is not None and min(shape, default=0) >= 0:
        return np.array(shape, np.int64)
    dims = ctx.add_tensor(f"{ctx.name}_input_dims", np.int64, (ctx.rank(0),))
    ctx.emit("Shape", None, [ctx.input(0)], [dims])
    return dims


def _keep_aspect_ratio(ctx: NodeContext, sizes: int, policy: str) -> tuple[int, int]:
    """(scales, sizes) of a keep_aspect_ratio_policy; scales -1 when they are sizes / dims anyway."""
    shape, values = ctx.shape(0), ctx.builder.graph.tensors[sizes].data
    if values is None or shape is None or min(shape, default=0) < 0:
        ctx.unsupported(f"keep_aspect_ratio_policy={policy!r} is resolved at conversion and needs constant "
                        "sizes and a static input shape (--input-shape)")
    axes = [int(a) % len(shape) for a in ctx.attr("axes", range(len(shape)))]
    dims, scales = keep_aspect_ratio(tuple(shape), [int(v) for v in values], axes, policy)
    sizes = ctx.add_const(f"{ctx.name}_sizes", np.array(dims, np.int64))
    if all(np.float32(s) == resize_scale(n, d) for s, n, d in zip(scales, shape, dims, strict=True)):
        return -1, sizes
    return ctx.add_const(f"{ctx.name}_scales", np.array(scales, np.float32)), sizes
