"""Winograd F(4x4, 3x3) convolution for 3x3, stride-1 layers (Lavin and Gray, 2016).

Each 4 x 4 block of the output comes from a 6 x 6 tile of the input: the tiles are transformed
(``V = B^T d B``), multiplied by the transformed weights (``U = G g G^T``, made once at build)
as 36 matrix products over channels, one per tile position, and transformed back
(``Y = A^T M A``) with the bias, a residual and the activation added as the blocks are written.
That is 36 multiplies for 16 outputs against im2col's 144, at the cost of the transforms and
of weights four times larger, so it pays on layers with many channels and large planes; the
convolution kernel picks it by shape (``worth_it``).
"""

from __future__ import annotations

import functools
import math

import numpy as np
from numba import carray
from numba import uint64 as _u  # NOTE: unsigned indices skip the negative-index check, so the loops vectorize

from lite.kernels.fast import compiled, jit, wide_registers
from lite.kernels.fast.crew import as_pointer

TILE, WINDOW = 4, 6  # output block and input tile sizes
DIRECT_FIRST = wide_registers()
"""Whether the direct kernels keep the 3x3 stride-1 layers they take (``lite.kernels.fast.direct``:
up to 128 channels): with 512-bit registers their tile beat Winograd. With AVX2's, where the
tile is smaller, Winograd runs first: it ran well ahead of the direct kernels there
(docs/performance.md, Winograd on AVX2)."""
MIN_BLOCKS = 36
"""The fewest output blocks worth the transforms (a 24 x 24 plane): 256 channels on 14 x 14 only
broke even against the blocked direct kernel with 512-bit registers."""
MIN_CHANNELS = 32 if DIRECT_FIRST else 64
"""The fewest channels in and out. With AVX2, SqueezeNet's 32 -> 128 on 27 x 27 ran faster on one
thread but slowed the model at two: its 36 products are too small to share."""
MIN_WIDE_CHANNELS = 256
"""With AVX2 (``DIRECT_FIRST`` false), layers of at least this many channels in and out take
Winograd from 16 output blocks (14 x 14 planes): ResNet-50's 256 channels, above; with 128 or
fewer the transforms ate the gain (128 on 14 x 14, 48 -> 192 on 13 x 13: no faster than the direct
kernel)."""


G = np.array([[1 / 4, 0, 0], [-1 / 6, -1 / 6, -1 / 6], [-1 / 6, 1 / 6, -1 / 6],
              [1 / 24, 1 / 12, 1 / 6], [1 / 24, -1 / 12, 1 / 6], [0, 0, 1]])


def transform_weights(weight: np.ndarray) -> np.ndarray:
    """``U``: (36, K, C) from a (K, C, 3, 3) weight, computed in float64 and stored in its dtype."""
    u = np.einsum("ai,kcij,bj->abkc", G, weight.astype(np.float64), G)
    return np.ascontiguousarray(u.reshape(WINDOW * WINDOW, *weight.shape[:2]).astype(weight.dtype))


class WinogradPlan:
    """Tile counts and scratch shapes for one input shape; ``steps`` binds the calls of a run."""

    def __init__(self, x: tuple[int, ...], out_channels: int, begins: tuple[int, ...], out: tuple[int, ...]):
        (n, c), (self.oh, self.ow) = x[:2], out
        self.pads = begins
        self.tiles_h, self.tiles_w = -(-self.oh // TILE), -(-self.ow // TILE)
        tiles = n * self.tiles_h * self.tiles_w
        padded = ((self.tiles_h * TILE + 2) * (self.tiles_w * TILE + 2),)  # NOTE: also holds the output rows
        self.scratch = ((WINDOW * WINDOW, c, tiles), (WINDOW * WINDOW, out_channels, tiles), padded)

    def steps(self, x: np.ndarray, u: np.ndarray, bias: np.ndarray, lo: np.generic, hi: np.generic,
              residual: np.ndarray | None, out: np.ndarray, buffers: list[np.ndarray], matmul) -> list:
        """The calls computing ``out = clip(conv(x) + bias + residual, lo, hi)``; ``matmul(a, b, out)``
        makes the step of a matrix product (the model's threads split it)."""
        v, m, plane = buffers[:3]
        extra = np.zeros((1, 1, 1, 1), out.dtype) if residual is None else residual
        planes_in, planes_out = x.shape[0] * x.shape[1], out.shape[0] * out.shape[1]
        return [functools.partial(input_transform, x, v, plane, *self.pads, self.tiles_h, self.tiles_w, 0, planes_in),
                matmul(u, v, m),
                functools.partial(output_transform, m, bias, extra, residual is not None, out, lo, hi,
                                  self.tiles_h, self.tiles_w, plane, 0, planes_out)]


def worth_it(channels: int, out_channels: int, out: tuple[int, int]) -> bool:
    """Whether Winograd beats the other kernels here: MIN_CHANNELS or more in and out, and at least
    MIN_BLOCKS output blocks (with AVX2, 16 for MIN_WIDE_CHANNELS channels or more)."""
    fewest = min(channels, out_channels)
    blocks = math.ceil(out[0] / TILE) * math.ceil(out[1] / TILE)
    wide_layer = not DIRECT_FIRST and fewest >= MIN_WIDE_CHANNELS and blocks >= 16
    return fewest >= MIN_CHANNELS and (blocks >= MIN_BLOCKS or wide_layer)


@jit
def input_transform(x, v, plane, pt, pl, th, tw, first, last):
    """``v[:, c, tile] = B^T d B`` for every 6 x 6 tile ``d`` of the planes ``first`` to ``last - 1``
    (of N * C) of x, zero-padded.

    A row of tiles at a time: first the rows of the padded plane combine into six rows (``B^T d``,
    contiguous, so vectorized), then every tile's six columns of those combine into its six values
    per row (``(B^T d) B``), written along the row of tiles.
    """
    n, c, h, w = x.shape
    pw = tw * TILE + 2
    rows = np.empty((WINDOW, pw), plane.dtype)
    plane[:] = 0
    for job in range(first, last):
        image, channel = job // c, job % c
        for r in range(h):  # the padded plane: only the interior is written, so the border stays zero
            source, into = x[image, channel, r], (r + pt) * pw + pl
            for q in range(w):
                plane[_u(into + q)] = source[q]
        for ty in range(th):
            _rows_in(plane, ty * TILE * pw, pw, rows)
            tile = image * th * tw + ty * tw
            for a in range(WINDOW):
                _columns_in(rows[a], v, a * WINDOW, channel, tile, tw)


@jit
def _rows_in(plane, at, pw, rows):
    for q in range(pw):
        d0, d1, d2 = plane[_u(at + q)], plane[_u(at + pw + q)], plane[_u(at + 2 * pw + q)]
        d3, d4, d5 = plane[_u(at + 3 * pw + q)], plane[_u(at + 4 * pw + q)], plane[_u(at + 5 * pw + q)]
        rows[0, q] = 4 * d0 - 5 * d2 + d4
        rows[1, q] = -4 * d1 - 4 * d2 + d3 + d4
        rows[2, q] = 4 * d1 - 4 * d2 - d3 + d4
        rows[3, q] = -2 * d1 - d2 + 2 * d3 + d4
        rows[4, q] = 2 * d1 - d2 - 2 * d3 + d4
        rows[5, q] = 4 * d1 - 5 * d3 + d5


@jit
def _columns_in(row, v, first, channel, tile, tw):
    v0, v1, v2 = v[first, channel, tile:], v[first + 1, channel, tile:], v[first + 2, channel, tile:]
    v3, v4, v5 = v[first + 3, channel, tile:], v[first + 4, channel, tile:], v[first + 5, channel, tile:]
    for tx in range(tw):
        at = _u(tx * TILE)
        d0, d1, d2, d3, d4, d5 = row[at], row[at + 1], row[at + 2], row[at + 3], row[at + 4], row[at + 5]
        v0[_u(tx)] = 4 * d0 - 5 * d2 + d4
        v1[_u(tx)] = -4 * d1 - 4 * d2 + d3 + d4
        v2[_u(tx)] = 4 * d1 - 4 * d2 - d3 + d4
        v3[_u(tx)] = -2 * d1 - d2 + 2 * d3 + d4
        v4[_u(tx)] = 2 * d1 - d2 - 2 * d3 + d4
        v5[_u(tx)] = 4 * d1 - 5 * d3 + d5


@jit
def output_transform(m, bias, residual, has_residual, out, lo, hi, th, tw, plane, first, last):
    """``out = clip(A^T M A + bias [+ residual], lo, hi)``, the 4 x 4 blocks cropped to out's plane,
    for the output planes ``first`` to ``last - 1`` (of N * K).

    A row of tiles at a time, as ``input_transform`` backwards: each tile position's six values
    combine along the row of tiles into four rows (``A^T M``), whose columns combine into the
    blocks (``(A^T M) A``) of four output rows; bias, residual and clip go on as they are copied out.
    """
    n, k, oh, ow = out.shape
    pw = tw * TILE
    rows = np.empty((TILE, WINDOW, tw), m.dtype)
    for job in range(first, last):
        image, channel = job // k, job % k
        shift = bias[channel]
        for ty in range(th):
            tile = image * th * tw + ty * tw
            for j in range(WINDOW):
                _rows_out(m, j, channel, tile, tw, rows)
            for r in range(TILE):
                _columns_out(rows[r], plane, r * pw, tw)
            for r in range(min(TILE, oh - ty * TILE)):
                y = ty * TILE + r
                source, target = plane[r * pw:], out[image, channel, y]
                if has_residual:
                    extra = residual[image, channel, y]
                    for q in range(ow):
                        target[q] = min(max(source[q] + shift + extra[q], lo), hi)
                else:
                    for q in range(ow):
                        target[q] = min(max(source[q] + shift, lo), hi)


@jit
def _rows_out(m, j, channel, tile, tw, rows):
    m0, m1, m2 = m[j, channel, tile:], m[WINDOW + j, channel, tile:], m[2 * WINDOW + j, channel, tile:]
    m3, m4, m5 = m[3 * WINDOW + j, channel, tile:], m[4 * WINDOW + j, channel, tile:], m[5 * WINDOW + j, channel, tile:]
    r0, r1, r2, r3 = rows[0, j], rows[1, j], rows[2, j], rows[3, j]
    for tx in range(tw):
        i = _u(tx)
        a0, a1, a2, a3, a4, a5 = m0[i], m1[i], m2[i], m3[i], m4[i], m5[i]
        r0[i] = a0 + a1 + a2 + a3 + a4
        r1[i] = a1 - a2 + 2 * a3 - 2 * a4
        r2[i] = a1 + a2 + 4 * a3 + 4 * a4
        r3[i] = a1 - a2 + 8 * a3 - 8 * a4 + a5


@jit
def _columns_out(rows, plane, at, tw):
    s0, s1, s2, s3, s4, s5 = rows[0], rows[1], rows[2], rows[3], rows[4], rows[5]
    for tx in range(tw):
        i, o = _u(tx), _u(at + tx * TILE)
        a0, a1, a2, a3, a4, a5 = s0[i], s1[i], s2[i], s3[i], s4[i], s5[i]
        plane[o] = a0 + a1 + a2 + a3 + a4
        plane[o + 1] = a1 - a2 + 2 * a3 - 2 * a4
        plane[o + 2] = a1 + a2 + 4 * a3 + 4 * a4
        plane[o + 3] = a1 - a2 + 8 * a3 - 8 * a4 + a5


@functools.cache
def warm(dtype: str) -> None:
    """Compiles the transforms for ``dtype`` now (at build), not in the first predict."""
    plan = WinogradPlan((1, 2, 4, 4), 2, (1, 1), (4, 4))
    buffers = [np.zeros(shape, dtype) for shape in plan.scratch]
    x, out = np.zeros((1, 2, 4, 4), dtype), np.zeros((1, 2, 4, 4), dtype)
    u = transform_weights(np.zeros((2, 2, 3, 3), dtype))
    for residual in (None, np.zeros_like(out)):
        lowest, highest = np.dtype(dtype).type(-np.inf), np.dtype(dtype).type(np.inf)
        for step in plan.steps(x, u, np.zeros(2, dtype), lowest, highest, residual, out, buffers,
                               lambda a, b, o: functools.partial(np.matmul, a, b, out=o)):
            compiled(step)


# The blocks of the float32 transforms on the crew (``lite.kernels.fast.crew.Jobs``), then
# (first, last, padded plane) for each piece:
_TILES, _TH, _TW, _PLANE_N = range(4)  # both
_X, _N, _C, _H, _W, _V, _PT, _PL = range(4, 12)  # the input transform's
_M, _K, _BIAS, _RESIDUAL, _HAS_RESIDUAL, _OUT, _OUT_SHAPE, _LO, _HI, _RESIDUAL_SHAPE = 4, 5, 6, 7, 8, 9, 10, 14, 15, 16
_HEADER, _PER_PIECE = 20, 3


def crew_transforms(steps: list, bounds_in: list[tuple[int, int]], bounds_out: list[tuple[int, int]],
                    planes: list[np.ndarray]) -> tuple:
    """The transforms of ``steps`` (as ``WinogradPlan.steps`` made them, float32) as jobs for the
    crew: input planes in the pieces ``bounds_in``, output planes in ``bounds_out``, each piece
    with its own padded plane of ``planes``."""
    from lite.kernels.fast.crew import Jobs, pieces_block

    (x, v, _plane, pt, pl, th, tw, *_), (m, bias, extra, has_residual, out, lo, hi, *_) = (s.args for s in steps[::2])
    shared = {_TILES: v.shape[2], _TH: th, _TW: tw, _PLANE_N: planes[0].size}
    block_in = pieces_block(_HEADER, bounds_in, [[p] for p in planes[:len(bounds_in)]])
    block_out = pieces_block(_HEADER, bounds_out, [[p] for p in planes[:len(bounds_out)]])
    for block in (block_in, block_out):
        block[list(shared)] = list(shared.values())
    block_in[[_X, _N, _C, _H, _W, _V, _PT, _PL]] = x.ctypes.data, *x.shape, v.ctypes.data, pt, pl
    block_out[[_M, _K, _BIAS, _RESIDUAL, _HAS_RESIDUAL]] = m.ctypes.data, m.shape[1], bias.ctypes.data, \
        extra.ctypes.data, has_residual
    block_out[_OUT:_OUT_SHAPE + 4] = out.ctypes.data, *out.shape
    block_out[_RESIDUAL_SHAPE:_RESIDUAL_SHAPE + 4] = extra.shape
    block_out[_LO:_HI + 1].view(np.float64)[:] = lo, hi
    return (Jobs(input_job, block_in, len(bounds_in), (x, v, *planes)),
            Jobs(output_job, block_out, len(bounds_out), (m, bias, extra, out, *planes)))


def input_job(index, data, extra):
    """Input planes of piece ``index`` of the block at ``data``."""
    block = carray(data, (_HEADER + _PER_PIECE * (index + 1),), np.int64)
    x = carray(as_pointer(block[_X]), (block[_N], block[_C], block[_H], block[_W]), np.float32)
    v = carray(as_pointer(block[_V]), (WINDOW * WINDOW, block[_C], block[_TILES]), np.float32)
    piece = _HEADER + _PER_PIECE * index
    plane = carray(as_pointer(block[piece + 2]), (block[_PLANE_N],), np.float32)
    input_transform(x, v, plane, block[_PT], block[_PL], block[_TH], block[_TW], block[piece], block[piece + 1])


def output_job(index, data, extra):
    """Output planes of piece ``index`` of the block at ``data``."""
    block = carray(data, (_HEADER + _PER_PIECE * (index + 1),), np.int64)
    floats = carray(data, (_HEADER,), np.float64)
    m = carray(as_pointer(block[_M]), (WINDOW * WINDOW, block[_K], block[_TILES]), np.float32)
    bias = carray(as_pointer(block[_BIAS]), (block[_K],), np.float32)
    shape, extent = block[_OUT_SHAPE:_OUT_SHAPE + 4], block[_RESIDUAL_SHAPE:_RESIDUAL_SHAPE + 4]
    out = carray(as_pointer(block[_OUT]), (shape[0], shape[1], shape[2], shape[3]), np.float32)
    residual = carray(as_pointer(block[_RESIDUAL]), (extent[0], extent[1], extent[2], extent[3]), np.float32)
    piece = _HEADER + _PER_PIECE * index
    plane = carray(as_pointer(block[piece + 2]), (block[_PLANE_N],), np.float32)
    output_transform(m, bias, residual, block[_HAS_RESIDUAL] != 0, out, np.float32(floats[_LO]),
                     np.float32(floats[_HI]), block[_TH], block[_TW], plane, block[piece], block[piece + 1])
