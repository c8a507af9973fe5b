"""Direct depthwise convolution with the bias and a clip activation fused (no im2col, no GEMM).

Channel by channel, the padded input plane is split into stride phases (one for stride 1), so
every tap is one long multiply-add over the whole output plane, computed "wide" (as wide as
the phase; the extra columns are thrown away). It computes ``clip(bias + sum of taps, lo, hi)``
for x (N, C, H, W) and weight (O, 1, KH, KW) with O a multiple of C (output channel o reads
input channel o // (O / C)).

Every offset (where each input row goes in the phases, where each tap reads) is computed once
per geometry at plan time, so the per-channel loops hold no integer division: with strides
and dilations as run-time values, the divisions cost more than the arithmetic on 7x7 and
14x14 planes. Indices are unsigned and three taps go in one pass, so the loops vectorize.
It beats the numpy kernel (im2col-style copies and a batched matmul) on every MobileNetV2 layer
measured, so it runs on every geometry it can.

A 1x1 expansion whose output only this convolution reads leaves its epilogue here (``lite.fusion``,
``Conv2DFusion.hand_epilogue``): each input value is ``taken`` with the expansion's bias and clip as
it is copied into the phases (or the flat plan's plane), and its activation, if any, runs over
the copied runs while they are in cache, instead of a pass of its own over the expanded tensor
(MobileNetV2's largest: 96 x 112 x 112); the mobile networks ran faster with it, at one thread
and two (measurements: docs/performance.md). An activation over a stride-2 layer's phases (rows
of 56 values and less, run by run) measured slower than the pass it saves, so those expansions
keep their epilogue.
"""

from __future__ import annotations

import functools

import numpy as np
from numba import carray
from numba import uint64 as _u  # NOTE: unsigned indices skip the negative-index check, so the loops vectorize

from lite.kernels.fast import compiled, jit
from lite.kernels.fast.activation import CLIP_CODE, activate_run
from lite.kernels.fast.crew import as_pointer
from lite.kernels.window import Geometry

ROUND = 32
"""The wide plane's positions ``_plane`` computes round up to a multiple of this: the compiled
loops run 32 positions a pass (8-float vectors, four at a time) and leave the rest to a scalar
loop, which on small planes took most of the time (7 x 7: 63 positions, 31 of them scalar)."""


class PlaneKernel:
    """What the compiled depthwise kernels' plans share: the weight's layout, ``run`` (its
    defaults, then ``planes``) and ``warm``. A plan sets ``geometry`` and ``scratch``."""

    @staticmethod
    def arrange(weight: np.ndarray) -> np.ndarray:
        """The weight (O, 1, KH, KW) as ``run`` reads it: (O, KH * KW)."""
        return np.ascontiguousarray(weight.reshape(weight.shape[0], -1))

    def run(self, x: np.ndarray, weight: np.ndarray, bias: np.ndarray, lo: np.generic, hi: np.generic,
            out: np.ndarray, scratch: list[np.ndarray], first: int = 0, last: int | None = None,
            code: int = CLIP_CODE, alpha: np.generic | None = None, prologue: tuple | None = None) -> None:
        """``out`` = clip(depthwise(x, weight) + bias, lo, hi) for the output planes ``first`` to
        ``last - 1`` (of N * O; default all); ``weight`` as ``arrange`` gave it; lo and hi of out's dtype.
        With an activation's ``code`` (``lite.kernels.fast.activation.EPILOGUE_CODES``; float32
        only) that activation with ``alpha`` replaces the clip. ``prologue`` (float32 only):
        the epilogue of the convolution that produced x, ``(shift, lo, hi, code, alpha)`` with a
        shift per input channel, applied to each input plane as it is copied in (``taken``, then
        the activation of ``code`` unless it is CLIP_CODE); None: x as it is."""
        last = out.shape[0] * out.shape[1] if last is None else last
        alpha = out.dtype.type(1) if alpha is None else alpha
        self.planes(x, weight, bias, lo, hi, out, scratch, first, last, code, alpha,
                    no_prologue(x.dtype) if prologue is None else prologue)

    def planes(self, x: np.ndarray, weight: np.ndarray, bias: np.ndarray, lo: np.generic, hi: np.generic,
               out: np.ndarray, scratch: list[np.ndarray], first: int, last: int, code: int, alpha: np.generic,
               prologue: tuple) -> None:
        """``run`` with every argument given: the plan's compiled loop."""
        raise NotImplementedError

    def warm(self, dtype: np.dtype) -> None:
        """Compiles the kernel for ``dtype`` now (at build), not in the first predict."""
        _warm(type(self), np.dtype(dtype).name)


def no_prologue(dtype: np.dtype) -> tuple:
    """The prologue arguments that leave the input as it is (no shift: an empty array)."""
    kind = np.dtype(dtype).type
    return np.zeros(0, dtype), kind(-np.inf), kind(np.inf), CLIP_CODE, kind(1)


@jit
def taken(value, shift, lo, hi, transform):
    """An input value as a depthwise kernel copies it in: with a prologue (``transform``) the
    producing convolution's bias and clip, ``min(max(value + shift, lo), hi)`` as its own epilogue
    computes them; else the value itself."""
    return min(max(value + shift, lo), hi) if transform else value


@functools.cache
def _warm(kind: type[PlaneKernel], dtype: str) -> None:
    plan = kind(Geometry((1, 2, 4, 4), (3, 3), (1, 1), (1, 1), (1, 1), (1, 1), (4, 4)))
    x, out = np.zeros((1, 2, 4, 4), dtype), np.zeros((1, 2, 4, 4), dtype)
    scratch = [np.zeros(shape, dtype) for shape in plan.scratch]
    lo, hi = np.dtype(dtype).type(0), np.dtype(dtype).type(6)
    compiled(plan.run, x, plan.arrange(np.zeros((2, 1, 3, 3), dtype)), np.zeros(2, dtype), lo, hi, out, scratch)


class DepthwisePlan(PlaneKernel):
    """Offsets and scratch sizes for one geometry; ``run`` computes the output."""

    def __init__(self, g: Geometry) -> None:
        (_, _, h, w), (kh, kw), (sh, sw), (dh, dw) = g.x, g.kernel, g.strides, g.dilations
        (oh, ow), (pt, pl) = g.out, g.begins
        self.geometry = g
        self.wq = max(-(-(w + pl + g.ends[1]) // sw), ow + (kw - 1) * dw // sw)
        self.hq = max(-(-(h + pt + g.ends[0]) // sh), oh + (kh - 1) * dh // sh) + 1
        self.phase_floats = sh * sw * self.hq * self.wq
        self.scratch = ((self.phase_floats + ROUND,), (oh * self.wq + ROUND,))  # NOTE: _plane runs past both
        self.taps = self._tap_offsets()
        self.copies = self._row_copies()

    def _phase_offset(self, row: int, column: int) -> int:
        """Where padded position (row, column) lies in the phases."""
        (sh, sw), phase = self.geometry.strides, self.hq * self.wq
        return ((row % sh) * sw + column % sw) * phase + (row // sh) * self.wq + column // sw

    def _tap_offsets(self) -> np.ndarray:
        """Each tap's offset in the phases (where output (0, 0) reads it), row-major."""
        (kh, kw), (dh, dw) = self.geometry.kernel, self.geometry.dilations
        return np.array([self._phase_offset(a * dh, b * dw) for a in range(kh) for b in range(kw)], np.int64)

    def _row_copies(self) -> np.ndarray:
        """The runs ``run`` copies from each input row into the phases (every ``stride``-th
        element, from each of the row's first ``stride`` columns): (source offset in the plane,
        target offset, count, second target, second count). With stride 2 the row's two runs
        are one pair (the second starts one element after the first), copied in one pass."""
        g = self.geometry
        (_, _, h, w), (_, sw), (pt, pl) = g.x, g.strides, g.begins
        copies = []
        for r in range(h):
            runs = [(r * w + j, self._phase_offset(r + pt, j + pl), len(range(j, w, sw))) for j in range(min(sw, w))]
            if sw == 2:
                second = runs[1][1:] if len(runs) == 2 else (0, 0)
                copies.append((*runs[0], *second))
            else:
                copies.extend((*run, 0, 0) for run in runs)
        return np.array(copies, np.int64).reshape(-1, 5)

    def planes(self, x: np.ndarray, weight: np.ndarray, bias: np.ndarray, lo: np.generic, hi: np.generic,
               out: np.ndarray, scratch: list[np.ndarray], first: int, last: int, code: int, alpha: np.generic,
               prologue: tuple) -> None:
        by_plane(x, weight, bias, out, self.taps, self.copies, self.geometry.strides[1], lo, hi, code, alpha,
                 self.wq, *scratch, first, last, *prologue)


@jit
def fill_phases(xf, base, copies, stride, phases, shift=0.0, lo=-np.inf, hi=np.inf, transform=False):
    """Copies one channel's plane (``xf[base:]``) into its stride phases, run by run, each value
    ``taken`` (with ``transform``: a producer's bias and clip); the padding is not written (every
    channel writes the same positions, so it stays zero)."""
    for k in range(copies.shape[0]):
        source, into, count = base + copies[k, 0], copies[k, 1], copies[k, 2]
        if stride == 1:
            for j in range(count):
                phases[_u(into + j)] = taken(xf[_u(source + j)], shift, lo, hi, transform)
        elif stride == 2:  # NOTE: both phases in one pass: contiguous loads, deinterleaved (3x faster)
            other, paired = copies[k, 3], copies[k, 4]
            for j in range(paired):
                phases[_u(into + j)] = taken(xf[_u(source + 2 * j)], shift, lo, hi, transform)
                phases[_u(other + j)] = taken(xf[_u(source + 2 * j + 1)], shift, lo, hi, transform)
            for j in range(paired, count):
                phases[_u(into + j)] = taken(xf[_u(source + 2 * j)], shift, lo, hi, transform)
        else:
            for j in range(count):
                phases[_u(into + j)] = taken(xf[_u(source + j * stride)], shift, lo, hi, transform)


@jit
def _plane(phases, wf, wbase, taps, bias, lo, hi, code, alpha, oh, ow, wq, wide, of, obase):
    """One output channel from its phases: a 3x3 kernel's nine taps in one pass over the wide
    plane (one load and store of it; large planes measured faster than three passes of
    three), other kernels as long multiply-adds three taps per pass (fewer loads and stores of
    the wide plane than one a pass); then the clip or activation of ``code`` as the valid
    columns are written out."""
    count, n = -(-oh * wq // ROUND) * ROUND, taps.shape[0]
    t = 0
    if n == 9:
        w0, w1, w2, w3, w4 = wf[_u(wbase)], wf[_u(wbase + 1)], wf[_u(wbase + 2)], wf[_u(wbase + 3)], wf[_u(wbase + 4)]
        w5, w6, w7, w8 = wf[_u(wbase + 5)], wf[_u(wbase + 6)], wf[_u(wbase + 7)], wf[_u(wbase + 8)]
        s0, s1, s2, s3, s4 = taps[0], taps[1], taps[2], taps[3], taps[4]
        s5, s6, s7, s8 = taps[5], taps[6], taps[7], taps[8]
        for i in range(count):
            wide[_u(i)] = (bias + w0 * phases[_u(s0 + i)] + w1 * phases[_u(s1 + i)] + w2 * phases[_u(s2 + i)]
                           + w3 * phases[_u(s3 + i)] + w4 * phases[_u(s4 + i)] + w5 * phases[_u(s5 + i)]
                           + w6 * phases[_u(s6 + i)] + w7 * phases[_u(s7 + i)] + w8 * phases[_u(s8 + i)])
        t = 9
    else:
        for i in range(count):
            wide[_u(i)] = bias
    while t + 3 <= n:
        w0, w1, w2 = wf[_u(wbase + t)], wf[_u(wbase + t + 1)], wf[_u(wbase + t + 2)]
        s0, s1, s2 = taps[t], taps[t + 1], taps[t + 2]
        for i in range(count):
            wide[_u(i)] += w0 * phases[_u(s0 + i)] + w1 * phases[_u(s1 + i)] + w2 * phases[_u(s2 + i)]
        t += 3
    while t < n:
        weight, s0 = wf[_u(wbase + t)], taps[t]
        for i in range(count):
            wide[_u(i)] += weight * phases[_u(s0 + i)]
        t += 1
    for r in range(oh):
        for i in range(ow):
            of[_u(obase + r * ow + i)] = min(max(wide[_u(r * wq + i)], lo), hi)
    if code != CLIP_CODE:  # NOTE: over the whole plane, not row by row: short rows vectorize poorly
        activate_run(of, obase, oh * ow, of.dtype.type(0), code, alpha)


@jit
def by_plane(x, weight, bias, out, taps, copies, stride, lo, hi, code, alpha, wq, phases, wide, first, last,
             pshift, plo, phi, pcode, palpha):
    """Output planes ``first`` to ``last - 1`` (of N * O), channel by channel: its stride phases
    (where ``pshift`` is not empty, the prologue ``pshift``, ``plo``, ``phi``, ``pcode``, ``palpha``
    applied as the runs are copied: the padding stays zero), then the taps over the whole output
    plane."""
    n, c, h, w = x.shape
    o, oh, ow = out.shape[1], out.shape[2], out.shape[3]
    xf, of, wf = x.reshape(n * c * h * w), out.reshape(n * o * oh * ow), weight.reshape(weight.size)
    multiplier, ntaps, zero = o // c, taps.shape[0], x.dtype.type(0)
    phases[:] = 0
    for job in range(first, last):
        image, channel = job // o, job % o
        shift = pshift[channel // multiplier] if pshift.size else zero
        fill_phases(xf, (image * c + channel // multiplier) * h * w, copies, stride, phases, shift, plo, phi,
                    pshift.size > 0)
        if pshift.size and pcode != CLIP_CODE:
            for k in range(copies.shape[0]):  # NOTE: the second run of a stride-2 pair; none (count 0) else
                activate_run(phases, copies[k, 1], copies[k, 2], zero, pcode, palpha)
                activate_run(phases, copies[k, 3], copies[k, 4], zero, pcode, palpha)
        _plane(phases, wf, channel * ntaps, taps, bias[channel], lo, hi, code, alpha, oh, ow, wq, wide, of,
               job * oh * ow)


# The block of a float32 depthwise convolution on the crew (``lite.kernels.fast.crew.Jobs``):
_X, _N, _C, _H, _W, _WEIGHT, _O, _TAPS_N, _BIAS, _OUT, _OH, _OW, _TAPS = range(13)
_PSHIFT, _PSHIFT_N, _PCODE, _PLO, _PHI, _PALPHA = range(13, 19)  # the prologue (floats as float64 bits)
SHARED = 19  # NOTE: the words above, the same in every plan's block (``write_shared``, ``read_shared``)
_COPIES, _COPIES_N, _STRIDE, _WQ, _LO, _HI, _ALPHA, _CODE, _PHASES_N, _WIDE_N = range(SHARED, SHARED + 10)
_HEADER, _PER_PIECE = SHARED + 10, 4  # then (first, last, phases, wide) for each piece


def write_shared(block: np.ndarray, plan: PlaneKernel, x: np.ndarray, weight: np.ndarray, bias: np.ndarray,
                 out: np.ndarray, prologue: tuple) -> None:
    """The first ``SHARED`` words of a plan's crew block: the arrays and shapes every plan's job
    reads, and the prologue (``PlaneKernel.run``'s)."""
    block[[_X, _N, _C, _H, _W]] = x.ctypes.data, *x.shape
    block[[_WEIGHT, _O, _TAPS_N, _BIAS]] = weight.ctypes.data, out.shape[1], plan.taps.shape[0], bias.ctypes.data
    block[[_OUT, _OH, _OW, _TAPS]] = out.ctypes.data, out.shape[2], out.shape[3], plan.taps.ctypes.data
    shift, lo, hi, code, alpha = prologue
    block[[_PSHIFT, _PSHIFT_N, _PCODE]] = shift.ctypes.data, shift.size, code
    block[_PLO:_PALPHA + 1].view(np.float64)[:] = lo, hi, alpha


@jit
def read_shared(block):
    """(x, weight, bias, out, taps) from the words ``write_shared`` wrote, float32."""
    n, c, h, w, o, oh, ow = block[_N], block[_C], block[_H], block[_W], block[_O], block[_OH], block[_OW]
    x = carray(as_pointer(block[_X]), (n, c, h, w), np.float32)
    weight = carray(as_pointer(block[_WEIGHT]), (o, block[_TAPS_N]), np.float32)
    bias = carray(as_pointer(block[_BIAS]), (o,), np.float32)
    out = carray(as_pointer(block[_OUT]), (n, o, oh, ow), np.float32)
    return x, weight, bias, out, carray(as_pointer(block[_TAPS]), (block[_TAPS_N],), np.int64)


@jit
def read_prologue(block, floats):
    """(shift, lo, hi, code, alpha): the prologue ``write_shared`` wrote, float32."""
    shift = carray(as_pointer(block[_PSHIFT]), (block[_PSHIFT_N],), np.float32)
    return shift, np.float32(floats[_PLO]), np.float32(floats[_PHI]), block[_PCODE], np.float32(floats[_PALPHA])


def crew_jobs(plan: DepthwisePlan, x: np.ndarray, weight: np.ndarray, bias: np.ndarray, lo, hi, out: np.ndarray,
              scratch: list[list[np.ndarray]], bounds: list[tuple[int, int]], code: int, alpha,
              prologue: tuple | None = None):
    """A float32 depthwise convolution's output planes as jobs for the crew, one per piece of
    ``bounds`` with that piece's scratch (``plan.run``'s arguments otherwise)."""
    from lite.kernels.fast.crew import Jobs, pieces_block

    prologue = no_prologue(np.float32) if prologue is None else prologue
    block = pieces_block(_HEADER, bounds, scratch)
    write_shared(block, plan, x, weight, bias, out, prologue)
    block[[_COPIES, _COPIES_N, _STRIDE, _WQ]] = plan.copies.ctypes.data, plan.copies.shape[0], \
        plan.geometry.strides[1], plan.wq
    block[_LO:_CODE].view(np.float64)[:] = lo, hi, alpha
    block[[_CODE, _PHASES_N, _WIDE_N]] = code, scratch[0][0].size, scratch[0][1].size
    arrays = (x, weight, bias, out, plan.taps, plan.copies, prologue[0], *(a for piece in scratch for a in piece))
    return Jobs(depthwise_job, block, len(bounds), arrays)


def depthwise_job(index, data, extra):
    """Piece ``index`` of the depthwise convolution that the block at ``data`` describes."""
    block = carray(data, (_HEADER + _PER_PIECE * (index + 1),), np.int64)
    floats = carray(data, (_HEADER,), np.float64)
    x, weight, bias, out, taps = read_shared(block)
    copies = carray(as_pointer(block[_COPIES]), (block[_COPIES_N], 5), np.int64)
    piece = _HEADER + _PER_PIECE * index
    phases = carray(as_pointer(block[piece + 2]), (block[_PHASES_N],), np.float32)
    wide = carray(as_pointer(block[piece + 3]), (block[_WIDE_N],), np.float32)
    lo, hi, alpha = np.float32(floats[_LO]), np.float32(floats[_HI]), np.float32(floats[_ALPHA])
    by_plane(x, weight, bias, out, taps, copies, block[_STRIDE], lo, hi, block[_CODE], alpha, block[_WQ], phases, wide,
             block[piece], block[piece + 1], *read_prologue(block, floats))
