"""2-D max pooling in one compiled pass (the pads are never read), planes shared out among threads."""

from __future__ import annotations

import functools

import numpy as np
from numba import carray
from numba import uint64 as _u  # NOTE: unsigned indices skip the negative-index check, so the loops vectorize

from lite.kernels.fast import compiled, jit
from lite.kernels.fast.crew import as_pointer


@jit
def max_pool(x, out, kh, kw, sh, sw, dh, dw, pt, pl, lowest, first, last):
    """out (N, C, OH, OW) = the max over each window of x (N, C, H, W), for the planes ``first`` to
    ``last - 1`` (of N * C); windows start at (r * sh - pt, q * sw - pl) and their taps step
    (dh, dw); positions outside x are ignored (a window with none inside gives ``lowest``).

    Per output row, the window's input rows are first reduced to one row (contiguous, so
    vectorized), then each output takes the max of its kw taps in that row; with stride 2 the
    row is first split into its even and odd positions, so every tap reads a contiguous run.
    """
    n, c, h, w = x.shape
    oh, ow = out.shape[2], out.shape[3]
    xf, of = x.reshape(n * c * h * w), out.reshape(n * c * oh * ow)
    column, halves, evens = np.empty(w, x.dtype), np.empty(w + 1, x.dtype), (w + 1) // 2
    for plane in range(first, last):
        source, target = plane * h * w, plane * oh * ow
        for r in range(oh):
            _reduce_rows(xf, source, column, r * sh - pt, kh, dh, h, lowest)
            row = target + r * ow
            for q in range(ow):
                of[_u(row + q)] = lowest
            if sw == 2:
                for j in range(w // 2):  # NOTE: contiguous loads, split in one pass
                    halves[_u(j)] = column[_u(2 * j)]
                    halves[_u(evens + j)] = column[_u(2 * j + 1)]
                if w % 2:
                    halves[_u(evens - 1)] = column[_u(w - 1)]
            for b in range(kw):
                shift = b * dw - pl
                begin = 0 if shift >= 0 else (sw - 1 - shift) // sw
                end = min(ow, (w - 1 - shift) // sw + 1)
                if sw == 2:
                    start = (evens if shift % 2 else 0) + shift // 2
                    for q in range(begin, end):
                        of[_u(row + q)] = max(of[_u(row + q)], halves[_u(start + q)])
                else:
                    for q in range(begin, end):
                        of[_u(row + q)] = max(of[_u(row + q)], column[_u(q * sw + shift)])


@jit
def _reduce_rows(xf, source, column, top, kh, dh, h, lowest):
    """column = the max of the input rows ``top + a * dh`` (a < kh) that lie inside the plane."""
    w = column.size
    for i in range(w):
        column[_u(i)] = lowest
    for a in range(kh):
        y = top + a * dh
        if 0 <= y < h:
            line = source + y * w
            for i in range(w):
                column[_u(i)] = max(column[_u(i)], xf[_u(line + i)])


@functools.cache
def warm(dtype: str) -> None:
    """Compiles ``max_pool`` for ``dtype`` now (at build), not in the first predict."""
    x, out = np.zeros((1, 1, 4, 4), dtype), np.zeros((1, 1, 2, 2), dtype)
    compiled(max_pool, x, out, 2, 2, 2, 2, 1, 1, 0, 0, np.dtype(dtype).type(-np.inf), 0, 1)


# The block of a float32 max pool on the crew (``lite.kernels.fast.crew.Jobs``), then (first, last) a piece:
_X, _N, _C, _H, _W, _OUT, _OH, _OW, _KH, _KW, _SH, _SW, _DH, _DW, _PT, _PL, _LOWEST = range(17)
_HEADER = 17


def crew_jobs(x: np.ndarray, out: np.ndarray, geometry: dict, bounds: list[tuple[int, int]]):
    """A float32 max pool's planes as jobs for the crew, one per piece of ``bounds``; ``geometry``
    holds ``max_pool``'s keyword arguments kh to lowest."""
    from lite.kernels.fast.crew import Jobs, pieces_block

    block = pieces_block(_HEADER, bounds)
    block[[_X, _N, _C, _H, _W, _OUT, _OH, _OW]] = x.ctypes.data, *x.shape, out.ctypes.data, *out.shape[2:]
    block[_KH:_LOWEST] = [geometry[k] for k in ("kh", "kw", "sh", "sw", "dh", "dw", "pt", "pl")]
    block[_LOWEST:_HEADER].view(np.float64)[:] = geometry["lowest"]
    return Jobs(pool_job, block, len(bounds), (x, out))


def pool_job(index, data, extra):
    """Piece ``index`` of the max pool that the block at ``data`` describes."""
    block = carray(data, (_HEADER + 2 * (index + 1),), np.int64)
    floats = carray(data, (_HEADER,), np.float64)
    n, c = block[_N], block[_C]
    x = carray(as_pointer(block[_X]), (n, c, block[_H], block[_W]), np.float32)
    out = carray(as_pointer(block[_OUT]), (n, c, block[_OH], block[_OW]), np.float32)
    piece = _HEADER + 2 * index
    max_pool(x, out, block[_KH], block[_KW], block[_SH], block[_SW], block[_DH], block[_DW], block[_PT], block[_PL],
             np.float32(floats[_LOWEST]), block[piece], block[piece + 1])
