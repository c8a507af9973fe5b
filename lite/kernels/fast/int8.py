"""Exact int32 accumulation of quantized convolutions and products, requantized as it is stored.

The terms ``(x - x_zero_point) * (w - w_zero_point)`` are products of two int16 values (each
offset lies in [-255, 255]), so pairs of them along the summed axis go through one ``pmaddwd``
(``vpdpwssd`` with VNNI): both operands are laid out as int16 pairs packed in int32 words (the
first of a pair in the low half), the sum of a pair's two products (at most 2 * 255 * 255)
is exact in int32, and so is the whole sum while the caller checks that it stays in range.

The register tile (``requantized_tile_rows``, ``requantized_tile_columns``) computes ``ROWS`` x
``WIDTH`` int32 sums (``lite.kernels.fast.tile``'s shape): ROWS pair words of the left operand, each broadcast, times
one row of WIDTH pair words of the right one, whose rows lie at offsets a table gives (a product's
at k * WIDTH, computed, not read: a load less a term). It is
plain LLVM IR (sign extension, multiplication, the sum of even and odd lanes), which LLVM
turns into ``vpdpwssd`` with AVX-512 VNNI or AVX-VNNI and into ``vpmaddwd`` with AVX2 or
AVX-512BW alone; elsewhere it is correct, only slower.

- A convolution (``conv_items``) reads its input from a buffer that ``fill_phases`` writes
  each run: ``x - x_zero_point`` per pair of channels of a group, padded with zeros and split
  into ``stride x stride`` phases of ``hq x wq`` positions, so that each tap of the window reads
  a contiguous run of positions (the output computed on the ``wq``-wide grid, its last columns
  discarded). The weight is packed once (``pack_conv_weight``) as (out channels, pairs). Only
  the phases some tap reads are written (a 1x1 stride-2 layer reads one of four), and a stride-2
  row's two column phases are written in one pass of contiguous loads (``_pair_run2``).
- A product (``product_panels``) reads the rows of ``x - x_zero_point`` as pair words
  (``fill_rows``) and the weight packed once into panels of WIDTH columns (``pack_product_weight``).
- On the model's crew (``lite.kernels.fast.crew``), the convolution's items, the pair planes of
  its input copy (``fill_job``, inputs of ``int8_plans.SPLIT_FILL`` values and more) and the
  product's panels (``product_job``) are shared out among the threads.

``sum_tile_rows`` is the same tile storing its int32 sums as they are: the products of integer
Winograd (``lite.kernels.fast.int8_winograd``), transformed and requantized after.

A panel's last columns, where they are one or two vectors, run on a narrow tile of that width
(``requantized_tile_rows_1``, ``_2``: a 7 x 7 plane is 48 + 1 positions, so a whole second tile
wasted two thirds of its work), and a product's rows short of ROWS one row at a time
(``requantized_row_columns``: the classifier's single row). With AVX-512 VNNI, convolutions
whose weight offsets fit int8 run on byte quads instead (``lite.kernels.fast.int8_quads``:
``vpdpbusd``, twice the terms an instruction), on the same items and tiles.

Each tile's sums get the bias, the multiplier of their channel, the rounding (half to even),
the zero point and the bounds in registers (``emit_requantize``: vector IR without fast-math) and
are stored as bytes: the output is written once, as ``lite.ops.quant.requantize`` computes it.
A tile that reaches past the output (the last rows or columns) is requantized into a spare and
its inside copied (``copy_spare``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import numpy as np
from llvmlite import ir
from numba import carray, types
from numba import uint64 as _u  # NOTE: unsigned indices skip the negative-index check, so loops vectorize
from numba.extending import intrinsic

from lite.kernels.fast import compiled, jit
from lite.kernels.fast.crew import as_pointer
from lite.kernels.fast.tile import LANES, ROWS, VECTORS, WIDTH, emit_loop

_I8, _I16, _I32, _I64 = ir.IntType(8), ir.IntType(16), ir.IntType(32), ir.IntType(64)
_F32 = ir.FloatType()
SUMS = ir.VectorType(_I32, LANES)
PAIRS = ir.VectorType(_I16, 2 * LANES)
FLOATS = ir.VectorType(_F32, LANES)
BYTES = ir.VectorType(_I8, LANES)
_PRODUCTS = ir.VectorType(_I32, 2 * LANES)
_EVEN = ir.Constant(ir.VectorType(_I32, LANES), list(range(0, 2 * LANES, 2)))
_ODD = ir.Constant(ir.VectorType(_I32, LANES), list(range(1, 2 * LANES, 2)))
_SPLAT = ir.Constant(ir.VectorType(_I32, LANES), [0] * LANES)

MAX_OFFSET = 255
"""The largest magnitude of ``x - x_zero_point`` or ``w - w_zero_point`` for 8-bit tensors."""


def multiply_pairs(builder: ir.IRBuilder, left: ir.Value, right: ir.Value, sums: ir.Value) -> ir.Value:
    """``sums + (left[2i] * right[2i] + left[2i + 1] * right[2i + 1])`` per int32 lane (``pmaddwd``)."""
    products = builder.mul(builder.sext(left, _PRODUCTS), builder.sext(right, _PRODUCTS))
    undefined = ir.Constant(_PRODUCTS, ir.Undefined)
    even = builder.shuffle_vector(products, undefined, _EVEN)
    odd = builder.shuffle_vector(products, undefined, _ODD)
    return builder.add(sums, builder.add(even, odd))


def multiply_words(builder: ir.IRBuilder, left: ir.Value, right: ir.Value, sums: ir.Value) -> ir.Value:
    """``multiply_pairs`` of LANES int32 words each (two int16 a word)."""
    return multiply_pairs(builder, builder.bitcast(left, PAIRS), builder.bitcast(right, PAIRS), sums)


def _emit_pair_tile(builder: ir.IRBuilder, a: ir.Value, a_stride: ir.Value, rows: ir.Value, offsets: ir.Value,
                    count: ir.Value, finish: Callable[[ir.IRBuilder, int, int, ir.Value], None],
                    shape: tuple[int, int] = (ROWS, VECTORS), multiply=multiply_words) -> None:
    """The tile's IR: pointers ``a`` and ``rows`` to int32, ``offsets`` to int64, or None where row k
    lies at k * WIDTH (a product's panels: no table read a term); ``finish(builder,
    r, j, sums)`` emits what becomes of row r's vector j of final sums; ``shape``: (rows, vectors),
    ``(ROWS, VECTORS)`` or a narrow variant for the last rows or columns; ``multiply(builder,
    left, right, sums)``: the sums plus the products of a's broadcast word and a row's words
    (``multiply_words``: int16 pairs; ``lite.kernels.fast.int8_quads``: byte quads)."""
    height, vectors = shape
    zero = ir.Constant(SUMS, [0] * LANES)

    def term(k: ir.Value, sums: list[ir.Value]) -> list[ir.Value]:
        start = builder.gep(rows, [builder.mul(k, _I64(WIDTH)) if offsets is None
                                   else builder.load(builder.gep(offsets, [k]))])
        right = [builder.load(builder.bitcast(builder.gep(start, [_I64(j * LANES)]), SUMS.as_pointer()), align=4)
                 for j in range(vectors)]
        updated = []
        for r in range(height):
            word = builder.load(builder.gep(a, [builder.add(builder.mul(a_stride, _I64(r)), k)]))
            left = splat_lanes(builder, word, SUMS)
            updated += [multiply(builder, left, right[j], sums[r * vectors + j]) for j in range(vectors)]
        return updated

    finals = emit_loop(builder, count, [zero] * (height * vectors), term)
    for index, final in enumerate(finals):
        finish(builder, *divmod(index, vectors), final)


def splat_lanes(builder: ir.IRBuilder, value: ir.Value, vector: ir.VectorType) -> ir.Value:
    """``value`` in every lane of ``vector``."""
    lone = builder.insert_element(ir.Constant(vector, ir.Undefined), value, _I32(0))
    return builder.shuffle_vector(lone, ir.Constant(vector, ir.Undefined), _SPLAT)


ROUNDING = 12582912.0
"""1.5 * 2 ** 23: a float32 of magnitude below 2 ** 22 plus this is rounded to an integer, half to
even (IEEE's default rounding, which fadd without fast-math keeps), held in the low bits."""
_ROUNDING_BITS = 0x4B400000  # ROUNDING's float32 bits


def requantize_bounds(builder: ir.IRBuilder, zero_point: ir.Value, lo: ir.Value, hi: ir.Value
                      ) -> tuple[ir.Value, ir.Value, ir.Value]:
    """``emit_requantize``'s bounds from float32 scalars (zero point, lo, hi, all integers): the
    float vectors ``lo - zero_point`` and ``hi - zero_point`` and the int32 vector of ROUNDING's
    bits minus the zero point."""
    low, high = (splat_lanes(builder, builder.fsub(value, zero_point), FLOATS) for value in (lo, hi))
    offset = builder.sub(_I32(_ROUNDING_BITS), builder.fptosi(zero_point, _I32))
    return low, high, splat_lanes(builder, offset, SUMS)


def emit_requantize(builder: ir.IRBuilder, sums: ir.Value, bias: ir.Value, multiplier: ir.Value,
                    bounds: tuple[ir.Value, ir.Value, ir.Value]) -> ir.Value:
    """``lite.ops.quant.requantize`` of LANES int32 sums as LANES bytes: ``clip(roundeven(float32(sums
    + bias) * multiplier) + zero_point, lo, hi)`` (``bias`` int32 and ``multiplier`` float vectors,
    ``bounds`` from ``requantize_bounds``), plain IEEE arithmetic (no fast-math).

    The product is clipped to the integers ``[lo - zero_point, hi - zero_point]`` first (rounding
    commutes with clipping to integers), then rounded by adding ROUNDING, whose bits minus
    ROUNDING's and the zero point's give the output: one integer subtraction where a round and
    a float-to-int conversion were (docs/performance.md, the int8 section)."""
    low, high, offset = bounds
    real = builder.fmul(builder.sitofp(builder.add(sums, bias), FLOATS), multiplier)
    above = builder.select(builder.fcmp_ordered("<", real, low), low, real)
    clipped = builder.select(builder.fcmp_ordered(">", above, high), high, above)
    rounded = builder.bitcast(builder.fadd(clipped, ir.Constant(FLOATS, [ROUNDING] * LANES)), SUMS)
    return builder.trunc(builder.sub(rounded, offset), BYTES)


def _per_row_or_column(builder: ir.IRBuilder, values: ir.Value, vector: ir.VectorType, per_row: bool, r: int,
                       j: int) -> ir.Value:
    """Row r's vector j of a tile's per-row values (``values[r]`` splat) or per-column ones
    (``values[j * LANES:]``)."""
    if per_row:
        return splat_lanes(builder, builder.load(builder.gep(values, [_I64(r)])), vector)
    return builder.load(builder.bitcast(builder.gep(values, [_I64(j * LANES)]), vector.as_pointer()), align=4)


def _requantizing_finish(builder: ir.IRBuilder, out: ir.Value, out_stride: ir.Value, bias: ir.Value,
                         multiplier: ir.Value, bounds: tuple[ir.Value, ...], per_row: bool,
                         row_terms: ir.Value | None = None):
    """A tile ``finish`` storing row r's requantized bytes at ``out + r * out_stride``: one bias and
    multiplier per row (``per_row``: a convolution's output channels) or per column (a product's);
    ``row_terms``: int32 words added to row r's sums besides (a per-column bias's rows' share)."""
    splats = requantize_bounds(builder, *bounds)

    def finish(builder: ir.IRBuilder, r: int, j: int, sums: ir.Value) -> None:
        b = _per_row_or_column(builder, bias, SUMS, per_row, r, j)
        if row_terms is not None:
            b = builder.add(b, _per_row_or_column(builder, row_terms, SUMS, True, r, j))
        m = _per_row_or_column(builder, multiplier, FLOATS, per_row, r, j)
        place = builder.gep(out, [builder.add(builder.mul(out_stride, _I64(r)), _I64(j * LANES))])
        builder.store(emit_requantize(builder, sums, b, m, splats), builder.bitcast(place, BYTES.as_pointer()),
                      align=1)
    return finish


def _tile_intrinsic(per_row: bool, shape: tuple[int, int] = (ROWS, VECTORS), multiply=multiply_words,
                    row_terms: bool = False, linear: bool = False):
    """The requantizing pair tile (see ``requantized_tile_rows``) with bias and multiplier per row
    or per column, of ``shape`` (rows, vectors), its products by ``multiply``; ``row_terms``: one
    more address after the multiplier's, of int32 words added to each row's sums; ``linear``: row k
    of the right operand lies at k * WIDTH (the offsets argument unread)."""
    addresses = 10 if row_terms else 9

    def codegen(context, builder, signature, args):
        a_at, a_step, rows_at, offsets_at, count_, out_at, out_step, bias_at, multiplier_at = args[:9]
        words = _I32.as_pointer()
        terms = builder.inttoptr(args[9], words) if row_terms else None
        finish = _requantizing_finish(builder, builder.inttoptr(out_at, _I8.as_pointer()), out_step,
                                      builder.inttoptr(bias_at, words),
                                      builder.inttoptr(multiplier_at, _F32.as_pointer()), args[addresses:],
                                      per_row, terms)
        _emit_pair_tile(builder, builder.inttoptr(a_at, words), a_step, builder.inttoptr(rows_at, words),
                        None if linear else builder.inttoptr(offsets_at, _I64.as_pointer()), count_, finish, shape,
                        multiply)
        return context.get_dummy_value()

    signature = types.void(*(types.int64,) * addresses, *(types.float32,) * 3)
    if row_terms:
        def tile_with_terms(typingctx, a, a_stride, rows, offsets, count, out, out_stride, bias, multiplier,
                            terms, zero_point, lo, hi):
            return signature, codegen
        return tile_with_terms

    def tile(typingctx, a, a_stride, rows, offsets, count, out, out_stride, bias, multiplier, zero_point, lo, hi):
        return signature, codegen
    return tile


requantized_tile_rows = intrinsic(_tile_intrinsic(per_row=True))
"""(a, a_stride, rows, offsets, count, out, out_stride, bias, multiplier, zero_point, lo, hi): the
int32 sums of the ROWS x WIDTH tile (over ``count`` pairs: pair word
a[r * a_stride + k] times pair words rows[offsets[k] + j]) plus bias[r], times multiplier[r],
requantized (``emit_requantize``) into the bytes out[r * out_stride + j] (addresses as int64;
bias int32, multiplier float32, one per row; zero_point, lo, hi float32)."""
requantized_tile_columns = intrinsic(_tile_intrinsic(per_row=False, linear=True))
"""``requantized_tile_rows`` with bias[j] and multiplier[j] per column j, and row k of the panel at
k * WIDTH (a product's: ``offsets`` unread)."""
requantized_tile_rows_1 = intrinsic(_tile_intrinsic(per_row=True, shape=(ROWS, 1)))
"""``requantized_tile_rows`` one vector wide (LANES columns): a panel's last columns, where they
are LANES or fewer (7 x 7 planes: 49 = 48 + 1)."""
requantized_tile_rows_2 = intrinsic(_tile_intrinsic(per_row=True, shape=(ROWS, min(2, VECTORS))))
"""``requantized_tile_rows`` two vectors wide (one where the whole tile is)."""
requantized_tile_rows_linear, requantized_tile_rows_1_linear, requantized_tile_rows_2_linear = (
    intrinsic(_tile_intrinsic(per_row=True, shape=(ROWS, width), linear=True))
    for width in (VECTORS, 1, min(2, VECTORS)))
"""The three ``requantized_tile_rows`` with row k of ``rows`` at k * WIDTH (``offsets`` unread): a
1x1 convolution's packed panel (``lite.kernels.fast.int8_pointwise``)."""
requantized_row_columns = intrinsic(_tile_intrinsic(per_row=False, shape=(1, VECTORS), linear=True))
"""``requantized_tile_columns`` of one row: a product's rows one at a time where they are fewer than ROWS."""


def _sum_tile_intrinsic(shape: tuple[int, int] = (ROWS, VECTORS), multiply=multiply_words, terms: bool = False):
    """The pair tile (``_emit_pair_tile``, of ``shape``, its products by ``multiply``) storing its
    int32 sums; ``terms``: two more addresses, of int32 words added to the sums, one per column
    and one per row."""
    def codegen(context, builder, signature, args):
        a_at, a_step, rows_at, offsets_at, count_, out_at, out_step = args[:7]
        words = _I32.as_pointer()
        target = builder.inttoptr(out_at, words)
        column_terms, row_terms = (builder.inttoptr(at, words) for at in args[7:9]) if terms else (None, None)

        def finish(builder: ir.IRBuilder, r: int, j: int, sums: ir.Value) -> None:
            if terms:
                sums = builder.add(sums, _per_row_or_column(builder, column_terms, SUMS, False, r, j))
                sums = builder.add(sums, _per_row_or_column(builder, row_terms, SUMS, True, r, j))
            place = builder.gep(target, [builder.add(builder.mul(out_step, _I64(r)), _I64(j * LANES))])
            builder.store(sums, builder.bitcast(place, SUMS.as_pointer()), align=4)

        _emit_pair_tile(builder, builder.inttoptr(a_at, words), a_step, builder.inttoptr(rows_at, words),
                        builder.inttoptr(offsets_at, _I64.as_pointer()), count_, finish, shape, multiply)
        return context.get_dummy_value()

    if terms:
        def tile_with_terms(typingctx, a, a_stride, rows, offsets, count, out, out_stride, column_terms, row_terms):
            return types.void(*(types.int64,) * 9), codegen
        return tile_with_terms

    def tile(typingctx, a, a_stride, rows, offsets, count, out, out_stride):
        return types.void(*(types.int64,) * 7), codegen
    return tile


sum_tile_rows = intrinsic(_sum_tile_intrinsic())
"""(a, a_stride, rows, offsets, count, out, out_stride): the int32 sums of the ROWS x WIDTH tile
(``requantized_tile_rows``'s, over ``count`` pairs) stored as they are, row r at out + r *
out_stride int32 words (addresses as int64); the sums wrap as int32 arithmetic does."""


@jit
def pair_word(first, second):
    """Two int16 values in one int32 word, ``first`` in the low half."""
    word = (np.int64(first) & 0xFFFF) | ((np.int64(second) & 0xFFFF) << 16)
    return np.int32(word - ((np.int64(second) & 0x8000) << 17))


@jit
def byte_bits(value):
    """An integral float32 in [-128, 255] as the uint8 of its byte (two's complement below zero),
    for a store into bytes of either signedness. LLVM's float-to-uint8 conversion of a negative
    value is undefined: AVX-512 code happens to keep the bits, AVX2 code stores 0."""
    return np.uint8(np.int32(value) & 0xFF)


@jit
def copy_spare(spare, out, at, rows, count):
    """out[r, at + i] = the byte spare[r * WIDTH + i] (a tile requantized into the spare) for r <
    rows and i < count: the part of a tile that lies inside the output."""
    for r in range(rows):
        for i in range(count):
            out[r, at + i] = spare[r * WIDTH + i]


# ---- convolutions ---------------------------------------------------------------------------------

@jit
def pack_conv_weight(w, zero_point, packed):
    """w (O, Cg, KH, KW) minus its zero point (one per output channel) into ``packed`` (O padded,
    pairs) pair words, the pairs ordered (channel pair, kh, kw); zeros past Cg and past O."""
    o_count, cg, kh, kw = w.shape
    packed[:] = 0
    for o in range(o_count):
        zp = zero_point[o]
        for cp in range((cg + 1) // 2):
            for i in range(kh):
                for j in range(kw):
                    first = np.int64(w[o, 2 * cp, i, j]) - zp
                    second = np.int64(w[o, 2 * cp + 1, i, j]) - zp if 2 * cp + 1 < cg else 0
                    packed[o, (cp * kh + i) * kw + j] = pair_word(first, second)


@jit
def _pair_run(x, first, second, zero_point, out, at, step, count):
    """out[at + i] = the pair word of (x[first + i * step] - zero_point, x[second + i * step] -
    zero_point) for i < count, x and out flat (int32 arithmetic: both offsets fit int16); a
    negative ``second``: zero in the high half (the last channel of an odd count). Flat unsigned
    indices, and a loop of its own for step 1: the strided slices this read before did not
    vectorize (a 3x3 layer's rows are copied one call each)."""
    mask = np.int32(0xFFFF)
    if second < 0:
        for i in range(count):
            out[_u(at + i)] = (np.int32(x[_u(first + i * step)]) - zero_point) & mask
    elif step == 1:
        for i in range(count):
            out[_u(at + i)] = ((np.int32(x[_u(first + i)]) - zero_point) & mask) | \
                ((np.int32(x[_u(second + i)]) - zero_point) << np.int32(16))
    else:
        for i in range(count):
            out[_u(at + i)] = ((np.int32(x[_u(first + i * step)]) - zero_point) & mask) | \
                ((np.int32(x[_u(second + i * step)]) - zero_point) << np.int32(16))


@jit
def _pair_run2(x, first, second, zero_point, out, even, odd, count):
    """``_pair_run`` of ``count`` columns from ``first`` (and ``second``) split by column parity: the
    even columns' pair words to out[even:], the odd ones' to out[odd:] (flat unsigned indices, as
    ``_pair_run``)."""
    half, mask = count // 2, np.int32(0xFFFF)
    if second < 0:
        for j in range(count - half):
            out[_u(even + j)] = (np.int32(x[_u(first + 2 * j)]) - zero_point) & mask
        for j in range(half):
            out[_u(odd + j)] = (np.int32(x[_u(first + 2 * j + 1)]) - zero_point) & mask
        return
    for j in range(count - half):
        out[_u(even + j)] = ((np.int32(x[_u(first + 2 * j)]) - zero_point) & mask) | \
            ((np.int32(x[_u(second + 2 * j)]) - zero_point) << np.int32(16))
    for j in range(half):
        out[_u(odd + j)] = ((np.int32(x[_u(first + 2 * j + 1)]) - zero_point) & mask) | \
            ((np.int32(x[_u(second + 2 * j + 1)]) - zero_point) << np.int32(16))


@jit
def fill_phases(x, zero_point, phases, group, begin_h, begin_w, stride_h, stride_w):
    """``x - zero_point`` of x (N, C, H, W) into phases (N, group, pairs, stride_h, stride_w, hq, wq)
    pair words: input position (h, w) of channel 2p + t of a group is phase (hp % stride_h,
    wp % stride_w), position (hp // stride_h, wp // stride_w) of the padded plane (hp = h + begin_h,
    wp = w + begin_w). The pads are written zero (the buffer is scratch other kernels share)."""
    items = x.shape[0] * group * phases.shape[2]
    fill_phase_items(x, zero_point, phases, group, begin_h, begin_w, stride_h, stride_w, -1, 0, items)


@jit
def fill_phase_items(x, zero_point, phases, group, begin_h, begin_w, stride_h, stride_w, used, first, last):
    """``fill_phases`` of the pair planes ``first`` to ``last - 1`` (item = (image, group, pair));
    ``used``: bit ``ph * stride_w + pw`` set for each phase a tap reads (the others are left as
    pads: a 1x1 stride-2 layer reads one phase of four)."""
    c_count, h_count, w_count = x.shape[1], x.shape[2], x.shape[3]
    cg = c_count // group
    pairs, hq, wq = phases.shape[2], phases.shape[5], phases.shape[6]
    plane = h_count * w_count
    dense = begin_h == 0 and begin_w == 0 and stride_h == 1 and stride_w == 1 and wq == w_count
    flat, out = x.reshape(-1), phases.reshape(-1)
    zp = np.int32(zero_point)
    for item in range(first, last):
        n, rest = divmod(item, group * pairs)
        g, cp = divmod(rest, pairs)
        block = item * stride_h * stride_w * hq * wq
        first_at = (n * c_count + g * cg + 2 * cp) * plane
        second = first_at + plane if 2 * cp + 1 < cg else -1
        if dense:
            _pair_run(flat, first_at, second, zp, out, block, 1, plane)
            out[block + plane:block + hq * wq] = 0
            continue
        out[block:block + stride_h * stride_w * hq * wq] = 0
        for h in range(h_count):
            hp = h + begin_h
            row_used = (used >> ((hp % stride_h) * stride_w)) & ((1 << stride_w) - 1)
            if row_used == 0:
                continue
            if stride_w == 2 and row_used == 3:  # NOTE: both column phases in one pass: contiguous loads
                rows = block + ((hp % stride_h) * 2 * hq + hp // stride_h) * wq
                even, odd = rows + (begin_w % 2) * hq * wq, rows + ((1 + begin_w) % 2) * hq * wq
                _pair_run2(flat, first_at + h * w_count, second + h * w_count if second >= 0 else -1, zp, out,
                           even + begin_w // 2, odd + (1 + begin_w) // 2, w_count)
                continue
            for pw in range(stride_w):
                if not (row_used >> pw) & 1:
                    continue
                w0 = (pw - begin_w) % stride_w
                count = max(0, -(-(w_count - w0) // stride_w))
                at = block + (((hp % stride_h) * stride_w + pw) * hq + hp // stride_h) * wq
                at += (w0 + begin_w) // stride_w
                shift = h * w_count + w0
                _pair_run(flat, first_at + shift, second + shift if second >= 0 else -1, zp, out, at, stride_w,
                          count)


# The block of a phases fill on the crew (``lite.kernels.fast.crew.Jobs``), then per piece (first, last):
(_FX, _FN, _FC, _FH, _FW, _FSIGNED, _FZERO, _FPHASES, _FPAIRS, _FHQ, _FWQ, _FGROUP, _FBH, _FBW, _FSH,
 _FSW, _FUSED) = range(17)
_FILL_HEADER = 17


def fill_crew_jobs(x: np.ndarray, zero_point: int, phases: np.ndarray, group: int, begin_h: int, begin_w: int,
                   stride_h: int, stride_w: int, used: int, bounds: list[tuple[int, int]], job=None):
    """``fill_phase_items`` of each piece of ``bounds`` as jobs for the crew (``job``: another job
    function reading the same block, default ``fill_job``)."""
    from lite.kernels.fast.crew import Jobs, pieces_block

    block = pieces_block(_FILL_HEADER, bounds)
    block[:_FILL_HEADER] = (x.ctypes.data, *x.shape, x.dtype == np.int8, zero_point, phases.ctypes.data,
                            phases.shape[2], phases.shape[5], phases.shape[6], group, begin_h, begin_w, stride_h,
                            stride_w, used)
    return Jobs(job or fill_job, block, len(bounds), (x, phases))


@jit
def fill_piece_args(index, data):
    """(the block, its phases array, where piece ``index``'s bounds lie in the block) of a phases fill the
    block at ``data`` describes (``fill_crew_jobs``'s layout; the quad fill's too)."""
    block = carray(data, (_FILL_HEADER + 2 * (index + 1),), np.int64)
    shape = (block[_FN], block[_FGROUP], block[_FPAIRS], block[_FSH], block[_FSW], block[_FHQ], block[_FWQ])
    return block, carray(as_pointer(block[_FPHASES]), shape, np.int32), _FILL_HEADER + 2 * index


@jit
def _fill_piece(index, data, x):
    block, phases, piece = fill_piece_args(index, data)
    fill_phase_items(x, block[_FZERO], phases, block[_FGROUP], block[_FBH], block[_FBW], block[_FSH], block[_FSW],
                     block[_FUSED], block[piece], block[piece + 1])


def fill_job(index, data, extra):
    """A crew job: piece ``index`` of the phases fill the block at ``data`` describes."""
    block = carray(data, (_FILL_HEADER,), np.int64)
    shape = (block[_FN], block[_FC], block[_FH], block[_FW])
    if block[_FSIGNED]:
        _fill_piece(index, data, carray(as_pointer(block[_FX]), shape, np.int8))
    else:
        _fill_piece(index, data, carray(as_pointer(block[_FX]), shape, np.uint8))


@jit
def panel_item(item, group, panels, positions, flat, block):
    """(image, group, first column, columns, the address of its first pair word in ``flat``) of a
    convolution's item ``item`` = (image, group, panel of WIDTH of the grid's ``positions``)."""
    image, rest = divmod(item, group * panels)
    g, panel = divmod(rest, panels)
    column = panel * WIDTH
    source = flat.ctypes.data + ((image * group + g) * block + column) * 4
    return image, g, column, min(WIDTH, positions - column), source


@jit
def conv_items(flat, group, block, packed, offsets, bias, multiplier, zero_point, lo, hi, grid, spare, first,
               last):
    """Items ``first`` to ``last - 1`` of a convolution, item = (image, group, panel of WIDTH grid
    positions): every output channel of the group at those positions, requantized into grid
    (N, O, OH * wq) (``compact`` drops its columns past OW). ``flat``: the phases
    (``fill_phases``), ``block`` pair words per (image, group); ``offsets``: each pair's start in
    such a block; ``bias`` and ``multiplier`` padded as ``packed``'s rows; ``spare``: (ROWS, WIDTH)
    int32, for tiles that reach past the output."""
    o_group, positions = grid.shape[1] // group, grid.shape[2]
    panels = -(-positions // WIDTH)
    bytes_ = carray(as_pointer(spare.ctypes.data), (ROWS * WIDTH,), np.uint8)
    for item in range(first, last):
        image, g, column, count, source = panel_item(item, group, panels, positions, flat, block)
        panel_tiles(source, packed, offsets, bias, multiplier, zero_point, lo, hi, grid, image, g * o_group, o_group,
                    column, count, bytes_, False)


@jit
def panel_tiles(source, packed, offsets, bias, multiplier, zero_point, lo, hi, out, image, o_first, o_count, column,
                count, bytes_, linear):
    """Output channels ``o_first`` to ``o_first + o_count - 1`` of image ``image`` of out (N, O,
    positions) bytes at the ``count`` positions from ``column``: the requantized tiles over the pair
    words at the address ``source`` (pair k's row at ``offsets[k]`` words from it); ``bytes_``: the
    spare as ROWS * WIDTH bytes, for tiles that reach past the output; ``linear``: pair k's row is at
    k * WIDTH words (the ``_linear`` tiles compute it; ``offsets`` unread). Addresses, not views: a view
    a tile or an item cost as much as a small layer's tile (``int8_pointwise``)."""
    pairs, positions = packed.shape[1], out.shape[2]
    plane = out.ctypes.data + image * out.shape[1] * positions
    vectors = min(VECTORS, -(-count // LANES))  # NOTE: a narrow tile for a panel's last columns
    for top in range(0, o_count, ROWS):
        o = o_first + top
        rows = min(ROWS, o_count - top)
        whole = count == vectors * LANES and rows == ROWS
        place, stride = (plane + o * positions + column, positions) if whole else (bytes_.ctypes.data, WIDTH)
        weights, bias_at, multiplier_at = packed.ctypes.data + o * pairs * 4, bias.ctypes.data + o * 4, \
            multiplier.ctypes.data + o * 4
        table = offsets.ctypes.data
        if linear and vectors == VECTORS:
            requantized_tile_rows_linear(weights, pairs, source, table, pairs, place, stride, bias_at, multiplier_at,
                                         zero_point, lo, hi)
        elif linear and vectors == 1:
            requantized_tile_rows_1_linear(weights, pairs, source, table, pairs, place, stride, bias_at,
                                           multiplier_at, zero_point, lo, hi)
        elif linear:
            requantized_tile_rows_2_linear(weights, pairs, source, table, pairs, place, stride, bias_at,
                                           multiplier_at, zero_point, lo, hi)
        elif vectors == VECTORS:
            requantized_tile_rows(weights, pairs, source, table, pairs, place, stride, bias_at, multiplier_at,
                                  zero_point, lo, hi)
        elif vectors == 1:
            requantized_tile_rows_1(weights, pairs, source, table, pairs, place, stride, bias_at, multiplier_at,
                                    zero_point, lo, hi)
        else:
            requantized_tile_rows_2(weights, pairs, source, table, pairs, place, stride, bias_at, multiplier_at,
                                    zero_point, lo, hi)
        if not whole:
            copy_spare(bytes_, out[image, o:o + rows], column, rows, count)


@jit
def conv_sum_items(flat, group, block, packed, offsets, grid, spare, first, last):
    """``conv_items``' items with their int32 sums stored as they are (``sum_tile_rows``: they wrap
    as int32 arithmetic does, as ONNX ConvInteger's 32-bit accumulation), into grid (N, O, OH *
    wq) int32; ``spare`` (ROWS, WIDTH) int32 takes the tiles that reach past the output."""
    o_group, positions, pairs = grid.shape[1] // group, grid.shape[2], packed.shape[1]
    panels = -(-positions // WIDTH)
    for item in range(first, last):
        image, g, column, count, source = panel_item(item, group, panels, positions, flat, block)
        for o in range(g * o_group, (g + 1) * o_group, ROWS):
            place, stride, rows = sum_tile_place(grid, image, o, (g + 1) * o_group, column, count, spare)
            sum_tile_rows(packed.ctypes.data + o * pairs * 4, pairs, source, offsets.ctypes.data, pairs, place, stride)
            copy_sums(spare, grid, image, o, rows, column, count)


@jit
def sum_tile_place(grid, image, o, o_end, column, count, spare):
    """(address, row stride in words, rows to copy from the spare) of a sum tile of grid's (N, O,
    positions) channels ``o`` on (below ``o_end``) at the WIDTH positions from ``column``
    (``count`` of them inside): grid itself where the whole tile lies inside (nothing to copy),
    else ``spare``."""
    rows = min(ROWS, o_end - o)
    if count == WIDTH and rows == ROWS:
        return grid.ctypes.data + ((image * grid.shape[1] + o) * grid.shape[2] + column) * 4, grid.shape[2], 0
    return spare.ctypes.data, WIDTH, rows


@jit
def copy_sums(spare, grid, image, o, rows, column, count):
    """grid[image, o + r, column + i] = spare[r, i] for r < rows and i < count: the inside of a sum
    tile stored in the spare."""
    for r in range(rows):
        for i in range(count):
            grid[image, o + r, column + i] = spare[r, i]


@jit
def compact(grid, out, wq):
    """out (N, O, OH, OW) from grid (N, O, OH * wq): each row's first OW columns (flat unsigned
    indices: the loop over the four axes, and slice copies, did not vectorize)."""
    ow = out.shape[3]
    source, target = grid.reshape(grid.size), out.reshape(out.size)
    for r in range(out.size // ow):
        at, to = r * wq, r * ow
        for i in range(ow):
            target[_u(to + i)] = source[_u(at + i)]


# ---- products -------------------------------------------------------------------------------------

@jit
def pack_product_weight(w, zero_point, panels):
    """w (K, N) minus its zero point (one per column) into panels (panels, pairs, WIDTH) of pair
    words, zeros past K and past N."""
    k_count, n_count = w.shape
    panels[:] = 0
    for n in range(n_count):
        panel, j = divmod(n, WIDTH)
        zp = zero_point[n]
        for kp in range((k_count + 1) // 2):
            first = np.int64(w[2 * kp, n]) - zp
            second = np.int64(w[2 * kp + 1, n]) - zp if 2 * kp + 1 < k_count else 0
            panels[panel, kp, j] = pair_word(first, second)


@jit
def fill_rows(x, zero_point, rows):
    """x (M, K) minus its zero point into the first M rows of ``rows`` (M padded, pairs) of pair
    words (the rest, and a missing last term, stay as they are: zero)."""
    m_count, k_count = x.shape
    for m in range(m_count):
        for kp in range(k_count // 2):
            rows[m, kp] = pair_word(np.int64(x[m, 2 * kp]) - zero_point, np.int64(x[m, 2 * kp + 1]) - zero_point)
        if k_count % 2:
            rows[m, k_count // 2] = pair_word(np.int64(x[m, k_count - 1]) - zero_point, 0)


@jit
def product_panels(rows, panels, offsets, bias, multiplier, zero_point, lo, hi, out, spare, first, last):
    """Panels ``first`` to ``last - 1`` of out (M, N) = requantized rows (M padded to ROWS, pairs)
    times panels (``pack_product_weight``); ``offsets``: pair k's row at k * WIDTH (the tiles here
    compute it; ``int8_quads`` reads the table from the same crew block); ``bias`` and
    ``multiplier`` padded to the panels' columns; ``spare``: (ROWS, WIDTH) int32."""
    m_count, n_count = out.shape
    pairs = rows.shape[1]
    bytes_ = carray(as_pointer(spare.ctypes.data), (ROWS * WIDTH,), np.uint8)
    for panel in range(first, last):
        column = panel * WIDTH
        count = min(WIDTH, n_count - column)
        for top in range(0, m_count, ROWS):
            height = min(ROWS, m_count - top)
            whole = count == WIDTH and height == ROWS
            place = out[top].ctypes.data + column if whole else bytes_.ctypes.data
            if height < ROWS:  # NOTE: the last rows one at a time (a single row: a vector times a matrix)
                for r in range(height):
                    requantized_row_columns(rows.ctypes.data + (top + r) * pairs * 4, pairs,
                                            panels[panel].ctypes.data, offsets.ctypes.data, pairs,
                                            bytes_.ctypes.data + r * WIDTH, WIDTH, bias.ctypes.data + column * 4,
                                            multiplier.ctypes.data + column * 4, zero_point, lo, hi)
            else:
                requantized_tile_columns(rows.ctypes.data + top * pairs * 4, pairs, panels[panel].ctypes.data,
                                         offsets.ctypes.data, pairs, place, n_count if whole else WIDTH,
                                         bias.ctypes.data + column * 4, multiplier.ctypes.data + column * 4,
                                         zero_point, lo, hi)
            if not whole:
                copy_spare(bytes_, out[top:top + height], column, height, count)


@jit
def requantize_planes(sums, bias, multiplier, zero_point, lo, hi, out):
    """out (N, C, P) from exact float32 sums (N, C, P) (integers): ``requantize`` of sums + bias[c]."""
    n_count, c_count, p_count = sums.shape
    for n in range(n_count):
        for c in range(c_count):
            b, m = bias[c], multiplier[c]
            for p in range(p_count):
                y = np.rint(np.float32(np.int64(sums[n, c, p]) + b) * m) + zero_point
                out[n, c, p] = byte_bits(min(max(y, lo), hi))


@functools.cache
def warm(dtype: np.dtype) -> None:
    """Compiles the kernels for ``dtype`` (int8 or uint8) inputs and outputs now, at build."""
    x = np.zeros((1, 2, 3, 3), dtype)
    f32, i32, i64 = np.float32, np.int32, np.int64
    zp, lo, hi = f32(0), f32(-1), f32(1)
    packed, offsets = np.zeros((ROWS, 1), i32), np.zeros(1, i64)
    compiled(pack_conv_weight, np.zeros((1, 2, 1, 1), np.int8), np.zeros(1, i64), packed)
    phases = np.zeros((1, 1, 1, 1, 1, 3, 3 + WIDTH), i32)
    compiled(fill_phases, x, i64(0), phases, 1, 0, 0, 1, 1)
    grid = np.zeros((1, 1, 9), dtype)
    compiled(conv_items, phases.reshape(-1), 1, phases.size, packed, offsets, np.zeros(ROWS, i32),
             np.ones(ROWS, f32), zp, lo, hi, grid, np.zeros((ROWS, WIDTH), i32), 0, 1)
    compiled(compact, grid, np.zeros((1, 1, 3, 2), dtype), 3)
    panels = np.zeros((1, 1, WIDTH), i32)
    compiled(pack_product_weight, np.zeros((2, 1), np.int8), np.zeros(1, i64), panels)
    rows = np.zeros((ROWS, 1), i32)
    compiled(fill_rows, np.zeros((1, 2), dtype), i64(0), rows)
    compiled(product_panels, rows, panels, offsets, np.zeros(WIDTH, i32), np.ones(WIDTH, f32), zp, lo, hi,
             np.zeros((1, 1), dtype), np.zeros((ROWS, WIDTH), i32), 0, 1)
    compiled(requantize_planes, np.zeros((1, 1, 1), f32), np.zeros(1, i64), np.ones(1, f32), zp, lo, hi,
             np.zeros((1, 1, 1), dtype))


@functools.cache
def warm_sums(dtype: np.dtype) -> None:
    """Compiles ConvInteger's kernels (``conv_sum_items`` and its phases) for ``dtype`` (int8 or
    uint8) inputs now, at build."""
    i32, i64 = np.int32, np.int64
    phases = np.zeros((1, 1, 1, 1, 1, 3, 3 + WIDTH), i32)
    compiled(pack_conv_weight, np.zeros((1, 2, 1, 1), dtype), np.zeros(1, i64), np.zeros((ROWS, 1), i32))
    compiled(fill_phase_items, np.zeros((1, 2, 3, 3), dtype), i64(0), phases, 1, 0, 0, 1, 1, 1, 0, 1)
    grid = np.zeros((1, 1, 9), i32)
    compiled(conv_sum_items, phases.reshape(-1), 1, phases.size, np.zeros((ROWS, 1), i32), np.zeros(1, i64), grid,
             np.zeros((ROWS, WIDTH), i32), 0, 1)
    compiled(compact, grid, np.zeros((1, 1, 3, 2), i32), 3)


# The block of a convolution on the crew (``lite.kernels.fast.crew.Jobs``), then per piece
# (first, last, spare):
(_FLAT, _FLAT_N, _GROUP, _BLOCK, _PACKED, _PACKED_ROWS, _PAIRS, _OFFSETS, _BIAS, _CHANNELS, _MULTIPLIER, _GRID,
 _IMAGES, _POSITIONS, _ZERO, _LO, _HI) = range(17)
_HEADER = 17


def conv_crew_jobs(flat: np.ndarray, group: int, block_size: int, packed: np.ndarray, offsets: np.ndarray,
                   bias: np.ndarray, multiplier: np.ndarray, zero_point, lo, hi, grid: np.ndarray,
                   spares: list[np.ndarray], bounds: list[tuple[int, int]], job=None):
    """The convolution's items as jobs for the crew, one per piece of ``bounds`` with its own spare
    (``conv_items``'s arguments otherwise); ``job``: another job function reading the same block
    (default the pair jobs of grid's dtype)."""
    from lite.kernels.fast.crew import Jobs, pieces_block

    block = pieces_block(_HEADER, bounds, [[spare] for spare in spares])
    block[:_ZERO] = (flat.ctypes.data, flat.size, group, block_size, packed.ctypes.data, packed.shape[0],
                     packed.shape[1], offsets.ctypes.data, bias.ctypes.data, grid.shape[1], multiplier.ctypes.data,
                     grid.ctypes.data, grid.shape[0], grid.shape[2])
    block[_ZERO:_HEADER].view(np.float64)[:] = zero_point, lo, hi
    job = job or (conv_job_int8 if grid.dtype == np.int8 else conv_job_uint8)
    return Jobs(job, block, len(bounds), (flat, packed, offsets, bias, multiplier, grid, *spares))


@jit
def conv_piece_args(index, data):
    """What piece ``index`` of the convolution that the block at ``data`` describes computes with:
    (flat, group, block, packed, offsets, bias, multiplier, zero point, lo, hi, spare, first, last)."""
    block = carray(data, (_HEADER + 3 * (index + 1),), np.int64)
    floats = carray(data, (_HEADER,), np.float64)
    flat = carray(as_pointer(block[_FLAT]), (block[_FLAT_N],), np.int32)
    packed = carray(as_pointer(block[_PACKED]), (block[_PACKED_ROWS], block[_PAIRS]), np.int32)
    offsets = carray(as_pointer(block[_OFFSETS]), (block[_PAIRS],), np.int64)
    bias = carray(as_pointer(block[_BIAS]), (block[_PACKED_ROWS],), np.int32)
    multiplier = carray(as_pointer(block[_MULTIPLIER]), (block[_PACKED_ROWS],), np.float32)
    piece = _HEADER + 3 * index
    spare = carray(as_pointer(block[piece + 2]), (ROWS, WIDTH), np.int32)
    return (flat, block[_GROUP], block[_BLOCK], packed, offsets, bias, multiplier, np.float32(floats[_ZERO]),
            np.float32(floats[_LO]), np.float32(floats[_HI]), spare, block[piece], block[piece + 1])


@jit
def _conv_piece(index, data, grid):
    """Piece ``index`` of the convolution that the block at ``data`` describes, into ``grid``."""
    a = conv_piece_args(index, data)
    conv_items(a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8], a[9], grid, a[10], a[11], a[12])


def conv_job_int8(index, data, extra):
    """A crew job of a convolution with int8 output."""
    block = carray(data, (_HEADER,), np.int64)
    shape = (block[_IMAGES], block[_CHANNELS], block[_POSITIONS])
    _conv_piece(index, data, carray(as_pointer(block[_GRID]), shape, np.int8))


def conv_job_uint8(index, data, extra):
    """A crew job of a convolution with uint8 output."""
    block = carray(data, (_HEADER,), np.int64)
    shape = (block[_IMAGES], block[_CHANNELS], block[_POSITIONS])
    _conv_piece(index, data, carray(as_pointer(block[_GRID]), shape, np.uint8))


@jit
def _conv_sum_piece(index, data, grid):
    """Piece ``index`` of the ConvInteger sums that the block at ``data`` describes, into ``grid``."""
    a = conv_piece_args(index, data)
    conv_sum_items(a[0], a[1], a[2], a[3], a[4], grid, a[10], a[11], a[12])


def conv_sum_job(index, data, extra):
    """A crew job of ConvInteger's int32 sums (``conv_crew_jobs``' block; its bias, multiplier and
    floats unread)."""
    block = carray(data, (_HEADER,), np.int64)
    shape = (block[_IMAGES], block[_CHANNELS], block[_POSITIONS])
    _conv_sum_piece(index, data, carray(as_pointer(block[_GRID]), shape, np.int32))


# The block of a product on the crew (``lite.kernels.fast.crew.Jobs``), then per piece (first, last, spare):
(_PROWS, _PROWS_M, _PPAIRS, _PPANELS, _PPANELS_N, _POFFSETS, _PBIAS, _PMULTIPLIER, _POUT, _PM, _PN, _PROW_TERMS,
 _PZERO, _PLO, _PHI) = range(15)
_PRODUCT_HEADER = 15


def product_crew_jobs(rows: np.ndarray, panels: np.ndarray, offsets: np.ndarray, bias: np.ndarray,
                      multiplier: np.ndarray, zero_point, lo, hi, out: np.ndarray, spares: list[np.ndarray],
                      bounds: list[tuple[int, int]], job=None, row_terms: np.ndarray | None = None):
    """``product_panels``'s panels as jobs for the crew, one per piece of ``bounds`` with its own
    spare (``out`` viewed as bytes); ``job``: another job function reading the same block (default
    ``product_job``), ``row_terms`` its rows' own terms (``int8_quads.quad_product_job``)."""
    from lite.kernels.fast.crew import Jobs, pieces_block

    view = out.view(np.uint8)
    block = pieces_block(_PRODUCT_HEADER, bounds, [[spare] for spare in spares])
    block[:_PZERO] = (rows.ctypes.data, *rows.shape, panels.ctypes.data, panels.shape[0], offsets.ctypes.data,
                      bias.ctypes.data, multiplier.ctypes.data, view.ctypes.data, *view.shape,
                      0 if row_terms is None else row_terms.ctypes.data)
    block[_PZERO:_PRODUCT_HEADER].view(np.float64)[:] = zero_point, lo, hi
    kept = (rows, panels, offsets, bias, multiplier, view, *spares, *(() if row_terms is None else (row_terms,)))
    return Jobs(job or product_job, block, len(bounds), kept)


@jit
def product_piece_args(index, data):
    """What piece ``index`` of the product that the block at ``data`` describes computes with: (rows,
    panels, offsets, bias, multiplier, zero point, lo, hi, out, spare, first, last, row terms' address)."""
    block = carray(data, (_PRODUCT_HEADER + 3 * (index + 1),), np.int64)
    floats = carray(data, (_PRODUCT_HEADER,), np.float64)
    words, columns = block[_PPAIRS], block[_PPANELS_N] * WIDTH
    piece = _PRODUCT_HEADER + 3 * index
    return (carray(as_pointer(block[_PROWS]), (block[_PROWS_M], words), np.int32),
            carray(as_pointer(block[_PPANELS]), (block[_PPANELS_N], words, WIDTH), np.int32),
            carray(as_pointer(block[_POFFSETS]), (words,), np.int64),
            carray(as_pointer(block[_PBIAS]), (columns,), np.int32),
            carray(as_pointer(block[_PMULTIPLIER]), (columns,), np.float32), np.float32(floats[_PZERO]),
            np.float32(floats[_PLO]), np.float32(floats[_PHI]),
            carray(as_pointer(block[_POUT]), (block[_PM], block[_PN]), np.uint8),
            carray(as_pointer(block[piece + 2]), (ROWS, WIDTH), np.int32), block[piece], block[piece + 1],
            block[_PROW_TERMS])


def product_job(index, data, extra):
    """A crew job: piece ``index`` of the product the block at ``data`` describes."""
    a = product_piece_args(index, data)
    product_panels(a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8], a[9], a[10], a[11])
