"""Quantized Add, Sub and Mul of two 8-bit tensors of one shape, in one pass.

Each element is ``quantize(dequantize(a) op dequantize(b))`` in float32 with the operations in
``lite.ops.quant``'s order: ``(float32(q) - zero_point) * scale`` for each input, the op, then
``rint(y / scale) + zero_point`` clipped to the output's range. These kernels are compiled
without fast-math (unlike the package's others), so the division stays a division, no
multiply-add is contracted, and every result is bit-identical to the numpy path.
"""

from __future__ import annotations

import functools

import numpy as np

from lite.kernels.fast import JIT_OPTIONS, compiled, numba_module

OPS = {"AddFusion": 0, "SubFusion": 1, "MulFusion": 2}


def _exact_jit(function):
    """``lite.kernels.fast.jit`` with IEEE arithmetic (no fast-math)."""
    return numba_module().njit(**{**JIT_OPTIONS, "fastmath": False})(function)


@_exact_jit
def arithmetic(op, a, a_scale, a_zero, b, b_scale, b_zero, y_scale, y_zero, lo, hi, out):
    """out = requantized (a op b) elementwise over flat arrays of one size (``op``: 0 add, 1 sub,
    2 mul; scales, zero points and bounds float32)."""
    if op == 0:
        for i in range(out.size):
            real = (np.float32(a[i]) - a_zero) * a_scale + (np.float32(b[i]) - b_zero) * b_scale
            out[i] = min(max(np.rint(real / y_scale) + y_zero, lo), hi)
    elif op == 1:
        for i in range(out.size):
            real = (np.float32(a[i]) - a_zero) * a_scale - (np.float32(b[i]) - b_zero) * b_scale
            out[i] = min(max(np.rint(real / y_scale) + y_zero, lo), hi)
    else:
        for i in range(out.size):
            real = ((np.float32(a[i]) - a_zero) * a_scale) * ((np.float32(b[i]) - b_zero) * b_scale)
            out[i] = min(max(np.rint(real / y_scale) + y_zero, lo), hi)


@functools.cache
def warm(a: np.dtype, b: np.dtype, out: np.dtype) -> None:
    """Compiles ``arithmetic`` for these input and output types now, at build."""
    f32 = np.float32
    compiled(arithmetic, 0, np.zeros(1, a), f32(1), f32(0), np.zeros(1, b), f32(1), f32(0), f32(1), f32(0),
             f32(-128), f32(127), np.zeros(1, out))
