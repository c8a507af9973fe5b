"""2-D max pooling in one compiled pass (the pads are never read)."""

from __future__ import annotations

import functools

import numpy as np
from numba import uint64 as _u  # NOTE: unsigned indices skip the negative-index check, so the loops vectorize

from lite.kernels.fast import compiled, jit


@jit
def max_pool(x, out, kh, kw, sh, sw, dh, dw, pt, pl, lowest):
    """out (N, C, OH, OW) = the max over each window of x (N, C, H, W); windows start at
    (r * sh - pt, q * sw - pl) and their taps step (dh, dw); positions outside x are ignored
    (a window with none inside gives ``lowest``).

    Per output row, the window's input rows are first reduced to one row (contiguous, so
    vectorized), then each output takes the max of its kw taps in that row.
    """
    n, c, h, w = x.shape
    oh, ow = out.shape[2], out.shape[3]
    xf, of = x.reshape(n * c * h * w), out.reshape(n * c * oh * ow)
    column = np.empty(w, x.dtype)
    for plane in range(n * c):
        source, target = plane * h * w, plane * oh * ow
        for r in range(oh):
            for i in range(w):
                column[_u(i)] = lowest
            for a in range(kh):
                y = r * sh + a * dh - pt
                if 0 <= y < h:
                    line = source + y * w
                    for i in range(w):
                        column[_u(i)] = max(column[_u(i)], xf[_u(line + i)])
            row = target + r * ow
            for q in range(ow):
                of[_u(row + q)] = lowest
            for b in range(kw):
                shift = b * dw - pl
                first = 0 if shift >= 0 else (sw - 1 - shift) // sw
                last = min(ow, (w - 1 - shift) // sw + 1)
                for q in range(first, last):
                    at = _u(row + q)
                    of[at] = max(of[at], column[_u(q * sw + shift)])


@functools.cache
def warm(dtype: str) -> None:
    """Compiles ``max_pool`` for ``dtype`` now (at build), not in the first predict."""
    x, out = np.zeros((1, 1, 4, 4), dtype), np.zeros((1, 1, 2, 2), dtype)
    compiled(max_pool, x, out, 2, 2, 2, 2, 1, 1, 0, 0, np.dtype(dtype).type(-np.inf))
