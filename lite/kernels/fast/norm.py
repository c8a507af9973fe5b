"""Layer normalization in one compiled pass per row (statistics, normalize, scale and bias), group
(and instance) normalization in three passes per group, and layer normalization over the channels
of a channels-first image (``channel_norm``)."""

from __future__ import annotations

import functools

import numpy as np

from lite.kernels.fast import compiled, jit


@jit
def layer_norm(x, scale, bias, epsilon, out):
    """``out[r] = (x[r] - mean) / sqrt(var + epsilon) * scale + bias`` for every row r of x (rows, D)."""
    rows, width = x.shape
    for r in range(rows):
        row, target = x[r], out[r]
        total = row.dtype.type(0)
        for i in range(width):
            total += row[i]
        mean = total / width
        spread = row.dtype.type(0)
        for i in range(width):
            centered = row[i] - mean
            spread += centered * centered
        inverse = 1 / np.sqrt(spread / width + epsilon)
        for i in range(width):
            target[i] = (row[i] - mean) * inverse * scale[i] + bias[i]


@jit
def group_norm(x, scale, bias, epsilon, out):
    """``out[n, g, c] = (x[n, g, c] - mean) / sqrt(var + epsilon) * scale[g, c] + bias[g, c]`` for x
    (N, G, K, S): G groups of K channels of S positions each, the statistics of each sample's group
    over its K x S values, summed in float64 (a group may hold a whole image)."""
    samples, groups, channels, plane = x.shape
    count = channels * plane
    for n in range(samples):
        for g in range(groups):
            total = 0.0
            for c in range(channels):
                for i in range(plane):
                    total += x[n, g, c, i]
            mean = total / count
            spread = 0.0
            for c in range(channels):
                for i in range(plane):
                    centered = x[n, g, c, i] - mean
                    spread += centered * centered
            inverse = 1 / np.sqrt(spread / count + epsilon)
            center = x.dtype.type(mean)
            for c in range(channels):
                factor, shift = x.dtype.type(scale[g, c] * inverse), bias[g, c]
                row, target = x[n, g, c], out[n, g, c]
                for i in range(plane):
                    target[i] = (row[i] - center) * factor + shift


CHANNEL_NORM_POSITIONS = 256
"""Positions ``channel_norm`` takes at a time: their C values stay in cache across its three passes."""


@jit
def channel_norm(x, scale, bias, epsilon, out):
    """``out[n, :, p] = (x[n, :, p] - mean) / sqrt(var + epsilon) * scale + bias`` for x (N, C, P):
    each position's statistics over its C channels, CHANNEL_NORM_POSITIONS positions at a time,
    each pass a vector along the positions."""
    samples, channels, positions = x.shape
    mean = np.empty(CHANNEL_NORM_POSITIONS, np.float32)
    inverse = np.empty(CHANNEL_NORM_POSITIONS, np.float32)
    for n in range(samples):
        for first in range(0, positions, CHANNEL_NORM_POSITIONS):
            count = min(CHANNEL_NORM_POSITIONS, positions - first)
            mean[:count] = 0
            inverse[:count] = 0
            for c in range(channels):
                row = x[n, c, first:first + count]
                for p in range(count):
                    mean[p] += row[p]
            for p in range(count):
                mean[p] /= channels
            for c in range(channels):
                row = x[n, c, first:first + count]
                for p in range(count):
                    centered = row[p] - mean[p]
                    inverse[p] += centered * centered
            for p in range(count):
                inverse[p] = 1 / np.sqrt(inverse[p] / channels + epsilon)
            for c in range(channels):
                row, target, factor, shift = x[n, c, first:first + count], out[n, c, first:first + count], \
                    scale[c], bias[c]
                for p in range(count):
                    target[p] = (row[p] - mean[p]) * inverse[p] * factor + shift


@functools.cache
def warm_channel_norm() -> None:
    """Compiles ``channel_norm`` for float32 now (at build)."""
    x = np.zeros((1, 2, 3), np.float32)
    compiled(channel_norm, x, np.ones(2, np.float32), np.zeros(2, np.float32), np.float32(1e-5), np.zeros_like(x))


@functools.cache
def warm(dtype: str) -> None:
    """Compiles ``layer_norm`` for ``dtype`` now (at build), not in the first predict."""
    x = np.zeros((2, 4), dtype)
    compiled(layer_norm, x, np.ones(4, dtype), np.zeros(4, dtype), x.dtype.type(1e-5), np.zeros_like(x))


@functools.cache
def warm_group_norm(dtype: str) -> None:
    """Compiles ``group_norm`` for ``dtype`` now (at build)."""
    x = np.zeros((1, 2, 2, 3), dtype)
    compiled(group_norm, x, np.ones((2, 2), dtype), np.zeros((2, 2), dtype), x.dtype.type(1e-5), np.zeros_like(x))
