"""What a quantized Add, Sub or Mul of two tensors with per-tensor parameters computes.

ONNX writes such an op as DequantizeLinear -> Add -> QuantizeLinear (QDQ form) or as
``com.microsoft``'s QLinearAdd and QLinearMul (QOperator form). onnxruntime runs both forms of
an 8-bit Add or Mul on its QLinearAdd and QLinearMul kernels (its optimizer fuses the QDQ
group), whose float32 arithmetic is not the group's: the Add folds the scales into two ratios and
the zero points into one constant, with fused multiply-adds (its x86 kernel, AVX2 and later),
and the Mul multiplies the integer product by one ratio. The two differ where a result lies
within float32 rounding of a tie (QLinearAdd gives 146 where the group gives 147 for an exact
146.50002), and a deep network amplifies such steps. Delite computes 8-bit Add and Mul as those
kernels do, so a quantized model gives onnxruntime's numbers bit for bit; Sub (which onnxruntime
has no quantized kernel for) and ops with a 16-bit tensor keep the group's arithmetic.

With ``ra = float32(a_scale / y_scale)`` and ``rb = float32(b_scale / y_scale)``:

- Add: ``fixed = y_zero - fma(ra, a_zero, rb * b_zero)``, then
  ``saturate(rint(fma(a, ra, fma(b, rb, fixed))))`` (``a`` and ``b`` the integers, in float32);
- Mul: ``saturate(rint(float32((a - a_zero) * (b - b_zero)) * ratio + y_zero))`` with
  ``ratio = float32(a_scale * b_scale) / y_scale``;
- otherwise ``quantize(dequantize(a) op dequantize(b))`` in float32 (``lite.ops.quant``).
"""

from __future__ import annotations

import numpy as np

from lite.ops.quant import dequantize_tensor, per_tensor_terms, qrange, quantize_tensor

BYTE_TYPES = (np.dtype(np.int8), np.dtype(np.uint8))
FLOAT_OPS = {"AddFusion": np.add, "SubFusion": np.subtract, "MulFusion": np.multiply}
RATIO_OPS = ("AddFusion", "MulFusion")
"""The ops computed with onnxruntime's scale ratios (on 8-bit tensors)."""


def uses_scale_ratios(op_type: str, *dtypes: np.dtype | type) -> bool:
    """Whether ``op_type`` on tensors of ``dtypes`` (both inputs' and the output's) is computed with
    onnxruntime's scale ratios: Add or Mul, all of them 8-bit."""
    return op_type in RATIO_OPS and all(np.dtype(d) in BYTE_TYPES for d in dtypes)


def quantized_arithmetic(op_type: str, a: np.ndarray, a_params, b: np.ndarray, b_params, y_params,
                         dtype: np.dtype | type) -> np.ndarray:
    """``a op b`` (broadcast) of quantized tensors with per-tensor parameters, quantized by
    ``y_params`` into ``dtype``: AddFusion, SubFusion or MulFusion, no fused activation."""
    a, b = np.asarray(a), np.asarray(b)
    if not uses_scale_ratios(op_type, a.dtype, b.dtype, dtype):
        real = FLOAT_OPS[op_type](dequantize_tensor(a, a_params), dequantize_tensor(b, b_params))
        return quantize_tensor(real, y_params, dtype)
    (a_scale, a_zero), (b_scale, b_zero), (y_scale, y_zero) = (per_tensor_terms(p) for p in (a_params, b_params,
                                                                                            y_params))
    a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
    if op_type == "AddFusion":
        ra, rb, fixed = add_terms(a_scale, a_zero, b_scale, b_zero, y_scale, y_zero)
        result = fma32(a, ra, fma32(b, rb, fixed))
    else:
        ratio = mul_ratio(a_scale, b_scale, y_scale)
        result = ((a - a_zero) * (b - b_zero)).astype(np.float32) * ratio + y_zero
    return np.clip(np.rint(result), *qrange(dtype, y_params.bits)).astype(dtype)


def add_terms(a_scale, a_zero, b_scale, b_zero, y_scale, y_zero) -> tuple[np.float32, np.float32, np.float32]:
    """(ra, rb, fixed) of a quantized Add, from float32 scales and zero points."""
    f32 = np.float32
    ra, rb = f32(f32(a_scale) / f32(y_scale)), f32(f32(b_scale) / f32(y_scale))
    fixed = f32(f32(y_zero) - fma32(ra, f32(a_zero), f32(rb * f32(b_zero))))
    return ra, rb, fixed


def mul_ratio(a_scale, b_scale, y_scale) -> np.float32:
    """What a quantized Mul multiplies the integer product by: ``(a_scale * b_scale) / y_scale`` in float32."""
    return np.float32(np.float32(np.float32(a_scale) * np.float32(b_scale)) / np.float32(y_scale))


def fma32(x, y, z) -> np.ndarray:
    """``x * y + z`` of float32 values, rounded to float32 once (a fused multiply-add).

    The product of two float32 values is exact in float64; their float64 sum, rounded to odd (an
    inexact sum truncated toward zero, its last bit set), then rounded to float32, is the exactly
    rounded result (53 bits are more than 24 + 2)."""
    x, y, z = (np.asarray(v, np.float32).astype(np.float64) for v in (x, y, z))
    product = x * y
    total = product + z
    # the sum's rounding error, exactly (Knuth's two-sum)
    product_part = total - z
    error = (product - product_part) + (z - (total - product_part))
    bits = np.asarray(total).view(np.int64)
    rounded_away = (error != 0) & ((error < 0) != (total < 0))
    bits = np.where(rounded_away, bits - 1, bits)  # one ulp toward zero (the magnitude is the low 63 bits)
    bits = np.where(error != 0, bits | 1, bits)
    return bits.view(np.float64).astype(np.float32)
