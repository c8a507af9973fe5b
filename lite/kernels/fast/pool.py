"""2-D max pooling in one compiled pass per plane over its stride phases, planes shared out among threads.

Plane by plane, the input goes into its stride phases (``lite.kernels.fast.depthwise``'s layout,
padded with the lowest value, so pads never win), where every tap of the window is one
contiguous run; the max over the taps is then taken over the whole "wide" output plane at once
(a 3x3 window's nine taps in one pass, larger windows three taps a pass) and its valid columns
written out. It replaced a row-by-row kernel (reduce the window's rows, then its columns, one
output row at a time), which it beats on every window but the largest (13x13: about even;
measured: docs/performance.md, kernel measurements).
"""

from __future__ import annotations

import functools

import numpy as np
from numba import carray
from numba import uint64 as _u  # NOTE: unsigned indices skip the negative-index check, so the loops vectorize

from lite.kernels.fast import compiled, jit
from lite.kernels.fast.crew import as_pointer
from lite.kernels.fast.depthwise import ROUND, DepthwisePlan, fill_phases
from lite.kernels.window import Geometry


def run(plan: DepthwisePlan, x: np.ndarray, out: np.ndarray, lowest: np.generic, first: int = 0,
        last: int | None = None) -> None:
    """out (N, C, OH, OW) = the max over each window of x (N, C, H, W) for the planes ``first`` to
    ``last - 1`` (of N * C; default all), the geometry of ``plan``; positions outside x are
    ignored (a window with none inside gives ``lowest``)."""
    last = x.shape[0] * x.shape[1] if last is None else last
    max_pool(x, out, plan.taps, plan.copies, plan.geometry.strides[1], plan.wq, plan.phase_floats, lowest,
             first, last)


@jit
def max_pool(x, out, taps, copies, stride, wq, phase_floats, lowest, first, last):
    """Planes ``first`` to ``last - 1``: each into its phases (``fill_phases``, pads ``lowest``),
    the max of its taps over the wide plane, the valid columns out."""
    n, c, h, w = x.shape
    oh, ow = out.shape[2], out.shape[3]
    xf, of = x.reshape(n * c * h * w), out.reshape(n * c * oh * ow)
    count = -(-oh * wq // ROUND) * ROUND  # NOTE: whole passes of the compiled loop (the scratch has room)
    phases, wide = np.full(phase_floats + ROUND, lowest, x.dtype), np.empty(count, x.dtype)
    for plane in range(first, last):
        fill_phases(xf, plane * h * w, copies, stride, phases)
        _max_taps(phases, taps, count, wide)
        base = plane * oh * ow
        for r in range(oh):
            for i in range(ow):
                of[_u(base + r * ow + i)] = wide[_u(r * wq + i)]


@jit
def _max_taps(phases, taps, count, wide):
    """wide[i] = the max over the taps t of phases[taps[t] + i], for i < count."""
    n = taps.shape[0]
    if n == 9:  # NOTE: a 3x3 window in one pass: one store of the wide plane, not three
        s0, s1, s2, s3, s4 = taps[0], taps[1], taps[2], taps[3], taps[4]
        s5, s6, s7, s8 = taps[5], taps[6], taps[7], taps[8]
        for i in range(count):
            top = max(max(phases[_u(s0 + i)], phases[_u(s1 + i)]), max(phases[_u(s2 + i)], phases[_u(s3 + i)]))
            bottom = max(max(phases[_u(s4 + i)], phases[_u(s5 + i)]), max(phases[_u(s6 + i)], phases[_u(s7 + i)]))
            wide[_u(i)] = max(max(top, bottom), phases[_u(s8 + i)])
        return
    first = taps[0]
    for i in range(count):
        wide[_u(i)] = phases[_u(first + i)]
    t = 1
    while t + 3 <= n:
        s0, s1, s2 = taps[t], taps[t + 1], taps[t + 2]
        for i in range(count):
            wide[_u(i)] = max(max(wide[_u(i)], phases[_u(s0 + i)]), max(phases[_u(s1 + i)], phases[_u(s2 + i)]))
        t += 3
    while t < n:
        s0 = taps[t]
        for i in range(count):
            wide[_u(i)] = max(wide[_u(i)], phases[_u(s0 + i)])
        t += 1


@functools.cache
def warm(dtype: str) -> None:
    """Compiles ``max_pool`` for ``dtype`` now (at build), not in the first predict."""
    plan = DepthwisePlan(Geometry((1, 1, 4, 4), (2, 2), (2, 2), (1, 1), (0, 0), (0, 0), (2, 2)))
    x, out = np.zeros((1, 1, 4, 4), dtype), np.zeros((1, 1, 2, 2), dtype)
    kind = np.dtype(dtype)
    compiled(run, plan, x, out, kind.type(-np.inf if kind.kind == "f" else np.iinfo(kind).min))


# The block of a float32 max pool on the crew (``lite.kernels.fast.crew.Jobs``), then (first, last) a piece:
_X, _N, _C, _H, _W, _OUT, _OH, _OW, _TAPS, _TAPS_N, _COPIES, _COPIES_N, _STRIDE, _WQ, _PHASES, _LOWEST = range(16)
_HEADER = 16


def crew_jobs(plan: DepthwisePlan, x: np.ndarray, out: np.ndarray, lowest: np.generic, bounds: list[tuple[int, int]]):
    """A float32 max pool's planes as jobs for the crew, one per piece of ``bounds`` (``run``'s
    arguments otherwise)."""
    from lite.kernels.fast.crew import Jobs, pieces_block

    block = pieces_block(_HEADER, bounds)
    block[[_X, _N, _C, _H, _W, _OUT, _OH, _OW]] = x.ctypes.data, *x.shape, out.ctypes.data, *out.shape[2:]
    block[[_TAPS, _TAPS_N, _COPIES, _COPIES_N]] = plan.taps.ctypes.data, plan.taps.size, plan.copies.ctypes.data, \
        plan.copies.shape[0]
    block[[_STRIDE, _WQ, _PHASES]] = plan.geometry.strides[1], plan.wq, plan.phase_floats
    block[_LOWEST:_HEADER].view(np.float64)[:] = lowest
    return Jobs(pool_job, block, len(bounds), (x, out, plan.taps, plan.copies))


def pool_job(index, data, extra):
    """Piece ``index`` of the max pool that the block at ``data`` describes."""
    block = carray(data, (_HEADER + 2 * (index + 1),), np.int64)
    floats = carray(data, (_HEADER,), np.float64)
    n, c = block[_N], block[_C]
    x = carray(as_pointer(block[_X]), (n, c, block[_H], block[_W]), np.float32)
    out = carray(as_pointer(block[_OUT]), (n, c, block[_OH], block[_OW]), np.float32)
    taps = carray(as_pointer(block[_TAPS]), (block[_TAPS_N],), np.int64)
    copies = carray(as_pointer(block[_COPIES]), (block[_COPIES_N], 5), np.int64)
    piece = _HEADER + 2 * index
    max_pool(x, out, taps, copies, block[_STRIDE], block[_WQ], block[_PHASES], np.float32(floats[_LOWEST]),
             block[piece], block[piece + 1])
