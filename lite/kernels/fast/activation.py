"""GELU in one compiled pass: x * (1 + erf(x / sqrt(2))) / 2 with the float32 erf of
``lite.kernels.elementwise.erf_float32`` (x * P(x^2) / Q(x^2) on x clamped to [-4, 4]), which
is plain arithmetic, so the compiler vectorizes it (numpy runs it as about twenty passes)."""

from __future__ import annotations

import functools

import numpy as np

from lite.kernels.elementwise import ERF32_ALPHA, ERF32_BETA
from lite.kernels.fast import compiled, jit
from lite.ops.activation import SQRT_HALF

A0, A1, A2, A3, A4, A5, A6 = (np.float32(c) for c in ERF32_ALPHA)
B0, B1, B2, B3, B4 = (np.float32(c) for c in ERF32_BETA)
HALF, ROOT_HALF = np.float32(0.5), np.float32(SQRT_HALF)


@jit
def gelu_float32(x, out):
    """out = GELU(x) for float32 1-D arrays of one length (out may be x)."""
    for i in range(x.shape[0]):
        value = x[i]
        v = min(max(value * ROOT_HALF, np.float32(-4)), np.float32(4))
        z = v * v
        p = (((((A0 * z + A1) * z + A2) * z + A3) * z + A4) * z + A5) * z + A6
        q = (((B0 * z + B1) * z + B2) * z + B3) * z + B4
        out[i] = value * (HALF + HALF * (v * (p / q)))


@functools.cache
def warm() -> None:
    """Compiles ``gelu_float32`` now (at build), not in the first predict."""
    x = np.zeros(4, np.float32)
    compiled(gelu_float32, x, np.zeros_like(x))
