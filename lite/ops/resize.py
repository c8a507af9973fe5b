"""Resize: output dims from scales and scales from output dims, in float32 as onnxruntime computes them."""

from __future__ import annotations

import numpy as np


def resized_dim(size: int, scale: float) -> int:
    """The output dim of an axis of ``size`` resized by ``scale``: floor(size * scale) in float32."""
    return int(np.float32(size) * np.float32(scale))


def resize_scale(size: int, resized: int) -> np.float32:
    """The scale of an axis of ``size`` resized to ``resized`` (what coordinates are computed from)."""
    return np.float32(resized) / np.float32(size)
