"""A batch of 2-D transposes of 4-byte elements in 8 x 8 blocks: each block is read as 8 row pieces
and written as 8 column pieces, both a few cache lines, where numpy's strided copy of a transposed
view writes (or reads) one element a line (NCHW to NHWC and back: ConvNeXt's LayerNorms, models
exported from channels-last frameworks)."""

from __future__ import annotations

import functools

import numpy as np
from numba import uint64 as _u  # NOTE: unsigned indices skip the negative-index check, so the loops vectorize

from lite.kernels.fast import compiled, jit

BLOCK = 8


@jit
def transpose_planes(x, out, batches, rows, cols):
    """out (B, C, R) = each of the B (R, C) planes of x transposed; both flat, of one 4-byte type."""
    whole_rows, whole_cols, plane = rows // BLOCK * BLOCK, cols // BLOCK * BLOCK, rows * cols
    for b in range(batches):
        base = b * plane
        for i0 in range(0, whole_rows, BLOCK):
            for j0 in range(0, whole_cols, BLOCK):
                for j in range(j0, j0 + BLOCK):
                    for i in range(i0, i0 + BLOCK):
                        out[_u(base + j * rows + i)] = x[_u(base + i * cols + j)]
            for j in range(whole_cols, cols):
                for i in range(i0, i0 + BLOCK):
                    out[_u(base + j * rows + i)] = x[_u(base + i * cols + j)]
        for i in range(whole_rows, rows):
            for j in range(cols):
                out[_u(base + j * rows + i)] = x[_u(base + i * cols + j)]


@functools.cache
def warm() -> None:
    """Compiles ``transpose_planes`` now (at build)."""
    x = np.zeros(6, np.uint32)
    compiled(transpose_planes, x, np.zeros_like(x), 1, 2, 3)
