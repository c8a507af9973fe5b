"""Resize (ONNX semantics) -> relax.op.image.resize2d (4-D NCHW) / resize3d (5-D NCDHW), where the two agree.

Relax derives the coordinate scale from the sizes (in / out), ONNX from the given scales
(1 / scale). They agree when the output size is the input size times the scale exactly (or
the mode reads sizes only: ALIGN_CORNERS, TF_CROP_AND_RESIZE); for NEAREST they must also
round every tie alike, which holds for integer up- or down-sampling factors
(tests/delegates/test_tvm.py and test_tvm_spatial.py check them against onnxruntime). Relax
has no HALF_PIXEL_SYMMETRIC or antialias; such cases, and other ranks, stay native.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from tvm import relax

from lite.delegates.tvm.ops.common import Node, emitter
from lite.kernel import Kernel
from lite.ops.resize import resize_scale, resized_dim

MODES = {"HALF_PIXEL": "half_pixel", "ASYMMETRIC": "asymmetric", "ALIGN_CORNERS": "align_corners",
         "PYTORCH_HALF_PIXEL": "pytorch_half_pixel", "TF_CROP_AND_RESIZE": "tf_crop_and_resize"}
FROM_SIZES = ("ALIGN_CORNERS", "TF_CROP_AND_RESIZE")  # coordinates that read the output size, not the scale
METHODS = {"NEAREST": "nearest_neighbor", "LINEAR": "linear", "CUBIC": "cubic"}
RESIZES = {4: (relax.op.image.resize2d, "NCHW"), 5: (relax.op.image.resize3d, "NCDHW")}


def _given(kernel: Kernel, index: int) -> np.ndarray | None:
    tensor = kernel.inputs[index] if index < len(kernel.inputs) else None
    if tensor is None or tensor.data is None or not np.size(tensor.data):
        return None
    return np.asarray(tensor.data)


def _dims(kernel: Kernel, attrs: Mapping[str, Any], shape: tuple[int, ...]) -> tuple[list[int], str | None]:
    """The output dims, and why Relax's coordinates (from sizes) would differ from the kernel's."""
    scales, sizes = _given(kernel, 2), _given(kernel, 3)
    ratios = None if scales is None else [np.float32(s) for s in scales.reshape(-1)]
    if sizes is not None:
        dims = [int(d) for d in sizes.reshape(-1)]
    else:
        dims = [resized_dim(n, s) for n, s in zip(shape, ratios, strict=True)]
    if ratios is None or attrs["coordinate_transform_mode"] in FROM_SIZES:
        return dims, None
    exact = [resize_scale(n, d) for d, n in zip(dims, shape, strict=True)]
    if any(abs(e - r) > 1e-6 * r for e, r in zip(exact, ratios, strict=True)):
        return dims, (f"Resize with scales {[float(r) for r in ratios]} on {list(shape)}: the output size is "
                      "not the input size times the scale, and Relax derives coordinates from sizes; "
                      "no exact Relax equivalent")
    return dims, None


def _roi(kernel: Kernel, attrs: Mapping[str, Any], rank: int) -> tuple[list[float] | None, str | None]:
    """The spatial roi [starts..., ends...] Relax takes (None unless TF_CROP_AND_RESIZE), or why not."""
    if attrs["coordinate_transform_mode"] != "TF_CROP_AND_RESIZE":
        return None, None
    roi = _given(kernel, 1)
    if roi is None:
        return None, None  # decided when the value is known
    starts, ends = [float(v) for v in roi[:rank]], [float(v) for v in roi[rank:]]
    if starts[:2] != [0.0, 0.0] or ends[:2] != [1.0, 1.0]:
        return None, f"Resize cropping the batch or channel axis (roi {roi.tolist()}): Relax crops spatial axes only"
    return starts[2:] + ends[2:], None


def plan(kernel: Kernel, attrs: Mapping[str, Any]) -> tuple[list[int] | None, list[float] | None, str | None]:
    """(output spatial dims, or None when not known yet; spatial roi; why Relax cannot match ONNX, or None)."""
    shape = kernel.inputs[0].shape
    if len(shape) not in RESIZES:
        return None, None, f"Resize of a {len(shape)}-D input: only 4-D (resize2d) and 5-D (resize3d) compile"
    mode = attrs["coordinate_transform_mode"]
    if mode not in MODES:
        return None, None, f"Resize with coordinate mode {mode}: no Relax equivalent"
    if attrs.get("antialias"):
        return None, None, "Resize with antialias: no Relax equivalent"
    if -1 in shape or (_given(kernel, 2) is None and _given(kernel, 3) is None):
        return None, None, None  # decided when shapes are known
    dims, problem = _dims(kernel, attrs, shape)
    roi, roi_problem = _roi(kernel, attrs, len(shape))
    if problem or roi_problem:
        return None, None, problem or roi_problem
    if dims[:2] != list(shape[:2]):
        return None, None, (f"Resize of the batch or channel axis ({list(shape)} -> {dims}): Relax resizes "
                            "spatial axes only")
    if attrs["method"] == "NEAREST" and any(d % n and n % d for d, n in zip(dims[2:], shape[2:], strict=True)):
        return None, None, (f"Resize NEAREST {list(shape[2:])} -> {dims[2:]}: a non-integer factor can round ties "
                            "differently in Relax (coordinates from in / out); no exact Relax equivalent")
    return dims[2:], roi, None


def check_resize(kernel: Kernel, attrs: Mapping[str, Any]) -> str | None:
    return plan(kernel, attrs)[2]


@emitter("Resize", check=check_resize, values=(1,), shapes=(2, 3))
def resize(node: Node) -> relax.Expr:
    size, roi, problem = plan(node.kernel, node.attrs)
    if problem or size is None:
        raise ValueError(problem or "Resize: output size unknown")
    attrs = node.attrs
    op, layout = RESIZES[len(size) + 2]
    nearest = attrs["method"] == "NEAREST"
    return op(node.x(0), size=size, roi=roi, layout=layout, method=METHODS[attrs["method"]],
              coordinate_transformation_mode=MODES[attrs["coordinate_transform_mode"]],
              rounding_method=attrs["nearest_mode"].lower() if nearest else "",
              cubic_alpha=float(attrs["cubic_coeff_a"]), cubic_exclude=int(bool(attrs["exclude_outside"])),
              extrapolation_value=float(attrs["extrapolation_value"]))
