"""64-byte aligned numpy allocation (what SIMD code and TVM-compiled kernels expect)."""

from __future__ import annotations

import numpy as np

from lite.errors import OutOfMemoryError

ALIGNMENT = 64


def aligned_size(nbytes: int) -> int:
    """``nbytes`` rounded up to a multiple of ALIGNMENT (where the next aligned item may start)."""
    return -(-nbytes // ALIGNMENT) * ALIGNMENT


def aligned_empty(nbytes: int) -> np.ndarray:
    """An uninitialised uint8 array of ``nbytes`` whose data is 64-byte aligned.

    Raises:
        OutOfMemoryError: the system refused the allocation.
    """
    return _aligned_in(_storage(nbytes), (nbytes,), np.dtype(np.uint8))


def aligned_array(shape: tuple[int, ...], dtype: np.dtype | type) -> np.ndarray:
    """An uninitialised C-contiguous array of ``shape`` and ``dtype``, 64-byte aligned (an empty one too)."""
    dtype = np.dtype(dtype)
    count = int(np.prod(shape, dtype=np.int64))
    return _aligned_in(_storage(count * dtype.itemsize), tuple(shape), dtype)


def _storage(nbytes: int) -> np.ndarray:
    try:
        return np.empty(nbytes + ALIGNMENT, dtype=np.uint8)
    except MemoryError as exc:
        raise OutOfMemoryError(f"could not allocate {nbytes} bytes; use smaller input shapes, or a lower "
                               "Context.memory_limit to refuse such models up front") from exc


def _aligned_in(storage: np.ndarray, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    # NOTE: built at an offset, not sliced: numpy gives an empty slice the address of its base
    return np.ndarray(shape, dtype, buffer=storage, offset=-storage.ctypes.data % ALIGNMENT)
