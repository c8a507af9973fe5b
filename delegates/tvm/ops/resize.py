"""Resize (ONNX semantics) -> relax.op.image.resize2d, where the two agree exactly.

Relax derives the coordinate scale from the sizes (in / out), ONNX from the given scales
(1 / scale). They agree when the output size is the input size times the scale exactly; for
NEAREST they must also round every tie alike, which holds for integer up- or down-sampling
factors (tests/delegates/test_tvm.py checks them against onnxruntime). Other cases stay native.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from tvm import relax

from lite.delegates.tvm.ops import Node, emitter
from lite.kernel import Kernel
from lite.ops.resize import resize_scale, resized_dim

MODES = {"HALF_PIXEL": "half_pixel", "ASYMMETRIC": "asymmetric", "ALIGN_CORNERS": "align_corners",
         "PYTORCH_HALF_PIXEL": "pytorch_half_pixel"}


def _given(kernel: Kernel, index: int) -> np.ndarray | None:
    tensor = kernel.inputs[index] if index < len(kernel.inputs) else None
    if tensor is None or tensor.data is None or not np.size(tensor.data):
        return None
    return np.asarray(tensor.data)


def plan(kernel: Kernel, attrs: Mapping[str, Any]) -> tuple[list[int] | None, str | None]:
    """(output H, W, or None when not known yet; why Relax cannot match ONNX, or None)."""
    shape = kernel.inputs[0].shape
    if len(shape) != 4:
        return None, f"Resize of a {len(shape)}-D input: only 4-D NCHW resizes compile (resize2d)"
    if attrs["coordinate_transform_mode"] not in MODES:
        return None, f"Resize with coordinate mode {attrs['coordinate_transform_mode']}: no exact Relax equivalent"
    scales, sizes = _given(kernel, 2), _given(kernel, 3)
    if -1 in shape or (scales is None and sizes is None):
        return None, None  # decided when shapes are known
    if sizes is not None:
        dims = [int(d) for d in sizes.reshape(-1)]
        ratios = [resize_scale(n, d) for d, n in zip(dims, shape, strict=True)]
    else:
        ratios = [np.float32(s) for s in scales.reshape(-1)]
        dims = [resized_dim(n, s) for n, s in zip(shape, ratios, strict=True)]
        exact = [resize_scale(n, d) for d, n in zip(dims, shape, strict=True)]
        if any(abs(e - r) > 1e-6 * r for e, r in zip(exact, ratios, strict=True)):
            return None, (f"Resize with scales {[float(r) for r in ratios]} on {list(shape)}: the output size is "
                          "not the input size times the scale, and Relax derives coordinates from sizes; "
                          "no exact Relax equivalent")
    if dims[:2] != list(shape[:2]):
        return None, f"Resize of the batch or channel axis ({list(shape)} -> {dims}): resize2d scales H and W only"
    if attrs["method"] == "NEAREST" and any(d % n and n % d for d, n in zip(dims[2:], shape[2:], strict=True)):
        return None, (f"Resize NEAREST {list(shape[2:])} -> {dims[2:]}: a non-integer factor can round ties "
                      "differently in Relax (coordinates from in / out); no exact Relax equivalent")
    return dims[2:], None


def check_resize(kernel: Kernel, attrs: Mapping[str, Any]) -> str | None:
    return plan(kernel, attrs)[1]


@emitter("Resize", check=check_resize, shapes=(2, 3))
def resize(node: Node) -> relax.Expr:
    size, problem = plan(node.kernel, node.attrs)
    if problem or size is None:
        raise ValueError(problem or "Resize: output size unknown")
    nearest = node.attrs["method"] == "NEAREST"
    return relax.op.image.resize2d(
        node.x(0), size=size, layout="NCHW", method="nearest_neighbor" if nearest else "linear",
        coordinate_transformation_mode=MODES[node.attrs["coordinate_transform_mode"]],
        rounding_method=node.attrs["nearest_mode"].lower() if nearest else "")
