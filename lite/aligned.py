"""64-byte aligned numpy allocation (what SIMD code and TVM-compiled kernels expect)."""

from __future__ import annotations

import numpy as np

ALIGNMENT = 64


def aligned_empty(nbytes: int) -> np.ndarray:
    """An uninitialised uint8 array of ``nbytes`` whose data is 64-byte aligned."""
    storage = np.empty(nbytes + ALIGNMENT, dtype=np.uint8)
    start = -storage.ctypes.data % ALIGNMENT
    return storage[start : start + nbytes]


def aligned_array(shape: tuple[int, ...], dtype: np.dtype | type) -> np.ndarray:
    """An uninitialised C-contiguous array of ``shape`` and ``dtype``, 64-byte aligned."""
    dtype = np.dtype(dtype)
    count = int(np.prod(shape, dtype=np.int64))
    return aligned_empty(count * dtype.itemsize).view(dtype).reshape(shape)
