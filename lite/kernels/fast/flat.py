"""Stride-1 depthwise convolutions whose output rows are as wide as the input's, on the plane as
it is (no phases, no wide rows), the bias and a clip activation fused.

Channel by channel, the input plane is copied whole (one contiguous run) between zero margins,
and every output position i (row-major, the input's row width) reads tap (a, b) at ``i`` plus
a constant offset. Rows above and below the plane read the margins; columns that would wrap
into the next or previous row are masked, one mask for each kernel column. So the taps are long
multiply-adds over the whole plane, the output is written in one run, and nothing is copied
back out. It takes the common case: 3x3 (and 5x5) stride-1 layers padded to keep the plane's
width, as in MobileNet and EfficientNet.

It is faster than ``lite.kernels.fast.depthwise`` (phases and wide rows) on every such layer,
most on small planes, where the wide rows waste most (measurements: docs/performance.md).
"""

from __future__ import annotations

import numpy as np
from numba import carray
from numba import uint64 as _u  # NOTE: unsigned indices skip the negative-index check, so the loops vectorize

from lite.kernels.fast import jit
from lite.kernels.fast.activation import CLIP_CODE, activate_run
from lite.kernels.fast.crew import as_pointer
from lite.kernels.fast.depthwise import (
    ROUND,
    SHARED,
    PlaneKernel,
    no_prologue,
    read_prologue,
    read_shared,
    taken,
    write_shared,
)
from lite.kernels.window import Geometry


def fits(g: Geometry) -> bool:
    """Whether ``FlatPlan`` runs this geometry: stride 1, output rows as wide as the input's."""
    (_, kw), (_, dw), (_, pl), (_, pr) = g.kernel, g.dilations, g.begins, g.ends
    return g.strides == (1, 1) and pl + pr == (kw - 1) * dw and min(*g.begins, *g.ends) >= 0


class FlatPlan(PlaneKernel):
    """Tap offsets, column masks and scratch sizes for one geometry; ``run`` computes the output."""

    def __init__(self, g: Geometry) -> None:
        (_, _, _, w), (kh, kw), (dh, dw), (oh, _), (pt, pl) = g.x, g.kernel, g.dilations, g.out, g.begins
        self.geometry = g
        self.count = -(-oh * w // ROUND) * ROUND  # NOTE: the loops run whole passes of ROUND positions
        self.margin = pt * w + pl
        self.taps = np.array([a * dh * w + b * dw for a in range(kh) for b in range(kw)], np.int64)
        column = np.arange(self.count) % w
        self.masks = np.array([(column + b * dw - pl >= 0) & (column + b * dw - pl < w) for b in range(kw)], np.uint8)
        self.scratch = ((self.count + int(self.taps.max()) + ROUND,), (self.count,))

    def planes(self, x: np.ndarray, weight: np.ndarray, bias: np.ndarray, lo: np.generic, hi: np.generic,
               out: np.ndarray, scratch: list[np.ndarray], first: int, last: int, code: int, alpha: np.generic,
               prologue: tuple) -> None:
        flat_planes(x, weight, bias, out, self.taps, self.masks, self.margin, lo, hi, code, alpha, *scratch,
                    first, last, *prologue)


@jit
def flat_planes(x, weight, bias, out, taps, masks, margin, lo, hi, code, alpha, padded, wide, first, last,
                pshift, plo, phi, pcode, palpha):
    """Output planes ``first`` to ``last - 1`` (of N * O), channel by channel: its input plane
    between the margins (where ``pshift`` is not empty, with the prologue ``pshift``, ``plo``,
    ``phi``, ``pcode``, ``palpha`` applied), then the taps. A plane is written ``count``
    positions long where that stays within the range's planes (the following planes' first
    positions are written again right after); else it goes through ``wide``, so nothing past the
    range is touched.

    One function: a compiled call that takes arrays counts references to each, and once a plane
    that cost a noticeable share of a 7 x 7 plane's time."""
    n, c, h, w = x.shape
    o, oh, ow = out.shape[1], out.shape[2], out.shape[3]
    plane, size, count, zero = h * w, oh * ow, wide.shape[0], x.dtype.type(0)
    xf, of, wf = x.reshape(n * c * plane), out.reshape(n * o * size), weight.reshape(weight.size)
    multiplier, ntaps, columns = o // c, taps.shape[0], masks.shape[0]
    nine = ntaps == 9 and columns == 3 and masks[1].min() == 1  # NOTE: else a masked middle column, as any kernel
    padded[:] = 0
    image, channel = first // o, first % o  # NOTE: counted on, not divided, per plane (a third of 7 x 7's time)
    for job in range(first, last):
        reads = channel if multiplier == 1 else channel // multiplier
        source, wbase = (image * c + reads) * plane, channel * ntaps
        prologue = pshift.size > 0
        shift = pshift[reads] if prologue else zero
        for i in range(plane):
            padded[_u(margin + i)] = taken(xf[_u(source + i)], shift, plo, phi, prologue)
        if prologue and pcode != CLIP_CODE:
            activate_run(padded, margin, plane, zero, pcode, palpha)
        direct, shift = job * size + count <= last * size, bias[channel]  # NOTE: direct: stays within the range
        if nine:  # NOTE: the nine taps in one pass, each kernel column's three under its mask
            into, base = of if direct else wide, job * size if direct else 0
            w0, w1, w2, w3, w4 = wf[_u(wbase)], wf[_u(wbase + 1)], wf[_u(wbase + 2)], wf[_u(wbase + 3)], \
                wf[_u(wbase + 4)]
            w5, w6, w7, w8 = wf[_u(wbase + 5)], wf[_u(wbase + 6)], wf[_u(wbase + 7)], wf[_u(wbase + 8)]
            s0, s1, s2, s3, s4, s5, s6, s7, s8 = taps[0], taps[1], taps[2], taps[3], taps[4], taps[5], taps[6], \
                taps[7], taps[8]
            for i in range(count):
                left = w0 * padded[_u(s0 + i)] + w3 * padded[_u(s3 + i)] + w6 * padded[_u(s6 + i)]
                center = w1 * padded[_u(s1 + i)] + w4 * padded[_u(s4 + i)] + w7 * padded[_u(s7 + i)]
                right = w2 * padded[_u(s2 + i)] + w5 * padded[_u(s5 + i)] + w8 * padded[_u(s8 + i)]
                total = shift + center + (left if masks[0, _u(i)] else zero) + (right if masks[2, _u(i)] else zero)
                into[_u(base + i)] = min(max(total, lo), hi)
            length = 0 if direct else size
        else:
            _any_kernel(padded, wf, wbase, taps, masks, shift, count, wide)
            length = count if direct else size
        for i in range(length):
            of[_u(job * size + i)] = min(max(wide[_u(i)], lo), hi)
        if code != CLIP_CODE:
            activate_run(of, job * size, size, zero, code, alpha)
        channel += 1
        if channel == o:
            image, channel = image + 1, 0


@jit
def _any_kernel(padded, wf, wbase, taps, masks, bias, count, wide):
    """Any kernel into ``wide``: column by column, its taps in passes of five, three or one under
    the column's mask (long multiply-adds, few loads and stores of ``wide``)."""
    columns, zero = masks.shape[0], padded.dtype.type(0)
    rows = taps.shape[0] // columns
    for i in range(count):
        wide[_u(i)] = bias
    for b in range(columns):
        a = 0
        while a < rows:
            t = a * columns + b
            if a + 5 <= rows:
                v0, v1, v2 = wf[_u(wbase + t)], wf[_u(wbase + t + columns)], wf[_u(wbase + t + 2 * columns)]
                v3, v4 = wf[_u(wbase + t + 3 * columns)], wf[_u(wbase + t + 4 * columns)]
                s0, s1, s2, s3, s4 = taps[t], taps[t + columns], taps[t + 2 * columns], taps[t + 3 * columns], \
                    taps[t + 4 * columns]
                for i in range(count):
                    total = (v0 * padded[_u(s0 + i)] + v1 * padded[_u(s1 + i)] + v2 * padded[_u(s2 + i)]
                             + v3 * padded[_u(s3 + i)] + v4 * padded[_u(s4 + i)])
                    wide[_u(i)] += total if masks[b, _u(i)] else zero
                a += 5
            elif a + 3 <= rows:
                v0, v1, v2 = wf[_u(wbase + t)], wf[_u(wbase + t + columns)], wf[_u(wbase + t + 2 * columns)]
                s0, s1, s2 = taps[t], taps[t + columns], taps[t + 2 * columns]
                for i in range(count):
                    total = v0 * padded[_u(s0 + i)] + v1 * padded[_u(s1 + i)] + v2 * padded[_u(s2 + i)]
                    wide[_u(i)] += total if masks[b, _u(i)] else zero
                a += 3
            else:
                v0, s0 = wf[_u(wbase + t)], taps[t]
                for i in range(count):
                    wide[_u(i)] += v0 * padded[_u(s0 + i)] if masks[b, _u(i)] else zero
                a += 1


# A float32 flat depthwise convolution on the crew (``lite.kernels.fast.crew.Jobs``):
# ``lite.kernels.fast.depthwise.SHARED`` words first, then:
_MASKS, _COLUMNS, _COUNT, _MARGIN, _LO, _HI, _ALPHA, _CODE, _PADDED_N = range(SHARED, SHARED + 9)
_HEADER, _PER_PIECE = SHARED + 9, 4  # then (first, last, padded, wide) for each piece


def crew_jobs(plan: FlatPlan, x: np.ndarray, weight: np.ndarray, bias: np.ndarray, lo, hi, out: np.ndarray,
              scratch: list[list[np.ndarray]], bounds: list[tuple[int, int]], code: int, alpha,
              prologue: tuple | None = None):
    """The output planes as jobs for the crew, one per piece of ``bounds`` with that piece's
    scratch (``plan.run``'s arguments otherwise)."""
    from lite.kernels.fast.crew import Jobs, pieces_block

    prologue = no_prologue(np.float32) if prologue is None else prologue
    block = pieces_block(_HEADER, bounds, scratch)
    write_shared(block, plan, x, weight, bias, out, prologue)
    block[[_MASKS, _COLUMNS, _COUNT, _MARGIN]] = plan.masks.ctypes.data, *plan.masks.shape, plan.margin
    block[_LO:_CODE].view(np.float64)[:] = lo, hi, alpha
    block[[_CODE, _PADDED_N]] = code, scratch[0][0].size
    arrays = (x, weight, bias, out, plan.taps, plan.masks, prologue[0], *(a for piece in scratch for a in piece))
    return Jobs(flat_job, block, len(bounds), arrays)


def flat_job(index, data, extra):
    """Piece ``index`` of the convolution that the block at ``data`` describes."""
    block = carray(data, (_HEADER + _PER_PIECE * (index + 1),), np.int64)
    floats = carray(data, (_HEADER,), np.float64)
    x, weight, bias, out, taps = read_shared(block)
    masks = carray(as_pointer(block[_MASKS]), (block[_COLUMNS], block[_COUNT]), np.uint8)
    piece = _HEADER + _PER_PIECE * index
    padded = carray(as_pointer(block[piece + 2]), (block[_PADDED_N],), np.float32)
    wide = carray(as_pointer(block[piece + 3]), (block[_COUNT],), np.float32)
    lo, hi, alpha = np.float32(floats[_LO]), np.float32(floats[_HI]), np.float32(floats[_ALPHA])
    flat_planes(x, weight, bias, out, taps, masks, block[_MARGIN], lo, hi, block[_CODE], alpha, padded, wide,
                block[piece], block[piece + 1], *read_prologue(block, floats))
