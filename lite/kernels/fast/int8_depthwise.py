"""Compiled quantized depthwise convolutions: 8-bit input and output, exact sums in float32.

They run the float32 depthwise kernels' loops (``lite.kernels.fast.flat`` for stride-1 layers
that keep the plane's width, ``lite.kernels.fast.depthwise``'s stride phases otherwise) on 8-bit
planes: channel by channel (output channel ``o`` reads input channel ``o // multiplier``), the
plane minus its zero point is copied into float32 scratch, the taps run over the whole plane
starting from the bias, and the sums are requantized into the output as they are computed
(``lite.ops.quant.requantize``: ``clip(rint(float32(sum + bias) * multiplier) + zero_point, lo,
hi)``). Every product, partial sum and the bias are integers whose magnitudes the caller
checked stay below 2 ** 24, so float32 holds each exactly in any order, and ``sum + bias`` is
the float32 value the reference converts. Each plane is one compiled call's loop (no call per
plane: on 7 x 7 planes such calls cost more than the arithmetic).

Outputs are written as bytes: an int8 output in [lo, hi] is stored as its two's complement.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import numpy as np
from numba import carray
from numba import uint64 as _u  # NOTE: unsigned indices skip the negative-index check, so the loops vectorize

from lite.kernels.fast import compiled, jit
from lite.kernels.fast.crew import Jobs, as_pointer
from lite.kernels.fast.depthwise import ROUND, DepthwisePlan
from lite.kernels.fast.flat import FlatPlan, _any_kernel
from lite.kernels.fast.int8 import byte_bits
from lite.kernels.window import Geometry


@jit
def _byte(total, multiplier, zero_point, lo, hi):
    """The output byte of an exact float32 ``sum + bias``."""
    return byte_bits(min(max(np.rint(total * multiplier) + zero_point, lo), hi))


@jit
def flat_items(x, x_zero_point, weight, bias, multiplier, zero_point, lo, hi, out, taps, masks, margin, padded, wide,
               spare, first, last):
    """Output planes ``first`` to ``last - 1`` (of N * O) of out (N, O, OH, OW) bytes from x
    (N, C, H, W) 8-bit on a ``FlatPlan``'s ``taps``, ``masks``, ``margin``; ``weight`` (O, taps)
    and ``bias`` float32; scratch ``padded`` and ``wide`` (float32) and ``spare`` (bytes, as long
    as wide). A plane is written ``count`` positions long where that stays within the range's
    planes (the next plane's first positions are written again right after), else through spare."""
    n, c, h, w = x.shape
    o, oh, ow = out.shape[1], out.shape[2], out.shape[3]
    plane, size, count = h * w, oh * ow, wide.shape[0]
    xf, of, wf = x.reshape(n * c * plane), out.reshape(n * o * size), weight.reshape(weight.size)
    repeat, ntaps, zero = o // c, taps.shape[0], np.float32(0)
    nine = ntaps == 9 and masks.shape[0] == 3 and masks[1].min() == 1
    padded[:] = 0
    image, channel = first // o, first % o
    for job in range(first, last):
        source, wbase = (image * c + channel // repeat) * plane, channel * ntaps
        for i in range(plane):
            padded[_u(margin + i)] = np.float32(xf[_u(source + i)]) - x_zero_point
        direct, b, m = job * size + count <= last * size, bias[channel], multiplier[channel]
        into, base = (of, job * size) if direct else (spare, 0)
        if nine:
            w0, w1, w2, w3, w4 = wf[_u(wbase)], wf[_u(wbase + 1)], wf[_u(wbase + 2)], wf[_u(wbase + 3)], \
                wf[_u(wbase + 4)]
            w5, w6, w7, w8 = wf[_u(wbase + 5)], wf[_u(wbase + 6)], wf[_u(wbase + 7)], wf[_u(wbase + 8)]
            s0, s1, s2, s3, s4, s5, s6, s7, s8 = taps[0], taps[1], taps[2], taps[3], taps[4], taps[5], taps[6], \
                taps[7], taps[8]
            for i in range(count):
                left = w0 * padded[_u(s0 + i)] + w3 * padded[_u(s3 + i)] + w6 * padded[_u(s6 + i)]
                center = w1 * padded[_u(s1 + i)] + w4 * padded[_u(s4 + i)] + w7 * padded[_u(s7 + i)]
                right = w2 * padded[_u(s2 + i)] + w5 * padded[_u(s5 + i)] + w8 * padded[_u(s8 + i)]
                total = b + center + (left if masks[0, _u(i)] else zero) + (right if masks[2, _u(i)] else zero)
                into[_u(base + i)] = _byte(total, m, zero_point, lo, hi)
        else:
            _any_kernel(padded, wf, wbase, taps, masks, b, count, wide)
            for i in range(count):
                into[_u(base + i)] = _byte(wide[_u(i)], m, zero_point, lo, hi)
        if not direct:
            for i in range(size):
                of[_u(job * size + i)] = spare[_u(i)]
        channel += 1
        if channel == o:
            image, channel = image + 1, 0


@jit
def phase_items(x, x_zero_point, weight, bias, multiplier, zero_point, lo, hi, out, taps, copies, stride, wq, phases,
                wide, spare, first, last):
    """``flat_items`` on a ``DepthwisePlan``'s stride phases (``taps``, ``copies``, ``stride``,
    ``wq``): each plane copied into its phases run by run (the padding is not written: it stays
    zero), its sums over the wide plane (OH rows of ``wq``) requantized into ``spare``, then its
    rows' first OW bytes copied out, a plain loop a row (LLVM vectorizes it; runs of 16 bytes
    measured slower). One function, as ``flat_items``."""
    n, c, h, w = x.shape
    o, oh, ow = out.shape[1], out.shape[2], out.shape[3]
    count = -(-oh * wq // ROUND) * ROUND
    xf, of, wf = x.reshape(n * c * h * w), out.reshape(n * o * oh * ow), weight.reshape(weight.size)
    repeat, ntaps = o // c, taps.shape[0]
    phases[:] = 0
    for job in range(first, last):
        image, channel = job // o, job % o
        base = (image * c + channel // repeat) * h * w
        for k in range(copies.shape[0]):
            source, into, length = base + copies[k, 0], copies[k, 1], copies[k, 2]
            if stride == 2:  # NOTE: both phases in one pass: contiguous loads, deinterleaved
                other, paired = copies[k, 3], copies[k, 4]
                for j in range(paired):
                    phases[_u(into + j)] = np.float32(xf[_u(source + 2 * j)]) - x_zero_point
                    phases[_u(other + j)] = np.float32(xf[_u(source + 2 * j + 1)]) - x_zero_point
                for j in range(paired, length):
                    phases[_u(into + j)] = np.float32(xf[_u(source + 2 * j)]) - x_zero_point
            else:
                for j in range(length):
                    phases[_u(into + j)] = np.float32(xf[_u(source + j * stride)]) - x_zero_point
        b, m, wbase = bias[channel], multiplier[channel], channel * ntaps
        if ntaps == 9:
            w0, w1, w2, w3, w4 = wf[_u(wbase)], wf[_u(wbase + 1)], wf[_u(wbase + 2)], wf[_u(wbase + 3)], \
                wf[_u(wbase + 4)]
            w5, w6, w7, w8 = wf[_u(wbase + 5)], wf[_u(wbase + 6)], wf[_u(wbase + 7)], wf[_u(wbase + 8)]
            s0, s1, s2, s3, s4, s5, s6, s7, s8 = taps[0], taps[1], taps[2], taps[3], taps[4], taps[5], taps[6], \
                taps[7], taps[8]
            for i in range(count):
                total = (b + w0 * phases[_u(s0 + i)] + w1 * phases[_u(s1 + i)] + w2 * phases[_u(s2 + i)]
                         + w3 * phases[_u(s3 + i)] + w4 * phases[_u(s4 + i)] + w5 * phases[_u(s5 + i)]
                         + w6 * phases[_u(s6 + i)] + w7 * phases[_u(s7 + i)] + w8 * phases[_u(s8 + i)])
                spare[_u(i)] = _byte(total, m, zero_point, lo, hi)
        else:
            for i in range(count):
                wide[_u(i)] = b
            for t in range(ntaps):
                weight_t, s0 = wf[_u(wbase + t)], taps[t]
                for i in range(count):
                    wide[_u(i)] += weight_t * phases[_u(s0 + i)]
            for i in range(count):
                spare[_u(i)] = _byte(wide[_u(i)], m, zero_point, lo, hi)
        at = job * oh * ow
        for r in range(oh):
            for i in range(ow):
                of[_u(at + r * ow + i)] = spare[_u(r * wq + i)]


class Int8Depthwise:
    """A geometry's plan (``FlatPlan`` where it fits, else ``DepthwisePlan``), its scratch shapes
    per piece (float32, float32, bytes) and the call of its loop."""

    def __init__(self, g: Geometry) -> None:
        from lite.kernels.fast import flat

        self.flat = flat.fits(g)
        self.plan = FlatPlan(g) if self.flat else DepthwisePlan(g)
        count = self.plan.count if self.flat else self.plan.scratch[1][0]
        padded = self.plan.scratch[0][0]
        self.scratch = ((padded,), (count,), (count,))
        self.table = self.plan.masks if self.flat else self.plan.copies
        self.numbers = (self.plan.margin, 0) if self.flat else (g.strides[1], self.plan.wq)

    def items(self, *args) -> None:
        """``flat_items`` or ``phase_items`` with (x, x_zero_point, weight, bias, multiplier,
        zero_point, lo, hi, out, padded, wide, spare, first, last)."""
        *head, padded, wide, spare, first, last = args
        if self.flat:
            flat_items(*head, self.plan.taps, self.table, self.numbers[0], padded, wide, spare, first, last)
        else:
            phase_items(*head, self.plan.taps, self.table, *self.numbers, padded, wide, spare, first, last)

    @staticmethod
    def arranged(weight: np.ndarray, bias: np.ndarray, multiplier: np.ndarray) -> tuple[np.ndarray, ...]:
        """The weight (O, taps), bias and multipliers (O,) as ``items`` reads them: as they are."""
        return weight, bias, multiplier

    @staticmethod
    def count(images: int, outputs: int) -> int:
        """The items of ``items``: the output planes."""
        return images * outputs

    @staticmethod
    def scratch_kinds(dtype: np.dtype) -> tuple[type, ...]:
        """The dtypes of ``scratch``'s arrays (the same for int8 and uint8 inputs)."""
        return np.float32, np.float32, np.uint8

    def call(self, x: np.ndarray, floats: tuple, arrays: tuple, out: np.ndarray) -> Callable[..., None]:
        """``items`` with the loop's arguments (``floats``: x's zero point, the output's zero point,
        lo, hi), waiting for a piece's scratch, first and last."""
        f32 = np.float32
        return partial(self.items, x, f32(floats[0]), *arrays, *map(f32, floats[1:]), out)

    def crew_jobs(self, x: np.ndarray, floats: tuple, arrays: tuple, out: np.ndarray,
                  scratch: list[list[np.ndarray]], bounds: list[tuple[int, int]]) -> Jobs:
        """The crew's jobs for ``bounds``, ``call``'s arguments in their block."""
        block = crew_block(self, x, *arrays, floats, out, scratch, bounds)
        return Jobs(depthwise_job, block, len(bounds),
                    (x, *arrays, out, self.plan.taps, self.table, *(a for piece in scratch for a in piece)))

    @staticmethod
    def crew_job() -> Callable:
        return depthwise_job

    def warm(self, dtype: np.dtype) -> None:
        """Compiles the loop for ``dtype`` (int8 or uint8) inputs now, on one plane of zeros."""
        g = self.plan.geometry
        f32 = np.float32
        scratch = [np.zeros(shape, kind) for shape, kind in zip(self.scratch, self.scratch_kinds(dtype), strict=True)]
        compiled(self.items, np.zeros((1, 1, *g.x[2:]), dtype), f32(0), np.zeros((1, self.plan.taps.size), f32),
                 np.zeros(1, f32), np.ones(1, f32), f32(0), f32(0), f32(255), np.zeros((1, 1, *g.out), np.uint8),
                 *scratch, 0, 1)


# The block of a quantized depthwise convolution on the crew (``lite.kernels.fast.crew.Jobs``),
# then per piece (first, last, padded, wide, spare):
(_X, _N, _C, _H, _W, _SIGNED, _WEIGHT, _TAPS_N, _BIAS, _MULTIPLIER, _OUT, _O, _OH, _OW, _TAPS, _TABLE, _ROWS,
 _COLUMNS, _FIRST_NUMBER, _SECOND_NUMBER, _FLAT, _PADDED_N, _WIDE_N, _X_ZERO, _ZERO, _LO, _HI) = range(27)
HEADER, PER_PIECE = 27, 5


def crew_block(kernel: Int8Depthwise, x: np.ndarray, weight: np.ndarray, bias: np.ndarray, multiplier: np.ndarray,
               floats: tuple, out: np.ndarray, scratch: list[list[np.ndarray]], bounds: list[tuple[int, int]]
               ) -> np.ndarray:
    """The int64 block ``depthwise_job`` reads: the loop's arguments (``floats``: x's zero point,
    the output's zero point, lo, hi), then each piece's bounds and scratch."""
    from lite.kernels.fast.crew import pieces_block

    block = pieces_block(HEADER, bounds, scratch)
    table = kernel.table
    block[:_X_ZERO] = (x.ctypes.data, *x.shape, x.dtype == np.int8, weight.ctypes.data, weight.shape[1],
                       bias.ctypes.data, multiplier.ctypes.data, out.ctypes.data, *out.shape[1:],
                       kernel.plan.taps.ctypes.data, table.ctypes.data, *table.shape, *kernel.numbers, kernel.flat,
                       scratch[0][0].size, scratch[0][1].size)
    block[_X_ZERO:HEADER].view(np.float64)[:] = floats
    return block


@jit
def _job_piece(index, data, x):
    """Piece ``index`` of the block at ``data``, x already typed."""
    block = carray(data, (HEADER,), np.int64)
    floats = carray(data, (HEADER,), np.float64)
    o, oh, ow, ntaps = block[_O], block[_OH], block[_OW], block[_TAPS_N]
    piece = carray(data, (HEADER + PER_PIECE * (index + 1),), np.int64)[HEADER + PER_PIECE * index:]
    weight = carray(as_pointer(block[_WEIGHT]), (o, ntaps), np.float32)
    bias = carray(as_pointer(block[_BIAS]), (o,), np.float32)
    multiplier = carray(as_pointer(block[_MULTIPLIER]), (o,), np.float32)
    out = carray(as_pointer(block[_OUT]), (block[_N], o, oh, ow), np.uint8)
    taps = carray(as_pointer(block[_TAPS]), (ntaps,), np.int64)
    padded = carray(as_pointer(piece[2]), (block[_PADDED_N],), np.float32)
    wide = carray(as_pointer(piece[3]), (block[_WIDE_N],), np.float32)
    spare = carray(as_pointer(piece[4]), (block[_WIDE_N],), np.uint8)
    floats4 = (np.float32(floats[_X_ZERO]), np.float32(floats[_ZERO]), np.float32(floats[_LO]), np.float32(floats[_HI]))
    if block[_FLAT]:
        masks = carray(as_pointer(block[_TABLE]), (block[_ROWS], block[_COLUMNS]), np.uint8)
        flat_items(x, floats4[0], weight, bias, multiplier, floats4[1], floats4[2], floats4[3], out, taps, masks,
                   block[_FIRST_NUMBER], padded, wide, spare, piece[0], piece[1])
    else:
        copies = carray(as_pointer(block[_TABLE]), (block[_ROWS], block[_COLUMNS]), np.int64)
        phase_items(x, floats4[0], weight, bias, multiplier, floats4[1], floats4[2], floats4[3], out, taps, copies,
                    block[_FIRST_NUMBER], block[_SECOND_NUMBER], padded, wide, spare, piece[0], piece[1])


def depthwise_job(index, data, extra):
    """A crew job: piece ``index`` of the quantized depthwise convolution the block at ``data`` describes."""
    block = carray(data, (HEADER,), np.int64)
    shape = (block[_N], block[_C], block[_H], block[_W])
    if block[_SIGNED]:
        _job_piece(index, data, carray(as_pointer(block[_X]), shape, np.int8))
    else:
        _job_piece(index, data, carray(as_pointer(block[_X]), shape, np.uint8))
