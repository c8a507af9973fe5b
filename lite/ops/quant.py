"""What ONNX QuantizeLinear and DequantizeLinear mean: scales per tensor, per axis or per block.

``quantize(x, scale, zero_point, dtype)`` is ``saturate(round_half_even(x / scale) + zero_point)``
in ``dtype``; ``dequantize(q, scale, zero_point)`` is ``(q - zero_point) * scale``. The kernels,
delegates and the quantized ops to come all use these.
"""

from __future__ import annotations

import numpy as np

from lite.ops.dtypes import NARROW_FLOATS, NARROW_INTS, saturating_cast
from lite.schema.graph import integer_bits, integer_kind

# The integer types ONNX quantizes to (int4/uint4 and int2/uint2 are packed in the file).
INT_QUANT_DTYPES = (np.dtype(np.int8), np.dtype(np.uint8), np.dtype(np.int16), np.dtype(np.uint16)) + NARROW_INTS
# Every type QuantizeLinear writes: the integers and the float8/float4 types (scaled, then cast).
QUANT_DTYPES = INT_QUANT_DTYPES + NARROW_FLOATS
# What DequantizeLinear takes: the quantized types and int32 (bias).
DEQUANT_DTYPES = QUANT_DTYPES + (np.dtype(np.int32),)


def qrange(dtype: np.dtype | type, bits: int | None = None) -> tuple[int, int]:
    """The least and greatest value of ``bits``-bit (default: the whole) integer ``dtype``
    (int4 is [-8, 7], uint2 [0, 3], ...)."""
    dtype = np.dtype(dtype)
    bits = integer_bits(dtype) if bits is None else bits
    if integer_kind(dtype) == "i":
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
             axis: int = 1, block_size: int = 0, saturate: bool = True) -> np.ndarray:
    """ONNX QuantizeLinear: ``saturate(round_half_even(x / scale) + zero_point)`` as ``dtype``.

    The division is in the scale's float type (int32 ``x`` divides in float64, as ONNX's
    reference does); rounding ties go to even; values outside an integer ``dtype``'s range
    saturate. To a float8 or float4 type, ``x / scale + zero_point`` is cast as ONNX's Cast does
    (``saturate`` as its attribute; ``lite.ops.dtypes.saturating_cast``).
    """
    dtype = np.dtype(dtype)
    scale = broadcast_param(scale, x.shape, axis, block_size)
    if dtype in NARROW_FLOATS:
        return _quantize_float(x / scale, zero_point, dtype, axis, block_size, saturate)
    y = np.rint(x / scale)
    y = y.astype(np.promote_types(y.dtype, np.float32), copy=False)  # float16 cannot hold 65535
    if zero_point is not None:
        y = y + broadcast_param(zero_point, x.shape, axis, block_size).astype(y.dtype)
    low, high = qrange(dtype)
    return np.clip(y, low, high).astype(dtype)


def _quantize_float(y: np.ndarray, zero_point: np.ndarray | None, dtype: np.dtype, axis: int, block_size: int,
                    saturate: bool) -> np.ndarray:
    y = y.astype(np.promote_types(y.dtype, np.float32), copy=False)
    if zero_point is not None:
        y = y + broadcast_param(zero_point, y.shape, axis, block_size).astype(y.dtype)
    return saturating_cast(y, dtype, saturate)


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


# ---- quantized ops -----------------------------------------------------------------------------
#
# A quantized op is an op whose inputs and outputs are quantized tensors (their QuantParams say
# real = (q - zero_point) * scale). It means ``quantize(op(dequantize(inputs)))``: ONNX's
# DequantizeLinear -> op -> QuantizeLinear group, and what QLinearConv, QLinearMatMul and
# onnxruntime's QLinear* operators define. Convolutions and products accumulate
# ``(x - x_zero_point) * (w - w_zero_point)`` exactly (int32 in ONNX) before the output's
# requantization, so the reference computes them in float64, where those sums are exact. Average
# pools too: their windows' sums of ``(q - zero_point) * scale`` are exact in float64 (as
# onnxruntime's QLinearAveragePool sums the integers), then divided once.

ACCUMULATING_OPS = frozenset({"Conv2DFusion", "Conv2dTransposeFusion", "MatMulFusion", "FullConnection",
                              "AvgPoolFusion"})
# Ops whose quantized form is defined by their own quantize/dequantize semantics, not by a group.
BOUNDARY_OPS = frozenset({"QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear", "MatMulInteger",
                          "ConvInteger"})


def param_arrays(params, shape: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray | None]:
    """A tensor's ``QuantParams`` as (scale, zero point) arrays ``quantize``/``dequantize`` take
    for a tensor of ``shape`` (a blocked scale gets the tensor's rank back)."""
    scale, zero_point = params.scale, params.zero_point if params.zero_point.size else None
    if params.block_size:
        blocks = [-(-n // params.block_size) if d == params.axis else n for d, n in enumerate(shape)]
        scale = scale.reshape(blocks)
        zero_point = None if zero_point is None else zero_point.reshape(blocks)
    elif scale.size == 1:
        scale = scale.reshape(())
        zero_point = None if zero_point is None else zero_point.reshape(())
    return scale, zero_point


def byte_values(dtype: np.dtype | type) -> np.ndarray:
    """Every value of an 8-bit type, in the order of its bytes (0 to 255: an int8's -128 is byte 128)."""
    return np.arange(256, dtype=np.uint8).view(dtype)


def dequantize_tensor(q: np.ndarray, params, dtype: np.dtype | type = np.float32) -> np.ndarray:
    """``(q - zero_point) * scale`` by the tensor's ``QuantParams``, in ``dtype`` (float64 keeps
    every int32 value exact)."""
    scale, zero_point = param_arrays(params, q.shape)
    offset = q.astype(np.float64 if np.dtype(dtype) == np.float64 else np.float32)
    if zero_point is not None:
        offset = offset - broadcast_param(zero_point, q.shape, params.axis, params.block_size).astype(offset.dtype)
    return (offset * broadcast_param(scale, q.shape, params.axis, params.block_size).astype(offset.dtype)).astype(dtype)


def quantize_tensor(x: np.ndarray, params, dtype: np.dtype | type) -> np.ndarray:
    """``saturate(round_half_even(x / scale) + zero_point)`` by the tensor's ``QuantParams``, in
    ``dtype``, within the ``bits`` the parameters give."""
    scale, zero_point = param_arrays(params, x.shape)
    scale = broadcast_param(scale, x.shape, params.axis, params.block_size).astype(x.dtype)
    y = np.rint(x / scale)
    if zero_point is not None:
        y += broadcast_param(zero_point, x.shape, params.axis, params.block_size).astype(y.dtype)
    low, high = qrange(dtype, params.bits)
    return np.clip(y, low, high).astype(dtype)


def per_tensor_terms(params) -> tuple[np.float32, np.float32]:
    """(scale, zero point) of per-tensor parameters, as float32 (zero point 0 where there is none)."""
    zero_point = params.zero_point.reshape(-1)[0] if params.zero_point.size else 0
    return np.float32(params.scale.reshape(-1)[0]), np.float32(zero_point)


def same_quantization(a, b) -> bool:
    """Whether two tensors' QuantParams map the same integers to the same reals."""
    return a is not None and b is not None and a == b


def requantize_multiplier(x_scale: np.ndarray, w_scale: np.ndarray, y_scale: np.ndarray) -> np.ndarray:
    """``x_scale * w_scale / y_scale`` in float32, left to right: what an int32 accumulator of a
    quantized convolution or product is multiplied by (as onnxruntime's QLinearConv computes it)."""
    return (np.float32(x_scale) * np.asarray(w_scale, np.float32) / np.float32(y_scale)).astype(np.float32)


def requantize(acc: np.ndarray, multiplier: np.ndarray, zero_point: int, dtype: np.dtype | type,
               bounds: tuple[int, int]) -> np.ndarray:
    """A quantized convolution's or product's output from its exact int32 accumulator (bias
    included): ``saturate(round_half_even(float32(acc) * multiplier) + zero_point)`` within
    ``bounds`` (the type's range, narrowed by a fused RELU or RELU6). ``multiplier`` broadcasts
    against ``acc`` (one per output channel)."""
    y = np.rint(acc.astype(np.float32) * multiplier)
    return np.clip(y + np.float32(zero_point), *bounds).astype(dtype)


def activation_bounds(activation: str, dtype: np.dtype | type, scale: float, zero_point: int,
                      bits: int | None = None) -> tuple[int, int] | None:
    """The output range a fused activation leaves a quantized output (RELU: from the zero
    point up; RELU6: up to 6's quantized value too); None for an activation no range expresses."""
    low, high = qrange(dtype, bits)
    if activation == "NO_ACTIVATION":
        return low, high
    if activation == "RELU":
        return max(low, zero_point), high
    if activation == "RELU6":
        six = int(np.clip(np.rint(np.float32(6.0) / np.float32(scale)) + zero_point, low, high))
        return max(low, zero_point), six
    return None
