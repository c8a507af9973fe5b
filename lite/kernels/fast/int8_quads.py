"""Quantized convolutions and products on byte quads: ``vpdpbusd`` (AVX-512 VNNI), four products a lane.

Where every weight offset ``w - w_zero_point`` fits int8, a convolution's terms go in quads of
four input channels: one int32 word holds four bytes, and ``vpdpbusd`` adds to each int32 lane
the four products of unsigned bytes (the input) by signed bytes (the weight), without
saturation, twice the terms of the int16 pairs' ``vpdpwssd`` (``lite.kernels.fast.int8``) per
instruction.

The input byte is ``u = x`` for uint8 x and ``u = x + 128`` (``x ^ 0x80``) for int8 x, so
``x - x_zero_point = u - p`` with ``p = x_zero_point (+ 128)``, a byte too; the pads hold ``p``
(an offset of zero). Hence ``sum (x - zx)(w') = sum u w' - p * sum w'``: the second term is one
constant per output channel, folded into the bias by the plan. The int32 lanes wrap, but the
sum plus bias is the exact value wherever the plan checked that it fits int32 (modular
arithmetic). Only with AVX-512 VNNI: the intrinsic exists nowhere else, so these kernels are
compiled only there (``available``).

Products broadcast the rows instead (the products section below): a linear layer's constant weight
packed once, or, for a product of two activations (attention's), both operands packed batch by
batch at each call (``activation_quad_batches``).
"""

from __future__ import annotations

import functools

import numpy as np
from llvmlite import ir
from numba import carray
from numba import uint64 as _u  # NOTE: unsigned indices skip the negative-index check, so loops vectorize
from numba.core import cgutils
from numba.extending import intrinsic

from lite.kernels import fast
from lite.kernels.fast import compiled, jit
from lite.kernels.fast.crew import as_pointer
from lite.kernels.fast.int8 import (
    _CHANNELS,
    _FBH,
    _FBW,
    _FC,
    _FGROUP,
    _FH,
    _FILL_HEADER,
    _FN,
    _FSH,
    _FSIGNED,
    _FSW,
    _FUSED,
    _FW,
    _FX,
    _FZERO,
    _GRID,
    _HEADER,
    _IMAGES,
    _POSITIONS,
    SUMS,
    _sum_tile_intrinsic,
    _tile_intrinsic,
    conv_piece_args,
    copy_spare,
    copy_sums,
    fill_piece_args,
    panel_item,
    product_piece_args,
    sum_tile_place,
)
from lite.kernels.fast.tile import LANES, ROWS, VECTORS, WIDTH


def available() -> bool:
    """Whether compiled code targets AVX-512 VNNI with the wide register tile."""
    numba = fast.numba_module()
    return fast.wide_registers() and numba is not None and "+avx512vnni" in (numba.config.CPU_FEATURES or "")


def multiply_quads(builder: ir.IRBuilder, left: ir.Value, right: ir.Value, sums: ir.Value) -> ir.Value:
    """``sums`` plus, per int32 lane, the four products of right's unsigned bytes by left's signed
    bytes (``vpdpbusd``)."""
    function = cgutils.get_or_insert_function(builder.module, ir.FunctionType(SUMS, [SUMS, SUMS, SUMS]),
                                              "llvm.x86.avx512.vpdpbusd.512")
    return builder.call(function, [sums, right, left])


quad_tile = intrinsic(_tile_intrinsic(per_row=True, multiply=multiply_quads))
"""``int8.requantized_tile_rows`` on byte quads (a's words signed, the rows' words unsigned)."""
quad_tile_1 = intrinsic(_tile_intrinsic(per_row=True, shape=(ROWS, 1), multiply=multiply_quads))
quad_tile_2 = intrinsic(_tile_intrinsic(per_row=True, shape=(ROWS, min(2, VECTORS)), multiply=multiply_quads))


@jit
def pack_conv_quads(w, zero_point, packed):
    """The weight (O, C, KH, KW) minus its zero point (one per output channel, every offset in
    int8) into packed (O padded, quads * KH * KW): word (quad, i, j) holds the bytes of channels
    4 * quad to 4 * quad + 3 (zero past C), the first in the low byte."""
    o_count, c_count, kh, kw = w.shape
    quads = (c_count + 3) // 4
    packed[:] = 0
    for o in range(o_count):
        for q in range(quads):
            for i in range(kh):
                for j in range(kw):
                    word = np.int64(0)
                    for t in range(min(4, c_count - 4 * q)):
                        word |= ((np.int64(w[o, 4 * q + t, i, j]) - zero_point[o]) & 0xFF) << (8 * t)
                    packed[o, (q * kh + i) * kw + j] = np.int32(np.uint32(word))


@jit
def _quad_word(x, s0, s1, s2, s3, flip, keep, other):
    """The word of bytes ``x[s_t] ^ flip`` (t < 4, the first low), each byte where ``keep`` is zero
    ``other``'s."""
    word = (np.int32(x[_u(s0)] ^ flip) | (np.int32(x[_u(s1)] ^ flip) << 8) | (np.int32(x[_u(s2)] ^ flip) << 16)
            | (np.int32(x[_u(s3)] ^ flip) << 24))
    return (word & keep) | other


@jit
def _quad_run(x, starts, flip, keep, pad, out, at, step, count):
    """out[at + i] = the word of bytes ``x[starts[t] + i * step] ^ flip`` (t < 4, the first low) for
    i < count, each byte where ``keep`` is zero replaced by ``pad``'s (flat unsigned indices: the
    strided slices this read before did not vectorize)."""
    s0, s1, s2, s3 = starts[0], starts[1], starts[2], starts[3]
    other = pad & ~keep
    for i in range(count):
        k = i * step
        out[_u(at + i)] = _quad_word(x, s0 + k, s1 + k, s2 + k, s3 + k, flip, keep, other)


@jit
def _quad_run2(x, starts, flip, keep, pad, out, even, odd, count):
    """``_quad_run`` of ``count`` columns from ``starts`` split by column parity: the even columns'
    words to out[even:], the odd ones' to out[odd:]."""
    s0, s1, s2, s3 = starts[0], starts[1], starts[2], starts[3]
    half, other = count // 2, pad & ~keep
    for j in range(count - half):
        k = 2 * j
        out[_u(even + j)] = _quad_word(x, s0 + k, s1 + k, s2 + k, s3 + k, flip, keep, other)
    for j in range(half):
        k = 2 * j + 1
        out[_u(odd + j)] = _quad_word(x, s0 + k, s1 + k, s2 + k, s3 + k, flip, keep, other)


@jit
def fill_quad_items(x, flip, pad, phases, group, begin_h, begin_w, stride_h, stride_w, used, first, last):
    """The quad planes ``first`` to ``last - 1`` (item = (image, group, quad)) of x (N, C, H, W) into
    phases (N, group, quads, stride_h, stride_w, hq, wq) of int32 words, as ``int8.fill_phases``
    lays out pairs: four bytes ``x ^ flip`` a word, the pads (and missing channels) the byte ``pad``;
    ``used``: the phases a tap reads (``int8.fill_phase_items``)."""
    c_count, h_count, w_count = x.shape[1], x.shape[2], x.shape[3]
    cg = c_count // group
    quads, hq, wq = phases.shape[2], phases.shape[5], phases.shape[6]
    plane, size = h_count * w_count, stride_h * stride_w * hq * wq
    flat, out = x.reshape(-1), phases.reshape(-1)
    pad_word = np.int32(np.uint32(np.int64(pad) * 0x01010101))
    starts = np.empty(4, np.int64)
    dense = begin_h == 0 and begin_w == 0 and stride_h == 1 and stride_w == 1 and size == plane
    for item in range(first, last):
        n, rest = divmod(item, group * quads)
        g, q = divmod(rest, quads)
        block = item * size
        base = (n * c_count + g * cg + 4 * q) * plane
        present = min(4, cg - 4 * q)
        keep = np.int32(np.uint32((1 << (8 * present)) - 1)) if present < 4 else np.int32(-1)
        if dense:
            for t in range(4):
                starts[t] = base + min(t, present - 1) * plane
            _quad_run(flat, starts, flip, keep, pad_word, out, block, 1, plane)
            continue
        out[block:block + size] = pad_word
        for h in range(h_count):
            hp = h + begin_h
            row_used = (used >> ((hp % stride_h) * stride_w)) & ((1 << stride_w) - 1)
            if stride_w == 2 and row_used == 3:  # NOTE: both column phases in one pass: contiguous loads
                rows = block + ((hp % stride_h) * 2 * hq + hp // stride_h) * wq
                for t in range(4):
                    starts[t] = base + min(t, present - 1) * plane + h * w_count
                _quad_run2(flat, starts, flip, keep, pad_word, out, rows + (begin_w % 2) * hq * wq + begin_w // 2,
                           rows + ((1 + begin_w) % 2) * hq * wq + (1 + begin_w) // 2, w_count)
                continue
            for pw in range(stride_w):
                if not (row_used >> pw) & 1:
                    continue
                w0 = (pw - begin_w) % stride_w
                count = max(0, -(-(w_count - w0) // stride_w))
                if count == 0:
                    continue
                at = block + (((hp % stride_h) * stride_w + pw) * hq + hp // stride_h) * wq + (w0 + begin_w) // stride_w
                for t in range(4):
                    starts[t] = base + min(t, present - 1) * plane + h * w_count + w0
                _quad_run(flat, starts, flip, keep, pad_word, out, at, stride_w, count)


@jit
def conv_quad_items(flat, group, block, packed, offsets, bias, multiplier, zero_point, lo, hi, grid, spare, first,
                    last):
    """``int8.conv_items`` on byte quads (``quad_tile``): the same items, arguments and layout, one
    quad word for each pair word there."""
    o_group, words, positions = grid.shape[1] // group, packed.shape[1], grid.shape[2]
    panels = -(-positions // WIDTH)
    bytes_ = carray(as_pointer(spare.ctypes.data), (ROWS * WIDTH,), np.uint8)
    for item in range(first, last):
        image, g, column, count, source = panel_item(item, group, panels, positions, flat, block)
        vectors = min(VECTORS, -(-count // LANES))
        for top in range(0, o_group, ROWS):
            o = g * o_group + top
            rows = min(ROWS, o_group - top)
            whole = count == vectors * LANES and rows == ROWS
            out = grid[image, o:o + rows]
            place, stride = (out.ctypes.data + column, positions) if whole else (bytes_.ctypes.data, WIDTH)
            weights, bias_at, multiplier_at = packed.ctypes.data + o * words * 4, bias.ctypes.data + o * 4, \
                multiplier.ctypes.data + o * 4
            if vectors == VECTORS:
                quad_tile(weights, words, source, offsets.ctypes.data, words, place, stride, bias_at, multiplier_at,
                          zero_point, lo, hi)
            elif vectors == 1:
                quad_tile_1(weights, words, source, offsets.ctypes.data, words, place, stride, bias_at,
                            multiplier_at, zero_point, lo, hi)
            else:
                quad_tile_2(weights, words, source, offsets.ctypes.data, words, place, stride, bias_at,
                            multiplier_at, zero_point, lo, hi)
            if not whole:
                copy_spare(bytes_, out, column, rows, count)


# ---- products -------------------------------------------------------------------------------------
# Rows (M, K) times a weight (K, N), the rows broadcast: the signed byte is the row's,
# ``s = x`` (int8) or ``x ^ 0x80`` (uint8, x - 128), and the unsigned one the weight's, ``w' + 128``
# (w' = w - w_zero_point, in int8). With p = x_zero_point (int8) or x_zero_point - 128 (uint8),
# ``sum (x - zx) w' = sum s (w' + 128) - 128 * sum s - p * sum w'``: the second term is one word
# per row (``fill_quad_rows``), the third one per column, folded into the bias by the plan. A
# product of two activations has w's own bytes (``activation_quad_batches``): its zero point joins
# the row term's factor, and the columns' terms are summed at each call.

quad_tile_columns = intrinsic(_tile_intrinsic(per_row=False, multiply=multiply_quads, row_terms=True))
"""``int8.requantized_tile_columns`` on byte quads (a's words signed, the panel's unsigned), each
row's sums plus its row term (the address after the multiplier's)."""
quad_row_columns = intrinsic(_tile_intrinsic(per_row=False, shape=(1, VECTORS), multiply=multiply_quads,
                                             row_terms=True))
"""``quad_tile_columns`` of one row."""


@jit
def fill_quad_rows(x, flip, factor, rows, row_terms):
    """The bytes ``x ^ flip`` of x (M, K), read as bytes, into the first K bytes of each row of
    rows (M, quads * 4 bytes; the rest stay zero), and each row's term ``-factor * sum`` of those
    bytes read as signed into row_terms (int32, wrapping as the sums do)."""
    m_count, k_count = x.shape
    for m in range(m_count):
        total = np.int64(0)
        for k in range(k_count):
            byte = x[m, _u(k)] ^ flip
            rows[m, _u(k)] = byte
            total += np.int64(np.int8(byte))
        row_terms[m] = np.int32(np.int64(-factor) * total)


quad_sum_tile = intrinsic(_sum_tile_intrinsic(multiply=multiply_quads, terms=True))
"""(a, a_stride, rows, offsets, count, out, out_stride, column terms, row terms): the int32 sums of
``quad_tile_columns``, plus each column's and each row's term, stored as int32 words (an
integer product's output)."""
quad_sum_row = intrinsic(_sum_tile_intrinsic(shape=(1, VECTORS), multiply=multiply_quads, terms=True))
"""``quad_sum_tile`` of one row."""


@jit
def quad_product_sums(rows, row_terms, panels, offsets, column_terms, out, spare, first, last):
    """Panels ``first`` to ``last - 1`` of out (M, N) int32 = rows (M, quads) of signed quad words
    times panels of unsigned ones, plus ``column_terms`` (padded to the panels' columns) and
    ``row_terms``: ``quad_product_panels``' sums, unrequantized (MatMulInteger's)."""
    m_count, n_count = out.shape
    quads = rows.shape[1]
    for panel in range(first, last):
        column = panel * WIDTH
        count = min(WIDTH, n_count - column)
        weights, terms_at = panels[panel].ctypes.data, column_terms.ctypes.data + column * 4
        for top in range(0, m_count, ROWS):
            height = min(ROWS, m_count - top)
            whole = count == WIDTH and height == ROWS
            place = out[top].ctypes.data + column * 4 if whole else spare.ctypes.data
            if height < ROWS:
                for r in range(height):
                    quad_sum_row(rows.ctypes.data + (top + r) * quads * 4, quads, weights, offsets.ctypes.data, quads,
                                 spare.ctypes.data + r * WIDTH * 4, WIDTH, terms_at,
                                 row_terms.ctypes.data + (top + r) * 4)
            else:
                quad_sum_tile(rows.ctypes.data + top * quads * 4, quads, weights, offsets.ctypes.data, quads, place,
                              n_count if whole else WIDTH, terms_at, row_terms.ctypes.data + top * 4)
            if not whole:
                for r in range(height):
                    for i in range(count):
                        out[top + r, column + i] = spare[r, i]


@jit
def conv_quad_sum_items(flat, group, block, packed, offsets, column_terms, row_terms, grid, spare, first, last):
    """``int8.conv_sum_items`` on byte quads (``quad_sum_tile``): the phases hold x's unsigned bytes
    u (``fill_quad_items``), so each output channel's sums carry ``row_terms[o]``, the pad byte p
    times minus the sum of its weight offsets (``sum (u - p) w' = sum u w' - p sum w'``, wrapping
    as int32 does); ``column_terms``: WIDTH zeros."""
    o_group, words, positions = grid.shape[1] // group, packed.shape[1], grid.shape[2]
    panels = -(-positions // WIDTH)
    for item in range(first, last):
        image, g, column, count, source = panel_item(item, group, panels, positions, flat, block)
        for o in range(g * o_group, (g + 1) * o_group, ROWS):
            place, stride, rows = sum_tile_place(grid, image, o, (g + 1) * o_group, column, count, spare)
            quad_sum_tile(packed.ctypes.data + o * words * 4, words, source, offsets.ctypes.data, words, place, stride,
                          column_terms.ctypes.data, row_terms.ctypes.data + o * 4)
            copy_sums(spare, grid, image, o, rows, column, count)


def conv_quad_sum_job(index, data, extra):
    """A crew job of ConvInteger's sums on quads (``int8.conv_crew_jobs``' block: its bias the row
    terms, its multiplier the column terms' address; the floats unread)."""
    block = carray(data, (_HEADER,), np.int64)
    grid = carray(as_pointer(block[_GRID]), (block[_IMAGES], block[_CHANNELS], block[_POSITIONS]), np.int32)
    a = conv_piece_args(index, data)
    columns = carray(as_pointer(a[6].ctypes.data), (WIDTH,), np.int32)
    conv_quad_sum_items(a[0], a[1], a[2], a[3], a[4], columns, a[5], grid, a[10], a[11], a[12])


def integer_product_job(index, data, extra):
    """A crew job: piece ``index`` of the integer product the block at ``data`` describes
    (``int8.product_crew_jobs``' block, with row terms, its bias the columns' terms and its output
    the int32 sums viewed as bytes; the multiplier and float terms unread)."""
    a = product_piece_args(index, data)
    view = a[8]
    out = carray(as_pointer(view.ctypes.data), (view.shape[0], view.shape[1] // 4), np.int32)
    quad_product_sums(a[0], carray(as_pointer(a[12]), (a[0].shape[0],), np.int32), a[1], a[2], a[3], out, a[9],
                      a[10], a[11])


@jit
def pack_activation_quads(w, flip, panels, column_sums):
    """The bytes ``w ^ flip`` of w (K, N), read as bytes, into panels (panels, quads, WIDTH * 4
    bytes): word (panel, quad, j) holds rows 4 * quad to 4 * quad + 3 of column panel * WIDTH + j,
    the first in the low byte (bytes past K and N left as they are: the rows' bytes there are zero,
    and those columns are dropped), and each column's sum of them into column_sums (int64)."""
    k_count, n_count = w.shape
    column_sums[:n_count] = 0
    for panel in range(panels.shape[0]):
        first = panel * WIDTH
        count = min(WIDTH, n_count - first)
        for k in range(k_count):
            q, t = k // 4, k % 4
            for j in range(count):
                byte = w[k, _u(first + j)] ^ flip
                panels[panel, q, _u(4 * j + t)] = byte
                column_sums[_u(first + j)] += np.int64(byte)


@jit
def activation_quad_batches(x, x_flip, w, w_flip, factor, pad, multiplier, zero_point, lo, hi, out, rows, rows8,
                            row_terms, panels, panels8, column_sums, bias, offsets, spare, first, last):
    """Batches ``first`` to ``last - 1`` of out (B, M, N) = the requantized product of two 8-bit
    activations x (B, M, K) and w (B, K, N), read as bytes, on byte quads: x's bytes ``x ^ x_flip``
    signed, w's ``w ^ w_flip`` unsigned, ``factor`` and ``pad`` the offsets of those bytes (w - zw =
    u - factor, x - zx = s - pad); rows, panels and the rest scratch of one batch."""
    k_count = x.shape[2]
    for b in range(first, last):
        fill_quad_rows(x[b], x_flip, factor, rows8, row_terms)
        pack_activation_quads(w[b], w_flip, panels8, column_sums)
        for n in range(w.shape[2]):
            bias[n] = np.int32(k_count * pad * factor - pad * column_sums[n])
        quad_product_panels(rows, row_terms, panels, offsets, bias, multiplier, zero_point, lo, hi, out[b], spare, 0,
                            panels.shape[0])


@jit
def quad_product_panels(rows, row_terms, panels, offsets, bias, multiplier, zero_point, lo, hi, out, spare, first,
                        last):
    """``int8.product_panels`` on byte quads: rows (M, quads) of signed quad words
    (``fill_quad_rows``), their ``row_terms``, panels of unsigned ones (``pack_activation_quads``);
    ``bias`` the columns' bias with their corrections."""
    m_count, n_count = out.shape
    quads = rows.shape[1]
    bytes_ = carray(as_pointer(spare.ctypes.data), (ROWS * WIDTH,), np.uint8)
    for panel in range(first, last):
        column = panel * WIDTH
        count = min(WIDTH, n_count - column)
        weights, bias_at, multiplier_at = panels[panel].ctypes.data, bias.ctypes.data + column * 4, \
            multiplier.ctypes.data + column * 4
        for top in range(0, m_count, ROWS):
            height = min(ROWS, m_count - top)
            whole = count == WIDTH and height == ROWS
            place = out[top].ctypes.data + column if whole else bytes_.ctypes.data
            if height < ROWS:  # NOTE: the last rows one at a time (a single row: a vector times a matrix)
                for r in range(height):
                    quad_row_columns(rows.ctypes.data + (top + r) * quads * 4, quads, weights, offsets.ctypes.data,
                                     quads, bytes_.ctypes.data + r * WIDTH, WIDTH, bias_at, multiplier_at,
                                     row_terms.ctypes.data + (top + r) * 4, zero_point, lo, hi)
            else:
                quad_tile_columns(rows.ctypes.data + top * quads * 4, quads, weights, offsets.ctypes.data, quads,
                                  place, n_count if whole else WIDTH, bias_at, multiplier_at,
                                  row_terms.ctypes.data + top * 4, zero_point, lo, hi)
            if not whole:
                copy_spare(bytes_, out[top:top + height], column, height, count)


def quad_product_job(index, data, extra):
    """A crew job: piece ``index`` of the quad product the block at ``data``
    (``int8.product_crew_jobs``'s, with row terms) describes."""
    a = product_piece_args(index, data)
    quad_product_panels(a[0], carray(as_pointer(a[12]), (a[0].shape[0],), np.int32), a[1], a[2], a[3], a[4], a[5],
                        a[6], a[7], a[8], a[9], a[10], a[11])


@functools.cache
def warm() -> None:
    """Compiles the quad kernels now, at build (their inputs and outputs are read as bytes)."""
    i32, i64, f32 = np.int32, np.int64, np.float32
    packed, offsets = np.zeros((ROWS, 1), i32), np.zeros(1, i64)
    compiled(pack_conv_quads, np.zeros((1, 2, 1, 1), np.int8), np.zeros(1, i64), packed)
    phases = np.zeros((1, 1, 1, 1, 1, 3, 3 + WIDTH), i32)
    compiled(fill_quad_items, np.zeros((1, 2, 3, 3), np.uint8), np.uint8(0), i64(0), phases, 1, 0, 0, 1, 1, 1, 0, 1)
    compiled(conv_quad_items, phases.reshape(-1), 1, phases.size, packed, offsets, np.zeros(ROWS, i32),
             np.ones(ROWS, f32), f32(0), f32(-1), f32(1), np.zeros((1, 1, 9), np.uint8),
             np.zeros((ROWS, WIDTH), i32), 0, 1)
    compiled(conv_quad_sum_items, phases.reshape(-1), 1, phases.size, packed, offsets, np.zeros(WIDTH, i32),
             np.zeros(ROWS, i32), np.zeros((1, 1, 9), i32), np.zeros((ROWS, WIDTH), i32), 0, 1)
    panels = np.zeros((1, 1, WIDTH), i32)
    compiled(pack_activation_quads, np.zeros((2, 1), np.uint8), np.uint8(0), panels.view(np.uint8), np.zeros(1, i64))
    rows, row_terms = np.zeros((1, 1), i32), np.zeros(1, i32)
    compiled(fill_quad_rows, np.zeros((1, 2), np.uint8), np.uint8(0), i64(128), rows.view(np.uint8), row_terms)
    compiled(quad_product_sums, rows, row_terms, panels, offsets, np.zeros(WIDTH, i32), np.zeros((1, 1), i32),
             np.zeros((ROWS, WIDTH), i32), 0, 1)
    compiled(quad_product_panels, rows, row_terms, panels, offsets, np.zeros(WIDTH, i32), np.ones(WIDTH, f32),
             f32(0), f32(-1), f32(1), np.zeros((1, 1), np.uint8), np.zeros((ROWS, WIDTH), i32), 0, 1)


# The block of a product of two activations on the crew (``lite.kernels.fast.crew.Jobs``): the
# arrays' addresses and shapes, the byte terms, the float terms as float64 bits; then per piece
# (first, last, rows, row terms, panels, column sums, bias, spare):
(_AX, _AW, _AOUT, _AB, _AM, _AK, _AN, _AXFLIP, _AWFLIP, _AFACTOR, _APAD, _AMULT, _AOFFSETS, _AQUADS, _APANELS,
 _AZERO, _ALO, _AHI) = range(18)
_ACTIVATION_HEADER = 18
_ACTIVATION_SCRATCH = 6


def activation_crew_jobs(x: np.ndarray, w: np.ndarray, out: np.ndarray, flips: tuple, factor: int, pad: int,
                         multiplier: np.ndarray, zero_point, lo, hi, offsets: np.ndarray, scratch: list[tuple],
                         bounds: list[tuple[int, int]]):
    """``activation_quad_batches``' batches as jobs for the crew (x, w and out (B, M, K), (B, K, N),
    (B, M, N) bytes; ``scratch``: each piece's (rows, rows' bytes, row terms, panels, panels' bytes,
    column sums, bias, spare), as the plan made them)."""
    from lite.kernels.fast.crew import Jobs, pieces_block

    arrays = [[rows, terms, panels, sums, bias, spare] for rows, _, terms, panels, _, sums, bias, spare in scratch]
    block = pieces_block(_ACTIVATION_HEADER, bounds, arrays)
    block[:_AZERO] = (x.ctypes.data, w.ctypes.data, out.ctypes.data, *x.shape, w.shape[2], *flips, factor, pad,
                      multiplier.ctypes.data, offsets.ctypes.data, offsets.size, scratch[0][3].shape[0])
    block[_AZERO:_ACTIVATION_HEADER].view(np.float64)[:] = float(zero_point), float(lo), float(hi)
    kept = (x, w, out, multiplier, offsets, *(a for piece in arrays for a in piece))
    return Jobs(activation_job, block, len(bounds), kept)


@jit
def _activation_piece(index, data):
    """Piece ``index`` of the product of two activations the block at ``data`` describes."""
    block = carray(data, (_ACTIVATION_HEADER + (2 + _ACTIVATION_SCRATCH) * (index + 1),), np.int64)
    floats = carray(data, (_ACTIVATION_HEADER,), np.float64)
    batches, m, k, n, quads, panels = block[_AB], block[_AM], block[_AK], block[_AN], block[_AQUADS], block[_APANELS]
    piece = _ACTIVATION_HEADER + (2 + _ACTIVATION_SCRATCH) * index
    rows_at, panels_at, columns = block[piece + 2], block[piece + 4], panels * WIDTH
    activation_quad_batches(
        carray(as_pointer(block[_AX]), (batches, m, k), np.uint8), np.uint8(block[_AXFLIP]),
        carray(as_pointer(block[_AW]), (batches, k, n), np.uint8), np.uint8(block[_AWFLIP]), block[_AFACTOR],
        block[_APAD], carray(as_pointer(block[_AMULT]), (columns,), np.float32), np.float32(floats[_AZERO]),
        np.float32(floats[_ALO]), np.float32(floats[_AHI]), carray(as_pointer(block[_AOUT]), (batches, m, n), np.uint8),
        carray(as_pointer(rows_at), (m, quads), np.int32), carray(as_pointer(rows_at), (m, quads * 4), np.uint8),
        carray(as_pointer(block[piece + 3]), (m,), np.int32), carray(as_pointer(panels_at), (panels, quads, WIDTH),
                                                                     np.int32),
        carray(as_pointer(panels_at), (panels, quads, WIDTH * 4), np.uint8),
        carray(as_pointer(block[piece + 5]), (columns,), np.int64),
        carray(as_pointer(block[piece + 6]), (columns,), np.int32),
        carray(as_pointer(block[_AOFFSETS]), (quads,), np.int64),
        carray(as_pointer(block[piece + 7]), (ROWS, WIDTH), np.int32), block[piece], block[piece + 1])


def activation_job(index, data, extra):
    """A crew job: piece ``index`` of the product of two activations the block at ``data`` describes."""
    _activation_piece(index, data)


@functools.cache
def warm_activations() -> None:
    """Compiles ``activation_quad_batches`` now, at build."""
    i32, i64, f32, u8 = np.int32, np.int64, np.float32, np.uint8
    rows, panels = np.zeros((1, 1), i32), np.zeros((1, 1, WIDTH), i32)
    compiled(activation_quad_batches, np.zeros((1, 1, 2), u8), u8(0), np.zeros((1, 2, 1), u8), u8(0), i64(128),
             i64(0), np.ones(WIDTH, f32), f32(0), f32(-1), f32(1), np.zeros((1, 1, 1), u8), rows, rows.view(u8),
             np.zeros(1, i32), panels, panels.view(u8), np.zeros(WIDTH, i64), np.zeros(WIDTH, i32),
             np.zeros(1, i64), np.zeros((ROWS, WIDTH), i32), 0, 1)


@jit
def _conv_piece(index, data, grid):
    """Piece ``index`` of the quad convolution the block at ``data`` (``int8.conv_crew_jobs``'s) describes."""
    a = conv_piece_args(index, data)
    conv_quad_items(a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8], a[9], grid, a[10], a[11], a[12])


def conv_quad_job(index, data, extra):
    """A crew job of a quad convolution (its output viewed as bytes)."""
    block = carray(data, (_HEADER,), np.int64)
    shape = (block[_IMAGES], block[_CHANNELS], block[_POSITIONS])
    _conv_piece(index, data, carray(as_pointer(block[_GRID]), shape, np.uint8))


@jit
def _fill_piece(index, data, x):
    block, phases, piece = fill_piece_args(index, data)
    flip = np.uint8(0x80) if block[_FSIGNED] else np.uint8(0)
    fill_quad_items(x, flip, block[_FZERO], phases, block[_FGROUP], block[_FBH], block[_FBW], block[_FSH],
                    block[_FSW], block[_FUSED], block[piece], block[piece + 1])


def fill_quad_job(index, data, extra):
    """A crew job: piece ``index`` of the quad fill the block at ``data`` (``int8.fill_crew_jobs``'s,
    its zero point word the pad byte) describes; x read as bytes."""
    block = carray(data, (_FILL_HEADER,), np.int64)
    shape = (block[_FN], block[_FC], block[_FH], block[_FW])
    _fill_piece(index, data, carray(as_pointer(block[_FX]), shape, np.uint8))
