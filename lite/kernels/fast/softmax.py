"""Attention's softmax in one compiled pass per row: scale, mask, max, exponentials, sum and
division over each row of the scores while it is in cache (numpy makes six passes over the
whole array), float32 on ``lite.kernels.fast.activation.exp32``.

The scores are (B, H, Sq, Sk), C-contiguous; the mask is given by its base array and its
element strides for the four dims (0 where it broadcasts), so no broadcast copy is made.
"""

from __future__ import annotations

import functools

import numpy as np
from numba import carray
from numba import uint64 as _u  # NOTE: unsigned indices skip the negative-index check, so the loops vectorize

from lite.kernels.fast import compiled, exact_jit, jit
from lite.kernels.fast.activation import bits_of_float, exp32, float_from_bits
from lite.kernels.fast.crew import as_pointer


@jit
def softmax_rows(scores, shape, scale, mask, strides, first, last, nan_to_zero):
    """Rows ``first`` to ``last - 1`` of the flat (B, H, Sq, Sk) ``scores``, in place:
    softmax(scores * scale + mask) over Sk; ``mask`` flat, read at ``strides`` (an empty mask: none).
    Without a mask and with a positive scale the scaling joins the exponentials' pass: the greatest
    scaled score is the scaled greatest score (rounding is monotonic). A row holding a NaN or +inf,
    or all -inf, or whose scaled greatest score overflows, is NaN everywhere, as numpy's passes give
    it (found on the values' bits, which fast-math cannot assume away: ``finite_row``), or 0 with
    ``nan_to_zero``."""
    heads, queries, width = shape[1], shape[2], shape[3]
    masked = mask.shape[0] > 0
    for row in range(first, last):
        base = row * width
        if masked or not scale > 0:
            at = (row // (heads * queries)) * strides[0] + (row // queries % heads) * strides[1] \
                + (row % queries) * strides[2]
            for i in range(width):
                value = scores[_u(base + i)] * scale
                if masked:
                    value += mask[_u(at + i * strides[3])]
                scores[_u(base + i)] = value
            top, factor = row_max(scores, base, width), np.float32(1)
        else:
            top, factor = exact_product(row_max(scores, base, width), scale), scale
        if not (finite_row(scores, base, width) and is_finite(top)):
            fill = np.float32(0) if nan_to_zero else float_from_bits(QUIET_NAN)
            for i in range(width):
                scores[_u(base + i)] = fill
            continue
        total = np.float32(0)
        for i in range(width):
            e = exp32(scores[_u(base + i)] * factor - top)
            scores[_u(base + i)] = e
            total += e
        inverse = np.float32(1) / total
        for i in range(width):
            scores[_u(base + i)] *= inverse


@exact_jit
def exact_product(a, b):
    """a * b without fast-math, so an overflow is +-inf (for ``is_finite``), not a value LLVM may assume away."""
    return a * b


QUIET_NAN = np.int32(0x7FC00000)
"""The bits of float32's quiet NaN (made from its bits: fast-math code may not compute one)."""


@jit
def is_finite(value):
    """Whether the float32 ``value`` is neither infinite nor NaN, on its bits."""
    return (bits_of_float(value) & np.int32(0x7FFFFFFF)) < np.int32(0x7F800000)


@jit
def finite_row(values, base, width):
    """Whether ``values[base:base + width]`` has no NaN and no +inf and is not all -inf: whether its
    softmax is a number everywhere. Read on the int32 bits (a NaN's magnitude bits exceed +inf's)."""
    magnitude, infinity = np.int32(0x7FFFFFFF), np.int32(0x7F800000)
    bad, finite = 0, 0
    for i in range(width):
        bits = bits_of_float(values[_u(base + i)])
        size = bits & magnitude
        bad += (size > infinity) | (bits == infinity)
        finite += size < infinity
    return bad == 0 and finite > 0


@jit
def row_max(values, base, width):
    """The max of ``values[base:base + width]`` (width at least one) as the greatest of their order
    keys: the int32 bits, all but the sign flipped for negative values, so keys order as the values
    do. An integer max reduction vectorizes; numba's float one in a running value does not (and
    running maxima in a small array, as before, cost four times the integer one)."""
    shift, magnitude = np.int32(31), np.int32(0x7FFFFFFF)
    top = np.int32(-0x80000000)
    for i in range(width):
        bits = bits_of_float(values[_u(base + i)])
        top = max(top, np.int32(bits ^ ((bits >> shift) & magnitude)))
    return float_from_bits(np.int32(top ^ ((top >> shift) & magnitude)))


def mask_layout(mask: np.ndarray | None, shape: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    """(flat mask, element strides) as ``softmax_rows`` reads a mask broadcast to ``shape`` (4 dims);
    an empty mask for None."""
    if mask is None:
        return np.zeros(0, np.float32), np.zeros(4, np.int64)
    view = np.broadcast_to(mask.reshape((1,) * (4 - mask.ndim) + mask.shape), shape)
    return mask.reshape(-1), np.array([s // mask.itemsize for s in view.strides], np.int64)


@functools.cache
def warm() -> None:
    """Compiles ``softmax_rows`` now (at build), with and without a mask, not in the first predict."""
    scores, shape = np.zeros(8, np.float32), np.array([1, 1, 2, 4], np.int64)
    for mask in (None, np.zeros(4, np.float32)):
        compiled(softmax_rows, scores, shape, np.float32(1), *mask_layout(mask, (1, 1, 2, 4)), 0, 2, False)


# The block of a softmax on the crew (``lite.kernels.fast.crew.Jobs``), then (first, last) a piece:
_SCORES, _SHAPE, _SCALE, _MASK, _MASK_SIZE, _STRIDES, _NAN_TO_ZERO = 0, 1, 5, 6, 7, 8, 12
_HEADER, _PER_PIECE = 13, 2


def crew_jobs(scores: np.ndarray, shape: np.ndarray, scale: np.float32, mask: np.ndarray, strides: np.ndarray,
              bounds: list[tuple[int, int]], nan_to_zero: bool):
    """``softmax_rows`` over the row pieces ``bounds`` as jobs for the crew."""
    from lite.kernels.fast.crew import Jobs, pieces_block

    block = pieces_block(_HEADER, bounds)
    block[[_SCORES, _MASK, _MASK_SIZE, _NAN_TO_ZERO]] = scores.ctypes.data, mask.ctypes.data, mask.size, nan_to_zero
    block[_SHAPE:_SHAPE + 4], block[_STRIDES:_STRIDES + 4] = shape, strides
    block[_SCALE:_SCALE + 1].view(np.float64)[0] = scale
    return Jobs(softmax_job, block, len(bounds), (scores, mask))


def softmax_job(index, data, extra):
    """Rows of piece ``index`` of the softmax the block at ``data`` describes."""
    block = carray(data, (_HEADER + _PER_PIECE * (index + 1),), np.int64)
    floats = carray(data, (_HEADER,), np.float64)
    shape = block[_SHAPE:_SHAPE + 4]
    scores = carray(as_pointer(block[_SCORES]), (shape[0] * shape[1] * shape[2] * shape[3],), np.float32)
    mask = carray(as_pointer(block[_MASK]), (block[_MASK_SIZE],), np.float32)
    piece = _HEADER + _PER_PIECE * index
    softmax_rows(scores, shape, np.float32(floats[_SCALE]), mask, block[_STRIDES:_STRIDES + 4], block[piece],
                 block[piece + 1], block[_NAN_TO_ZERO] != 0)
