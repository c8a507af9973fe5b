"""Resize -> ONNX Resize (opset 13+ form: x, roi, scales, sizes; absent inputs as "")."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from lite.delegates.onnxruntime.emitters.registry import emitter

if TYPE_CHECKING:
    from lite.delegates.onnxruntime.builder import NodeContext


@emitter("Resize", (np.float32, np.int32, np.int8, np.uint8))
def resize(ctx: NodeContext) -> None:
    attrs = {"mode": ctx.attrs["method"].lower(),
             "coordinate_transformation_mode": ctx.attrs["coordinate_transform_mode"].lower(),
             "nearest_mode": ctx.attrs["nearest_mode"].lower()}
    inputs = [ctx.input(0), "", ctx.input(2)] + ([ctx.input(3)] if ctx.has_input(3) else [])
    ctx.op("Resize", inputs, ctx.output(), **attrs)
