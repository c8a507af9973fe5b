"""Named dtype groups. Each layer states which group an op supports on it.

The native kernels run ``FLOATS``, ``INTS``, ``NUMBERS`` and ``ALL``. onnxruntime's CPU kernels
lack float16 and the narrow integers for most math, so the ONNX Runtime emitters use the
``*_32_64`` groups there; the TVM delegate and the example NPU compile ``FLOAT32``.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

FLOAT32 = (np.dtype(np.float32),)
FLOATS = (np.dtype(np.float32), np.dtype(np.float64), np.dtype(np.float16))
SIGNED_INTS = (np.dtype(np.int64), np.dtype(np.int32), np.dtype(np.int16), np.dtype(np.int8))
UNSIGNED_INTS = (np.dtype(np.uint8), np.dtype(np.uint16), np.dtype(np.uint32), np.dtype(np.uint64))
INTS = SIGNED_INTS + UNSIGNED_INTS
SIGNED = FLOATS + SIGNED_INTS  # what Neg, Abs of a signed value and Sign make sense on
NUMBERS = FLOATS + INTS
BOOL = (np.dtype(np.bool_),)
ALL = NUMBERS + BOOL
BFLOAT16 = np.dtype(ml_dtypes.bfloat16)  # Cast only
# Storage, Cast and (de)quantization only: the narrow integers and floats (ml_dtypes).
NARROW_INTS = (np.dtype(ml_dtypes.int4), np.dtype(ml_dtypes.uint4), np.dtype(ml_dtypes.int2), np.dtype(ml_dtypes.uint2))
NARROW_FLOATS = (np.dtype(ml_dtypes.float8_e4m3fn), np.dtype(ml_dtypes.float8_e5m2), np.dtype(ml_dtypes.float4_e2m1fn))

FLOATS_32_64 = (np.dtype(np.float32), np.dtype(np.float64))
INTS_32_64 = (np.dtype(np.int32), np.dtype(np.int64))
NUMBERS_32_64 = FLOATS_32_64 + INTS_32_64


def saturating_cast(x: np.ndarray, dtype: np.dtype | type, saturate: bool = True) -> np.ndarray:
    """ONNX Cast (and QuantizeLinear's last step) to ``dtype``: to a float8 or float4 type with
    ``saturate``, values beyond the largest finite one (infinities included) become it, NaN stays
    NaN (float4, which has none, gives -0 as ONNX's reference does); then, as ``astype``, rounding
    to nearest even. Without ``saturate`` they overflow to NaN or infinity. Other types: ``astype``
    (float to integer truncates; to int4/int2 wraps around, as ONNX's Cast does)."""
    dtype, x = np.dtype(dtype), np.asarray(x)
    if saturate and dtype in NARROW_FLOATS:
        if x.dtype.itemsize < 2 or x.dtype == BFLOAT16:  # NOTE: clip in float32, which numpy can do
            x = x.astype(np.float32)
        largest = float(ml_dtypes.finfo(dtype).max)
        x = np.clip(x, -largest, largest)
    return x.astype(dtype)
