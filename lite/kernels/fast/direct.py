"""Direct convolution for inputs with few channels: an implicit GEMM over the stride phases.

A convolution whose input has few channels (a network's stem: 3 channels, 3x3 or 7x7 taps)
multiplies the weight by only K = C * KH * KW rows of columns, so im2col + BLAS spends its time
gathering the columns and in a thin product, far below BLAS's peak. Here the
input goes once into its stride phases (``lite.kernels.fast.depthwise.DepthwisePlan``'s layout,
one plane per channel), where each of the K terms is a contiguous run, and a register tile of
``ROWS`` output channels by ``WIDTH`` positions of the "wide" plane (OH rows of the phase width)
accumulates all K terms with vector FMAs, reading its B rows in place. The wide plane's extra
columns are dropped as each tile is copied into the output, with the bias and activation. A
band's last tile is only as wide (one, two or three vectors) as its remaining columns: on a 13 x
13 plane (a wide row of 15, 195 columns) whole tiles computed 240, narrow ones 208. The terms go
in chunks of ``CHUNK_TERMS`` (the sums carried in the wide plane between chunks), so a chunk's B
rows stay in L1 across all the blocks of output channels (it helps layers with many terms).

The tile is ``lite.kernels.fast.tile``'s. The stems and the small 3x3 layers it takes ran faster
on it than on the im2col or Winograd plan they replaced, at one thread and two (measurements:
docs/performance.md, kernel measurements).
"""

from __future__ import annotations

import functools

import numpy as np
from numba import carray, types
from numba import uint64 as _u  # NOTE: unsigned indices skip the negative-index check, so the loops vectorize
from numba.extending import intrinsic

from lite.kernels.fast import compiled, jit
from lite.kernels.fast.activation import CLIP_CODE, activate_run
from lite.kernels.fast.crew import as_pointer
from lite.kernels.fast.depthwise import DepthwisePlan, fill_phases
from lite.kernels.fast.tile import FLOAT, INDEX, LANES, ROWS, TILE_VECTORS, WIDTH, emit_clip_span, emit_tile
from lite.kernels.window import Geometry

BAND_FLOATS = 32768
"""About how many floats of the wide plane a band of output rows takes (128 KB: in L2 from its
tiles to its copy into the output)."""
MAX_TERMS = 1152
"""The most K terms the kernel takes: up to 128 channels of 3x3 taps. In ResNet-50 it beat the
plans it replaces up to 128 channels; with 256 channels (2304 terms) it lost at two threads, and
with 512 at one and two (every piece of rows reads all the weights), so those stay with the other
plans (measurements: docs/performance.md, kernel measurements)."""

CHUNK_TERMS = 192
"""Terms a pass of the tiles takes: the B rows of a chunk (192 x WIDTH floats, 36 KB) stay in L1
while every block of output channels reads them."""

CREW_PER_THREAD = 1
"""Crew jobs a thread takes of a layer's rows on idle cores (the dynamic threads of busy ones keep
``lite.kernels.parallel.CHUNKS_PER_THREAD``). Every job reads all the weights and ends its bands
with a narrow tile, so one job a thread measured faster than two on every layer tried
(docs/performance.md, kernel measurements)."""

ONE = np.float32(1)
NO_RESIDUAL = np.zeros(0, np.float32)


def fits(geometry: Geometry, channels: int, group: int) -> bool:
    """Whether this kernel runs a 2-D convolution: one group, more than one tap, at most
    MAX_TERMS terms."""
    terms = channels * geometry.kernel[0] * geometry.kernel[1]
    return group == 1 and geometry.kernel[0] * geometry.kernel[1] > 1 and terms <= MAX_TERMS


def _direct_tile(vectors: int, accumulate: bool):
    """The tile of ``vectors`` vectors (a narrow one below VECTORS) as an intrinsic ``(weights,
    phases, offsets, terms, wide, stride)``: wide[r, j] (+)= sum over k < terms of weights[k, r] *
    phases[offsets[k] + j], for ROWS rows r (``stride`` floats apart) and ``vectors * LANES``
    columns j, added to wide's values when ``accumulate``; every argument an address or a count."""
    @intrinsic
    def tile(typingctx, weights, phases, offsets, terms, wide, stride):
        def codegen(context, builder, signature, args):
            weights_at, phases_at, offsets_at, count, wide_at, row_stride = args
            floats = FLOAT.as_pointer()
            weights_p, phases_p = builder.inttoptr(weights_at, floats), builder.inttoptr(phases_at, floats)
            offsets_p, wide_p = builder.inttoptr(offsets_at, INDEX.as_pointer()), builder.inttoptr(wide_at, floats)
            emit_tile(builder,
                      lambda k, r: builder.gep(weights_p, [builder.add(builder.mul(k, INDEX(ROWS)), INDEX(r))]),
                      lambda k: builder.gep(phases_p, [builder.load(builder.gep(offsets_p, [k]))]), count, wide_p,
                      row_stride, vectors, accumulate)
            return context.get_dummy_value()
        return types.void(*(types.int64,) * 6), codegen
    return tile


_narrow1, _narrow2, _whole = (_direct_tile(vectors, False) for vectors in TILE_VECTORS)
_add_narrow1, _add_narrow2, _add_whole = (_direct_tile(vectors, True) for vectors in TILE_VECTORS)


@jit
def tile(columns, add, weights, phases, offsets, terms, wide, stride):
    """The tile for the next ``columns`` columns of a band: whole, or as narrow as covers them;
    adding to wide's sums when ``add``."""
    if columns > 2 * LANES:
        if add:
            _add_whole(weights, phases, offsets, terms, wide, stride)
        else:
            _whole(weights, phases, offsets, terms, wide, stride)
    elif columns > LANES:
        if add:
            _add_narrow2(weights, phases, offsets, terms, wide, stride)
        else:
            _narrow2(weights, phases, offsets, terms, wide, stride)
    elif add:
        _add_narrow1(weights, phases, offsets, terms, wide, stride)
    else:
        _narrow1(weights, phases, offsets, terms, wide, stride)


class DirectPlan:
    """The phases, term offsets and scratch of one geometry; ``fill`` then ``rows`` compute one
    image of the output."""

    def __init__(self, g: Geometry, out_channels: int) -> None:
        self.phases_plan = plan = DepthwisePlan(g)
        channels, self.wq, self.oh = g.x[1], plan.wq, g.out[0]
        self.plane = plan.phase_floats  # floats of one channel's phases
        self.offsets = (np.arange(channels)[:, None] * self.plane + plan.taps[None, :]).reshape(-1)
        self.blocks = -(-out_channels // ROWS)
        self.band = max(1, min(self.oh, BAND_FLOATS // (self.blocks * ROWS * self.wq)))
        # NOTE: whole tiles past a band's end read into the phases' spare WIDTH floats
        width = -(-self.band * self.wq // WIDTH) * WIDTH
        self.scratch = ((channels * self.plane + WIDTH,), (self.blocks * ROWS, width))

    def arrange(self, weight: np.ndarray) -> np.ndarray:
        """The weight (O, C, KH, KW) as the tiles read it: (blocks, K, ROWS), zero rows past O."""
        matrix = np.zeros((self.blocks * ROWS, self.offsets.size), np.float32)
        matrix[:weight.shape[0]] = weight.reshape(weight.shape[0], -1)
        return np.ascontiguousarray(matrix.reshape(self.blocks, ROWS, -1).transpose(0, 2, 1))

    def fill(self, x: np.ndarray, image: int, phases: np.ndarray) -> None:
        """Image ``image`` of x (N, C, H, W) into its phases, padding zero."""
        fill_all(x, image, self.phases_plan.copies, self.phases_plan.geometry.strides[1], self.plane, phases)

    def rows(self, weights: np.ndarray, phases: np.ndarray, wide: np.ndarray, out: np.ndarray, image: int,
             bias: np.ndarray, lo: np.float32, hi: np.float32, code: int = CLIP_CODE, alpha: np.float32 = ONE,
             first: int = 0, last: int | None = None, residual: np.ndarray | None = None) -> None:
        """Output rows ``first`` to ``last - 1`` (default all) of ``out[image]``, every channel, as
        clip(sum + bias (+ residual, out's shape), lo, hi), then the activation of ``code``
        (``lite.kernels.fast.activation.EPILOGUE_CODES``) with ``alpha``; ``wide`` is this
        call's own scratch (``scratch[1]``)."""
        last = self.oh if last is None else last
        added = NO_RESIDUAL if residual is None else residual.reshape(-1)
        rows(weights, phases, self.offsets, wide, out, image, bias, lo, hi, code, alpha, self.wq, self.band,
             first, last, added)

    def warm(self) -> None:
        """Compiles the kernel now (at build), not in the first predict."""
        _warm()


@functools.cache
def _warm() -> None:
    plan = DirectPlan(Geometry((1, 2, 4, 4), (3, 3), (1, 1), (1, 1), (1, 1), (1, 1), (4, 4)), 2)
    x, out = np.zeros((1, 2, 4, 4), np.float32), np.zeros((1, 2, 4, 4), np.float32)
    phases, wide = (np.zeros(shape, np.float32) for shape in plan.scratch)
    compiled(plan.fill, x, 0, phases)
    compiled(plan.rows, plan.arrange(np.zeros((2, 2, 3, 3), np.float32)), phases, wide, out, 0,
             np.zeros(2, np.float32), np.float32(-np.inf), np.float32(np.inf))


@jit
def fill_all(x, image, copies, stride, plane, phases):
    """Every channel of image ``image`` into its phases (``plane`` floats each), padding zero."""
    _, c, h, w = x.shape
    phases[:] = 0
    xf = x.reshape(x.size)
    for channel in range(c):
        fill_phases(xf, (image * c + channel) * h * w, copies, stride, phases[channel * plane:])


@jit
def rows(weights, phases, offsets, wide, out, image, bias, lo, hi, code, alpha, wq, band, first, last, residual):
    """Output rows ``first`` to ``last - 1``, ``band`` rows at a time: the band's wide plane in
    tiles, all row blocks of each tile in turn (its B rows stay in L1), then the band's rows out."""
    blocks, terms, stride = weights.shape[0], offsets.size, wide.shape[1]
    for top in range(first, last, band):
        bottom = min(top + band, last)
        start, columns = top * wq, (bottom - top) * wq
        for column in range(0, columns, WIDTH):
            for chunk in range(0, terms, CHUNK_TERMS):
                count = min(CHUNK_TERMS, terms - chunk)
                for block in range(blocks):
                    tile(columns - column, chunk > 0, weights[block, chunk:].ctypes.data,
                         phases.ctypes.data + (start + column) * 4, offsets[chunk:].ctypes.data, count,
                         wide.ctypes.data + (block * ROWS * stride + column) * 4, stride)
        write_out(wide, out, image, bias, lo, hi, code, alpha, wq, top, bottom, residual)


def _clip_span(added: bool):
    """``lite.kernels.fast.tile.emit_clip_span`` as an intrinsic ``(source, target, residual,
    count, shift, lo, hi)`` (addresses, a count of at least LANES, floats); ``added``: the
    residual is added (else its address is not read)."""
    @intrinsic
    def span(typingctx, source, target, residual, count, shift, lo, hi):
        def codegen(context, builder, signature, args):
            floats = FLOAT.as_pointer()
            source_p, target_p, residual_p = (builder.inttoptr(at, floats) for at in args[:3])
            emit_clip_span(builder, source_p, target_p, residual_p if added else None, *args[3:])
            return context.get_dummy_value()
        return types.void(*(types.int64,) * 4, *(types.float32,) * 3), codegen
    return span


_span, _span_added = _clip_span(False), _clip_span(True)


@jit
def write_out(wide, out, image, bias, lo, hi, code, alpha, wq, top, bottom, residual):
    """Rows ``top`` to ``bottom - 1`` of out[image] from the band's wide plane (from row ``top``),
    with bias, the residual (flat, as out; empty for none), clip and activation. Rows of at
    least LANES columns go in vectors (``_clip_span``: numba's loop left the last up to 31
    columns of each row scalar, and SqueezeNet's 3->64 stem, 111 columns, spent most of its
    time here)."""
    channels, oh, ow = out.shape[1], out.shape[2], out.shape[3]
    flat, wide_flat, zero = out.reshape(out.size), wide.reshape(wide.size), out.dtype.type(0)
    added = residual.size > 0
    for o in range(channels):
        shift, base, start = bias[o], ((image * channels + o) * oh + top) * ow, o * wide.shape[1]
        for row in range(bottom - top):
            at, source = base + row * ow, start + row * wq
            if ow >= LANES:
                if added:
                    _span_added(wide.ctypes.data + source * 4, out.ctypes.data + at * 4, residual.ctypes.data + at * 4,
                                ow, shift, lo, hi)
                else:
                    _span(wide.ctypes.data + source * 4, out.ctypes.data + at * 4, 0, ow, shift, lo, hi)
            elif added:
                for i in range(ow):
                    flat[_u(at + i)] = min(max(wide_flat[_u(source + i)] + shift + residual[_u(at + i)], lo), hi)
            else:
                for i in range(ow):
                    flat[_u(at + i)] = min(max(wide_flat[_u(source + i)] + shift, lo), hi)
        if code != CLIP_CODE:  # NOTE: over the band, not row by row: short rows vectorize poorly
            activate_run(flat, base, (bottom - top) * ow, zero, code, alpha)


# The block of the rows on the crew (``lite.kernels.fast.crew.Jobs``):
_WEIGHTS, _BLOCKS, _TERMS, _PHASES, _PHASES_N, _OFFSETS, _STRIDE, _OUT, _N, _C, _OH, _OW = range(12)
_IMAGE, _BIAS, _LO, _HI, _ALPHA, _CODE, _WQ, _BAND, _RESIDUAL, _RESIDUAL_N = range(12, 22)
_HEADER, _PER_PIECE = 22, 3  # then (first, last, wide) for each piece


def crew_jobs(plan: DirectPlan, weights: np.ndarray, phases: np.ndarray, wides: list[np.ndarray], out: np.ndarray,
              image: int, bias: np.ndarray, lo, hi, code: int, alpha, bounds: list[tuple[int, int]],
              residual: np.ndarray | None = None):
    """``plan.rows``' pieces of ``bounds`` as jobs for the crew, each with its wide plane of
    ``wides`` (its arguments otherwise)."""
    from lite.kernels.fast.crew import Jobs, pieces_block

    block = pieces_block(_HEADER, bounds, [[wide] for wide in wides])
    block[[_WEIGHTS, _BLOCKS, _TERMS, _PHASES, _PHASES_N]] = weights.ctypes.data, *weights.shape[:2], \
        phases.ctypes.data, phases.size
    block[[_OFFSETS, _STRIDE, _OUT, _N, _C, _OH, _OW]] = plan.offsets.ctypes.data, wides[0].shape[1], \
        out.ctypes.data, *out.shape
    block[[_IMAGE, _BIAS, _CODE, _WQ, _BAND]] = image, bias.ctypes.data, code, plan.wq, plan.band
    block[_LO:_CODE].view(np.float64)[:] = lo, hi, alpha
    added = NO_RESIDUAL if residual is None else residual.reshape(-1)
    block[[_RESIDUAL, _RESIDUAL_N]] = added.ctypes.data, added.size
    return Jobs(rows_job, block, len(bounds), (weights, phases, plan.offsets, *wides, out, bias, added))


def rows_job(index, data, extra):
    """Piece ``index`` of the rows that the block at ``data`` describes."""
    block = carray(data, (_HEADER + _PER_PIECE * (index + 1),), np.int64)
    floats = carray(data, (_HEADER,), np.float64)
    blocks, terms, n, c, oh, ow = block[_BLOCKS], block[_TERMS], block[_N], block[_C], block[_OH], block[_OW]
    piece = _HEADER + _PER_PIECE * index
    weights = carray(as_pointer(block[_WEIGHTS]), (blocks, terms, ROWS), np.float32)
    phases = carray(as_pointer(block[_PHASES]), (block[_PHASES_N],), np.float32)
    offsets = carray(as_pointer(block[_OFFSETS]), (terms,), np.int64)
    wide = carray(as_pointer(block[piece + 2]), (blocks * ROWS, block[_STRIDE]), np.float32)
    out = carray(as_pointer(block[_OUT]), (n, c, oh, ow), np.float32)
    bias = carray(as_pointer(block[_BIAS]), (c,), np.float32)
    residual = carray(as_pointer(block[_RESIDUAL]), (block[_RESIDUAL_N],), np.float32)
    lo, hi, alpha = np.float32(floats[_LO]), np.float32(floats[_HI]), np.float32(floats[_ALPHA])
    rows(weights, phases, offsets, wide, out, block[_IMAGE], bias, lo, hi, block[_CODE], alpha, block[_WQ],
         block[_BAND], block[piece], block[piece + 1], residual)
