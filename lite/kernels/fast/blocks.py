"""1x1 convolutions and layout changes on the channel-blocked layout (NCHW16c), float32.

An image of C channels on an H x W plane is stored as (CB, H * W, LANES) with CB = ceil(C / LANES):
channel c at [c // LANES, position, c % LANES], the channels past C zero. A 1x1 convolution is
then a product whose output, at one position, is a run of vectors of output channels, so
``lite.kernels.fast.tile``'s register tile takes ROWS positions by three blocks of output
channels: each of its K terms broadcasts the input channel's value at ROWS positions and
multiplies it by a packed row of 48 weights. The input is read in place, the weight is packed
once, and no transpose is needed on either side; the bias, a residual (in the same layout), the
clip and an activation are applied to each tile while it is in cache.
"""

from __future__ import annotations

import functools

import numpy as np
from llvmlite import ir
from numba import carray, types
from numba import uint64 as _u  # NOTE: unsigned indices skip the negative-index check, so the loops vectorize
from numba.extending import intrinsic

from lite.kernels.fast import compiled, jit
from lite.kernels.fast.activation import CLIP_CODE, activate_run
from lite.kernels.fast.blocked_depthwise import depthwise
from lite.kernels.fast.crew import as_pointer
from lite.kernels.fast.gate import excite, gated_run, hidden_rows
from lite.kernels.fast.tile import (
    FLOAT,
    INDEX,
    LANES,
    ROWS,
    TILE_VECTORS,
    UNROLL,
    VECTOR,
    VECTORS,
    WIDTH,
    clip_finish,
    emit_loop,
    emit_tile,
    select_clip,
    splat,
)

LANE_BITS = 4
assert 1 << LANE_BITS == LANES
ONE = np.float32(1)
NO_RESIDUAL = np.zeros((0, 0, LANES), np.float32)
ZEROS = np.zeros(LANES, np.float32)
"""One vector of zeros: an offset or a residual where there is none."""
BAND_BYTES = 1 << 17
"""The input a 1x1 product reads for one band of position tiles (``unit_place``): with a group's
panel, well within a core's L2 (512 KiB and up)."""
CACHED_BYTES = 1 << 19
"""What a product may read again and find in the core's cache (L2: 512 KiB and up)."""
ROWS_AHEAD = 48
"""Rows of the packed weight a tile's term prefetches ahead of the one it reads (the 1x1 and the
dense kernels): far enough ahead that a panel streaming from memory arrives in time (the
distance measured: docs/performance.md, channel blocks)."""


def blocks(channels: int) -> int:
    """How many blocks of LANES channels hold ``channels``."""
    return -(-channels // LANES)


@jit
def group_blocks(group, out_blocks):
    """(first block, blocks) of group ``group`` of a product's ``out_blocks`` output blocks, of
    the ceil(out_blocks / VECTORS) groups its tiles take: VECTORS blocks a group, except that
    where a last group would hold one block of three (its tile a third as dense: 11% slower a
    block on 64 channels), the last two take two each."""
    first = group * VECTORS
    if VECTORS == 3 and out_blocks % 3 == 1 and out_blocks > 1 and group >= out_blocks // 3 - 1:
        return first - (group == out_blocks // 3), 2
    return first, min(VECTORS, out_blocks - first)


def _pointwise_tile(vectors: int, residual: bool, half: bool = False):
    """The tile of ``vectors`` blocks of output channels as an intrinsic ``(x, plane, panel, terms,
    out, out_plane, bias, added, lo, hi)``: for ROWS positions r, lanes l and blocks j,
    out[j * out_plane + r * LANES + l] = clip(sum over k < terms of x[(k >> 4) * plane + r * LANES
    + (k & 15)] * panel[k * WIDTH + j * LANES + l] + bias[j * LANES + l] (+ added[the same place
    as out's]), lo, hi); addresses and counts in int64 (floats apart), lo and hi float32. ``half``:
    the sums of the last block's second half of lanes are zero, not computed (the panel's zero
    padding past the output channels)."""
    @intrinsic
    def tile(typingctx, x, plane, panel, terms, out, out_plane, bias, added, lo, hi):
        def codegen(context, builder, signature, args):
            x_at, x_plane, panel_at, count, out_at, o_plane, bias_at, added_at, low, high = args
            floats = FLOAT.as_pointer()
            x_p, panel_p, out_p, bias_p = (builder.inttoptr(at, floats) for at in (x_at, panel_at, out_at, bias_at))

            def block_and_lane(k):
                return builder.lshr(k, INDEX(LANE_BITS)), builder.and_(k, INDEX(LANES - 1))

            def scalar(k, r):
                block, lane = block_and_lane(k)
                return builder.gep(x_p, [builder.add(builder.add(builder.mul(block, x_plane), INDEX(r * LANES)), lane)])

            def ahead(k, u):  # NOTE: the next tile's rows of k's block, a row every two terms (a line each)
                if u is not None and u % 2:
                    return None  # NOTE: the term before prefetched this term's line
                block, lane = block_and_lane(k)
                if u is not None:  # NOTE: lane = k & (LANES - UNROLL) + u, u's part a constant offset
                    lane = builder.add(builder.and_(k, INDEX(LANES - UNROLL)), INDEX(u))
                row = builder.add(INDEX(ROWS), builder.lshr(lane, INDEX(1)))
                return builder.gep(x_p, [builder.add(builder.mul(block, x_plane), builder.mul(row, INDEX(LANES)))])

            finish = clip_finish(builder, bias_p, vectors, low, high, out_at, added_at if residual else None)
            emit_tile(builder, scalar, lambda k: builder.gep(panel_p, [builder.mul(k, INDEX(WIDTH))]), count, out_p,
                      INDEX(LANES), vectors, vector_stride=o_plane, finish=finish, ahead=ahead, rows_ahead=ROWS_AHEAD,
                      unroll=UNROLL, half=half)
            return context.get_dummy_value()
        return types.void(*(types.int64,) * 8, types.float32, types.float32), codegen
    return tile


_one, _two, _three = (_pointwise_tile(vectors, False) for vectors in TILE_VECTORS)
_added_one, _added_two, _added_three = (_pointwise_tile(vectors, True) for vectors in TILE_VECTORS)
_half_one, _half_two, _half_three = (_pointwise_tile(vectors, False, True) for vectors in TILE_VECTORS)
_added_half_one, _added_half_two, _added_half_three = (_pointwise_tile(vectors, True, True) for vectors in TILE_VECTORS)


@jit
def half_used(channels):
    """Whether the last block of ``channels`` output channels uses at most half its lanes (its
    tiles then compute half of it: ``_pointwise_tile``'s ``half``)."""
    return 0 < channels % LANES <= LANES // 2


@jit
def _half_tile(vectors, x, plane, panel, terms, out, out_plane, bias, added, lo, hi):
    """``_tile`` for the group holding a half-used last block."""
    if vectors == VECTORS:
        if added:
            _added_half_three(x, plane, panel, terms, out, out_plane, bias, added, lo, hi)
        else:
            _half_three(x, plane, panel, terms, out, out_plane, bias, added, lo, hi)
    elif vectors == 2:
        if added:
            _added_half_two(x, plane, panel, terms, out, out_plane, bias, added, lo, hi)
        else:
            _half_two(x, plane, panel, terms, out, out_plane, bias, added, lo, hi)
    elif added:
        _added_half_one(x, plane, panel, terms, out, out_plane, bias, added, lo, hi)
    else:
        _half_one(x, plane, panel, terms, out, out_plane, bias, added, lo, hi)


@jit
def _tile(vectors, x, plane, panel, terms, out, out_plane, bias, added, lo, hi):
    """The tile of ``vectors`` (1 to 3) blocks, adding the residual at ``added`` unless it is 0."""
    if vectors == VECTORS:
        if added:
            _added_three(x, plane, panel, terms, out, out_plane, bias, added, lo, hi)
        else:
            _three(x, plane, panel, terms, out, out_plane, bias, added, lo, hi)
    elif vectors == 2:
        if added:
            _added_two(x, plane, panel, terms, out, out_plane, bias, added, lo, hi)
        else:
            _two(x, plane, panel, terms, out, out_plane, bias, added, lo, hi)
    elif added:
        _added_one(x, plane, panel, terms, out, out_plane, bias, added, lo, hi)
    else:
        _one(x, plane, panel, terms, out, out_plane, bias, added, lo, hi)


def pack_pointwise(weight: np.ndarray, bias: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """A 1x1 weight (O, C, 1, 1) and bias (O,) or None as ``pointwise`` reads them: panels (groups
    of output blocks (``group_blocks``), C, WIDTH) and the bias (OB, LANES), zero where padded. A row
    for each input channel, none for the padded lanes of the last input block: a product takes C
    terms, not CB * LANES (24 channels: 24 terms, not 32)."""
    out_c, channels = weight.shape[:2]
    out_blocks, matrix = blocks(out_c), weight.reshape(out_c, channels)
    panels = np.zeros((-(-out_blocks // VECTORS), channels, WIDTH), np.float32)
    for group in range(panels.shape[0]):
        first, count = group_blocks(group, out_blocks)
        rows = matrix[first * LANES:(first + count) * LANES]
        panels[group, :channels, :rows.shape[0]] = rows.T
    return panels, padded_bias(bias, out_blocks)


def padded_bias(bias: np.ndarray | None, out_blocks: int) -> np.ndarray:
    """A bias (O,) or None as the blocked kernels add it: (OB, LANES), zero past O."""
    shift = np.zeros(out_blocks * LANES, np.float32)
    if bias is not None:
        shift[:bias.size] = bias
    return shift.reshape(out_blocks, LANES)


@jit
def pointwise(x, panels, bias, lo, hi, code, alpha, residual, out, channels, first, last):
    """Units ``first`` to ``last - 1`` (of ``units(positions, out blocks)``: unit u is position tile
    u % tiles of group u // tiles of the output blocks, ``group_blocks``) of the 1x1 convolution out (OB, P,
    LANES) = act(clip(x (CB, P, LANES) by the packed weight + bias (+ residual, out's shape; empty
    for none), lo, hi), alpha), the activation of ``code`` (``lite.kernels.fast.activation``;
    CLIP_CODE: none); at least ROWS positions; ``channels``: out's channels (the lanes of its last
    block past them are zero). A group's panel (K x WIDTH) stays in cache across its tiles."""
    positions, out_blocks = x.shape[1], out.shape[0]
    plane, terms, count = positions * LANES, panels.shape[1], tiles(positions)
    added = residual.ctypes.data if residual.size else 0
    flat = out.reshape(out.size)
    x_at, out_at, panels_at, bias_at = x.ctypes.data, out.ctypes.data, panels.ctypes.data, bias.ctypes.data
    groups = -(-out_blocks // VECTORS)
    halved = groups - 1 if half_used(channels) else groups  # NOTE: the group of the half-used last block
    band = band_tiles(terms, count, groups)
    overlapping = count > 1 and positions % ROWS != 0  # NOTE: the last tile overlaps the one before, not short
    group, tile = unit_place(first, count, groups, band)
    band_first = tile // band * band
    for unit in range(first, last):  # NOTE: addresses, not views: a view a unit cost as much as a short tile
        if unit > first:  # NOTE: the next unit's place by counting: unit_place's divisions cost a short tile 5-10%
            group, tile, band_first = next_place(group, tile, band_first, count, groups, band)
        if overlapping and tile == count - 1:
            continue  # NOTE: the unit of the tile before runs it, below
        # NOTE: the last tile's rows overlap the next to last's: one unit runs both in turn, so the shared rows take
        # the activation once, after the last store (two threads at once could store both before either activated)
        paired = 2 if overlapping and tile == count - 2 else 1
        block, vectors = group_blocks(group, out_blocks)
        for t in range(tile, tile + paired):
            top = min(t * ROWS, positions - ROWS)
            offset = (block * plane + top * LANES) * 4
            tile_terms = (x_at + top * LANES * 4, plane, panels_at + group * terms * WIDTH * 4, terms, out_at + offset,
                          plane, bias_at + block * LANES * 4, added + offset if added else 0, lo, hi)
            if group == halved:
                _half_tile(vectors, *tile_terms)
            else:
                _tile(vectors, *tile_terms)
            if code != CLIP_CODE:
                for b in range(block, block + vectors):
                    activate_run(flat, (b * positions + top) * LANES, ROWS * LANES, flat.dtype.type(0), code, alpha)


@jit
def band_tiles(terms, count, groups):
    """How many of the ``count`` position tiles of a product of ``terms`` input channels by
    ``groups`` groups of output blocks make one band (``unit_place``). Bands (the tiles whose
    input fits in BAND_BYTES) read the input once and every group's panel once a band; one band
    (each group over the whole plane) reads the panels once and the input once a group. Bands
    where what they read again from memory (the panels, unless all fit in CACHED_BYTES) is less
    than what one band would (the input, unless it fits)."""
    tile_bytes = ROWS * terms * 4
    band = max(1, BAND_BYTES // tile_bytes)
    input_bytes, panel_bytes = count * tile_bytes, groups * terms * WIDTH * 4
    inputs_again = (groups - 1) * input_bytes if input_bytes > CACHED_BYTES else 0
    panels_again = (-(-count // band) - 1) * panel_bytes if panel_bytes > CACHED_BYTES else 0
    return band if panels_again < inputs_again else count


@jit
def unit_place(unit, count, groups, band):
    """(group, tile) of ``unit`` of a product of ``count`` position tiles by ``groups`` groups of
    output blocks, in bands of ``band`` tiles: each band's tiles for the first group, then for the
    next, so that every group reads the band's input from the core's cache, not from memory."""
    whole = band * groups
    first_tile = unit // whole * band
    tiles_here = min(band, count - first_tile)
    rest = unit - first_tile * groups
    return rest // tiles_here, first_tile + rest % tiles_here


@jit
def next_place(group, tile, band_first, count, groups, band):
    """(group, tile, first tile of its band) of the unit after the one at ``group``, ``tile`` (in
    the band from ``band_first``), as ``unit_place`` orders them."""
    if tile + 1 < min(band_first + band, count):
        return group, tile + 1, band_first
    if group + 1 < groups:
        return group + 1, band_first, band_first
    return 0, band_first + band, band_first + band


@jit
def units(positions, out_blocks):
    """How many units ``pointwise`` splits a product into: position tiles times groups of blocks."""
    return tiles(positions) * -(-out_blocks // VECTORS)


@jit
def tiles(positions):
    """How many position tiles ``pointwise`` runs on a plane of ``positions``."""
    return -(-positions // ROWS)


@jit
def to_blocks(x, image, out):
    """Image ``image`` of x (N, C, H, W) into out (CB, H * W, LANES), zero past C."""
    channels = x.shape[1]
    positions = x.shape[2] * x.shape[3]
    flat = x.reshape(x.size)
    for block in range(out.shape[0]):
        lanes = min(LANES, channels - block * LANES)
        base = (image * channels + block * LANES) * positions
        for p in range(positions):
            for lane in range(lanes):
                out[block, p, lane] = flat[_u(base + lane * positions + p)]
            for lane in range(lanes, LANES):
                out[block, p, lane] = 0


@jit
def from_blocks(x, image, out):
    """x (CB, H * W, LANES) into image ``image`` of out (N, C, H, W)."""
    channels = out.shape[1]
    positions = out.shape[2] * out.shape[3]
    flat = out.reshape(out.size)
    for block in range(x.shape[0]):
        lanes = min(LANES, channels - block * LANES)
        base = (image * channels + block * LANES) * positions
        for lane in range(lanes):
            for p in range(positions):
                flat[_u(base + lane * positions + p)] = x[block, p, lane]


@functools.cache
def warm() -> None:
    """Compiles the kernels now (at build), not in the first predict."""
    x, image = np.zeros((1, 3, 3, 3), np.float32), np.zeros((1, 9, LANES), np.float32)
    compiled(to_blocks, x, 0, image)
    compiled(from_blocks, image, 0, x)
    panels, bias = pack_pointwise(np.zeros((3, 3, 1, 1), np.float32), None)
    out = np.zeros((1, 9, LANES), np.float32)
    for residual in (NO_RESIDUAL, out.copy()):
        compiled(pointwise, image, panels, bias, np.float32(-np.inf), np.float32(np.inf), CLIP_CODE, ONE, residual,
                 out, 3, 0, 2)
    compiled(units, 9, 1)
    compiled(subsample, image, 3, 2, 2, np.zeros((1, 4, LANES), np.float32), 2, 0, 1)
    vector, bound = np.zeros(3, np.float32), np.float32(np.inf)
    square = np.zeros((3, 3), np.float32)
    compiled(channel_means, image, vector, np.zeros((1, 1, LANES), np.float32))
    compiled(squeeze_excite, image, square, vector, -bound, bound, 0, ONE, ONE, square, vector, -bound, bound, 0, ONE,
             ONE, vector, vector.copy(), np.zeros((1, 1, LANES), np.float32))
    for product in (hidden_rows, gated_run):
        compiled(product, vector, square, vector, -bound, bound, 0, ONE, ONE, vector.copy(), 0, 3)
    compiled(scale_panels, panels, np.zeros((1, 1, LANES), np.float32), panels.copy(), 0, 1)
    compiled(scale_blocks, image, np.zeros((1, 1, LANES), np.float32), image.copy())
    for scale in (NO_SCALE, np.ones(9, np.float32)):
        compiled(pool, image, image.copy(), 3, 3, 3, 3, 1, 1, 1, 1, 3, scale, 0, 3)
    compiled(affine, image, np.zeros((1, LANES), np.float32), np.zeros((1, LANES), np.float32), -bound, bound,
             CLIP_CODE, ONE, image.copy(), 0, 1)


# The block of a 1x1 convolution on the crew (``lite.kernels.fast.crew.Jobs``), then (first, last) a piece:
_X, _IN_BLOCKS, _POSITIONS, _PANELS, _GROUPS, _TERMS, _BIAS, _OUT, _OUT_BLOCKS, _RESIDUAL, _CODE, _CHANNELS = range(12)
_LO, _HI, _ALPHA = range(12, 15)
_HEADER = 15


def crew_jobs(x: np.ndarray, panels: np.ndarray, bias: np.ndarray, lo: np.float32, hi: np.float32, code: int,
              alpha: np.float32, residual: np.ndarray, out: np.ndarray, channels: int, bounds: list[tuple[int, int]]):
    """``pointwise``'s pieces of ``bounds`` (units) as jobs for the crew (its arguments otherwise)."""
    from lite.kernels.fast.crew import Jobs, pieces_block

    block = pieces_block(_HEADER, bounds)
    block[[_X, _IN_BLOCKS, _POSITIONS]] = x.ctypes.data, *x.shape[:2]
    block[[_PANELS, _GROUPS, _TERMS]] = panels.ctypes.data, *panels.shape[:2]
    block[[_BIAS, _OUT, _OUT_BLOCKS]] = bias.ctypes.data, out.ctypes.data, out.shape[0]
    block[[_RESIDUAL, _CODE, _CHANNELS]] = residual.ctypes.data if residual.size else 0, code, channels
    block[_LO:_HEADER].view(np.float64)[:] = lo, hi, alpha
    return Jobs(pointwise_job, block, len(bounds), (x, panels, bias, residual, out))


def pointwise_job(index, data, extra):
    """Piece ``index`` of the 1x1 convolution that the block at ``data`` describes."""
    block = carray(data, (_HEADER + 2 * (index + 1),), np.int64)
    floats = carray(data, (_HEADER,), np.float64)
    positions, out_blocks = block[_POSITIONS], block[_OUT_BLOCKS]
    x = carray(as_pointer(block[_X]), (block[_IN_BLOCKS], positions, LANES), np.float32)
    panels = carray(as_pointer(block[_PANELS]), (block[_GROUPS], block[_TERMS], WIDTH), np.float32)
    bias = carray(as_pointer(block[_BIAS]), (out_blocks, LANES), np.float32)
    out = carray(as_pointer(block[_OUT]), (out_blocks, positions, LANES), np.float32)
    residual = carray(as_pointer(block[_RESIDUAL]), (out_blocks if block[_RESIDUAL] else 0, positions, LANES),
                      np.float32)
    piece = _HEADER + 2 * index
    pointwise(x, panels, bias, np.float32(floats[_LO]), np.float32(floats[_HI]), block[_CODE],
              np.float32(floats[_ALPHA]), residual, out, block[_CHANNELS], block[piece], block[piece + 1])


# The block of a blocked depthwise convolution on the crew, then (first, last) a piece (channel blocks):
(_DX, _D_BLOCKS, _D_H, _D_W, _D_WEIGHT, _D_TAPS, _D_BIAS, _D_OUT, _D_OH, _D_OW,
 _D_KH, _D_KW, _D_SH, _D_SW, _D_PT, _D_PL, _D_DH, _D_DW, _D_CODE, _D_BY_ROWS) = range(20)
_D_LO, _D_HI, _D_ALPHA = range(20, 23)
_D_HEADER = 23


def depthwise_jobs(x: np.ndarray, w: np.ndarray, b: np.ndarray, out: np.ndarray, geometry: tuple[int, ...],
                   lo: np.float32, hi: np.float32, code: int, alpha: np.float32, bounds: list[tuple[int, int]],
                   by_rows: bool):
    """``lite.kernels.fast.blocked_depthwise.depthwise``'s pieces of ``bounds`` (output rows of
    every block when ``by_rows``, else channel blocks) as jobs for the crew; ``geometry`` its
    (kh, kw, sh, sw, pt, pl, dh, dw)."""
    from lite.kernels.fast.crew import Jobs, pieces_block

    block = pieces_block(_D_HEADER, bounds)
    block[[_DX, _D_BLOCKS, _D_H, _D_W]] = x.ctypes.data, *x.shape[:3]
    block[[_D_WEIGHT, _D_TAPS, _D_BIAS]] = w.ctypes.data, w.shape[1], b.ctypes.data
    block[[_D_OUT, _D_OH, _D_OW]] = out.ctypes.data, *out.shape[1:3]
    block[_D_KH:_D_CODE] = geometry
    block[[_D_CODE, _D_BY_ROWS]] = code, by_rows
    block[_D_LO:_D_HEADER].view(np.float64)[:] = lo, hi, alpha
    return Jobs(depthwise_job, block, len(bounds), (x, w, b, out))


def depthwise_job(index, data, extra):
    """Piece ``index`` of the depthwise convolution that the block at ``data`` describes."""
    block = carray(data, (_D_HEADER + 2 * (index + 1),), np.int64)
    floats = carray(data, (_D_HEADER,), np.float64)
    blocks = block[_D_BLOCKS]
    x = carray(as_pointer(block[_DX]), (blocks, block[_D_H], block[_D_W], LANES), np.float32)
    w = carray(as_pointer(block[_D_WEIGHT]), (blocks, block[_D_TAPS], LANES), np.float32)
    b = carray(as_pointer(block[_D_BIAS]), (blocks, LANES), np.float32)
    out = carray(as_pointer(block[_D_OUT]), (blocks, block[_D_OH], block[_D_OW], LANES), np.float32)
    piece = _D_HEADER + 2 * index
    first, last, top, bottom = block[piece], block[piece + 1], 0, block[_D_OH]
    if block[_D_BY_ROWS]:
        first, last, top, bottom = 0, blocks, first, last
    depthwise(x, w, b, out, block[_D_KH], block[_D_KW], block[_D_SH], block[_D_SW], block[_D_PT], block[_D_PL],
              block[_D_DH], block[_D_DW], np.float32(floats[_D_LO]), np.float32(floats[_D_HI]), block[_D_CODE],
              np.float32(floats[_D_ALPHA]), first, last, top, bottom)


@intrinsic
def _block_sums(typingctx, x, positions, out):
    """out[l] = sum over p < positions of x[p * LANES + l], the LANES sums in one vector register
    (addresses as int64)."""
    def codegen(context, builder, signature, args):
        x_at, count, out_at = args
        pointer = VECTOR.as_pointer()
        x_p = builder.inttoptr(x_at, pointer)
        [total] = emit_loop(builder, count, [ir.Constant(VECTOR, [0.0] * LANES)],
                            lambda p, sums: [builder.fadd(sums[0], builder.load(builder.gep(x_p, [p]), align=4))])
        builder.store(total, builder.inttoptr(out_at, pointer), align=4)
        return context.get_dummy_value()
    return types.void(types.int64, types.int64, types.int64), codegen


@jit
def channel_means(x, pooled, out):
    """pooled (C,) = the channel means of x (CB, P, LANES), summed in ``out`` (OB, 1, LANES), which
    holds at least x's blocks and is zero after (a gate's output: ``lite.kernels.fast.gate``'s two
    products then fill its first O channels)."""
    blocks, positions = x.shape[0], x.shape[1]
    flat, share = out.reshape(out.size), ONE / np.float32(positions)
    for block in range(blocks):
        _block_sums(x.ctypes.data + block * positions * LANES * 4, positions, out.ctypes.data + block * LANES * 4)
    for channel in range(pooled.shape[0]):
        pooled[channel] = flat[channel] * share
    flat[:] = 0


@jit
def squeeze_excite(x, w1, b1, lo1, hi1, code1, alpha1, beta1, w2, b2, lo2, hi2, code2, alpha2, beta2, pooled, hidden,
                   out):
    """A squeeze-and-excitation gate of x (CB, P, LANES) into out (OB, 1, LANES), zero past the
    gate's O channels, in one call: ``channel_means``, then ``lite.kernels.fast.gate.excite``."""
    channel_means(x, pooled, out)
    excite(pooled, w1, b1, lo1, hi1, code1, alpha1, beta1, w2, b2, lo2, hi2, code2, alpha2, beta2, hidden,
           out.reshape(out.size)[:w2.shape[1]])


@jit
def scale_blocks(x, gate, out):
    """out = x (CB, P, LANES) with each channel times its gate (CB, 1, LANES): ``_affine_run`` with
    no offset and no bounds."""
    positions = x.shape[1]
    block_bytes, bound = positions * LANES * 4, np.float32(np.inf)
    for block in range(x.shape[0]):
        _affine_run(x.ctypes.data + block * block_bytes, gate.ctypes.data + block * LANES * 4, ZEROS.ctypes.data,
                    out.ctypes.data + block * block_bytes, positions, -bound, bound)


def _greater(builder: ir.IRBuilder, a: ir.Value, b: ir.Value) -> ir.Value:
    """The lane-wise max of vectors a and b (``vmaxps``; the kernels compile with fastmath, which
    assumes no NaN)."""
    return builder.select(builder.fcmp_ordered(">", b, a), b, a)


def _window(maximum: bool):
    """An intrinsic ``(x, rows, columns, row_stride, out)``: out[l] = the max (``maximum``; from
    -inf, ``_greater``) or the sum (from 0) over rows r < ``rows`` and
    columns c < ``columns`` of x[r * row_stride + c * LANES + l] (float offsets), in one vector
    register; addresses and counts as int64."""
    @intrinsic
    def window(typingctx, x, rows, columns, row_stride, out):
        def codegen(context, builder, signature, args):
            x_at, row_count, column_count, stride, out_at = args
            floats, pointer = FLOAT.as_pointer(), VECTOR.as_pointer()
            x_p = builder.inttoptr(x_at, floats)

            def row(r, carried):
                start = builder.gep(x_p, [builder.mul(r, stride)])

                def column(c, inner):
                    value = builder.load(builder.bitcast(builder.gep(start, [builder.mul(c, INDEX(LANES))]),
                                                         pointer), align=4)
                    if maximum:
                        return [_greater(builder, inner[0], value)]
                    return [builder.fadd(inner[0], value)]
                return emit_loop(builder, column_count, carried, column)

            first = ir.Constant(VECTOR, [float("-inf") if maximum else 0.0] * LANES)
            [result] = emit_loop(builder, row_count, [first], row)
            builder.store(result, builder.inttoptr(out_at, pointer), align=4)
            return context.get_dummy_value()
        return types.void(*(types.int64,) * 5), codegen
    return window


_window_max, _window_sum = _window(True), _window(False)


def _columns(maximum: bool):
    """An intrinsic ``(x, rows, row_stride, step, count, out)``: for c < ``count``, out[c * LANES + l]
    = the max (``maximum``, as ``_window``'s) or the sum over r < ``rows`` (at least one) of
    x[r * row_stride + c * step + l] (float offsets): a pool's window rows reduced for each input
    column (step LANES), or a row of windows' columns for each output (row_stride LANES, step the
    stride's). A row at a time over all columns, so no reduction is a chain as long as the window."""
    @intrinsic
    def columns(typingctx, x, rows, row_stride, step, count, out):
        def codegen(context, builder, signature, args):
            x_at, row_count, stride, column_step, column_count, out_at = args
            pointer = VECTOR.as_pointer()
            x_p, out_p = builder.inttoptr(x_at, FLOAT.as_pointer()), builder.inttoptr(out_at, pointer)

            def vector(r, c):
                at = builder.gep(x_p, [builder.add(builder.mul(r, stride), builder.mul(c, column_step))])
                return builder.load(builder.bitcast(at, pointer), align=4)

            def first(c, _):
                builder.store(vector(INDEX(0), c), builder.gep(out_p, [c]), align=4)
                return []

            def row(r, _):
                def column(c, __):
                    value, held = vector(builder.add(r, INDEX(1)), c), builder.load(builder.gep(out_p, [c]), align=4)
                    result = _greater(builder, held, value) if maximum else builder.fadd(held, value)
                    builder.store(result, builder.gep(out_p, [c]), align=4)
                    return []
                return emit_loop(builder, column_count, [], column)

            emit_loop(builder, column_count, [], first)
            emit_loop(builder, builder.sub(row_count, INDEX(1)), [], row)
            return context.get_dummy_value()
        return types.void(*(types.int64,) * 6), codegen
    return columns


_columns_max, _columns_sum = _columns(True), _columns(False)


def _columns_of(rows: int, maximum: bool):
    """``_columns`` for exactly ``rows`` rows, as an intrinsic ``(x, row_stride, step, count, out)``:
    each column's ``rows`` loads reduced in registers (as a tree) and stored once, in one pass
    (the window of a 3 x 3 pool, ``_columns`` making a pass a row)."""
    @intrinsic
    def columns(typingctx, x, row_stride, step, count, out):
        def codegen(context, builder, signature, args):
            x_at, stride, column_step, column_count, out_at = args
            pointer = VECTOR.as_pointer()
            x_p, out_p = builder.inttoptr(x_at, FLOAT.as_pointer()), builder.inttoptr(out_at, pointer)

            def reduce(a, b):
                if maximum:
                    return _greater(builder, a, b)
                return builder.fadd(a, b)

            def column(c, _):
                base = builder.gep(x_p, [builder.mul(c, column_step)])
                values = [builder.load(builder.bitcast(builder.gep(base, [builder.mul(INDEX(r), stride)]), pointer),
                                       align=4) for r in range(rows)]
                while len(values) > 1:
                    values = [reduce(*values[i:i + 2]) if i + 1 < len(values) else values[i]
                              for i in range(0, len(values), 2)]
                builder.store(values[0], builder.gep(out_p, [c]), align=4)
                return []

            emit_loop(builder, column_count, [], column)
            return context.get_dummy_value()
        return types.void(*(types.int64,) * 5), codegen
    return columns


_three_max, _three_sum = _columns_of(3, True), _columns_of(3, False)
_strided_copy = _columns_of(1, True)
"""``_columns_of`` one row: column c (``step`` floats apart) copied to out's vector c."""


@jit
def _reduce_columns(maximum, x, rows, row_stride, step, count, out):
    """``_columns`` (``maximum``: the max, else the sum), in one pass where ``rows`` is 3."""
    if rows == 3:
        if maximum:
            _three_max(x, row_stride, step, count, out)
        else:
            _three_sum(x, row_stride, step, count, out)
    elif maximum:
        _columns_max(x, rows, row_stride, step, count, out)
    else:
        _columns_sum(x, rows, row_stride, step, count, out)


@intrinsic
def _scale_run(typingctx, x, scale, count):
    """An intrinsic ``(x, scale, count)``: for i < count, the vector of LANES floats at x + i * LANES
    times the float at scale + i (addresses and the count as int64): an average pool's divisors."""
    def codegen(context, builder, signature, args):
        x_at, scale_at, count_ = args
        x_p = builder.inttoptr(x_at, VECTOR.as_pointer())
        scale_p = builder.inttoptr(scale_at, FLOAT.as_pointer())

        def one(i, _):
            at = builder.gep(x_p, [i])
            share = splat(builder, builder.load(builder.gep(scale_p, [i])))
            builder.store(builder.fmul(builder.load(at, align=4), share), at, align=4)
            return []

        emit_loop(builder, count_, [], one)
        return context.get_dummy_value()
    return types.void(*(types.int64,) * 3), codegen


@jit
def pool(x, out, h, w, kh, kw, sh, sw, top, left, ow, scale, first, last):
    """Output rows ``first`` to ``last - 1`` of every block of out (CB, OH * OW, LANES) = the max
    (``scale`` empty) or the mean over each window of x (CB, H * W, LANES), an image in channel
    blocks (window kh x kw, strides sh, sw, pads top, left); the window's positions outside x are
    ignored. The mean is the sum times ``scale`` (OH * OW: one over each window's count,
    ``lite.kernels.pool.AvgPoolFusion``'s). Each output row reduces its window's rows first (a
    vector per input column, ``_columns``), then the windows' columns of those (``_columns`` again
    for the windows with no column in the pads): a window of 3 x 3 reduced alone was a chain of 8
    dependent maxima, 2x onnxruntime's time."""
    plane, maximum = h * w * LANES, scale.size == 0
    reduced = np.empty(w * LANES, np.float32)
    inside = max(-(-left // sw), 0), max(min((w - kw + left) // sw + 1, ow), 0)  # NOTE: windows clear of the pads
    for block in range(x.shape[0]):
        for r in range(first, last):
            y0 = r * sh - top
            ya, yb = max(y0, 0), min(y0 + kh, h)
            at, row_out = x.ctypes.data + (block * plane + ya * w * LANES) * 4, (block * out.shape[1] + r * ow) * LANES
            if yb <= ya:  # NOTE: a window wholly in the pads: what the window's reduction starts from
                reduced[:] = -np.inf if maximum else 0
            else:
                _reduce_columns(maximum, at, yb - ya, w * LANES, LANES, w, reduced.ctypes.data)
            if inside[1] > inside[0]:
                start = reduced.ctypes.data + (inside[0] * sw - left) * LANES * 4
                into = out.ctypes.data + (row_out + inside[0] * LANES) * 4
                _reduce_columns(maximum, start, kw, LANES, sw * LANES, inside[1] - inside[0], into)
            for i in range(ow):
                if inside[0] <= i < inside[1]:
                    continue
                xa, xb = max(i * sw - left, 0), min(i * sw - left + kw, w)
                into = out.ctypes.data + (row_out + i * LANES) * 4
                if maximum:
                    _window_max(reduced.ctypes.data + xa * LANES * 4, 1, xb - xa, 0, into)
                else:
                    _window_sum(reduced.ctypes.data + xa * LANES * 4, 1, xb - xa, 0, into)
            if not maximum:
                _scale_run(out.ctypes.data + row_out * 4, scale.ctypes.data + r * ow * 4, ow)


NO_SCALE = np.zeros(0, np.float32)
"""``pool``'s scale for a max pool."""


# The block of a blocked pool on the crew, then (first, last) a piece (output rows):
_P_X, _P_BLOCKS, _P_H, _P_W, _P_OUT, _P_OH, _P_OW, _P_KH, _P_KW, _P_SH, _P_SW, _P_TOP, _P_LEFT, _P_SCALE = range(14)
_P_HEADER = 14


def pool_jobs(x: np.ndarray, out: np.ndarray, h: int, w: int, oh: int, ow: int, window: tuple[int, ...],
              scale: np.ndarray, bounds: list[tuple[int, int]]):
    """``pool``'s pieces of ``bounds`` (output rows) as jobs for the crew: x's plane h x w, out's
    oh x ow, ``window`` its (kh, kw, sh, sw, top, left), ``scale`` its (NO_SCALE: a max pool)."""
    from lite.kernels.fast.crew import Jobs, pieces_block

    block = pieces_block(_P_HEADER, bounds)
    block[:_P_KH] = x.ctypes.data, x.shape[0], h, w, out.ctypes.data, oh, ow
    block[_P_KH:_P_SCALE] = window[:6]
    block[_P_SCALE] = scale.ctypes.data if scale.size else 0
    return Jobs(pool_job, block, len(bounds), (x, out, scale))


def pool_job(index, data, extra):
    """Piece ``index`` of the blocked pool that the block at ``data`` describes."""
    block = carray(data, (_P_HEADER + 2 * (index + 1),), np.int64)
    blocks, h, w, oh, ow = block[_P_BLOCKS], block[_P_H], block[_P_W], block[_P_OH], block[_P_OW]
    x = carray(as_pointer(block[_P_X]), (blocks, h * w, LANES), np.float32)
    out = carray(as_pointer(block[_P_OUT]), (blocks, oh * ow, LANES), np.float32)
    window = (block[_P_KH], block[_P_KW], block[_P_SH], block[_P_SW], block[_P_TOP], block[_P_LEFT])
    scale = carray(as_pointer(block[_P_SCALE]), (oh * ow if block[_P_SCALE] else 0,), np.float32)
    piece = _P_HEADER + 2 * index
    pool(x, out, h, w, *window, ow, scale, block[piece], block[piece + 1])


@intrinsic
def _affine_run(typingctx, x, multiplier, offset, out, count, lo, hi):
    """An intrinsic ``(x, multiplier, offset, out, count, lo, hi)``: for the ``count`` vectors of one
    block, out[k] = clip(x[k] * multiplier + offset, lo, hi), each a vector of LANES floats (LLVM
    may fuse the product and the sum; the clip ``tile.select_clip``'s, a NaN kept); addresses
    and the count as int64, lo and hi float32."""
    def codegen(context, builder, signature, args):
        x_at, multiplier_at, offset_at, out_at, count, low, high = args
        pointer = VECTOR.as_pointer()
        x_p, out_p = (builder.inttoptr(at, pointer) for at in (x_at, out_at))
        scale, shift = (builder.load(builder.inttoptr(at, pointer), align=4) for at in (multiplier_at, offset_at))
        low, high = splat(builder, low), splat(builder, high)

        def one(k, _):
            total = builder.fadd(builder.fmul(builder.load(builder.gep(x_p, [k]), align=4), scale), shift)
            builder.store(select_clip(builder, total, low, high), builder.gep(out_p, [k]), align=4)
            return []

        emit_loop(builder, count, [], one)
        return context.get_dummy_value()
    return types.void(*(types.int64,) * 5, types.float32, types.float32), codegen


@jit
def affine(x, multiplier, offset, lo, hi, code, alpha, out, first, last):
    """Blocks ``first`` to ``last - 1`` of out (CB, P, LANES) = act(clip(x * multiplier + offset,
    lo, hi), alpha), the multiplier and offset (CB, LANES) per channel (zero past C), the
    activation of ``code`` (CLIP_CODE: none): a BatchNorm, an activation, or both; one vector a
    position (``_affine_run``: the loop over lanes did not vectorize, 5x slower)."""
    positions = x.shape[1]
    flat = out.reshape(out.size)
    block_bytes = positions * LANES * 4
    for block in range(first, last):
        _affine_run(x.ctypes.data + block * block_bytes, multiplier.ctypes.data + block * LANES * 4,
                    offset.ctypes.data + block * LANES * 4, out.ctypes.data + block * block_bytes, positions, lo, hi)
        if code != CLIP_CODE:
            activate_run(flat, block * positions * LANES, positions * LANES, flat.dtype.type(0), code, alpha)


# The block of a blocked affine map on the crew, then (first, last) a piece (channel blocks):
_A_X, _A_BLOCKS, _A_POSITIONS, _A_MULTIPLIER, _A_OFFSET, _A_OUT, _A_CODE = range(7)
_A_LO, _A_HI, _A_ALPHA = range(7, 10)
_A_HEADER = 10


def affine_jobs(x: np.ndarray, multiplier: np.ndarray, offset: np.ndarray, lo, hi, code: int, alpha,
                out: np.ndarray, bounds: list[tuple[int, int]]):
    """``affine``'s pieces of ``bounds`` (channel blocks) as jobs for the crew."""
    from lite.kernels.fast.crew import Jobs, pieces_block

    block = pieces_block(_A_HEADER, bounds)
    block[:_A_LO] = x.ctypes.data, *x.shape[:2], multiplier.ctypes.data, offset.ctypes.data, out.ctypes.data, code
    block[_A_LO:_A_HEADER].view(np.float64)[:] = lo, hi, alpha
    return Jobs(affine_job, block, len(bounds), (x, multiplier, offset, out))


def affine_job(index, data, extra):
    """Piece ``index`` of the blocked affine map that the block at ``data`` describes."""
    block = carray(data, (_A_HEADER + 2 * (index + 1),), np.int64)
    floats = carray(data, (_A_HEADER,), np.float64)
    blocks, positions = block[_A_BLOCKS], block[_A_POSITIONS]
    x = carray(as_pointer(block[_A_X]), (blocks, positions, LANES), np.float32)
    multiplier = carray(as_pointer(block[_A_MULTIPLIER]), (blocks, LANES), np.float32)
    offset = carray(as_pointer(block[_A_OFFSET]), (blocks, LANES), np.float32)
    out = carray(as_pointer(block[_A_OUT]), (blocks, positions, LANES), np.float32)
    piece = _A_HEADER + 2 * index
    affine(x, multiplier, offset, np.float32(floats[_A_LO]), np.float32(floats[_A_HI]), block[_A_CODE],
           np.float32(floats[_A_ALPHA]), out, block[piece], block[piece + 1])


@jit
def subsample(x, w, sh, sw, out, ow, first, last):
    """Blocks ``first`` to ``last - 1`` of out (CB, OH * OW, LANES) = x (CB, H * W, LANES; rows ``w``
    wide) at positions (y * sh, x * sw): a strided 1x1 convolution's input gathered, so that
    ``pointwise`` reads it as a stride-1 one's."""
    oh = out.shape[1] // ow
    x_block, out_block = x.shape[1] * LANES * 4, out.shape[1] * LANES * 4
    for block in range(first, last):
        for y in range(oh):
            _strided_copy(x.ctypes.data + block * x_block + y * sh * w * LANES * 4, 0, sw * LANES, ow,
                          out.ctypes.data + block * out_block + y * ow * LANES * 4)


# The block of a subsample on the crew, then (first, last) a piece (channel blocks):
_S_X, _S_BLOCKS, _S_POSITIONS, _S_W, _S_SH, _S_SW, _S_OUT, _S_OUT_POSITIONS, _S_OW = range(9)
_S_HEADER = 9


def subsample_jobs(x: np.ndarray, w: int, sh: int, sw: int, out: np.ndarray, ow: int,
                   bounds: list[tuple[int, int]]):
    """``subsample``'s pieces of ``bounds`` (channel blocks) as jobs for the crew."""
    from lite.kernels.fast.crew import Jobs, pieces_block

    block = pieces_block(_S_HEADER, bounds)
    block[:_S_HEADER] = x.ctypes.data, *x.shape[:2], w, sh, sw, out.ctypes.data, out.shape[1], ow
    return Jobs(subsample_job, block, len(bounds), (x, out))


def subsample_job(index, data, extra):
    """Piece ``index`` of the subsample that the block at ``data`` describes."""
    block = carray(data, (_S_HEADER + 2 * (index + 1),), np.int64)
    blocks = block[_S_BLOCKS]
    x = carray(as_pointer(block[_S_X]), (blocks, block[_S_POSITIONS], LANES), np.float32)
    out = carray(as_pointer(block[_S_OUT]), (blocks, block[_S_OUT_POSITIONS], LANES), np.float32)
    piece = _S_HEADER + 2 * index
    subsample(x, block[_S_W], block[_S_SH], block[_S_SW], out, block[_S_OW], block[piece], block[piece + 1])


@jit
def scale_panels(panels, gate, scaled, first, last):
    """Rows ``first`` to ``last - 1`` of scaled = panels (groups, K, WIDTH) with each of the K rows
    times its channel's gate (gate (CB, 1, LANES): K values): a 1x1 convolution of the gated input
    by the ungated weight."""
    flat = gate.reshape(gate.size)
    for group in range(panels.shape[0]):
        for k in range(first, last):
            factor = flat[k]
            for j in range(WIDTH):
                scaled[group, k, j] = panels[group, k, j] * factor


# The block of the gate's scaling of the packed weight on the crew, then (first, last) a piece:
_G_PANELS, _G_GROUPS, _G_TERMS, _G_GATE, _G_GATE_SIZE, _G_SCALED = range(6)
_G_HEADER = 6


def scale_panels_jobs(panels: np.ndarray, gate: np.ndarray, scaled: np.ndarray, bounds: list[tuple[int, int]]):
    """``scale_panels``' pieces of ``bounds`` (rows) as jobs for the crew."""
    from lite.kernels.fast.crew import Jobs, pieces_block

    block = pieces_block(_G_HEADER, bounds)
    block[:_G_HEADER] = panels.ctypes.data, *panels.shape[:2], gate.ctypes.data, gate.size, scaled.ctypes.data
    return Jobs(scale_panels_job, block, len(bounds), (panels, gate, scaled))


def scale_panels_job(index, data, extra):
    """Piece ``index`` of the scaling that the block at ``data`` describes."""
    block = carray(data, (_G_HEADER + 2 * (index + 1),), np.int64)
    shape = (block[_G_GROUPS], block[_G_TERMS], WIDTH)
    piece = _G_HEADER + 2 * index
    scale_panels(carray(as_pointer(block[_G_PANELS]), shape, np.float32),
                 carray(as_pointer(block[_G_GATE]), (block[_G_GATE_SIZE],), np.float32),
                 carray(as_pointer(block[_G_SCALED]), shape, np.float32), block[piece], block[piece + 1])
