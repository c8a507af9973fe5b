"""A convolution's epilogue in one compiled pass: bias, an optional residual and a clip, or bias
and an activation that ``lite.fusion`` took over from the Activation kernel reading the output.

numpy adds a per-channel bias, adds a residual and clips as three passes over the output; on
the large outputs of early layers each pass runs from memory, not cache.
"""

from __future__ import annotations

import functools

import numpy as np
from numba import carray
from numba import uint64 as _u  # NOTE: unsigned indices skip the negative-index check, so the loops vectorize

from lite.kernels.fast import compiled, jit
from lite.kernels.fast.activation import SWISH_CODE, activate_run
from lite.kernels.fast.crew import as_pointer


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


# The block of a float32 epilogue on the crew (``lite.kernels.fast.crew.Jobs``):
_KIND, _OUT, _RESIDUAL, _BIAS, _N, _C, _L, _LO, _HI, _ALPHA, _CODE = range(11)
_HEADER, _PER_PIECE = 11, 2  # then (first, last) channel for each piece
_KINDS = (bias_clip, bias_residual_clip, bias_activation)
CREW_ELEMENTS = 1 << 15  # epilogues below this many elements stay whole (a hand-off costs microseconds)


def on_crew(threads, step):
    """``step`` (a compiled epilogue's call), or a step running it on the crew (channel pieces,
    float32, outputs of ``CREW_ELEMENTS`` or more) when the model's threads have one."""
    if not isinstance(step, functools.partial) or step.func not in _KINDS:
        return step
    rows = step.args[0]
    bounds = threads.loop_bounds(rows.shape[1])
    if rows.dtype != np.float32 or rows.size < CREW_ELEMENTS or len(bounds) < 2 or threads.crew() is None:
        return step
    return threads.crew_step(crew_jobs(step, bounds), step)


def crew_jobs(step: functools.partial, bounds: list[tuple[int, int]]):
    """A compiled epilogue (``bias_clip``, ``bias_residual_clip`` or ``bias_activation`` bound in
    a partial) as jobs for the crew, one per range of channels in ``bounds``."""
    from lite.kernels.fast.crew import Jobs, pieces_block

    kind = _KINDS.index(step.func)
    rows, bias, *rest = step.args
    residual = rest[0] if kind == 1 else rows
    lo, hi = rest[-2:] if kind != 2 else (0, 0)
    code, alpha = rest if kind == 2 else (0, 1)
    block = pieces_block(_HEADER, bounds)
    block[[_KIND, _OUT, _RESIDUAL, _BIAS]] = kind, rows.ctypes.data, residual.ctypes.data, bias.ctypes.data
    block[[_N, _C, _L, _CODE]] = *rows.shape, code
    block[_LO:_CODE].view(np.float64)[:] = lo, hi, alpha
    return Jobs(epilogue_job, block, len(bounds), (rows, bias, residual))


def epilogue_job(index, data, extra):
    """Channels ``first`` to ``last - 1`` (piece ``index``) of the epilogue the block at ``data`` describes."""
    block = carray(data, (_HEADER + _PER_PIECE * (index + 1),), np.int64)
    floats = carray(data, (_HEADER,), np.float64)
    first, last = block[_HEADER + _PER_PIECE * index], block[_HEADER + _PER_PIECE * index + 1]
    channels, length, kind = block[_C], block[_L], block[_KIND]
    lo, hi, alpha = np.float32(floats[_LO]), np.float32(floats[_HI]), np.float32(floats[_ALPHA])
    bias = carray(as_pointer(block[_BIAS] + 4 * first), (last - first,), np.float32)
    for image in range(block[_N]):
        offset = 4 * (image * channels + first) * length
        out = carray(as_pointer(block[_OUT] + offset), (1, last - first, length), np.float32)
        if kind == 0:
            bias_clip(out, bias, lo, hi)
        elif kind == 1:
            residual = carray(as_pointer(block[_RESIDUAL] + offset), (1, last - first, length), np.float32)
            bias_residual_clip(out, bias, residual, lo, hi)
        else:
            bias_activation(out, bias, block[_CODE], alpha)
