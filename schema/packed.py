"""Packed storage of the 4- and 2-bit types in a .lite file (ONNX's packing).

In memory a tensor of int4, uint4, float4_e2m1fn, int2 or uint2 is an ml_dtypes array, one element
per byte. In the file its elements are packed, low bits first: int4/uint4/float4 two per byte
(element 2k in the low nibble of byte k), int2/uint2 four per byte (element 4k + j in bits
2j..2j+1); the unused bits of the last byte are zero.
"""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np

from lite.schema.graph import NARROW_INTS

# dtype -> bits per element in the file.
PACKED_BITS: dict[np.dtype, int] = {
    np.dtype(ml_dtypes.int4): 4,
    np.dtype(ml_dtypes.uint4): 4,
    np.dtype(ml_dtypes.float4_e2m1fn): 4,
    np.dtype(ml_dtypes.int2): 2,
    np.dtype(ml_dtypes.uint2): 2,
}


def storage_nbytes(dtype: np.dtype, count: int) -> int:
    """Bytes that ``count`` elements of ``dtype`` take in the file (packed where the type is)."""
    dtype = np.dtype(dtype)
    if dtype in PACKED_BITS:
        return -(-count * PACKED_BITS[dtype] // 8)
    return count * dtype.itemsize


def pack(array: np.ndarray) -> np.ndarray:
    """The file bytes (uint8, 1-D) of ``array``: packed for the 4- and 2-bit types, else its
    little-endian bytes."""
    dtype = array.dtype
    if dtype not in PACKED_BITS:
        return np.ascontiguousarray(array, dtype.newbyteorder("<")).reshape(-1).view(np.uint8)
    bits = PACKED_BITS[dtype]
    per_byte = 8 // bits
    codes = np.ascontiguousarray(array).reshape(-1).view(np.uint8) & np.uint8((1 << bits) - 1)
    codes = np.concatenate([codes, np.zeros(-codes.size % per_byte, np.uint8)]).reshape(-1, per_byte)
    shifts = np.arange(per_byte, dtype=np.uint8) * np.uint8(bits)
    return np.bitwise_or.reduce(codes << shifts, axis=1).astype(np.uint8)


def unpack(raw: np.ndarray, dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
    """The array of ``dtype`` and ``shape`` that the file bytes ``raw`` (uint8, exactly
    ``storage_nbytes`` of them) hold; a view of ``raw`` for the unpacked types.

    Raises:
        ValueError: ``raw`` has another length than ``shape`` of ``dtype`` takes.
    """
    dtype, count = np.dtype(dtype), math.prod(shape)
    if raw.size != storage_nbytes(dtype, count):
        raise ValueError(f"{raw.size} bytes of data, but dims {tuple(shape)} of {dtype.name} take "
                         f"{storage_nbytes(dtype, count)}")
    if dtype not in PACKED_BITS:
        return raw.view(dtype.newbyteorder("<")).reshape(shape)
    bits = PACKED_BITS[dtype]
    shifts = np.arange(8 // bits, dtype=np.uint8) * np.uint8(bits)
    codes = ((raw[:, None] >> shifts) & np.uint8((1 << bits) - 1)).reshape(-1)[:count]
    if dtype not in NARROW_INTS:
        return codes.view(dtype).reshape(shape)
    if NARROW_INTS[dtype][0]:  # sign-extend
        codes = codes.astype(np.int8) - ((codes >> np.uint8(bits - 1)).astype(np.int8) << np.int8(bits))
    return codes.astype(dtype).reshape(shape)
