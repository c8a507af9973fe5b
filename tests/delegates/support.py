"""Helpers shared by the delegate tests."""

from __future__ import annotations

import numpy as np
import onnx

import lite
from lite.tools.converter import convert

RNG = np.random.default_rng(2024)


def build(onnx_model: onnx.ModelProto, *delegates: lite.Delegate | None, thread_num: int = 1,
          **convert_args) -> lite.Model:
    """Converts ``onnx_model`` and builds it with ``delegates`` (None entries are skipped)."""
    model = lite.Model()
    context = lite.Context(thread_num=thread_num, delegates=[d for d in delegates if d is not None])
    model.build(convert(onnx_model, **convert_args), lite.ModelType.LITE, context)
    return model


def feeds_for(onnx_model: onnx.ModelProto, shapes: dict[str, tuple] | None = None) -> dict[str, np.ndarray]:
    """Fresh random inputs (never zeros or ones), scaled to exercise RELU6/CLIP bounds."""
    shapes = shapes or {i.name: tuple(d.dim_value for d in i.type.tensor_type.shape.dim)
                        for i in onnx_model.graph.input}
    return {name: (3 * RNG.standard_normal(shape)).astype(np.float32) for name, shape in shapes.items()}
