"""Activations in one compiled pass each, float32, plain arithmetic that the compiler vectorizes
(numpy runs them as several passes, and numba's own exp is a scalar call per element).

- GELU: x * (1 + erf(x / sqrt(2))) / 2 with the float32 erf of
  ``lite.ops.activation.ERF32_ALPHA`` / ``ERF32_BETA`` (x * P(x^2) / Q(x^2) on x clamped to [-4, 4],
  as the numpy ``lite.kernels.elementwise.erf_float32``), and that erf alone (ERF: the Erf op);
- SIGMOID and SWISH (x * sigmoid(alpha * x)) on ``exp32``, the exponential as Cephes' expf
  computes it: 2^n by its bits times a degree-6 polynomial on the remainder (within 4 ulp);
- HARD_SWISH: x * clip(x / 6 + 1/2, 0, 1);
- GELU_TANH: x * (1 + tanh(u)) / 2 with u = sqrt(2 / pi) * (x + 0.044715 x^3), computed as
  x * sigmoid(2u) (the same function: (1 + tanh(u)) / 2 = sigmoid(2u)), so no tanh and no
  cancellation where 1 + tanh(u) nears 0.

Each takes (x, out, alpha) as 1-D arrays of one length (out may be x); ``COMPILED`` maps an
activation type to its function.
"""

from __future__ import annotations

import functools

import numpy as np
from llvmlite import ir
from numba import types
from numba import uint64 as _u  # NOTE: unsigned indices skip the negative-index check, so the loops vectorize
from numba.extending import intrinsic

from lite.kernels.fast import compiled, jit
from lite.ops.activation import ERF32_ALPHA, ERF32_BETA, GELU_TANH_CUBIC, SQRT_2_OVER_PI, SQRT_HALF

A0, A1, A2, A3, A4, A5, A6 = (np.float32(c) for c in ERF32_ALPHA)
B0, B1, B2, B3, B4 = (np.float32(c) for c in ERF32_BETA)
HALF, ROOT_HALF, SIXTH = np.float32(0.5), np.float32(SQRT_HALF), np.float32(1 / 6)
TWICE_ROOT_2_OVER_PI, CUBIC = np.float32(2 * SQRT_2_OVER_PI), np.float32(GELU_TANH_CUBIC)
ONE, ZERO = np.float32(1), np.float32(0)
ERF_TINY, TWO_OVER_ROOT_PI = np.float32(1e-20), np.float32(1.1283791670955126)
# Cephes expf: x = n ln 2 + r (ln 2 in two parts), e^r by a polynomial, 2^n from its exponent bits
LOG2E, LN2_HI, LN2_LO = np.float32(1.44269504088896341), np.float32(0.693359375), np.float32(-2.12194440e-4)
EXP_LO, EXP_HI = np.float32(-87.3), np.float32(88.3)  # NOTE: 2^n stays a normal float: fastmath assumes no inf
P0, P1, P2, P3, P4, P5 = (np.float32(c) for c in (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3,
                                                  4.1665795894e-2, 1.6666665459e-1, 5.0000001201e-1))


@intrinsic
def float_from_bits(typingctx, bits):
    """The float32 whose bits are the int32 ``bits`` (a bitcast, which vectorizes)."""
    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.FloatType())
    return types.float32(types.int32), codegen


@jit
def exp32(x):
    """e^x for float32 x (clamped to [-87.3, 88.3], where the result is a normal float)."""
    x = min(max(x, EXP_LO), EXP_HI)
    n = np.floor(x * LOG2E + HALF)
    r = x - n * LN2_HI - n * LN2_LO
    p = (((((P0 * r + P1) * r + P2) * r + P3) * r + P4) * r + P5) * r * r + r + ONE
    return p * float_from_bits(np.int32((np.int32(n) + np.int32(127)) << np.int32(23)))


@intrinsic
def bits_of_float(typingctx, value):
    """The int32 bits of the float32 ``value`` (a bitcast, which vectorizes)."""
    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.IntType(32))
    return types.int32(types.float32), codegen


@jit
def erf_of(value):
    """erf(x) as x * P(x^2) / Q(x^2) (``ERF32_ALPHA``, ``ERF32_BETA``) for |x| < 4, +-1 beyond (the
    float32 nearest erf there); NaN stays NaN (told by its bits: the kernels compile with fastmath,
    which assumes no NaN), and below ``ERF_TINY`` x * 2 / sqrt(pi), whose product no reordering can
    take through a subnormal."""
    if bits_of_float(value) & np.int32(0x7FFFFFFF) > np.int32(0x7F800000):
        return value
    if abs(value) >= np.float32(4):  # NOTE: erf(4) is 1 - 1.5e-8, 1 in float32
        return ONE if value > ZERO else -ONE
    if abs(value) < ERF_TINY:
        return value * TWO_OVER_ROOT_PI
    v = value
    z = v * v
    p = (((((A0 * z + A1) * z + A2) * z + A3) * z + A4) * z + A5) * z + A6
    q = (((B0 * z + B1) * z + B2) * z + B3) * z + B4
    return v * (p / q)


@jit
def erf_float32(x, out, alpha):
    """out = erf(x) (alpha unused: every compiled activation takes one)."""
    for i in range(x.shape[0]):
        out[i] = erf_of(x[i])


@jit
def gelu_of(value, alpha):
    """x * (1 + erf(x / sqrt(2))) / 2 (alpha unused: every compiled activation takes one)."""
    v = min(max(value * ROOT_HALF, np.float32(-4)), np.float32(4))
    z = v * v
    p = (((((A0 * z + A1) * z + A2) * z + A3) * z + A4) * z + A5) * z + A6
    q = (((B0 * z + B1) * z + B2) * z + B3) * z + B4
    return value * (HALF + HALF * (v * (p / q)))


@jit
def gelu_float32(x, out, alpha):
    """out = GELU(x)."""
    for i in range(x.shape[0]):
        out[i] = gelu_of(x[i], alpha)


@jit
def sigmoid_of(v):
    """1 / (1 + e^-v) from e = e^-|v| (in (0, 1], so nothing overflows): 1 / (1 + e) for v >= 0,
    e / (1 + e) below, which keeps tiny results' relative precision; 0 where e^v underflows."""
    e = exp32(-abs(v))
    s = ONE / (ONE + e)
    return s if v >= ZERO else (e * s if v >= EXP_LO else ZERO)


@jit
def sigmoid_float32(x, out, alpha):
    """out = sigmoid(x)."""
    for i in range(x.shape[0]):
        out[i] = sigmoid_of(x[i])


@jit
def swish_of(value, alpha):
    """x * sigmoid(alpha * x) as x / (1 + e^(-alpha * x)): one division, and no overflow. Where
    e^(-alpha * x) passes e^88 the result is below |x| * 1e-38 and is 0: a tiny value
    there became subnormal in the next layers' products, each an assist of the FPU (a random
    EfficientNet-B0 on inputs ten times larger than usual slowed down)."""
    z = -alpha * value
    return value / (ONE + exp32(z)) if z < EXP_HI else ZERO


@jit
def hard_swish_of(value, alpha):
    """x * clip(x / 6 + 1/2, 0, 1) (alpha unused: every compiled activation takes one)."""
    return value * min(max(value * SIXTH + HALF, ZERO), ONE)


@jit
def gelu_tanh_of(value, alpha):
    """x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 x^3))) / 2 as x * sigmoid(2 sqrt(2 / pi) * (x + 0.044715 x^3))."""
    return value * sigmoid_of(TWICE_ROOT_2_OVER_PI * (value + CUBIC * value * value * value))


@jit
def gelu_tanh_float32(x, out, alpha):
    """out = GELU(x), tanh form."""
    for i in range(x.shape[0]):
        out[i] = gelu_tanh_of(x[i], alpha)


@jit
def swish_float32(x, out, alpha):
    """out = x * sigmoid(alpha * x)."""
    for i in range(x.shape[0]):
        out[i] = swish_of(x[i], alpha)


@jit
def hard_swish_float32(x, out, alpha):
    """out = x * clip(x / 6 + 1/2, 0, 1)."""
    for i in range(x.shape[0]):
        out[i] = hard_swish_of(x[i], alpha)


CLIP_CODE, SWISH_CODE, HARD_SWISH_CODE, GELU_CODE, GELU_TANH_CODE = 0, 1, 2, 3, 4
EPILOGUE_CODES = {"SWISH": SWISH_CODE, "HARD_SWISH": HARD_SWISH_CODE, "GELU": GELU_CODE, "GELU_TANH": GELU_TANH_CODE}
"""Activations a compiled producer (a convolution, a linear layer) applies at the end of its own
epilogue, by the code its loops branch on (CLIP_CODE there: the producer's own clip)."""


@jit
def activate_run(flat, base, length, shift, code, alpha):
    """``flat[base:base + length] = activation(flat[...] + shift, alpha)`` in place for an activation of
    EPILOGUE_CODES (one contiguous run: a channel's row or plane, long enough to vectorize)."""
    if code == SWISH_CODE:
        for i in range(length):
            flat[_u(base + i)] = swish_of(flat[_u(base + i)] + shift, alpha)
    elif code == GELU_CODE:
        for i in range(length):
            flat[_u(base + i)] = gelu_of(flat[_u(base + i)] + shift, alpha)
    elif code == GELU_TANH_CODE:
        for i in range(length):
            flat[_u(base + i)] = gelu_tanh_of(flat[_u(base + i)] + shift, alpha)
    else:
        for i in range(length):
            flat[_u(base + i)] = hard_swish_of(flat[_u(base + i)] + shift, alpha)

COMPILED = {"GELU": gelu_float32, "GELU_TANH": gelu_tanh_float32, "SIGMOID": sigmoid_float32,
            "SWISH": swish_float32, "HARD_SWISH": hard_swish_float32, "ERF": erf_float32}


@functools.cache
def warm(kind: str) -> None:
    """Compiles the function of activation ``kind`` now (at build), not in the first predict."""
    x = np.zeros(4, np.float32)
    compiled(COMPILED[kind], x, np.zeros_like(x), np.float32(1))
