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

FLOATS_32_64 = (np.dtype(np.float32), np.dtype(np.float64))
INTS_32_64 = (np.dtype(np.int32), np.dtype(np.int64))
NUMBERS_32_64 = FLOATS_32_64 + INTS_32_64
