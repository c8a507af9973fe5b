"""Resize: output dims and scales, source coordinates, and the taps (input indices and weights)
each output position reads along one axis, for every method and coordinate mode of ONNX Resize.

Interpolation is separable: along each resized axis, output position i is the sum over taps t of
weights[i, t] * input[indices[i, t]] (NEAREST: one tap of weight 1). Coordinates are computed in
float32 as onnxruntime does; where onnxruntime and the ONNX reference differ, onnxruntime's choice
is kept: ALIGN_CORNERS divides by the output length (the reference uses input * scale unfloored)
and PYTORCH_HALF_PIXEL maps a length-1 output to 0 (as the spec says; the reference uses -0.5).
"""

from __future__ import annotations

import math

import numpy as np

METHODS = ("NEAREST", "LINEAR", "CUBIC")
COORDINATE_MODES = ("HALF_PIXEL", "ASYMMETRIC", "ALIGN_CORNERS", "PYTORCH_HALF_PIXEL", "TF_CROP_AND_RESIZE",
                    "HALF_PIXEL_SYMMETRIC")
NEAREST_MODES = ("ROUND_PREFER_FLOOR", "ROUND_PREFER_CEIL", "FLOOR", "CEIL")
KEEP_ASPECT_RATIO_POLICIES = ("stretch", "not_larger", "not_smaller")

# NOTE: coordinates within this of a half count as exact halves, as in onnxruntime: the
# float32 coordinate of an exact tie (7 -> 2 asymmetric: 3.5) can land an ulp to either side.
TIE_TOLERANCE = 1e-6


def resized_dim(size: int, scale: float) -> int:
    """The output dim of an axis of ``size`` resized by ``scale``: floor(size * scale) in float32."""
    return int(np.float32(size) * np.float32(scale))


def resize_scale(size: int, resized: int) -> np.float32:
    """The scale of an axis of ``size`` resized to ``resized`` (what coordinates are computed from)."""
    return np.float32(resized) / np.float32(size)


def keep_aspect_ratio(shape: tuple[int, ...], sizes: list[int], axes: list[int],
                      policy: str) -> tuple[list[int], list[float]]:
    """Output dims and scales of ONNX's keep_aspect_ratio_policy (opset 18) for ``sizes`` of every axis.

    ``not_larger`` / ``not_smaller``: one scale, the least / greatest of sizes / dims over ``axes``,
    for all of them; each of their dims becomes round-half-up(scale * dim). ``stretch``: sizes as given.
    """
    if policy == "stretch":
        return list(sizes), [float(resize_scale(n, d)) if n else 1.0 for n, d in zip(shape, sizes, strict=True)]
    ratios = [np.float32(sizes[a]) / np.float32(shape[a]) for a in axes]
    scale = min(ratios) if policy == "not_larger" else max(ratios)
    dims = [int(np.floor(scale * np.float32(n) + np.float32(0.5))) if a in axes else n for a, n in enumerate(shape)]
    return dims, [float(scale) if a in axes else 1.0 for a in range(len(shape))]


def source_coordinates(mode: str, n_out: int, n_in: int, scale: float,
                       roi: tuple[float, float] = (0.0, 1.0)) -> np.ndarray:
    """Input coordinates of the ``n_out`` output positions, in float32 as onnxruntime computes them.

    ``roi`` (start, end), as fractions of the input, is read by TF_CROP_AND_RESIZE only.
    """
    x, scale = np.arange(n_out, dtype=np.float32), np.float32(scale)
    last_in, last_out = np.float32(n_in - 1), np.float32(n_out - 1)
    if mode == "ASYMMETRIC":
        return x / scale
    if mode == "ALIGN_CORNERS":
        return x * last_in / last_out if n_out > 1 else np.zeros_like(x)
    if mode == "TF_CROP_AND_RESIZE":
        start, end = np.float32(roi[0]), np.float32(roi[1])
        if n_out <= 1:
            return np.full_like(x, np.float32(0.5) * (start + end) * last_in)
        return start * last_in + x * (end - start) * last_in / last_out
    if mode == "PYTORCH_HALF_PIXEL" and n_out <= 1:
        return np.zeros_like(x)
    half = np.float32(0.5)
    coords = (x + half) / scale - half
    if mode == "HALF_PIXEL_SYMMETRIC":
        # NOTE: the output's centre maps to the input's even when n_out is n_in * scale rounded down
        adjustment = np.float32(n_out) / (scale * np.float32(n_in))
        coords += np.float32(n_in) / 2 * (1 - adjustment)
    return coords


def outside(coords: np.ndarray, n_in: int) -> np.ndarray:
    """Which coordinates lie outside the input (TF_CROP_AND_RESIZE writes the extrapolation value there)."""
    return (coords < 0) | (coords > n_in - 1)


def nearest_index(coords: np.ndarray, mode: str, n_in: int) -> np.ndarray:
    """The input index each coordinate rounds to under ``mode``, clamped to [0, n_in)."""
    floor = np.floor(coords)
    if mode == "CEIL":
        floor = np.ceil(coords)
    elif mode != "FLOOR":
        fraction = coords - floor
        tie = np.abs(fraction - 0.5) <= TIE_TOLERANCE
        floor += (fraction > 0.5) | tie if mode == "ROUND_PREFER_CEIL" else (fraction > 0.5) & ~tie
    return np.clip(floor, 0, n_in - 1).astype(np.intp)


def cubic_weight(distance: np.ndarray, a: float) -> np.ndarray:
    """The cubic convolution kernel (Keys) with coefficient ``a`` at ``distance``; 0 from 2 on."""
    d = np.abs(distance)
    near = ((a + 2) * d - (a + 3)) * d * d + 1
    far = ((a * d - 5 * a) * d + 8 * a) * d - 4 * a
    return np.where(d <= 1, near, np.where(d < 2, far, 0))


def interpolation_taps(method: str, coords: np.ndarray, n_in: int, scale: float, cubic_coeff_a: float = -0.75,
                       exclude_outside: bool = False, antialias: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """(indices, weights), each (n_out, taps): what LINEAR or CUBIC reads for each coordinate.

    Tap t of a coordinate c reads input base + offset_t, base = ceil(c) - 1 (so the fraction c - base
    lies in (0, 1]), with weight kernel(c - base - offset_t); indices past an edge read the edge.
    LINEAR's kernel is the triangle of support 1, CUBIC's ``cubic_weight`` of support 2. With
    ``antialias`` a downsampling (scale < 1) widens the kernel by 1 / scale and the weights are
    normalised to sum to 1; ``exclude_outside`` drops the taps past the edges and renormalises.
    """
    support = 1 if method == "LINEAR" else 2
    stretch = min(float(scale), 1.0) if antialias else 1.0
    first = math.floor(-support / stretch) + 1
    offsets = np.arange(first, 2 - first)
    base = np.ceil(coords.astype(np.float64)) - 1
    distances = (coords[:, None] - base[:, None] - offsets[None, :]) * stretch
    linear = method == "LINEAR"
    weights = np.maximum(0.0, 1 - np.abs(distances)) if linear else cubic_weight(distances, cubic_coeff_a)
    indices = base.astype(np.int64)[:, None] + offsets[None, :]
    if antialias:
        weights = weights / weights.sum(axis=1, keepdims=True)
    if exclude_outside:
        weights = np.where((indices < 0) | (indices >= n_in), 0.0, weights)
        total = weights.sum(axis=1, keepdims=True)
        weights = weights / np.where(total == 0, 1.0, total)
    return np.clip(indices, 0, n_in - 1).astype(np.intp), weights
