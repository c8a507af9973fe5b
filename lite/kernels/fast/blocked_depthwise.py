"""Depthwise 2-D convolution on the channel-blocked layout (NCHW16c), float32, bias and activation fused.

An image of C channels on an H x W plane is stored as (CB, H, W, LANES) with CB = ceil(C / LANES):
channel c at [c // LANES, h, w, c % LANES], the channels past C zero. ``depthwise`` computes, for
the channel blocks ``first`` to ``last - 1`` (threads split the blocks),

    out[cb, oh, ow, l] = act(clip(b[cb, l] + sum over taps (i, j) of
        x[cb, oh * sh - pt + i * dh, ow * sw - pl + j * dw, l] * w[cb, i * kw + j, l], lo, hi))

where the taps that fall in the zero padding are skipped (not multiplied by zero).

A block's 16 channels are one 512-bit vector, so a tap at an output position is one vector FMA.
``_span`` emits LLVM IR of its own (``<16 x float>``): the sums of 16 output positions of a row
(or 4 positions of 4 blocks, while four blocks are left: small planes' rows are short) stay in
registers over every tap, each weight vector loaded once for all of them, and are clipped and
stored once. Each row's interior (the positions whose taps are all on the plane) runs in such
spans with the rows of taps that are on the plane; the border columns run down the interior
rows the same way, each with its columns of taps; the corners one position at a time. The tap
ranges come from per-call tables, so the loops hold no bounds check and no division; an
activation of ``lite.kernels.fast.activation`` runs over each finished row while it is in cache.
(Plain numba loops over the 16 lanes, the sums in ``out`` or in a local (8, 16) array, ran many
times slower on 3x3 layers without padding.)

It runs as fast as onnxruntime's own NCHWc depthwise kernel on the same buffers, and its spans
near the machine's peak in L1; the large planes run at the memory's pace (layer by layer:
docs/performance.md, kernel measurements).
"""

from __future__ import annotations

import functools

import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic

from lite.kernels.fast import compiled, jit, wide_registers
from lite.kernels.fast.activation import CLIP_CODE, activate_run
from lite.kernels.fast.tile import FLOAT, INDEX, LANES, VECTOR, emit_loop, splat, vector_call


def arrange(weight: np.ndarray, bias: np.ndarray | None, blocks: int) -> tuple[np.ndarray, np.ndarray]:
    """A depthwise weight (C, 1, KH, KW) and bias (C,) or None as ``depthwise`` reads them: the
    weight (blocks, KH * KW, LANES) and the bias (blocks, LANES), zero past C (and without a bias)."""
    channels, taps = weight.shape[0], weight.shape[2] * weight.shape[3]
    w = np.zeros((blocks * LANES, taps), np.float32)
    w[:channels] = weight.reshape(channels, taps)
    b = np.zeros(blocks * LANES, np.float32)
    if bias is not None:
        b[:channels] = bias
    return np.ascontiguousarray(w.reshape(blocks, LANES, taps).transpose(0, 2, 1)), b.reshape(blocks, LANES)


def _load(builder: ir.IRBuilder, base: ir.Value, index: ir.Value) -> ir.Value:
    """The vector at float ``index`` from the float pointer ``base`` (unaligned)."""
    return builder.load(builder.bitcast(builder.gep(base, [index]), VECTOR.as_pointer()), align=4)


def _emit_span(builder: ir.IRBuilder, addresses: list[ir.Value], shape: list[ir.Value], blocks: int,
               positions: int, kind: int, low: ir.Value, high: ir.Value) -> None:
    """One span (``_span``): its ``blocks * positions`` sums kept in registers over every tap, then
    clipped and stored once; ``kind`` past 0: the positions' offsets as constants (SHAPE)."""
    x_p, w_p, b_p, out_p = (builder.inttoptr(at, FLOAT.as_pointer()) for at in addresses)
    rows, cols, row_step, col_step, w_row, step, out_step, _, x_block, w_block, out_block = shape
    stride, columns = FIXED_COLUMNS.get(kind, (kind, 0))
    if columns:
        col_step = INDEX(LANES)
    x_at = [INDEX(p * stride * LANES) if kind else builder.mul(step, INDEX(p)) for p in range(positions)]
    x_q, w_q, out_q = ([builder.mul(block_step, INDEX(q)) for q in range(blocks)]
                       for block_step in (x_block, w_block, out_block))
    reads = [builder.add(x_q[k // positions], x_at[k % positions]) for k in range(blocks * positions)]

    def row(r, sums):
        """The taps of tap row ``r``."""
        x_row, w_r = builder.gep(x_p, [builder.mul(r, row_step)]), builder.gep(w_p, [builder.mul(r, w_row)])

        def column(c, sums):
            """Tap (r, c): a weight vector a block, an FMA a sum."""
            x_c, w_c = builder.gep(x_row, [builder.mul(c, col_step)]), builder.gep(w_r, [builder.mul(c, INDEX(LANES))])
            weights = [_load(builder, w_c, w_q[q]) for q in range(blocks)]
            return [vector_call(builder, "fma", _load(builder, x_c, at), weights[k // positions], total)
                    for k, (at, total) in enumerate(zip(reads, sums, strict=True))]
        if columns:  # NOTE: unrolled, so the loads of x that neighbouring taps share are one load
            for c in range(columns):
                sums = column(INDEX(c), sums)
            return sums
        return emit_loop(builder, cols, sums, column)

    bias = [_load(builder, b_p, INDEX(q * LANES)) for q in range(blocks)]
    sums = emit_loop(builder, rows, [bias[k // positions] for k in range(blocks * positions)], row)
    low_v, high_v = splat(builder, low), splat(builder, high)
    for k, total in enumerate(sums):
        total = builder.select(builder.fcmp_ordered("<", total, low_v), low_v, total)
        total = builder.select(builder.fcmp_ordered(">", total, high_v), high_v, total)
        at = builder.add(out_q[k // positions], INDEX(k % positions * LANES) if kind else
                         builder.mul(out_step, INDEX(k % positions)))
        builder.store(total, builder.bitcast(builder.gep(out_p, [at]), VECTOR.as_pointer()), align=4)


SHAPE = 11
"""A span's shape tuple: (rows, cols, row_step, col_step, w_row, step, out_step, kind, x_block,
w_block, out_block): the taps' rows and columns; the floats between x's tap rows, tap columns
and weight rows, between the span's positions in x and in out; ``kind``: 1 or 2 where the
positions are a row's neighbours at stride 1 or 2 (steps LANES and 2 * LANES, out_step LANES),
one of FIXED_COLUMNS where besides that the tap columns are neighbours and as many as it says,
else 0; the floats between the span's blocks in x, w and out."""
FIXED_KINDS = ((3, 4), (5, 6))
"""The kind of a row of stride s (1 or 2) whose tap columns are neighbours and 3 or 5:
FIXED_KINDS[s - 1][(columns - 3) // 2]."""
FIXED_COLUMNS = {FIXED_KINDS[s - 1][(c - 3) // 2]: (s, c) for s in (1, 2) for c in (3, 5)}
"""Kinds (stride, tap columns) whose tap columns are unrolled with constant offsets: the x vectors
that neighbouring positions' taps share are loaded once (3 x 3 at stride 1: 6 loads a tap row for
4 positions, not 12), and the column loop's counting is gone (measured: docs/performance.md,
depthwise tap columns)."""


def _span(blocks: int, positions: int):
    """An intrinsic ``(x, w, b, out, shape, lo, hi)`` for ``positions`` output positions p of
    ``blocks`` blocks q (SHAPE): out[q * out_block + p * out_step + l] = clip(b[q * LANES + l] + sum
    over r < rows, c < cols of x[q * x_block + r * row_step + c * col_step + p * step + l] *
    w[q * w_block + r * w_row + c * LANES + l], lo, hi); x, w, b and out are addresses. Kinds 1 and
    2 have code of their own with constant offsets (with the steps as values, LLVM chains the
    positions' addresses: a serial add before each load)."""
    @intrinsic
    def span(typingctx, x, w, b, out, shape, lo, hi):
        """The span's signature and code."""
        def codegen(context, builder, signature, args):
            """The span's IR: for more than one position, a copy for each kind."""
            addresses, (low, high) = args[:4], args[5:]
            shape_v = [builder.extract_value(args[4], k) for k in range(SHAPE)]
            if positions == 1:
                _emit_span(builder, addresses, shape_v, blocks, 1, 0, low, high)
                return context.get_dummy_value()
            done = builder.append_basic_block("span.stored")
            cases = [builder.append_basic_block(f"span.kind{k}") for k in range(3 + len(FIXED_COLUMNS))]
            switch = builder.switch(shape_v[7], cases[0])
            for kind, block in enumerate(cases):
                if kind:
                    switch.add_case(INDEX(kind), block)
                builder.position_at_end(block)
                _emit_span(builder, addresses, shape_v, blocks, positions, kind, low, high)
                builder.branch(done)
            builder.position_at_end(done)
            return context.get_dummy_value()
        return types.void(*(types.int64,) * 4, shape, types.float32, types.float32), codegen
    return span


_span16, _span8, _span4, _span1 = (_span(1, positions) for positions in (16, 8, 4, 1))
_quad4, _quad1 = _span(4, 4), _span(4, 1)
WIDEST = 16 if wide_registers() else 4
"""The most positions a span of one block takes: 16 sums fill half of AVX-512's 32 registers; with
AVX2's 16, where each 16-float sum takes two, 16 or 8 of them spilled to the stack."""
QUAD = 4
"""Blocks the spans take at once while that many are left: a row of a small plane fills a span
of 4 positions of 4 blocks, not one of 16, and a border position of 4 blocks is four chains of
dependent FMAs, not one."""
QUAD_SPANS = wide_registers()
"""Whether a span of 4 positions takes the 4 blocks at once (16 sums: with AVX2's 16 registers, where
each takes two, they spilled to the stack, so there each block's span runs in turn)."""
QUAD_ROW = 14
"""With AVX2's registers, the widest output row (stride 1) whose blocks run in quads: on wider rows,
and at stride 2, the blocks one at a time took 0.48-0.84 of the time of quads (measured:
docs/performance.md, depthwise quads), and on 7 x 7 and 14 x 14 stride-1 planes, whose border
positions are many, the quads 0.84-0.93 of the single blocks'."""


@jit
def _line(blocks, x_at, w_at, b_at, out_at, shape, lo, hi, count):
    """``count`` positions along a row or column (``shape``'s steps apart) of ``blocks`` blocks
    (QUAD or 1) in spans as wide as there are (4 positions for QUAD blocks; 16, 8, 4 for one), the
    last span moved back to end at the last position (its positions before are computed again,
    the same): fewer, wider spans. The callers' shape tuples keep their constant fields as
    literals (kind 0 down the columns, out_step LANES along the rows), so this compiles once for
    each with those folded in: faster on 7 x 7 planes than one version for both."""
    step, out_step, done, widest = shape[5] * 4, shape[6] * 4, 0, WIDEST if blocks == 1 else 4
    while done < count:
        rest = count - done
        size = 1
        for wide in (16, 8, 4):
            if size == 1 and wide <= widest and wide <= count and (rest > wide // 2 or wide == 4 and rest > 1):
                size = wide
        start = min(done, count - size)
        x_span, out_span = x_at + start * step, out_at + start * out_step
        if blocks == QUAD:
            if size == 4 and QUAD_SPANS:
                _quad4(x_span, w_at, b_at, out_span, shape, lo, hi)
            elif size == 4:  # NOTE: each block's span of 4 in turn: 16 sums of 16 floats spill AVX2's registers
                for q in range(QUAD):
                    _span4(x_span + q * shape[8] * 4, w_at + q * shape[9] * 4, b_at + q * LANES * 4,
                           out_span + q * shape[10] * 4, shape, lo, hi)
            else:
                _quad1(x_span, w_at, b_at, out_span, shape, lo, hi)
        elif size == 16:
            _span16(x_span, w_at, b_at, out_span, shape, lo, hi)
        elif size == 8:
            _span8(x_span, w_at, b_at, out_span, shape, lo, hi)
        elif size == 4:
            _span4(x_span, w_at, b_at, out_span, shape, lo, hi)
        else:
            _span1(x_span, w_at, b_at, out_span, shape, lo, hi)
        done = start + size


@jit
def tap_ranges(count, stride, pad, dilation, taps, size):
    """(count, 2): for each output index along one axis, the taps [start, end) that read inside
    the input's ``size`` (start = end where none does)."""
    ranges = np.empty((count, 2), np.int64)
    for o in range(count):
        begin = o * stride - pad
        start = 0 if begin >= 0 else min(taps, (dilation - 1 - begin) // dilation)
        end = taps if begin + (taps - 1) * dilation < size else (size - begin + dilation - 1) // dilation
        ranges[o, 0], ranges[o, 1] = start, max(start, min(taps, end))
    return ranges


@jit
def interior(ranges, taps):
    """The output indices [first, last) whose every tap reads inside the input (an interval)."""
    first = 0
    while first < ranges.shape[0] and (ranges[first, 0] != 0 or ranges[first, 1] != taps):
        first += 1
    last = first
    while last < ranges.shape[0] and ranges[last, 0] == 0 and ranges[last, 1] == taps:
        last += 1
    return first, last


@jit
def _point(blocks, x_at, w_at, b_at, out_at, shape, lo, hi):
    """One position of ``blocks`` blocks (QUAD or 1): a corner."""
    if blocks == QUAD:
        _quad1(x_at, w_at, b_at, out_at, shape, lo, hi)
    else:
        _span1(x_at, w_at, b_at, out_at, shape, lo, hi)


@jit
def _columns(at, blocks, conv, sizes, cols, top, bottom, left, right, lo, hi):
    """The border columns (before ``left``, from ``right`` on) down the interior rows ``top`` to
    ``bottom - 1``, each with its columns of taps; ``at``: the addresses of the blocks' x, w, b and
    out; ``conv`` (kh, kw, sh, sw, pt, pl, dh, dw); ``sizes`` (H, W, OH, OW)."""
    kh, kw, sh, sw, pt, pl, dh, dw = conv
    height, width, out_h, out_w = sizes
    for k in range(left + out_w - right):
        ow = k if k < left else k + right - left
        j = cols[ow, 0]
        shape = (kh, cols[ow, 1] - j, dh * width * LANES, dw * LANES, kw * LANES, sh * width * LANES, out_w * LANES, 0,
                 height * width * LANES, kh * kw * LANES, out_h * out_w * LANES)
        x_at = at[0] + (((top * sh - pt) * width + ow * sw - pl + j * dw) * LANES) * 4
        _line(blocks, x_at, at[1] + j * LANES * 4, at[2], at[3] + (top * out_w + ow) * LANES * 4, shape, lo, hi,
              bottom - top)


@jit
def _corners(at, blocks, conv, sizes, cols, oh, i, end, left, right, lo, hi):
    """The border columns of a border row ``oh`` one by one, each with its columns of taps and the
    row's rows of taps ``i`` to ``end - 1``."""
    kh, kw, sh, sw, pt, pl, dh, dw = conv
    height, width, out_h, out_w = sizes
    line = at[0] + (((oh * sh - pt + i * dh) * width - pl) * LANES) * 4
    for k in range(left + out_w - right):
        ow = k if k < left else k + right - left
        j = cols[ow, 0]
        shape = (end - i, cols[ow, 1] - j, dh * width * LANES, dw * LANES, kw * LANES, 0, 0, 0, height * width * LANES,
                 kh * kw * LANES, out_h * out_w * LANES)
        _point(blocks, line + (ow * sw + j * dw) * LANES * 4, at[1] + (i * kw + j) * LANES * 4, at[2],
               at[3] + (oh * out_w + ow) * LANES * 4, shape, lo, hi)


@jit
def _blocks(x, w, b, out, block, blocks, conv, lo, hi, code, alpha, rows, cols, first_row, last_row):
    """Output rows ``first_row`` to ``last_row - 1`` of ``blocks`` blocks from ``block``: the border
    columns down the interior rows, then row by row the interior columns (with the rows of taps
    on the plane) and, in the border rows, the corners; the activation of ``code`` over each
    finished row."""
    kh, kw, sh, sw, pt, pl, dh, dw = conv
    sizes = height, width, out_h, out_w = x.shape[1], x.shape[2], out.shape[1], out.shape[2]
    top, bottom = interior(rows, kh)
    left, right = interior(cols, kw)
    x_block, w_block, out_block = height * width * LANES, kh * kw * LANES, out_h * out_w * LANES
    at = (x.ctypes.data + block * x_block * 4, w.ctypes.data + block * w_block * 4, b.ctypes.data + block * LANES * 4,
          out.ctypes.data + block * out_block * 4)
    if max(top, first_row) < min(bottom, last_row):
        _columns(at, blocks, conv, sizes, cols, max(top, first_row), min(bottom, last_row), left, right, lo, hi)
    flat, kind = out.reshape(out.size), sw if sw <= 2 else 0
    if dw == 1 and sw <= 2 and (kw == 3 or kw == 5):
        kind = FIXED_KINDS[sw - 1][(kw - 3) // 2]
    for oh in range(first_row, last_row):
        i, end = rows[oh, 0], rows[oh, 1]
        line = at[0] + (((oh * sh - pt + i * dh) * width + left * sw - pl) * LANES) * 4
        shape = (end - i, kw, dh * width * LANES, dw * LANES, kw * LANES, sw * LANES, LANES, kind, x_block, w_block,
                 out_block)
        _line(blocks, line, at[1] + i * kw * LANES * 4, at[2], at[3] + (oh * out_w + left) * LANES * 4, shape, lo, hi,
              right - left)
        if oh < top or oh >= bottom:
            _corners(at, blocks, conv, sizes, cols, oh, i, end, left, right, lo, hi)
        for q in range(block, block + blocks if code != CLIP_CODE else block):
            activate_run(flat, q * out_block + oh * out_w * LANES, out_w * LANES, np.float32(0), code, alpha)


@jit
def depthwise(x, w, b, out, kh, kw, sh, sw, pt, pl, dh, dw, lo, hi, code, alpha, first, last, first_row=0,
              last_row=-1):
    """out (CB, OH, OW, LANES) = act(clip(b + depthwise(x (CB, H, W, LANES), w), lo, hi)) for the
    blocks ``first`` to ``last - 1`` and their output rows ``first_row`` to ``last_row - 1`` (-1:
    to the last), with ``arrange``'s w and b; the activation of ``code``
    (``lite.kernels.fast.activation``; CLIP_CODE: none) with ``alpha``."""
    rows = tap_ranges(out.shape[1], sh, pt, dh, kh, x.shape[1])
    cols = tap_ranges(out.shape[2], sw, pl, dw, kw, x.shape[2])
    end_row = out.shape[1] if last_row < 0 else last_row
    block, quads = first, QUAD_SPANS or sw == 1 and out.shape[2] <= QUAD_ROW
    while block < last:
        blocks = QUAD if quads and last - block >= QUAD else 1
        _blocks(x, w, b, out, block, blocks, (kh, kw, sh, sw, pt, pl, dh, dw), lo, hi, code, alpha, rows, cols,
                first_row, end_row)
        block += blocks


@functools.cache
def warm() -> None:
    """Compiles ``depthwise`` now (at build), not in the first call."""
    x, out = np.zeros((1, 3, 3, LANES), np.float32), np.zeros((1, 3, 3, LANES), np.float32)
    w, b = arrange(np.zeros((3, 1, 3, 3), np.float32), None, 1)
    compiled(depthwise, x, w, b, out, 3, 3, 1, 1, 1, 1, 1, 1, np.float32(0), np.float32(6), CLIP_CODE,
             np.float32(1), 0, 1, 0, 3)
