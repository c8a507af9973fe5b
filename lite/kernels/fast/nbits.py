"""Products on weights stored as small integer codes in blocks along K: y = clip(a @ W + bias, lo, hi), float32
a and y, W[k, n] = (q[k, n] - z[k // block, n]) * s[k // block, n] (a weight-only quantized linear layer:
onnxruntime's MatMulNBits, or a blocked DequantizeLinear of a constant before a MatMul).

The codes minus their zero points are packed once, at build, into panels of ``WIDTH`` columns, one signed
byte a weight (4-bit codes: -15..15), and the scales into panels of blocks (``pack``). A product of fewer
rows than a tile (a decoder's step) sums, row by row, each block's codes times a in float32, then scales the
block's sum (``_thin_panel``): the codes stream from memory once (later rows find the panel in cache), a
quarter of the float32 weight's bytes. More rows (a prompt) dequantize each panel into float32 scratch, the
weights exactly as DequantizeLinear gives them, and run ``lite.kernels.fast.gemm``'s register tile on it
(``_tiles``): once per panel whatever the rows, so no float32 copy of the weight is kept.
"""

from __future__ import annotations

import functools

import ml_dtypes
import numpy as np
from numba import carray
from numba import uint64 as _u  # NOTE: unsigned indices skip the negative-index check, so the loops vectorize

from lite.kernels.fast import compiled, jit
from lite.kernels.fast.activation import CLIP_CODE
from lite.kernels.fast.crew import as_pointer
from lite.kernels.fast.gemm import ONE, _finish, _tiles, panel_count
from lite.kernels.fast.tile import ROWS, WIDTH

MAX_CODE = 15
"""The largest |q - z| the byte codes hold exactly: 4-bit weights (uint4, int4)."""


def pack(q: np.ndarray, scale: np.ndarray, zero_point: np.ndarray | None, block: int
         ) -> tuple[np.ndarray, np.ndarray]:
    """(codes, scales): q - z (K, N) as (panels, K, WIDTH) int8 and s (blocks, N) as (panels, blocks, WIDTH)
    float32, zero columns past N. q and z are integer codes of any integer dtype (ml_dtypes' int4 and uint4
    too: converted, not viewed), 4-bit: their difference within MAX_CODE."""
    k, n = q.shape
    blocks, panels = scale.shape[0], panel_count(n)
    narrow = q.dtype.name in ("int4", "uint4")  # NOTE: one byte a weight, the only temporary as large as q
    kind = np.int8 if narrow else np.int16
    small = q.astype(kind)
    zeros = np.zeros((blocks, n), kind) if zero_point is None else zero_point.astype(kind)
    codes = np.empty((panels, k, WIDTH), np.int8)
    reach = _pack_codes(small, zeros, block, codes)
    if reach > MAX_CODE:
        raise ValueError(f"codes minus zero points reach {reach}, beyond {MAX_CODE}")
    scales = np.zeros((blocks, panels * WIDTH), np.float32)
    scales[:, :n] = scale
    return codes, np.ascontiguousarray(scales.reshape(blocks, panels, WIDTH).transpose(1, 0, 2))


@jit
def _pack_codes(q, zeros, block, codes):
    """codes (panels, K, WIDTH) = q (K, N) minus each block's zero point, zero columns past N; returns the
    largest |q - z| (the caller checks it against MAX_CODE)."""
    k, n = q.shape
    reach = 0
    for panel in range(codes.shape[0]):
        column = panel * WIDTH
        count = min(WIDTH, n - column)
        for kk in range(k):
            at = kk // block
            for j in range(count):
                value = np.int16(q[kk, column + j]) - np.int16(zeros[at, column + j])
                reach = max(reach, abs(value))
                codes[panel, kk, j] = value
            for j in range(count, WIDTH):
                codes[panel, kk, j] = 0
    return reach


@jit
def product(a, codes, scales, block, bias, lo, hi, out, first, last, code, alpha):
    """Columns of panels ``first`` to ``last - 1`` of out (M, N) = clip(a (M, K) @ W + bias, lo, hi), W packed
    by ``pack`` (``block`` rows of K a scale), then the activation of ``code`` with ``alpha``; a and out
    C-contiguous."""
    m, k = a.shape
    n = out.shape[1]
    spare = np.empty((ROWS, WIDTH), np.float32)
    floats = np.empty((k if m >= ROWS else 0, WIDTH), np.float32)
    for panel in range(first, last):
        column = panel * WIDTH
        count = min(WIDTH, n - column)
        if m < ROWS:
            _thin_panel(a, codes[panel], scales[panel], block, out, column, count)
        else:
            _dequantize(codes[panel], scales[panel], block, floats)
            _tiles(a, floats, out, column, count, spare)
        _finish(out, bias, lo, hi, column, count, code, alpha)


@jit
def _dequantize(codes, scales, block, floats):
    """floats (K, WIDTH) = the panel's codes times their blocks' scales (float32, as DequantizeLinear)."""
    k = codes.shape[0]
    for kk in range(k):
        at = kk // block
        for j in range(WIDTH):
            floats[kk, _u(j)] = np.float32(codes[kk, _u(j)]) * scales[at, _u(j)]


@jit
def _thin_panel(a, codes, scales, block, out, column, count):
    """One panel's columns for each row of a: per block, the codes times a summed, then scaled."""
    m, k = a.shape
    total = np.empty(WIDTH, np.float32)
    part = np.empty(WIDTH, np.float32)
    flat = codes.reshape(codes.size)
    for r in range(m):
        for j in range(WIDTH):
            total[j] = 0
        for first in range(0, k, block):
            for j in range(WIDTH):
                part[j] = 0
            for kk in range(first, min(first + block, k)):
                x = a[r, kk]
                row = kk * WIDTH
                for j in range(WIDTH):
                    part[_u(j)] += x * np.float32(flat[_u(row + j)])
            at = first // block
            for j in range(WIDTH):
                total[_u(j)] += part[_u(j)] * scales[at, _u(j)]
        for j in range(count):
            out[r, column + j] = total[j]


@functools.cache
def warm() -> None:
    """Compiles ``product`` now (at build), not in the first predict."""
    uint4 = np.dtype(ml_dtypes.uint4)  # NOTE: what weight_codes passes
    codes, scales = pack(np.zeros((2, 3), uint4), np.ones((1, 3), np.float32), np.zeros((1, 3), uint4), 2)
    for rows in (1, ROWS):
        compiled(product, np.zeros((rows, 2), np.float32), codes, scales, 2, np.zeros(3, np.float32),
                 np.float32(-np.inf), np.float32(np.inf), np.zeros((rows, 3), np.float32), 0, 1, CLIP_CODE, ONE)


# The block of a product on the crew (``lite.kernels.fast.crew.Jobs``), then (first, last) a piece:
_A, _M, _K, _CODES, _SCALES, _PANELS, _BLOCKS, _BLOCK, _BIAS, _OUT, _N, _CODE, _LO, _HI, _ALPHA = range(15)
_HEADER = 15


def crew_jobs(a: np.ndarray, codes: np.ndarray, scales: np.ndarray, block: int, bias: np.ndarray, lo: np.float32,
              hi: np.float32, out: np.ndarray, bounds: list[tuple[int, int]], code: int, alpha: np.float32):
    """The product's panels as jobs for the crew, one per piece of ``bounds`` (``product``'s arguments
    otherwise)."""
    from lite.kernels.fast.crew import Jobs, pieces_block

    block_data = pieces_block(_HEADER, bounds)
    block_data[[_A, _M, _K, _CODES, _SCALES, _PANELS, _BLOCKS, _BLOCK]] = (
        a.ctypes.data, *a.shape, codes.ctypes.data, scales.ctypes.data, codes.shape[0], scales.shape[1], block)
    block_data[[_BIAS, _OUT, _N, _CODE]] = bias.ctypes.data, out.ctypes.data, out.shape[1], code
    block_data[_LO:_HEADER].view(np.float64)[:] = lo, hi, alpha
    return Jobs(product_job, block_data, len(bounds), (a, codes, scales, bias, out))


def product_job(index, data, extra):
    """Piece ``index`` of the product that the block at ``data`` describes."""
    block = carray(data, (_HEADER + 2 * (index + 1),), np.int64)
    floats = carray(data, (_HEADER,), np.float64)
    m, k, n, panels = block[_M], block[_K], block[_N], block[_PANELS]
    a = carray(as_pointer(block[_A]), (m, k), np.float32)
    codes = carray(as_pointer(block[_CODES]), (panels, k, WIDTH), np.int8)
    scales = carray(as_pointer(block[_SCALES]), (panels, block[_BLOCKS], WIDTH), np.float32)
    bias = carray(as_pointer(block[_BIAS]), (n,), np.float32)
    out = carray(as_pointer(block[_OUT]), (m, n), np.float32)
    piece = _HEADER + 2 * index
    product(a, codes, scales, block[_BLOCK], bias, np.float32(floats[_LO]), np.float32(floats[_HI]), out,
            block[piece], block[piece + 1], block[_CODE], np.float32(floats[_ALPHA]))
