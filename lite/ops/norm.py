"""Normalisations over channel axis 1: inference BatchNorm as an affine map, LRN's channel window."""

from __future__ import annotations

import numpy as np


def batchnorm_affine(scale: np.ndarray, bias: np.ndarray, mean: np.ndarray, var: np.ndarray,
                     epsilon: float) -> tuple[np.ndarray, np.ndarray]:
    """(multiplier, offset), float64 vectors with y = x * multiplier + offset per channel.

    ``y = (x - mean) / sqrt(var + epsilon) * scale + bias`` (ONNX BatchNormalization, inference).
    """
    scale, bias, mean, var = (np.asarray(v, np.float64).reshape(-1) for v in (scale, bias, mean, var))
    multiplier = scale / np.sqrt(var + epsilon)
    return multiplier, bias - mean * multiplier


def lrn_window(size: int) -> tuple[int, int]:
    """(before, after): LRN sums channels c - before .. c + after for channel c (ONNX LRN)."""
    return (size - 1) // 2, size // 2


def norm_axis(rank: int, axis: int) -> int:
    """LayerNormalization's first normalised axis, made non-negative.

    Raises:
        ValueError: ``axis`` is outside [-rank, rank).
    """
    if not -rank <= axis < rank:
        raise ValueError(f"axis {axis} is out of range for rank {rank}")
    return axis % rank


def stats_dtype(dtype: np.dtype) -> np.dtype:
    """The dtype normalisation statistics are taken in: float64 for float64 data, else float32."""
    return np.dtype(np.float64) if dtype == np.float64 else np.dtype(np.float32)
