"""Exact integer Winograd F(2x2, 3x3) for quantized 3x3 stride-1 convolutions on int16 pairs.

Without VNNI a quantized 3x3 layer sums int16 pairs with ``vpmaddwd`` (``lite.kernels.fast.int8``),
nine terms per input channel and output. Winograd's F(2x2, 3x3) computes a 2 x 2 block of
outputs from a 4 x 4 block of inputs with 16 products instead of 36, and over the integers it is
exact:

- the input transform ``V = B^T d B`` of the offsets ``d = x - x_zero_point`` (at most 255 in
  magnitude) adds and subtracts four of them: at most 1020, an int16;
- the weight transform ``U = G g G^T`` has halves in ``G``; twice ``G`` is integer, so the kernel
  uses ``U' = (2G) g (2G)^T = 4U``, at most 9 times the largest weight offset: an int16;
- the 16 products ``M = sum over channels of U' V`` are int16 pairs, as the direct kernel's are
  (``int8.sum_tile_rows``), and the output transform ``A^T M A`` gives four times the exact sum,
  which the kernel divides by 4 (an exact shift) before the bias and the requantization.

Intermediate sums may wrap around int32; the arithmetic is modular, so the result is exact
wherever the final four-fold sum fits int32: 36 * channels * (largest input offset) * (largest
weight offset) at most 2^31 - 1 (``exact``), checked per layer, else the direct kernel runs.

Layout, per image: the input's stride-2 phases of pair words (``int8.fill_phases``: (pairs, 2,
2, hq, wq)); ``v`` (16, pairs, tiles) int32 pair words with tile (ty, tx) at ty * (tw + 1) + tx, so
that a tile's 16 inputs lie at fixed offsets from its index in the phases (column tw of each row,
and the padding to whole panels of WIDTH, hold junk no output reads); ``u`` (16, output rows,
pairs) (the output channels padded to ROWS); ``m`` (16, output rows, tiles) int32. The steps are
shared out among the model's threads: the input transform by channel pair, the products by
(product, panel of WIDTH tiles), the output transform by (output channel, row of tiles). Both
transforms are explicit vector IR: as numba loops over arrays they did not vectorize (the input
transform of 64 channels on 56 x 56 took 1.46 ms, against 0.12 ms now).
"""

from __future__ import annotations

import functools

import numpy as np
from llvmlite import ir
from numba import carray, types
from numba.extending import intrinsic

from lite.kernels.fast import compiled, jit
from lite.kernels.fast.blocked_winograd import A_T_SMALL, B_T_SMALL, G_SMALL
from lite.kernels.fast.crew import as_pointer
from lite.kernels.fast.int8 import (
    FLOATS,
    ROWS,
    SUMS,
    WIDTH,
    emit_requantize,
    requantize_bounds,
    splat_lanes,
    sum_tile_rows,
)
from lite.kernels.fast.tile import INDEX, LANES, emit_loop

AREA = 16
"""Products of F(2x2, 3x3): a 4 x 4 tile of inputs."""
TWICE_G = (2 * G_SMALL).astype(np.int64)
"""Twice the weight transform ``G`` of F(2x2, 3x3): integers."""
INT32_LIMIT = (1 << 31) - 1


def exact(channels: int, x_bound: int, w_bound: int) -> bool:
    """Whether every sum of a layer of ``channels`` input channels, input offsets at most ``x_bound``
    and weight offsets at most ``w_bound`` in magnitude, is exact on this kernel."""
    return 36 * channels * x_bound * w_bound <= INT32_LIMIT


def tiles(out: tuple[int, int]) -> tuple[int, int]:
    """(rows, columns) of 2 x 2 output tiles covering an output plane."""
    return -(-out[0] // 2), -(-out[1] // 2)


def padded_tiles(out: tuple[int, int]) -> int:
    """The products' columns for an output plane: tile (ty, tx) at ty * (tw + 1) + tx (the row
    stride of the input's stride-2 phases; the column tw of each row is junk), padded to a whole
    number of WIDTH panels."""
    th, tw = tiles(out)
    count = th * (tw + 1)
    return count + (-count) % WIDTH


def multiply_saving(out: tuple[int, int]) -> float:
    """The direct kernel's multiplies over this kernel's products for an output plane (9 per output
    against 16 per product column, the padded ones included)."""
    return 9 * out[0] * out[1] / (AREA * padded_tiles(out))


def phase_shape(out: tuple[int, int]) -> tuple[int, int]:
    """(hq, wq): the stride-2 phases of the padded input plane that the tiles of an output plane read."""
    th, tw = tiles(out)
    return th + 1, tw + 1


def product_reach() -> int:
    """Words the output transform reads past the products (a vector past the last row)."""
    return LANES


def phase_reach(out: tuple[int, int]) -> int:
    """Words the input transform reads past the last pair's phases."""
    th, tw = tiles(out)
    return padded_tiles(out) - th * (tw + 1) + tw + 2


def arrange(offsets: np.ndarray, rows: int) -> np.ndarray:
    """The transformed weight ``U' = (2G) g (2G)^T`` of ``offsets`` (K, C, 3, 3), the weight minus its
    zero points as integers, as pair words (16, rows, pairs): output channel k's row, channels
    2p and 2p + 1 in word p (low half first); zeros past K and past C."""
    out_c, channels = offsets.shape[:2]
    narrow = TWICE_G.astype(np.int16)  # NOTE: exact: |U'| <= 9 * 255 (rows of 2G sum to 3 at most)
    halves = np.zeros((AREA, rows, channels + channels % 2), np.int16)
    halves[:, :out_c, :channels] = np.einsum("ai,kcij,bj->abkc", narrow, offsets.astype(np.int16, copy=False),
                                             narrow).reshape(AREA, out_c, channels)
    return halves.view(np.int32)  # NOTE: x86-64 and AArch64 are little-endian: channel 2p is the low half


_HALVES = ir.VectorType(ir.IntType(16), 2 * LANES)


def _combine(builder: ir.IRBuilder, values: list[ir.Value], row: tuple[int, ...]) -> ir.Value:
    """The integer vectors ``values`` weighted by a row of F(2x2, 3x3)'s ``B^T`` or ``A^T`` (each weight
    0, 1 or -1, at least one 1): their sum, wrapping as int arithmetic does."""
    added = [value for value, weight in zip(values, row, strict=True) if weight == 1]
    total = added[0]
    for value in added[1:]:
        total = builder.add(total, value)
    for value, weight in zip(values, row, strict=True):
        if weight == -1:
            total = builder.sub(total, value)
    return total


@intrinsic
def _transform_pairs(typingctx, source, phase_step, row_step, target, plane_step, count):
    """``(source, phase_step, row_step, target, plane_step, count)``: for the ``count`` pair words
    (a multiple of LANES) of one channel pair's tiles, tile t's 4 x 4 input d[r][c] being the word
    at source + phase (r % 2, c % 2) * phase_step + (r // 2) * row_step + (c // 2) * 4 + 4t (the
    stride-2 phases of the padded plane: ``int8.fill_phases``), target + e * plane_step + 4t =
    ``(B^T d B)[e]`` (e = 4i + j), both int16 halves at once (addresses and steps in bytes, int64).
    Explicit vectors of 2 * LANES int16: numba's loops over the 16 inputs and outputs did not
    vectorize (the compiler could not tell the arrays apart)."""
    def codegen(context, builder, signature, args):
        source_at, phase_step_, row_step_, target_at, plane_step_, count_ = args
        pointer = _HALVES.as_pointer()
        offsets = [[builder.add(builder.mul(phase_step_, INDEX((r % 2) * 2 + c % 2)),
                                builder.add(builder.mul(row_step_, INDEX(r // 2)), INDEX(4 * (c // 2))))
                    for c in range(4)] for r in range(4)]
        planes = [builder.mul(plane_step_, INDEX(e)) for e in range(AREA)]

        def vector(k, _):
            at = builder.add(source_at, builder.mul(k, INDEX(4 * LANES)))
            d = [[builder.load(builder.inttoptr(builder.add(at, offsets[r][c]), pointer), align=4) for c in range(4)]
                 for r in range(4)]
            rows = [[_combine(builder, [d[r][c] for r in range(4)], B_T_SMALL[i]) for c in range(4)] for i in range(4)]
            to = builder.add(target_at, builder.mul(k, INDEX(4 * LANES)))
            for i in range(4):
                for j in range(4):
                    place = builder.inttoptr(builder.add(to, planes[4 * i + j]), pointer)
                    builder.store(_combine(builder, rows[i], B_T_SMALL[j]), place, align=4)
            return []

        emit_loop(builder, builder.sdiv(count_, INDEX(LANES)), [], vector)
        return context.get_dummy_value()
    return types.void(*(types.int64,) * 6), codegen


@jit
def input_transform(phases, v, first, last):
    """Channel pairs ``first`` to ``last - 1`` of v (16, pairs, tiles) = ``B^T d B`` of each tile,
    from phases (pairs, 2, 2, hq, wq) of one image (``int8.fill_phases`` with strides 2: tile
    (ty, tx) at t = ty * wq + tx; the other t are junk), read up to wq + 1 words past a pair's
    phases (the caller's buffer reaches past the last)."""
    _, _, _, hq, wq = phases.shape
    pairs, count = v.shape[1], v.shape[2]
    phase_words = hq * wq
    for pair in range(first, last):
        _transform_pairs(phases.ctypes.data + pair * 4 * phase_words * 4, phase_words * 4, wq * 4,
                         v.ctypes.data + pair * count * 4, pairs * count * 4, count)


@jit
def products(u, v, m, offsets, first, last):
    """Units ``first`` to ``last - 1`` (unit: product e = unit // panels, panel of WIDTH tiles
    unit % panels) of ``m[e] = u[e] v[e]``: every output row's sums at the panel's tiles."""
    _, rows, pairs = u.shape
    count = v.shape[2]
    panels = count // WIDTH
    u_at, v_at, m_at, offsets_at = u.ctypes.data, v.ctypes.data, m.ctypes.data, offsets.ctypes.data
    for unit in range(first, last):
        e, panel = unit // panels, unit % panels
        column = panel * WIDTH
        for top in range(0, rows, ROWS):
            sum_tile_rows(u_at + (e * rows + top) * pairs * 4, pairs, v_at + (e * pairs * count + column) * 4,
                          offsets_at, pairs, m_at + ((e * rows + top) * count + column) * 4, count)


_I8, _I32 = ir.IntType(8), ir.IntType(32)
_INTERLEAVED = ir.Constant(ir.VectorType(_I32, 2 * LANES), [i // 2 + (i % 2) * LANES for i in range(2 * LANES)])


@intrinsic
def _output_row(typingctx, source, plane_step, count, bias, multiplier, zero_point, lo, hi, upper, lower):
    """``(source, plane_step, count, bias, multiplier, zero_point, lo, hi, upper, lower)``: for
    ``count`` vectors of LANES tiles of a row, the 16 products of tile t being the int32 words
    at source + e * plane_step + 4t, ``A^T m A / 4`` (arithmetic shift: exact) plus ``bias``,
    requantized (``int8.emit_requantize``, ``multiplier``, the float32 zero point and bounds) as
    bytes: the tiles' upper output rows to ``upper + 2t`` (two columns a tile), the lower to
    ``lower + 2t`` (addresses and steps in bytes, int64; bias int64; the rest float32)."""
    def codegen(context, builder, signature, args):
        source_at, plane_step_, count_, bias_, multiplier_, zero_point_, lo_, hi_, upper_at, lower_at = args
        words, two = SUMS.as_pointer(), ir.Constant(SUMS, [2] * LANES)
        bounds = requantize_bounds(builder, zero_point_, lo_, hi_)
        shift = splat_lanes(builder, builder.trunc(bias_, _I32), SUMS)
        scale = splat_lanes(builder, multiplier_, FLOATS)
        pair = ir.VectorType(_I8, 2 * LANES).as_pointer()

        def requantized(value):
            return emit_requantize(builder, builder.ashr(value, two), shift, scale, bounds)

        def vector(k, _):
            at = builder.add(source_at, builder.mul(k, INDEX(4 * LANES)))
            m = [builder.load(builder.inttoptr(builder.add(at, builder.mul(plane_step_, INDEX(e))), words), align=4)
                 for e in range(AREA)]
            for a_row, target in zip(A_T_SMALL, (upper_at, lower_at), strict=True):
                row = [_combine(builder, [m[4 * r + j] for r in range(4)], a_row) for j in range(4)]
                left, right = (requantized(_combine(builder, row, column)) for column in A_T_SMALL)
                place = builder.inttoptr(builder.add(target, builder.mul(k, INDEX(2 * LANES))), pair)
                builder.store(builder.shuffle_vector(left, right, _INTERLEAVED), place, align=1)
            return []

        emit_loop(builder, count_, [], vector)
        return context.get_dummy_value()
    return types.void(types.int64, types.int64, types.int64, types.int64, types.float32, types.float32,
                      types.float32, types.float32, types.int64, types.int64), codegen


@jit
def output_transform(m, bias, multiplier, zero_point, lo, hi, th, tw, out, first, last):
    """Units ``first`` to ``last - 1`` (unit u: output channel u // th, row of tiles u % th) of out
    (K, OH, OW) bytes (int8 or uint8 as bytes): ``A^T m A / 4`` of each tile (tile (ty, tx) at
    ty * (tw + 1) + tx; exact), plus bias[k] (int32), requantized as ``lite.ops.quant.requantize``
    does (``int8.emit_requantize``). ``m`` is read up to a vector of LANES tiles past a row (the
    caller's buffer reaches past its end)."""
    _, oh, ow = out.shape
    vectors = -(-tw // LANES)
    count = m.shape[2]
    rows = np.empty((2, 2 * LANES * vectors), np.uint8)
    for unit in range(first, last):
        k, ty = unit // th, unit % th
        upper, lower = rows[0], rows[1]
        _output_row(m.ctypes.data + (k * count + ty * (tw + 1)) * 4, m.shape[1] * count * 4, vectors, bias[k],
                    multiplier[k], zero_point, lo, hi, upper.ctypes.data, lower.ctypes.data)
        out[k, 2 * ty, :] = upper[:ow]
        if 2 * ty + 1 < oh:
            out[k, 2 * ty + 1, :] = lower[:ow]


@functools.cache
def warm() -> None:
    """Compiles the kernels now (at build), not in the first predict."""
    th, tw = 1, 1
    out = np.zeros((1, 2, 2), np.uint8)
    v, m = np.zeros((AREA, 1, WIDTH), np.int32), np.zeros((AREA, ROWS, WIDTH), np.int32)
    u = arrange(np.zeros((1, 2, 3, 3), np.int64), ROWS)
    compiled(input_transform, np.zeros((1, 2, 2, 2, 2 + WIDTH), np.int32), v, 0, 1)
    compiled(products, u, v, m, np.zeros(1, np.int64), 0, 1)
    compiled(output_transform, m, np.zeros(1, np.int32), np.ones(1, np.float32), np.float32(0), np.float32(0),
             np.float32(255), th, tw, out, 0, 1)


# The blocks of the three steps on the crew (``lite.kernels.fast.crew.Jobs``), then (first, last) a piece:
_PHASES, _PAIRS, _HQ, _WQ, _V, _TILES = range(6)
_IN_HEADER = 6
_U, _ROWS, _M, _OFFSETS = range(6, 10)
_PRODUCT_HEADER = 10
_OUT, _K, _OH, _OW, _BIAS, _MULTIPLIER, _TH, _TW, _ZERO, _LO, _HI = range(10, 21)
_OUT_HEADER = 21


class Layer:
    """One image's three steps: their calls, their units and their jobs for the crew. ``phases``:
    the image's (pairs, 2, 2, hq, wq); ``requantization``: (bias int32, multiplier, zero point,
    lo, hi) of ``output_transform``."""

    def __init__(self, phases: np.ndarray, u: np.ndarray, v: np.ndarray, m: np.ndarray, offsets: np.ndarray,
                 requantization: tuple, out: np.ndarray):
        self.phases, self.u, self.v, self.m, self.offsets, self.out = phases, u, v, m, offsets, out
        self.th, self.tw = tiles(out.shape[1:])
        self.requantization = requantization

    def calls(self) -> tuple:
        """The three steps' functions and their terms before (first, last)."""
        return ((input_transform, (self.phases, self.v)),
                (products, (self.u, self.v, self.m, self.offsets)),
                (output_transform, (self.m, *self.requantization, self.th, self.tw, self.out)))

    def units(self) -> tuple[int, int, int]:
        """The units of the three steps."""
        pairs, count = self.v.shape[1:]
        return pairs, AREA * (count // WIDTH), self.out.shape[0] * self.th

    def block(self, header: int, bounds: list[tuple[int, int]]) -> np.ndarray:
        from lite.kernels.fast.crew import pieces_block

        block = pieces_block(header, bounds)
        pairs, _, _, hq, wq = self.phases.shape
        block[:_IN_HEADER] = self.phases.ctypes.data, pairs, hq, wq, self.v.ctypes.data, self.v.shape[2]
        if header >= _PRODUCT_HEADER:
            block[_IN_HEADER:_PRODUCT_HEADER] = (self.u.ctypes.data, self.u.shape[1], self.m.ctypes.data,
                                                 self.offsets.ctypes.data)
        if header == _OUT_HEADER:
            bias, multiplier, zero_point, lo, hi = self.requantization
            block[_PRODUCT_HEADER:_ZERO] = (self.out.ctypes.data, *self.out.shape, bias.ctypes.data,
                                            multiplier.ctypes.data, self.th, self.tw)
            block[_ZERO:_OUT_HEADER].view(np.float64)[:] = zero_point, lo, hi
        return block

    def jobs(self, step: int, bounds: list[tuple[int, int]]):
        """Step ``step`` (0: the input transform, 1: the products, 2: the output transform) in the
        pieces ``bounds`` as jobs for the crew."""
        from lite.kernels.fast.crew import Jobs

        arrays = (self.phases, self.u, self.v, self.m, self.offsets, self.out, *self.requantization[:2])
        job, header = ((input_job, _IN_HEADER), (products_job, _PRODUCT_HEADER), (output_job, _OUT_HEADER))[step]
        return Jobs(job, self.block(header, bounds), len(bounds), arrays)


@jit
def _v(block):
    """The transformed input a job's block describes."""
    return carray(as_pointer(block[_V]), (AREA, block[_PAIRS], block[_TILES]), np.int32)


@jit
def _m(block):
    """The products a job's block describes."""
    return carray(as_pointer(block[_M]), (AREA, block[_ROWS], block[_TILES]), np.int32)


def input_job(index, data, extra):
    """Piece ``index`` of the input transform the block at ``data`` describes."""
    block = carray(data, (_IN_HEADER + 2 * (index + 1),), np.int64)
    phases = carray(as_pointer(block[_PHASES]), (block[_PAIRS], 2, 2, block[_HQ], block[_WQ]), np.int32)
    piece = _IN_HEADER + 2 * index
    input_transform(phases, _v(block), block[piece], block[piece + 1])


def products_job(index, data, extra):
    """Piece ``index`` of the products the block at ``data`` describes."""
    block = carray(data, (_PRODUCT_HEADER + 2 * (index + 1),), np.int64)
    u = carray(as_pointer(block[_U]), (AREA, block[_ROWS], block[_PAIRS]), np.int32)
    offsets = carray(as_pointer(block[_OFFSETS]), (block[_PAIRS],), np.int64)
    piece = _PRODUCT_HEADER + 2 * index
    products(u, _v(block), _m(block), offsets, block[piece], block[piece + 1])


def output_job(index, data, extra):
    """Piece ``index`` of the output transform the block at ``data`` describes."""
    block = carray(data, (_OUT_HEADER + 2 * (index + 1),), np.int64)
    floats = carray(data, (_OUT_HEADER,), np.float64)
    out = carray(as_pointer(block[_OUT]), (block[_K], block[_OH], block[_OW]), np.uint8)
    bias = carray(as_pointer(block[_BIAS]), (block[_K],), np.int32)
    multiplier = carray(as_pointer(block[_MULTIPLIER]), (block[_K],), np.float32)
    piece = _OUT_HEADER + 2 * index
    output_transform(_m(block), bias, multiplier, np.float32(floats[_ZERO]), np.float32(floats[_LO]),
                     np.float32(floats[_HI]), block[_TH], block[_TW], out, block[piece], block[piece + 1])
