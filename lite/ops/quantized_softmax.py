"""What a quantized Softmax of an 8-bit tensor over its trailing axes computes: onnxruntime's
QLinearSoftmax (``com.microsoft``), which onnxruntime also runs for the QDQ group
DequantizeLinear -> Softmax -> QuantizeLinear.

Each value's exponential comes from a table of 256 float32 values, by its offset ``d`` below its
row's largest value: ``table[d] = float32(exp((bias - d) * x_scale))`` in float64, where
``bias = max(0, log(FLT_MAX / width) - 5) / x_scale`` lifts the values as high as a float32 sum
of ``width`` of them allows. The row's sum is float32: SUM_LANES running sums over its whole
groups of SUM_LANES values, added in order, then its last values in order. The output is
``saturate(rint(float32(e * multiplier) / sum) + y_zero)`` with
``multiplier = floor(float32(1 / y_scale))``: for an output scale of 1/255 in float32
(0.00392157, whose inverse is 254.99992) that is 254, so onnxruntime's probabilities are 254/255
of the softmax's; Delite computes the same, to give onnxruntime's numbers. Where onnxruntime
lets an int8 result of 128 wrap to -128 (a probability that rounds to 1 with an output zero point
of -128 and a scale of 1/256), Delite saturates to 127.
"""

from __future__ import annotations

import math

import numpy as np

from lite.ops.quant import qrange

SUM_LANES = 16
"""The running sums of a row (one AVX-512 vector of float32; onnxruntime's kernels sum in vectors too)."""
HEADROOM = 5.0
"""The natural-log headroom onnxruntime leaves below float32's largest value for the row's sum."""


def exponent_table(x_scale: float, width: int) -> np.ndarray:
    """The 256 float32 exponentials of a row of ``width`` values, by offset below its largest."""
    scale = float(np.float32(x_scale))
    largest = float(np.float32(np.finfo(np.float32).max) / np.float32(width))
    bias = max(0.0, math.log(largest) - HEADROOM) / scale
    offsets = np.arange(256, dtype=np.float64)
    return np.exp((bias - offsets) * scale).astype(np.float32)


def output_multiplier(y_scale: float) -> np.float32:
    """``floor(float32(1 / y_scale))``: what each exponential is multiplied by before the division."""
    return np.float32(np.floor(np.float32(1) / np.float32(y_scale)))


def quantized_softmax(x: np.ndarray, x_scale: float, y_scale: float, y_zero: int, dtype: np.dtype | type,
                      width: int, bits: int | None = None) -> np.ndarray:
    """The softmax of each row of ``width`` values of the 8-bit ``x`` (rows contiguous in its
    flattened order), quantized into ``dtype``; x's zero point cancels out."""
    rows = np.asarray(x).reshape(-1, width).astype(np.int64)
    table = exponent_table(x_scale, width)
    exps = table[rows.max(axis=1, keepdims=True) - rows]
    whole = width - width % SUM_LANES
    lanes = np.zeros((len(rows), SUM_LANES), np.float32)
    if whole:
        lanes = np.cumsum(exps[:, :whole].reshape(len(rows), -1, SUM_LANES), axis=1, dtype=np.float32)[:, -1]
    terms = np.concatenate([lanes, exps[:, whole:]], axis=1)
    totals = np.cumsum(terms, axis=1, dtype=np.float32)[:, -1:]  # NOTE: cumsum adds in order (np.sum pairs)
    quotients = (exps * output_multiplier(y_scale)).astype(np.float32) / totals
    result = np.clip(np.rint(quotients) + np.float32(y_zero), *qrange(dtype, bits))
    return result.astype(dtype).reshape(np.shape(x))
