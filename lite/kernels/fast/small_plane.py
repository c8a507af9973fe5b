"""Direct convolution for small output planes: output channels in vectors, positions broadcast.

On a 7 x 7 output plane (ResNet's last stage) the kernels that tile a "wide" plane waste
positions: ``lite.kernels.fast.blocked_direct``'s tiles of 8 cover the padded 7 x 9 plane in 64
positions for 49, and BLAS's products of 49 columns ran well behind onnxruntime's. Here the
tile (``lite.kernels.fast.tile``'s, in the blocked kernel's orientation: ``WIDTH`` output
channels of the packed weight in vectors by ``ROWS`` = 7 positions: 49 = 7 x 7) takes only the
output's own positions, and reads the NCHW input as it is (or its zero-padded copy): each
position's input for a term is one float, broadcast, at the position's offset plus the term's,
so any stride, dilation and kernel size reads the same way, with no blocks to fill or write
back. The terms go in chunks of ``CHUNK_TERMS`` (their panel rows, 24 KB, stay in L1 across the
tiles of positions), the sums carried in a small buffer between chunks; then the panel's
channels go out to NCHW with the bias, residual, clip and activation. Threads take ranges of
panels.

Its 1x1 and 3x3 layers on 7 x 7 run about as fast as onnxruntime's, faster than BLAS or the
blocked direct kernel, and ResNet-50's last stage runs faster on it at one thread and two
(measurements: docs/performance.md, kernel measurements).
"""

from __future__ import annotations

import functools

import numpy as np
from numba import carray, types
from numba import uint64 as _u  # NOTE: unsigned indices skip the negative-index check, so the loops vectorize
from numba.extending import intrinsic

from lite.kernels.fast import compiled, jit, wide_registers
from lite.kernels.fast.activation import CLIP_CODE, activate_run
from lite.kernels.fast.crew import as_pointer
from lite.kernels.fast.tile import FLOAT, INDEX, UNROLL, WIDTH, emit_tile
from lite.kernels.window import Geometry

MAX_POSITIONS = 49
"""The most output positions a plane may have for this kernel (7 x 7)."""
MIN_POSITIONS = 7
"""The fewest: a plane of fewer fills less than a tile (a squeeze-excite's 1 x 1 planes stay with BLAS)."""
MIN_CHANNEL_USE = 0.8
"""The least share of a layer's panels' channels that are output channels: 64 channels in two
panels of 48 (a 3x3 64 -> 64 layer on 7 x 7) measured slower than the direct kernel."""
CHUNK_TERMS = 128
"""Terms a pass of the tiles takes: their panel rows (128 x WIDTH floats, at most 24 KB) stay in L1."""
ROWS = 7 if wide_registers() else 5
"""Positions a tile takes (a plane's last tile repeats its last position where they run short):
7 with 512-bit registers (49 = 7 x 7). With 256-bit ones a tile of 7 spilled (14 registers of
sums of the 16) and ran at about half the speed of 5 or 6 positions (docs/performance.md)."""

NO_RESIDUAL = np.zeros(0, np.float32)
ONE = np.float32(1)


def fits(geometry: Geometry, group: int, out_channels: int) -> bool:
    """Whether this kernel runs a 2-D convolution: one group, no cropping pads, an output plane of
    MIN_POSITIONS to MAX_POSITIONS positions, output channels that use MIN_CHANNEL_USE of their
    panels."""
    positions, panels = geometry.out[0] * geometry.out[1], -(-out_channels // WIDTH)
    return (group == 1 and min(*geometry.begins, *geometry.ends) >= 0
            and MIN_POSITIONS <= positions <= MAX_POSITIONS and out_channels >= MIN_CHANNEL_USE * panels * WIDTH)


@intrinsic
def tile(typingctx, source, positions, offsets, terms, panel, sums):
    """The tile as an intrinsic ``(source, positions, offsets, terms, panel, sums)``: for ROWS
    positions r and WIDTH channels j, sums[r * WIDTH + j] += sum over k < terms of
    source[positions[r] + offsets[k]] * panel[k * WIDTH + j]; addresses and counts in int64. One
    variant only (the sums start at zero in the caller): each costs seconds of compiling."""
    def codegen(context, builder, signature, args):
        source_at, positions_at, offsets_at, count, panel_at, sums_at = args
        floats, indices = FLOAT.as_pointer(), INDEX.as_pointer()
        source_p, panel_p, sums_p = (builder.inttoptr(at, floats) for at in (source_at, panel_at, sums_at))
        positions_p, offsets_p = (builder.inttoptr(at, indices) for at in (positions_at, offsets_at))
        starts = [builder.gep(source_p, [builder.load(builder.gep(positions_p, [INDEX(r)]))]) for r in range(ROWS)]
        emit_tile(builder, lambda k, r: builder.gep(starts[r], [builder.load(builder.gep(offsets_p, [k]))]),
                  lambda k: builder.gep(panel_p, [builder.mul(k, INDEX(WIDTH))]), count, sums_p, INDEX(WIDTH),
                  accumulate=True, rows=ROWS, unroll=UNROLL)
        return context.get_dummy_value()
    return types.void(*(types.int64,) * 6), codegen


class SmallPlanePlan:
    """The offsets, tables and scratch of one geometry; ``fill`` (where the input is padded) then
    ``panels`` compute one image of the output."""

    def __init__(self, g: Geometry, out_channels: int) -> None:
        channels, h, w = g.x[1:]
        (kh, kw), (sh, sw), (dh, dw) = g.kernel, g.strides, g.dilations
        self.pads = (*g.begins, *g.ends)
        self.padded = any(self.pads)
        hp, wp = h + g.begins[0] + g.ends[0], w + g.begins[1] + g.ends[1]
        plane = hp * wp
        self.offsets = (np.arange(channels)[:, None, None] * plane + np.arange(kh)[None, :, None] * dh * wp
                        + np.arange(kw)[None, None, :] * dw).reshape(-1).astype(np.int64)
        count = g.out[0] * g.out[1]
        at = (np.arange(g.out[0])[:, None] * sh * wp + np.arange(g.out[1])[None, :] * sw).reshape(-1)
        spare = -(-count // ROWS) * ROWS - count  # NOTE: the last tile repeats the last position
        self.positions = np.concatenate([at, np.repeat(at[-1:], spare)]).astype(np.int64)
        self.panels = -(-out_channels // WIDTH)
        self.scratch = ((channels * plane if self.padded else 1,), (self.positions.size, WIDTH))

    def arrange(self, weight: np.ndarray) -> np.ndarray:
        """The weight (O, C, KH, KW) as the tiles read it: (panels, K, WIDTH), zero channels past O."""
        matrix = np.zeros((self.panels * WIDTH, self.offsets.size), np.float32)
        matrix[:weight.shape[0]] = weight.reshape(weight.shape[0], -1)
        return np.ascontiguousarray(matrix.reshape(self.panels, WIDTH, -1).transpose(0, 2, 1))

    def source(self, x: np.ndarray, image: int, padded: np.ndarray) -> np.ndarray:
        """What the tiles read for image ``image``: its zero-padded copy (``fill`` writes it) where
        the geometry pads, else the image itself (flat)."""
        return padded if self.padded else x[image].reshape(-1)

    def fill(self, x: np.ndarray, image: int, padded: np.ndarray) -> None:
        """Image ``image`` of x (N, C, H, W) into ``padded`` (scratch[0]), zero around it."""
        fill(x, image, padded, *self.pads[:2], *self.pads[2:])

    def run(self, source: np.ndarray, weights: np.ndarray, sums: np.ndarray, out: np.ndarray, image: int,
            bias: np.ndarray, lo: np.float32, hi: np.float32, code: int = CLIP_CODE, alpha: np.float32 = ONE,
            first: int = 0, last: int | None = None, residual: np.ndarray | None = None) -> None:
        """Panels ``first`` to ``last - 1`` (default all) of out[image] as clip(sum + bias (+ residual,
        out's shape), lo, hi), then the activation of ``code`` with ``alpha``; ``sums`` is this
        call's own scratch (``scratch[1]``)."""
        last = self.panels if last is None else last
        added = NO_RESIDUAL if residual is None else residual.reshape(-1)
        panels(source, self.positions, self.offsets, weights, sums, out, image, bias, lo, hi, code, alpha,
               first, last, added)

    def warm(self) -> None:
        """Compiles the kernels now (at build), not in the first predict."""
        _warm()


@functools.cache
def _warm() -> None:
    plan = SmallPlanePlan(Geometry((1, 2, 4, 4), (3, 3), (1, 1), (1, 1), (1, 1), (1, 1), (4, 4)), 2)
    x, out = np.zeros((1, 2, 4, 4), np.float32), np.zeros((1, 2, 4, 4), np.float32)
    padded, sums = (np.zeros(shape, np.float32) for shape in plan.scratch)
    compiled(plan.fill, x, 0, padded)
    compiled(plan.run, padded, plan.arrange(np.zeros((2, 2, 3, 3), np.float32)), sums, out, 0,
             np.zeros(2, np.float32), np.float32(-np.inf), np.float32(np.inf))


@jit
def fill(x, image, padded, top, left, bottom, right):
    """Image ``image`` of x (N, C, H, W) into padded (flat, C planes of (H + top + bottom) x
    (W + left + right)), zero around it."""
    channels, h, w = x.shape[1], x.shape[2], x.shape[3]
    wp = w + left + right
    plane = (h + top + bottom) * wp
    xf = x.reshape(x.size)
    for i in range(padded.size):  # NOTE: plain loops: a slice assignment here took 2.8 s to compile
        padded[i] = 0
    for c in range(channels):
        for y in range(h):
            at, source = c * plane + (y + top) * wp + left, ((image * channels + c) * h + y) * w
            for i in range(w):
                padded[_u(at + i)] = xf[_u(source + i)]


@jit
def panels(source, positions, offsets, weights, sums, out, image, bias, lo, hi, code, alpha, first, last, residual):
    """Panels ``first`` to ``last - 1`` of out[image]: for each, the tiles of positions over the
    chunks of terms, then its channels out with bias, residual (flat, as out; empty for none),
    clip and activation."""
    terms, spaced = offsets.size, positions.size
    channels, count = out.shape[1], out.shape[2] * out.shape[3]
    flat, zero, added = out.reshape(out.size), out.dtype.type(0), residual.size > 0
    for panel in range(first, last):
        sums[:] = 0
        for chunk in range(0, terms, CHUNK_TERMS):
            taken = min(CHUNK_TERMS, terms - chunk)
            for top in range(0, spaced, ROWS):
                tile(source.ctypes.data, positions[top:].ctypes.data, offsets[chunk:].ctypes.data, taken,
                     weights[panel, chunk:].ctypes.data, sums[top:].ctypes.data)
        for j in range(min(WIDTH, channels - panel * WIDTH)):
            o = panel * WIDTH + j
            shift, base = bias[o], (image * channels + o) * count
            if added:
                for p in range(count):
                    flat[base + p] = min(max(sums[p, j] + shift + residual[base + p], lo), hi)
            else:
                for p in range(count):
                    flat[base + p] = min(max(sums[p, j] + shift, lo), hi)
            if code != CLIP_CODE:
                activate_run(flat, base, count, zero, code, alpha)


# The block of the panels on the crew (``lite.kernels.fast.crew.Jobs``), then (first, last, sums) a piece:
_SOURCE, _SOURCE_N, _POSITIONS, _SPACED, _OFFSETS, _TERMS, _WEIGHTS, _PANELS, _OUT, _N, _C, _OH, _OW = range(13)
_IMAGE, _BIAS, _CODE, _RESIDUAL, _RESIDUAL_N, _LO, _HI, _ALPHA = range(13, 21)
_HEADER, _PER_PIECE = 21, 3


def crew_jobs(plan: SmallPlanePlan, source: np.ndarray, weights: np.ndarray, sums: list[np.ndarray],
              out: np.ndarray, image: int, bias: np.ndarray, lo, hi, code: int, alpha,
              bounds: list[tuple[int, int]], residual: np.ndarray | None = None):
    """``plan.run``'s pieces of ``bounds`` (panels) as jobs for the crew, each with its buffer of
    ``sums`` (its arguments otherwise)."""
    from lite.kernels.fast.crew import Jobs, pieces_block

    added = NO_RESIDUAL if residual is None else residual.reshape(-1)
    block = pieces_block(_HEADER, bounds, [[buffer] for buffer in sums])
    block[[_SOURCE, _SOURCE_N, _POSITIONS, _SPACED, _OFFSETS, _TERMS]] = source.ctypes.data, source.size, \
        plan.positions.ctypes.data, plan.positions.size, plan.offsets.ctypes.data, plan.offsets.size
    block[[_WEIGHTS, _PANELS, _OUT, _N, _C, _OH, _OW]] = weights.ctypes.data, weights.shape[0], out.ctypes.data, \
        *out.shape
    block[[_IMAGE, _BIAS, _CODE, _RESIDUAL, _RESIDUAL_N]] = image, bias.ctypes.data, code, added.ctypes.data, \
        added.size
    block[_LO:_HEADER].view(np.float64)[:] = lo, hi, alpha
    kept = (source, plan.positions, plan.offsets, weights, *sums, out, bias, added)
    return Jobs(panels_job, block, len(bounds), kept)


def panels_job(index, data, extra):
    """Piece ``index`` of the panels that the block at ``data`` describes."""
    block = carray(data, (_HEADER + _PER_PIECE * (index + 1),), np.int64)
    floats = carray(data, (_HEADER,), np.float64)
    terms, spaced, n, c, oh, ow = block[_TERMS], block[_SPACED], block[_N], block[_C], block[_OH], block[_OW]
    piece = _HEADER + _PER_PIECE * index
    source = carray(as_pointer(block[_SOURCE]), (block[_SOURCE_N],), np.float32)
    positions = carray(as_pointer(block[_POSITIONS]), (spaced,), np.int64)
    offsets = carray(as_pointer(block[_OFFSETS]), (terms,), np.int64)
    weights = carray(as_pointer(block[_WEIGHTS]), (block[_PANELS], terms, WIDTH), np.float32)
    sums = carray(as_pointer(block[piece + 2]), (spaced, WIDTH), np.float32)
    out = carray(as_pointer(block[_OUT]), (n, c, oh, ow), np.float32)
    bias = carray(as_pointer(block[_BIAS]), (c,), np.float32)
    residual = carray(as_pointer(block[_RESIDUAL]), (block[_RESIDUAL_N],), np.float32)
    panels(source, positions, offsets, weights, sums, out, block[_IMAGE], bias, np.float32(floats[_LO]),
           np.float32(floats[_HI]), block[_CODE], np.float32(floats[_ALPHA]), block[piece], block[piece + 1],
           residual)
