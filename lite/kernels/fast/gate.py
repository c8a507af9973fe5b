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
from numba import carray

from lite.kernels.fast import compiled, jit
from lite.kernels.fast.activation import hard_swish_of, sigmoid_of, swish_of
from lite.kernels.fast.crew import as_pointer

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
    """gated (O,) = the gate of the channel means ``pooled`` (C,), ``gate``'s terms otherwise:
    ``hidden_rows``, then ``gated_run``, each over all of its outputs."""
    hidden_rows(pooled, w1, b1, lo1, hi1, code1, alpha1, beta1, hidden, 0, hidden.shape[0])
    gated_run(hidden, w2, b2, lo2, hi2, code2, alpha2, beta2, gated, 0, gated.shape[0])


@jit
def hidden_rows(pooled, w1, b1, lo, hi, code, alpha, beta, hidden, first, last):
    """hidden[first:last] = the first product's rows ``first`` to ``last - 1``: dot products of C terms
    of w1 (H, C) and ``pooled``, plus b1, clipped to lo..hi, then the activation of ``code``."""
    for row in range(first, last):
        total = ZERO
        for term in range(pooled.shape[0]):
            total += w1[row, term] * pooled[term]
        hidden[row] = activate(min(max(total + b1[row], lo), hi), code, alpha, beta)


@jit
def gated_run(hidden, w2, b2, lo, hi, code, alpha, beta, gated, first, last):
    """gated[first:last] = the second product's outputs ``first`` to ``last - 1``: b2 plus the H rows
    of w2's transpose (H, O), each times its ``hidden`` value (so the loops run over long runs of
    a row), clipped to lo..hi, then the activation of ``code``."""
    run = gated[first:last]  # NOTE: indices from 0, not first: the loop vectorizes
    run[:] = b2[first:last]
    for row in range(w2.shape[0]):
        scale, weights = hidden[row], w2[row, first:last]
        for i in range(run.size):
            run[i] += weights[i] * scale
    _finish(run, lo, hi, code, alpha, beta)


@jit
def _finish(vector, lo, hi, code, alpha, beta):
    """vector = activation(clip(vector, lo, hi)) in place."""
    for i in range(vector.shape[0]):
        vector[i] = activate(min(max(vector[i], lo), hi), code, alpha, beta)


# The block of one of a gate's products on the crew, then (first, last) a piece:
_E_WEIGHT, _E_ROWS, _E_COLUMNS, _E_BIAS, _E_SOURCE, _E_TARGET, _E_CODE, _E_SECOND = range(8)
_E_LO, _E_HI, _E_ALPHA, _E_BETA = range(8, 12)
_E_HEADER = 12


def product_jobs(second: bool, weight: np.ndarray, bias: np.ndarray, lo, hi, code: int, alpha, beta,
                 source: np.ndarray, target: np.ndarray, bounds: list[tuple[int, int]]):
    """The pieces of ``bounds`` of a gate's first product (``hidden_rows``: source the channel means,
    target hidden) or its ``second`` (``gated_run``: source hidden, target the gate) as crew jobs."""
    from lite.kernels.fast.crew import Jobs, pieces_block

    block = pieces_block(_E_HEADER, bounds)
    block[:_E_LO] = weight.ctypes.data, *weight.shape, bias.ctypes.data, source.ctypes.data, target.ctypes.data, \
        code, int(second)
    block[_E_LO:_E_HEADER].view(np.float64)[:] = lo, hi, alpha, beta
    return Jobs(product_job, block, len(bounds), (weight, bias, source, target))


def product_job(index, data, extra):
    """Piece ``index`` of the gate's product that the block at ``data`` describes."""
    block = carray(data, (_E_HEADER + 2 * (index + 1),), np.int64)
    floats = carray(data, (_E_HEADER,), np.float64)
    rows, columns, piece = block[_E_ROWS], block[_E_COLUMNS], _E_HEADER + 2 * index
    weight = carray(as_pointer(block[_E_WEIGHT]), (rows, columns), np.float32)
    lo, hi, alpha, beta = np.float32(floats[_E_LO]), np.float32(floats[_E_HI]), np.float32(floats[_E_ALPHA]), \
        np.float32(floats[_E_BETA])
    if block[_E_SECOND]:
        gated_run(carray(as_pointer(block[_E_SOURCE]), (rows,), np.float32), weight,
                  carray(as_pointer(block[_E_BIAS]), (columns,), np.float32), lo, hi, block[_E_CODE], alpha, beta,
                  carray(as_pointer(block[_E_TARGET]), (columns,), np.float32), block[piece], block[piece + 1])
    else:
        hidden_rows(carray(as_pointer(block[_E_SOURCE]), (columns,), np.float32), weight,
                    carray(as_pointer(block[_E_BIAS]), (rows,), np.float32), lo, hi, block[_E_CODE], alpha, beta,
                    carray(as_pointer(block[_E_TARGET]), (rows,), np.float32), block[piece], block[piece + 1])


@functools.cache
def warm() -> None:
    """Compiles ``gate`` now (at build), not in the first predict."""
    w, b, bound = np.zeros((2, 2), np.float32), np.zeros(2, np.float32), np.float32(np.inf)
    compiled(gate, np.zeros((1, 2, 3), np.float32), w, b, -bound, bound, IDENTITY, ONE, ZERO, w, b, -bound, bound,
             IDENTITY, ONE, ZERO, np.zeros(2, np.float32), np.zeros(2, np.float32), np.zeros((1, 2), np.float32))
