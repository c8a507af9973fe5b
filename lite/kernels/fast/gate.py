"""A squeeze-and-excitation gate in one compiled call: ``gate = act2(clip2(w2 @ act1(clip1(w1 @
mean(x) + b1)) + b2))``, the mean over each channel's plane, float32.

EfficientNet-B0 and MobileNetV3 compute 16 and 8 such gates, each as five kernels: a global
average pool, a 1x1 convolution on a 1x1 plane, its activation, a second one and a sigmoid. At
one image the work is small (the pool reads the plane once, each product is a matrix-vector
product of at most 1152 x 48), so each kernel's dispatch is a large part of it.
``lite.fusion.SqueezeExcite`` runs the five here, one dispatch instead of five
(measured: docs/performance.md, runtime CPU fusion).
"""

from __future__ import annotations

import functools

import numpy as np

from lite.kernels.fast import compiled, jit
from lite.kernels.fast.activation import hard_swish_of, sigmoid_of, swish_of

IDENTITY, SIGMOID, HARD_SIGMOID, SWISH, HARD_SWISH = range(5)
GATE_CODES = {"SIGMOID": SIGMOID, "HARD_SIGMOID": HARD_SIGMOID, "SWISH": SWISH, "HARD_SWISH": HARD_SWISH}
"""The Activation types a gate applies after either product (a clip to bounds: any, as bounds)."""

ZERO, ONE = np.float32(0), np.float32(1)


@jit
def activate(value, code, alpha, beta):
    """The activation of ``code`` (``GATE_CODES``, IDENTITY: none) with the Activation's alpha and beta."""
    if code == SIGMOID:
        return sigmoid_of(value)
    if code == HARD_SIGMOID:
        return min(max(alpha * value + beta, ZERO), ONE)
    if code == SWISH:
        return swish_of(value, alpha)
    if code == HARD_SWISH:
        return hard_swish_of(value, alpha)
    return value


@jit
def gate(x, w1, b1, lo1, hi1, code1, alpha1, beta1, w2, b2, lo2, hi2, code2, alpha2, beta2, pooled, hidden, out):
    """out (N, O) = the gate of x (N, C, L) for every image: w1 (H, C), b1 (H,), w2 transposed (H,
    O), b2 (O,); the clip bounds and activation (code, alpha, beta) of each product; pooled (C,)
    and hidden (H,) scratch."""
    images, channels, length = x.shape
    share = ONE / np.float32(length)
    for image in range(images):
        for channel in range(channels):
            total = ZERO
            for i in range(length):
                total += x[image, channel, i]
            pooled[channel] = total * share
        excite(pooled, w1, b1, lo1, hi1, code1, alpha1, beta1, w2, b2, lo2, hi2, code2, alpha2, beta2, hidden,
               out[image])


@jit
def excite(pooled, w1, b1, lo1, hi1, code1, alpha1, beta1, w2, b2, lo2, hi2, code2, alpha2, beta2, hidden, gated):
    """gated (O,) = the gate of the channel means ``pooled`` (C,), ``gate``'s terms otherwise. The
    first product takes dot products of C terms, the second adds the H rows of w2's transpose,
    scaled, so both loops run over long vectors."""
    for row in range(w1.shape[0]):
        total = ZERO
        for term in range(pooled.shape[0]):
            total += w1[row, term] * pooled[term]
        hidden[row] = total + b1[row]
    _finish(hidden, lo1, hi1, code1, alpha1, beta1)
    gated[:] = b2
    for row in range(w2.shape[0]):
        scale = hidden[row]
        for i in range(gated.shape[0]):
            gated[i] += w2[row, i] * scale
    _finish(gated, lo2, hi2, code2, alpha2, beta2)


@jit
def _finish(vector, lo, hi, code, alpha, beta):
    """vector = activation(clip(vector, lo, hi)) in place."""
    for i in range(vector.shape[0]):
        vector[i] = activate(min(max(vector[i], lo), hi), code, alpha, beta)


@functools.cache
def warm() -> None:
    """Compiles ``gate`` now (at build), not in the first predict."""
    w, b, bound = np.zeros((2, 2), np.float32), np.zeros(2, np.float32), np.float32(np.inf)
    compiled(gate, np.zeros((1, 2, 3), np.float32), w, b, -bound, bound, IDENTITY, ONE, ZERO, w, b, -bound, bound,
             IDENTITY, ONE, ZERO, np.zeros(2, np.float32), np.zeros(2, np.float32), np.zeros((1, 2), np.float32))
