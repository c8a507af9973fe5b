"""Quantized 1x1 convolutions (stride 1, no pads, one group) on int16 pairs, packed panel by panel.

``int8.conv_items`` reads its input from phases that ``int8.fill_phases`` wrote for the whole
input first; for a 1x1 layer that is one pass over memory, after which a tile reads each pair of
a panel from a plane of its own, as many streams as pairs. Here each item (image, panel of WIDTH
positions) packs its pair words into a (pairs, WIDTH) scratch of its own (``pack_panel``, which
stays in the first-level cache), then runs the same requantizing tiles (``int8.panel_tiles``) on
those contiguous rows: no pass over memory, and one stream a tile (docs/performance.md, the int8
section). Only the int16-pair path runs here: where byte quads run (AVX-512 VNNI), ``int8_quads``
keeps these layers.
"""

from __future__ import annotations

import functools

import numpy as np
from llvmlite import ir
from numba import carray, types
from numba import uint64 as _u  # NOTE: unsigned indices skip the negative-index check, so loops vectorize
from numba.extending import intrinsic

from lite.kernels.fast import compiled, jit
from lite.kernels.fast.crew import as_pointer
from lite.kernels.fast.int8 import BYTES, SUMS, panel_tiles, splat_lanes
from lite.kernels.fast.tile import LANES, ROWS, WIDTH


@intrinsic
def _pair_vector(typingctx, x, low, high, zero_point, words, at):
    """words[at + j] = the pair word of (x[low + j] - zero_point, x[high + j] - zero_point) for j <
    LANES (x and words 1-D; x's bytes extended as its dtype's sign says): explicit vector IR, since
    LLVM left the 16-step loop scalar (its stores might alias its loads)."""
    extend_signed = x.dtype.signed

    def codegen(context, builder, signature, args):
        source = context.make_array(signature.args[0])(context, builder, args[0]).data
        target = context.make_array(signature.args[4])(context, builder, args[4]).data
        zp = splat_lanes(builder, builder.trunc(args[3], SUMS.element), SUMS)
        extend = builder.sext if extend_signed else builder.zext

        def offsets(index: ir.Value) -> ir.Value:
            place = builder.bitcast(builder.gep(source, [index]), BYTES.as_pointer())
            return builder.sub(extend(builder.load(place, align=1), SUMS), zp)

        low_half = builder.and_(offsets(args[1]), ir.Constant(SUMS, [0xFFFF] * LANES))
        word = builder.or_(low_half, builder.shl(offsets(args[2]), ir.Constant(SUMS, [16] * LANES)))
        builder.store(word, builder.bitcast(builder.gep(target, [args[5]]), SUMS.as_pointer()), align=4)
        return context.get_dummy_value()
    return types.void(x, types.int64, types.int64, types.int64, words, types.int64), codegen


@jit
def pack_panel(source, c_count, positions, base, count, zero_point, target):
    """target[k * WIDTH + j] = the pair word of (source[base + 2k * positions + j], source[base + (2k
    + 1) * positions + j]) minus ``zero_point`` for j < count: a panel of x (N, C, P) 8-bit, flat
    (a missing last channel: zero in the high half); the columns past count keep what they held
    (their outputs are dropped). Flat arrays: a reshape a panel cost more than the copy."""
    zp, mask = np.int32(zero_point), np.int32(0xFFFF)
    for k in range(c_count // 2):
        low, at = base + 2 * k * positions, k * WIDTH
        if count == WIDTH:
            for v in range(0, WIDTH, LANES):
                _pair_vector(source, low + v, low + positions + v, zero_point, target, at + v)
            continue
        for j in range(count):
            target[_u(at + j)] = ((np.int32(source[_u(low + j)]) - zp) & mask) | \
                ((np.int32(source[_u(low + positions + j)]) - zp) << np.int32(16))
    if c_count % 2:
        low, at = base + (c_count - 1) * positions, (c_count // 2) * WIDTH
        for j in range(count):
            target[_u(at + j)] = (np.int32(source[_u(low + j)]) - zp) & mask


@jit
def pointwise_items(x, zero_point, packed, offsets, bias, multiplier, zp, lo, hi, out, words, spare, first, last):
    """Items ``first`` to ``last - 1`` (item = (image, panel of WIDTH positions)) of out (N, O, P)
    bytes = the requantized 1x1 convolution of x (N, C, P) 8-bit: ``packed`` (O padded to ROWS,
    pairs) from ``int8.pack_conv_weight``, ``offsets`` k * WIDTH, ``bias`` and ``multiplier``
    padded as packed's rows, scratch ``words`` (pairs, WIDTH) and ``spare`` (ROWS, WIDTH) int32."""
    c_count, o_count, positions = x.shape[1], out.shape[1], out.shape[2]
    panels = -(-positions // WIDTH)
    bytes_ = carray(as_pointer(spare.ctypes.data), (ROWS * WIDTH,), np.uint8)
    source, target = x.reshape(x.size), words.reshape(words.size)
    for item in range(first, last):
        image, panel = divmod(item, panels)
        column = panel * WIDTH
        count = min(WIDTH, positions - column)
        pack_panel(source, c_count, positions, image * c_count * positions + column, count, zero_point, target)
        panel_tiles(words.ctypes.data, packed, offsets, bias, multiplier, zp, lo, hi, out, image, 0, o_count, column,
                    count, bytes_, True)


@functools.cache
def warm(dtype: np.dtype) -> None:
    """Compiles ``pointwise_items`` for ``dtype`` (int8 or uint8) inputs now, at build."""
    f32, i32 = np.float32, np.int32
    compiled(pointwise_items, np.zeros((1, 2, 3), dtype), np.int64(0), np.zeros((ROWS, 1), i32), np.zeros(1, np.int64),
             np.zeros(ROWS, i32), np.ones(ROWS, f32), f32(0), f32(-1), f32(1), np.zeros((1, 1, 3), np.uint8),
             np.zeros((1, WIDTH), i32), np.zeros((ROWS, WIDTH), i32), 0, 1)


# The block of a pointwise convolution on the crew (``lite.kernels.fast.crew.Jobs``), then per piece
# (first, last, words, spare):
(_X, _N, _C, _P, _SIGNED, _X_ZERO, _PACKED, _PACKED_ROWS, _PAIRS, _OFFSETS, _BIAS, _MULTIPLIER, _OUT, _O, _ZERO,
 _LO, _HI) = range(17)
HEADER, PER_PIECE = 17, 4


def crew_jobs(x: np.ndarray, zero_point: int, packed: np.ndarray, offsets: np.ndarray, bias: np.ndarray,
              multiplier: np.ndarray, floats: tuple, out: np.ndarray, scratch: list[list[np.ndarray]],
              bounds: list[tuple[int, int]]):
    """``pointwise_items``'s items as jobs for the crew, one per piece of ``bounds`` with its own
    scratch (words, spare); ``floats``: (zero point, lo, hi) of the output; ``out`` bytes."""
    from lite.kernels.fast.crew import Jobs, pieces_block

    block = pieces_block(HEADER, bounds, scratch)
    block[:_ZERO] = (x.ctypes.data, *x.shape, x.dtype == np.int8, zero_point, packed.ctypes.data, *packed.shape,
                     offsets.ctypes.data, bias.ctypes.data, multiplier.ctypes.data, out.ctypes.data, out.shape[1])
    block[_ZERO:HEADER].view(np.float64)[:] = floats
    arrays = (x, packed, offsets, bias, multiplier, out, *(a for pair in scratch for a in pair))
    return Jobs(pointwise_job, block, len(bounds), arrays)


@jit
def _job_piece(index, data, x):
    """Piece ``index`` of the block at ``data``, x already typed."""
    block = carray(data, (HEADER + PER_PIECE * (index + 1),), np.int64)
    floats = carray(data, (HEADER,), np.float64)
    rows, pairs = block[_PACKED_ROWS], block[_PAIRS]
    piece = HEADER + PER_PIECE * index
    pointwise_items(x, block[_X_ZERO], carray(as_pointer(block[_PACKED]), (rows, pairs), np.int32),
                    carray(as_pointer(block[_OFFSETS]), (pairs,), np.int64),
                    carray(as_pointer(block[_BIAS]), (rows,), np.int32),
                    carray(as_pointer(block[_MULTIPLIER]), (rows,), np.float32), np.float32(floats[_ZERO]),
                    np.float32(floats[_LO]), np.float32(floats[_HI]),
                    carray(as_pointer(block[_OUT]), (block[_N], block[_O], block[_P]), np.uint8),
                    carray(as_pointer(block[piece + 2]), (pairs, WIDTH), np.int32),
                    carray(as_pointer(block[piece + 3]), (ROWS, WIDTH), np.int32), block[piece], block[piece + 1])


def pointwise_job(index, data, extra):
    """A crew job: piece ``index`` of the pointwise convolution the block at ``data`` describes."""
    block = carray(data, (HEADER,), np.int64)
    shape = (block[_N], block[_C], block[_P])
    if block[_SIGNED]:
        _job_piece(index, data, carray(as_pointer(block[_X]), shape, np.int8))
    else:
        _job_piece(index, data, carray(as_pointer(block[_X]), shape, np.uint8))
