"""What ONNX DynamicQuantizeLinear, MatMulInteger and ConvInteger mean (onnxruntime's
``quantize_dynamic`` writes them).

``dynamic_quantize(x)`` quantizes float32 ``x`` to uint8 with a scale and zero point computed from
its range (widened to include 0); ``matmul_integer`` and ``conv_integer`` multiply int8/uint8
operands less their zero points and sum exactly into int32.

The sums run in float64: every operand less its zero point lies in [-255, 255], so each product is
below 2**16 and every partial sum of fewer than 2**37 products is an integer float64 holds exactly,
in any order (BLAS, unlike numpy's integer matmul, then does the work). ``exact_int32`` rounds
(absorbing the few ulps a transform algorithm such as Winograd's may add) and wraps to int32 as
ONNX's 32-bit accumulation does.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

# The operand types of MatMulInteger and ConvInteger.
INTEGER_DTYPES = (np.dtype(np.int8), np.dtype(np.uint8))
QMIN, QMAX = 0, 255
"""DynamicQuantizeLinear's output range (uint8)."""


def dynamic_quantize(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """ONNX DynamicQuantizeLinear: (y uint8, y_scale float32 scalar, y_zero_point uint8 scalar).

    ``y_scale = (max(0, max(x)) - min(0, min(x))) / 255`` (``1 / 255`` where that range is empty,
    as ONNX's reference evaluator has it), ``y_zero_point = round(saturate(0 - min / y_scale))``,
    ``y = saturate(round(x / y_scale) + y_zero_point)``; float32 arithmetic, ties to even, [0, 255].
    An empty ``x`` has the range [0, 0].
    """
    x = np.asarray(x, np.float32)
    scale, zero_point = dynamic_range(x)
    with np.errstate(all="ignore"):  # NaN, infinite or denormal x: IEEE results, as in ONNX's reference
        y = np.clip(np.rint(x / scale) + zero_point, QMIN, QMAX).astype(np.uint8)
        return y, np.array(scale, np.float32), np.array(zero_point).astype(np.uint8)


def dynamic_range(x: np.ndarray) -> tuple[np.float32, np.float32]:
    """(y_scale, y_zero_point as float32) of ``dynamic_quantize`` (the scale not finite where x's
    range is not)."""
    return range_terms(np.float32(x.min(initial=0.0)), np.float32(x.max(initial=0.0)))


def range_terms(low: np.float32, high: np.float32) -> tuple[np.float32, np.float32]:
    """(y_scale, y_zero_point as float32) of ``dynamic_quantize`` from x's range, 0 included
    (``low`` <= 0 <= ``high``)."""
    with np.errstate(all="ignore"):  # NOTE: an infinite range gives IEEE terms, as ONNX's reference has them
        span = np.float32(1.0) if high == low else high - low
        scale = np.float32(span / np.float32(QMAX - QMIN))
        zero_point = np.rint(np.clip(np.float32(QMIN) - low / scale, QMIN, QMAX))
    return scale, np.float32(zero_point)


def centered(q: np.ndarray, zero_point: np.ndarray | None) -> np.ndarray:
    """``q - zero_point`` in float64 (exact); ``zero_point`` broadcasts against ``q``."""
    out = np.asarray(q, np.float64)
    return out if zero_point is None else out - np.asarray(zero_point, np.float64)


def exact_int32(total: np.ndarray) -> np.ndarray:
    """An exact float64 sum of integer products as int32, wrapping past its range as ONNX's 32-bit
    accumulation does (the module's docstring says why the float64 sum is exact)."""
    return np.rint(total).astype(np.int64).astype(np.int32)


def row_zero_point(zero_point: np.ndarray | None, a_shape: tuple[int, ...]) -> np.ndarray | None:
    """MatMulInteger's a_zero_point shaped to broadcast against ``a``: a scalar (or one element)
    per tensor, a vector of one per row (M values for a of shape (..., M, K)), or a tensor that
    broadcasts already (shape (..., M, 1)).

    Raises:
        ValueError: a vector whose length is not a's number of rows.
    """
    if zero_point is None:
        return None
    zero_point = np.asarray(zero_point)
    if zero_point.size == 1:
        return zero_point.reshape(())
    if zero_point.ndim == 1:
        if len(a_shape) < 2 or zero_point.shape[0] != a_shape[-2]:
            raise ValueError(f"a_zero_point has {zero_point.shape[0]} values, but a of shape {list(a_shape)} "
                             f"has {a_shape[-2] if len(a_shape) > 1 else 1} rows")
        return zero_point.reshape(-1, 1)
    return zero_point


def matmul_integer(a: np.ndarray, b: np.ndarray, a_zero_point: np.ndarray | None = None,
                   b_zero_point: np.ndarray | None = None) -> np.ndarray:
    """ONNX MatMulInteger: ``(a - a_zero_point) @ (b - b_zero_point)`` in int32, numpy matmul's
    batching and broadcasting.

    ``a_zero_point`` is per tensor or per row of ``a`` (``row_zero_point``); ``b_zero_point`` per
    tensor or per column of ``b`` (a vector of N, or shape (..., 1, N)), broadcasting against ``b``.

    Raises:
        ValueError: a zero point or the operands' shapes do not fit.
    """
    a_zero_point = row_zero_point(a_zero_point, np.shape(a))
    return exact_int32(np.matmul(centered(a, a_zero_point), centered(b, b_zero_point)))


def channel_zero_point(zero_point: np.ndarray | None, w_shape: tuple[int, ...]) -> np.ndarray | None:
    """ConvInteger's w_zero_point shaped to broadcast against the weight: a scalar per tensor, else
    one value per output channel (w's first dim).

    Raises:
        ValueError: a zero point with neither one value nor one per output channel.
    """
    if zero_point is None:
        return None
    zero_point = np.asarray(zero_point)
    if zero_point.size == 1:
        return zero_point.reshape(())
    if zero_point.ndim != 1 or zero_point.shape[0] != w_shape[0]:
        raise ValueError(f"w_zero_point has shape {list(zero_point.shape)}; expected a scalar or "
                         f"({w_shape[0]},), one per output channel")
    return zero_point.reshape(-1, *[1] * (len(w_shape) - 1))


def tensor_zero_point(zero_point: np.ndarray | None) -> np.ndarray | None:
    """ConvInteger's x_zero_point as a scalar.

    Raises:
        ValueError: it holds more than one value.
    """
    if zero_point is None:
        return None
    zero_point = np.asarray(zero_point)
    if zero_point.size != 1:
        raise ValueError(f"x_zero_point must be a scalar (per tensor), got shape {list(zero_point.shape)}")
    return zero_point.reshape(())


def conv_integer(x: np.ndarray, w: np.ndarray, x_zero_point: np.ndarray | None, w_zero_point: np.ndarray | None,
                 convolve: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> np.ndarray:
    """ONNX ConvInteger: the convolution of ``x - x_zero_point`` by ``w - w_zero_point`` in int32.

    ``convolve(x, w)`` is a float64 convolution with the node's geometry (pads, strides, dilations,
    group) padding with zeros, so the padding is ``x_zero_point`` before the subtraction, as in
    ONNX's reference. ``x_zero_point`` is per tensor; ``w_zero_point`` per tensor or per output
    channel.

    Raises:
        ValueError: a zero point's shape does not fit.
    """
    x_zero_point = tensor_zero_point(x_zero_point)
    w_zero_point = channel_zero_point(w_zero_point, np.shape(w))
    return exact_int32(convolve(centered(x, x_zero_point), centered(w, w_zero_point)))
