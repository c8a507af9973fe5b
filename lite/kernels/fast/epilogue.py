"""A convolution's epilogue in one compiled pass: bias, an optional residual and a clip, or bias
and an activation that ``lite.fusion`` took over from the Activation kernel reading the output.

numpy adds a per-channel bias, adds a residual and clips as three passes over the output; on
the large outputs of early layers each pass runs from memory, not cache.
"""

from __future__ import annotations

import functools

import numpy as np
from numba import uint64 as _u  # NOTE: unsigned indices skip the negative-index check, so the loops vectorize

from lite.kernels.fast import compiled, jit
from lite.kernels.fast.activation import SWISH_CODE, activate_run


@jit
def bias_clip(out, bias, lo, hi):
    """``out[n, c, i] = clip(out[n, c, i] + bias[c], lo, hi)`` in place, for out (N, C, L)."""
    images, channels, length = out.shape
    flat = out.reshape(images * channels * length)
    for row in range(images * channels):
        shift, base = bias[row % channels], row * length
        for i in range(length):
            flat[_u(base + i)] = min(max(flat[_u(base + i)] + shift, lo), hi)


@jit
def bias_residual_clip(out, bias, residual, lo, hi):
    """``out[n, c, i] = clip(out[n, c, i] + bias[c] + residual[n, c, i], lo, hi)`` in place."""
    images, channels, length = out.shape
    flat, extra = out.reshape(images * channels * length), residual.reshape(images * channels * length)
    for row in range(images * channels):
        shift, base = bias[row % channels], row * length
        for i in range(length):
            at = _u(base + i)
            flat[at] = min(max(flat[at] + shift + extra[at], lo), hi)


@jit
def bias_activation(out, bias, code, alpha):
    """``out[n, c, i] = activation(out[n, c, i] + bias[c], alpha)`` in place, for float32 out (N, C, L);
    ``code`` picks the activation (``EPILOGUE_CODES``)."""
    images, channels, length = out.shape
    flat = out.reshape(images * channels * length)
    for row in range(images * channels):
        activate_run(flat, row * length, length, bias[row % channels], code, alpha)


@functools.cache
def warm_activation() -> None:
    """Compiles ``bias_activation`` now (at build), not in the first predict (one call compiles
    every code: it is a run-time value)."""
    compiled(bias_activation, np.zeros((1, 2, 3), np.float32), np.zeros(2, np.float32), SWISH_CODE, np.float32(1))


@functools.cache
def warm(dtype: str) -> None:
    """Compiles both epilogues for ``dtype`` now (at build), not in the first predict."""
    out, bias, bound = np.zeros((1, 2, 3), dtype), np.zeros(2, dtype), np.dtype(dtype).type(0)
    compiled(bias_clip, out, bias, bound, bound)
    compiled(bias_residual_clip, out, bias, np.zeros_like(out), bound, bound)
