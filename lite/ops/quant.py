"""What ONNX QuantizeLinear and DequantizeLinear mean: scales per tensor, per axis or per block.

``quantize(x, scale, zero_point, dtype)`` is ``saturate(round_half_even(x / scale) + zero_point)``
in ``dtype``; ``dequantize(q, scale, zero_point)`` is ``(q - zero_point) * scale``. The kernels,
delegates and the quantized ops to come all use these.
"""

from __future__ import annotations

import numpy as np

# The integer types ONNX quantizes to (int4/uint4 need packed storage, which .lite lacks yet).
QUANT_DTYPES = (np.dtype(np.int8), np.dtype(np.uint8), np.dtype(np.int16), np.dtype(np.uint16))
# What DequantizeLinear takes: the quantized types and int32 (bias).
DEQUANT_DTYPES = QUANT_DTYPES + (np.dtype(np.int32),)


def qrange(dtype: np.dtype | type, bits: int | None = None) -> tuple[int, int]:
    """The least and greatest value of ``bits``-bit (default: the whole) integer ``dtype``."""
    dtype = np.dtype(dtype)
    bits = dtype.itemsize * 8 if bits is None else bits
    if dtype.kind == "i":
        return -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    return 0, (1 << bits) - 1


def broadcast_param(value: np.ndarray, shape: tuple[int, ...], axis: int, block_size: int = 0) -> np.ndarray:
    """A scale or zero point shaped to broadcast against a tensor of ``shape``.

    A scalar or one-element value is per tensor; a vector is per axis; with ``block_size > 0``
    the value has the tensor's rank and each entry covers ``block_size`` elements along ``axis``.

    Raises:
        ValueError: the value's shape does not fit ``shape``, ``axis`` or ``block_size``.
    """
    value = np.asarray(value)
    rank = len(shape)
    if block_size < 0:
        raise ValueError(f"block_size must be >= 0, got {block_size}")
    if value.size == 1 and not block_size:
        return value.reshape(())
    if not -rank <= axis < rank:
        raise ValueError(f"axis {axis} is out of range for rank {rank}")
    axis %= rank
    if not block_size:
        if value.ndim != 1 or value.size != shape[axis]:
            raise ValueError(f"a per-axis scale or zero point has shape {value.shape}; expected "
                             f"({shape[axis]},) for axis {axis} of shape {shape}")
        return value.reshape([shape[axis] if d == axis else 1 for d in range(rank)])
    blocks = -(-shape[axis] // block_size)
    expected = tuple(blocks if d == axis else n for d, n in enumerate(shape))
    if value.shape != expected:
        raise ValueError(f"a blocked scale or zero point has shape {value.shape}; expected {expected} "
                         f"for block_size {block_size} on axis {axis} of shape {shape}")
    return np.repeat(value, block_size, axis=axis).take(range(shape[axis]), axis=axis)


def quantize(x: np.ndarray, scale: np.ndarray, zero_point: np.ndarray | None, dtype: np.dtype | type,
             axis: int = 1, block_size: int = 0) -> np.ndarray:
    """ONNX QuantizeLinear: ``saturate(round_half_even(x / scale) + zero_point)`` as ``dtype``.

    The division is in the scale's float type (int32 ``x`` divides in float64, as ONNX's
    reference does); rounding ties go to even; values outside ``dtype``'s range saturate.
    """
    dtype = np.dtype(dtype)
    scale = broadcast_param(scale, x.shape, axis, block_size)
    y = np.rint(x / scale)
    y = y.astype(np.promote_types(y.dtype, np.float32), copy=False)  # float16 cannot hold 65535
    if zero_point is not None:
        y = y + broadcast_param(zero_point, x.shape, axis, block_size).astype(y.dtype)
    low, high = qrange(dtype)
    return np.clip(y, low, high).astype(dtype)


def dequantize(q: np.ndarray, scale: np.ndarray, zero_point: np.ndarray | None, axis: int = 1,
               block_size: int = 0, dtype: np.dtype | type | None = None) -> np.ndarray:
    """ONNX DequantizeLinear: ``(q - zero_point) * scale`` in float32, returned as ``dtype``
    (the scale's type by default)."""
    scale = np.asarray(scale)
    dx = q.astype(np.float32)
    if zero_point is not None:
        dx = dx - broadcast_param(zero_point, q.shape, axis, block_size).astype(np.float32)
    y = dx * broadcast_param(scale, q.shape, axis, block_size)
    return y.astype(scale.dtype if dtype is None else dtype)
