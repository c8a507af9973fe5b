"""Resize -> ONNX Resize (opset 13+ form: x, roi, scales, sizes; absent inputs as "")."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from lite.delegates.onnxruntime.emitters.pool import emitted_opset
from lite.delegates.onnxruntime.emitters.registry import emitter

if TYPE_CHECKING:
    from lite.delegates.onnxruntime.context import NodeContext


@emitter("Resize", (np.float32, np.int32, np.int8, np.uint8))
def resize(ctx: NodeContext) -> None:
    attrs, opset = ctx.attrs, emitted_opset()
    if attrs["coordinate_transform_mode"] == "HALF_PIXEL_SYMMETRIC" and opset < 19:
        ctx.unsupported(f"HALF_PIXEL_SYMMETRIC: ONNX Resize has it from opset 19; this delegate emits opset {opset}")
    if attrs.get("antialias") and opset < 18:
        ctx.unsupported(f"antialias: ONNX Resize has it from opset 18; this delegate emits opset {opset}")
    if ctx.has_input(2) and ctx.has_input(3):
        ctx.unsupported("both scales and sizes (a keep_aspect_ratio_policy resolved at conversion): "
                        "ONNX Resize takes one of them")
    refused = _refused_shape(ctx)
    if refused:
        ctx.unsupported(refused)
    onnx_attrs = {"mode": attrs["method"].lower(),
                  "coordinate_transformation_mode": attrs["coordinate_transform_mode"].lower(),
                  "nearest_mode": attrs["nearest_mode"].lower(), "cubic_coeff_a": float(attrs["cubic_coeff_a"]),
                  "exclude_outside": int(bool(attrs["exclude_outside"])),
                  "extrapolation_value": float(attrs["extrapolation_value"])}
    if attrs.get("antialias"):
        onnx_attrs["antialias"] = 1
    roi = ctx.input(1) if attrs["coordinate_transform_mode"] == "TF_CROP_AND_RESIZE" else ""
    inputs = [ctx.input(0), roi, ctx.input(2)] + ([ctx.input(3)] if ctx.has_input(3) else [])
    ctx.op("Resize", inputs, ctx.output(), **onnx_attrs)


def _refused_shape(ctx: NodeContext) -> str | None:
    """Why onnxruntime's LINEAR or CUBIC refuses this rank and these scales (its ScalesValidation), or None."""
    method, rank = ctx.attrs["method"], ctx.rank(0)
    x, y = ctx.shape(0), ctx.kernel.outputs[0].shape
    given = ctx.kernel.inputs[2].data if ctx.has_input(2) else None
    if method == "NEAREST" or (given is None and (-1 in x or -1 in y)):
        return None
    scales = [float(s) for s in np.asarray(given).reshape(-1)] if given is not None else \
        [d / n if n else 1.0 for n, d in zip(x, y, strict=True)]
    same = [s == 1.0 for s in scales]
    if method == "LINEAR":
        takes = rank in (2, 3) or (rank == 4 and same[0] and (same[1] or same[3])) or (rank == 5 and all(same[:2]))
    else:
        takes = rank == 2 or (rank == 4 and same[0] and (
            same[1] or (same[3] and (bool(ctx.attrs.get("antialias")) or min(scales) >= 1))))
    return None if takes else (f"{method} of a {rank}-D input with scales {scales}: onnxruntime resizes 2-D inputs, "
                               "and others on their inner axes only")
