"""Helpers shared by the emitter families: ONNX element types and sliding-window attributes."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from onnx import helper

from lite.schema.graph import DTYPES

ONNX_TYPES: dict[np.dtype, int] = {dtype: helper.np_dtype_to_tensor_dtype(dtype) for dtype in DTYPES.values()}


def window_attrs(attrs: Mapping[str, Any], strides: str) -> dict[str, Any]:
    """kernel_shape, strides and pads / auto_pad of a Conv or pool (empty lists keep ONNX defaults)."""
    out: dict[str, Any] = {}
    for name, key in (("kernel_shape", "kernel_size"), ("strides", strides)):
        if attrs.get(key):
            out[name] = [int(v) for v in attrs[key]]
    if attrs["pad_mode"] == "PAD":
        if attrs.get("pad_list"):
            out["pads"] = [int(v) for v in attrs["pad_list"]]
    else:
        out["auto_pad"] = attrs["pad_mode"]  # SAME_UPPER, SAME_LOWER and VALID are ONNX's names
    return out


def dilations(attrs: Mapping[str, Any]) -> dict[str, Any]:
    """The dilations attribute, left out when absent or all 1."""
    values = [int(v) for v in attrs.get("dilation") or ()]
    return {"dilations": values} if any(v != 1 for v in values) else {}
