"""Quantized depthwise convolutions on channel blocks: 8-bit NCHW planes in and out, the taps on
vectors of 16 channels (``lite.kernels.fast.blocked_depthwise``), exact sums in float32.

``lite.kernels.fast.int8_depthwise`` runs a quantized depthwise convolution plane by plane. On
stride-2 layers it copies each plane into its stride phases row by row, and on small planes a
plane's fixed costs outweigh its few taps. Here 16 channels go at once:

- 16 x 16 byte blocks (16 channels' planes at 16 positions) are transposed in registers
  (``transpose_bytes``: four rounds of byte, word, doubleword and quadword interleaves), so each
  position's 16 channels are one vector, converted to float32 minus x's zero point;
- the float32 blocked depthwise kernel sums the taps (padding skipped, as zeros would add nothing),
  starting from the bias;
- each 16 positions' sums are requantized as vectors and transposed back into the 16 output planes
  in one step (``requantize_transposed``: ``clip(rint(sum * multiplier) + zero_point, lo, hi)``,
  ``lite.ops.quant.requantize``'s formula, as ``int8_depthwise._byte`` computes it).

Every product, partial sum and the bias are integers whose magnitudes the caller checked stay
below 2 ** 24, so the float32 sums are exact in any order and the bytes equal
``int8_depthwise``'s. A position or channel past the last whole 16 takes scalar loops.
``fits`` says where this runs faster than the plane-by-plane kernel (docs/performance.md).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import numpy as np
from llvmlite import ir
from numba import carray, types
from numba import uint64 as _u  # NOTE: unsigned indices skip the negative-index check, so the loops vectorize
from numba.extending import intrinsic

from lite.kernels.fast import compiled, jit
from lite.kernels.fast.activation import CLIP_CODE
from lite.kernels.fast.blocked_depthwise import QUAD, arrange, depthwise
from lite.kernels.fast.crew import Jobs, as_pointer
from lite.kernels.fast.int8_depthwise import _byte
from lite.kernels.fast.tile import LANES, VECTOR, splat, vector_call
from lite.kernels.window import Geometry

BYTES = ir.VectorType(ir.IntType(8), LANES)
WORDS = ir.VectorType(ir.IntType(32), LANES)
SMALL_PLANE = 64
"""The most output positions a stride-1 layer has for this kernel to run it: on larger planes the
plane-by-plane kernel's long runs are faster."""
LARGE_PLANE = 56 * 56
"""The most input positions a layer has for this kernel to run it: a block of a larger plane (16
channels' float32 copy, 800 KiB at 112 x 112) left the second core's pieces waiting on memory,
slower than the plane-by-plane kernel at two threads."""
GROUP_BYTES = 1 << 18
"""The most bytes of float32 input the blocks of one pass take (QUAD blocks of a small plane at
once, else one)."""


def fits(g: Geometry, outputs: int) -> bool:
    """Whether this kernel runs the depthwise layer of geometry ``g`` (one output channel an input
    channel, an input plane of at most LARGE_PLANE positions): stride 2 or more, or a stride-1
    output plane of at most SMALL_PLANE positions."""
    if outputs != g.x[1] or g.x[2] * g.x[3] > LARGE_PLANE:
        return False
    return max(g.strides) >= 2 or g.out[0] * g.out[1] <= SMALL_PLANE


def _interleave_mask(width: int, high: bool) -> ir.Constant:
    """The shuffle of two byte vectors interleaving their ``width``-byte elements of the low (or
    high) halves: x86's unpack instructions."""
    count, first = LANES // width, LANES // width // 2 if high else 0
    mask = []
    for k in range(count // 2):
        start = (first + k) * width
        mask += [start + j for j in range(width)] + [LANES + start + j for j in range(width)]
    return ir.Constant(WORDS, mask)


_OUTPUT_ORDER = (0, 8, 4, 12, 2, 10, 6, 14, 1, 9, 5, 13, 3, 11, 7, 15)
"""Which vector of the last round holds the transposed row j (the rounds leave them bit-reversed)."""


def _transposed(builder: ir.IRBuilder, rows: list[ir.Value]) -> list[ir.Value]:
    """The 16 byte vectors ``rows`` transposed: row j of the result is byte j of every row."""
    for width in (1, 2, 4, 8):
        paired = [None] * LANES
        for i in range(LANES):
            if (i // width) % 2 == 0:
                low, high = _interleave_mask(width, False), _interleave_mask(width, True)
                paired[i] = builder.shuffle_vector(rows[i], rows[i + width], low)
                paired[i + width] = builder.shuffle_vector(rows[i], rows[i + width], high)
        rows = paired
    return [rows[_OUTPUT_ORDER[j]] for j in range(LANES)]


def _address(builder: ir.IRBuilder, base: ir.Value, stride: ir.Value, row: int) -> ir.Value:
    return builder.inttoptr(builder.add(base, builder.mul(stride, ir.Constant(stride.type, row))),
                            BYTES.as_pointer())


@intrinsic
def transpose_bytes(typingctx, source, source_stride, target, target_stride):
    """16 x 16 bytes: target row j (at ``target + j * target_stride``) gets byte j of each source
    row r (at ``source + r * source_stride``); addresses and strides in bytes."""
    def codegen(context, builder, signature, args):
        source, source_step, target, target_step = args
        rows = [builder.load(_address(builder, source, source_step, r), align=1) for r in range(LANES)]
        for j, row in enumerate(_transposed(builder, rows)):
            builder.store(row, _address(builder, target, target_step, j), align=1)
        return context.get_dummy_value()
    return types.void(types.intp, types.intp, types.intp, types.intp), codegen


@intrinsic
def requantize_transposed(typingctx, sums, multiplier, zero_point, lo, hi, target, target_stride):
    """16 positions' sums of 16 channels (``sums``: 256 float32, a position's 16 channels
    contiguous), each requantized with its channel's ``multiplier`` (16 float32) as
    ``int8_depthwise._byte``, stored as channel k's 16 bytes at ``target + k * target_stride``."""
    def codegen(context, builder, signature, args):
        sums, multiplier, zero_point, lo, hi, target, target_step = args
        pointer = VECTOR.as_pointer()
        scale = builder.load(builder.inttoptr(multiplier, pointer), align=4)
        shift, low, high = (splat(builder, value) for value in (zero_point, lo, hi))
        rows = []
        for p in range(LANES):
            total = builder.load(builder.inttoptr(builder.add(sums, ir.Constant(sums.type, p * LANES * 4)), pointer),
                                 align=4)
            value = builder.fadd(vector_call(builder, "rint", builder.fmul(total, scale)), shift)
            value = vector_call(builder, "minnum", vector_call(builder, "maxnum", value, low), high)
            rows.append(builder.trunc(builder.fptosi(value, WORDS), BYTES))
        for k, row in enumerate(_transposed(builder, rows)):
            builder.store(row, _address(builder, target, target_step, k), align=1)
        return context.get_dummy_value()
    return types.void(types.intp, types.intp, types.float32, types.float32, types.float32, types.intp,
                      types.intp), codegen


@jit
def _blocks_in(xf, base, plane, lanes, x_zero_point, xb, at, staging):
    """``lanes`` channel planes of ``xf`` from ``base`` into xb's block at ``at`` (plane, LANES) as
    float32 minus x's zero point: whole 16 x 16 blocks transposed, the rest one by one."""
    start = 0
    if lanes == LANES:
        while start + LANES <= plane:
            transpose_bytes(xf.ctypes.data + base + start, plane, staging.ctypes.data, LANES)
            for i in range(LANES * LANES):
                xb[_u(at + start * LANES + i)] = np.float32(staging[_u(i)]) - x_zero_point
            start += LANES
    for p in range(start, plane):
        for k in range(lanes):
            xb[_u(at + p * LANES + k)] = np.float32(xf[_u(base + k * plane + p)]) - x_zero_point


@jit
def _blocks_out(sums, at, multiplier, first_channel, lanes, zero_point, lo, hi, of, base, size):
    """The sums of one block (``size`` positions of LANES, from ``at``) requantized into ``lanes``
    output planes of ``of`` from ``base``."""
    start = 0
    scale = multiplier[first_channel:first_channel + LANES]
    if lanes == LANES:
        while start + LANES <= size:
            requantize_transposed(sums.ctypes.data + (at + start * LANES) * 4, scale.ctypes.data, zero_point, lo, hi,
                                  of.ctypes.data + base + start, size)
            start += LANES
    for p in range(start, size):
        for k in range(lanes):
            of[_u(base + k * size + p)] = _byte(sums[_u(at + p * LANES + k)], scale[k], zero_point, lo, hi)


@jit
def block_items(x, x_zero_point, w, b, multiplier, zero_point, lo, hi, out, conv, xb, sums, staging, first, last):
    """Blocks ``first`` to ``last - 1`` (of N * ceil(C / LANES), image by image) of out (N, C, OH,
    OW) bytes from x (N, C, H, W) 8-bit; ``w`` and ``b``: the weight minus its zero points and the
    bias as ``blocked_depthwise.arrange`` lays them out (float32); ``multiplier`` float32, LANES a
    block; ``conv`` (kh, kw, sh, sw, pt, pl, dh, dw); scratch ``xb`` and ``sums`` (float32, as many
    floats as a pass's blocks of the input's and the output's planes) and ``staging`` (256 of x's
    dtype)."""
    n, c, h, width = x.shape
    oh, ow = out.shape[2], out.shape[3]
    kh, kw, sh, sw, pt, pl, dh, dw = conv
    plane, size, blocks, taps = h * width, oh * ow, (c + LANES - 1) // LANES, kh * kw
    xf, of, xbf, sf = x.reshape(x.size), out.reshape(out.size), xb.reshape(xb.size), sums.reshape(sums.size)
    most = max(1, min(QUAD, xb.size // (plane * LANES)))
    unbounded, job = np.float32(np.inf), first
    while job < last:
        image, block = job // blocks, job % blocks
        group = min(most, last - job, blocks - block)
        for g in range(group):
            channel = (block + g) * LANES
            _blocks_in(xf, (image * c + channel) * plane, plane, min(LANES, c - channel), x_zero_point, xbf,
                       g * plane * LANES, staging)
        xs = carray(as_pointer(xb.ctypes.data), (group, h, width, LANES), np.float32)
        ws = carray(as_pointer(w.ctypes.data + block * taps * LANES * 4), (group, taps, LANES), np.float32)
        bs = carray(as_pointer(b.ctypes.data + block * LANES * 4), (group, LANES), np.float32)
        outs = carray(as_pointer(sums.ctypes.data), (group, oh, ow, LANES), np.float32)
        depthwise(xs, ws, bs, outs, kh, kw, sh, sw, pt, pl, dh, dw, -unbounded, unbounded, CLIP_CODE, np.float32(1),
                  0, group, 0, oh)
        for g in range(group):
            channel = (block + g) * LANES
            _blocks_out(sf, g * size * LANES, multiplier, channel, min(LANES, c - channel), zero_point, lo, hi, of,
                        (image * c + channel) * size, size)
        job += group


class BlockedInt8Depthwise:
    """One geometry's arguments for ``block_items``: the weight, bias and multipliers laid out in
    blocks, the scratch shapes per piece (float32, float32, x's dtype) and the items' count."""

    def __init__(self, g: Geometry) -> None:
        (_, channels, h, w), (kh, kw), (sh, sw), (dh, dw), (pt, pl) = g.x, g.kernel, g.strides, g.dilations, g.begins
        self.geometry, self.blocks = g, -(-channels // LANES)
        self.conv = (kh, kw, sh, sw, pt, pl, dh, dw)
        group = max(1, min(QUAD, self.blocks, GROUP_BYTES // (h * w * LANES * 4)))
        self.scratch = ((group * h * w * LANES,), (group * g.out[0] * g.out[1] * LANES,), (LANES * LANES,))

    def arranged(self, weight: np.ndarray, bias: np.ndarray, multiplier: np.ndarray) -> tuple[np.ndarray, ...]:
        """The weight (O, taps) and bias (O,) as ``arrange`` lays them out, the multipliers LANES a block."""
        (kh, kw), channels = self.geometry.kernel, weight.shape[0]
        w, b = arrange(weight.reshape(channels, 1, kh, kw), bias, self.blocks)
        scale = np.zeros(self.blocks * LANES, np.float32)
        scale[:channels] = multiplier
        return w, b, scale

    def count(self, images: int, outputs: int) -> int:
        """The items of ``block_items``: the images' blocks (``outputs`` channels, as many as in)."""
        return images * self.blocks

    @staticmethod
    def scratch_kinds(dtype: np.dtype) -> tuple[type, ...]:
        """The dtypes of ``scratch``'s arrays: the staging bytes are x's."""
        return np.float32, np.float32, dtype

    def call(self, x: np.ndarray, floats: tuple, arrays: tuple, out: np.ndarray) -> Callable[..., None]:
        """``block_items`` with the loop's arguments (``floats``: x's zero point, the output's zero
        point, lo, hi; ``arrays``: ``arranged``'s), waiting for a piece's scratch, first and last."""
        f32 = np.float32
        return partial(block_items, x, f32(floats[0]), *arrays, *map(f32, floats[1:]), out, self.conv)

    def crew_jobs(self, x: np.ndarray, floats: tuple, arrays: tuple, out: np.ndarray,
                  scratch: list[list[np.ndarray]], bounds: list[tuple[int, int]]) -> Jobs:
        """The crew's jobs for ``bounds``, ``call``'s arguments in their block."""
        block = crew_block(self, x, arrays, floats, out, scratch, bounds)
        return Jobs(blocked_job, block, len(bounds), (x, *arrays, out, *(a for piece in scratch for a in piece)))

    @staticmethod
    def crew_job() -> Callable:
        return blocked_job

    def warm(self, dtype: np.dtype) -> None:
        """Compiles ``block_items`` for ``dtype`` (int8 or uint8) inputs now, on one image of zeros."""
        g, f32 = self.geometry, np.float32
        x = np.zeros((1, *g.x[1:]), dtype)
        w, b, scale = self.arranged(np.zeros((g.x[1], g.kernel[0] * g.kernel[1]), f32), np.zeros(g.x[1], f32),
                                    np.ones(g.x[1], f32))
        scratch = [np.zeros(shape, kind) for shape, kind in zip(self.scratch, self.scratch_kinds(dtype), strict=True)]
        compiled(block_items, x, f32(0), w, b, scale, f32(0), f32(0), f32(255), np.zeros((1, g.x[1], *g.out), np.uint8),
                 self.conv, *scratch, 0, 1)


# The block of a crew's quantized blocked depthwise convolution (``lite.kernels.fast.crew.Jobs``),
# then per piece (first, last, xb, sums, staging):
(_X, _N, _C, _H, _W, _SIGNED, _WEIGHT, _BIAS, _MULTIPLIER, _OUT, _OH, _OW, _CONV, _XB_N, _SUMS_N, _X_ZERO, _ZERO, _LO,
 _HI) = (*range(12), 12, 20, 21, 22, 23, 24, 25)
HEADER, PER_PIECE = 26, 5


def crew_block(kernel: BlockedInt8Depthwise, x: np.ndarray, arranged: tuple[np.ndarray, ...], floats: tuple,
               out: np.ndarray, scratch: list[list[np.ndarray]], bounds: list[tuple[int, int]]) -> np.ndarray:
    """The int64 block ``blocked_job`` reads: the loop's arguments (``arranged``: weight, bias and
    multipliers; ``floats``: x's zero point, the output's zero point, lo, hi), then each piece's
    bounds and scratch."""
    from lite.kernels.fast.crew import pieces_block

    block = pieces_block(HEADER, bounds, scratch)
    w, b, scale = arranged
    block[:_X_ZERO] = (x.ctypes.data, *x.shape, x.dtype == np.int8, w.ctypes.data, b.ctypes.data, scale.ctypes.data,
                       out.ctypes.data, *out.shape[2:], *kernel.conv, scratch[0][0].size, scratch[0][1].size)
    block[_X_ZERO:HEADER].view(np.float64)[:] = floats
    return block


@jit
def _job_piece(index, data, x):
    """Piece ``index`` of the block at ``data``, x already typed."""
    block = carray(data, (HEADER,), np.int64)
    floats = carray(data, (HEADER,), np.float64)
    n, c, oh, ow = block[_N], block[_C], block[_OH], block[_OW]
    conv = (block[_CONV], block[_CONV + 1], block[_CONV + 2], block[_CONV + 3], block[_CONV + 4], block[_CONV + 5],
            block[_CONV + 6], block[_CONV + 7])
    blocks, taps = (c + LANES - 1) // LANES, conv[0] * conv[1]
    piece = carray(data, (HEADER + PER_PIECE * (index + 1),), np.int64)[HEADER + PER_PIECE * index:]
    w = carray(as_pointer(block[_WEIGHT]), (blocks, taps, LANES), np.float32)
    b = carray(as_pointer(block[_BIAS]), (blocks, LANES), np.float32)
    scale = carray(as_pointer(block[_MULTIPLIER]), (blocks * LANES,), np.float32)
    out = carray(as_pointer(block[_OUT]), (n, c, oh, ow), np.uint8)
    xb = carray(as_pointer(piece[2]), (block[_XB_N],), np.float32)
    sums = carray(as_pointer(piece[3]), (block[_SUMS_N],), np.float32)
    staging = carray(as_pointer(piece[4]), (LANES * LANES,), x.dtype)
    block_items(x, np.float32(floats[_X_ZERO]), w, b, scale, np.float32(floats[_ZERO]), np.float32(floats[_LO]),
                np.float32(floats[_HI]), out, conv, xb, sums, staging, piece[0], piece[1])


def blocked_job(index, data, extra):
    """A crew job: piece ``index`` of the quantized blocked depthwise convolution the block at ``data`` describes."""
    block = carray(data, (HEADER,), np.int64)
    shape = (block[_N], block[_C], block[_H], block[_W])
    if block[_SIGNED]:
        _job_piece(index, data, carray(as_pointer(block[_X]), shape, np.int8))
    else:
        _job_piece(index, data, carray(as_pointer(block[_X]), shape, np.uint8))
