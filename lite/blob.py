"""A delegate blob's layout: a JSON header and named arrays in one byte string.

Delegates that save graph kernels (``Delegate.save_graph_kernel``) may use it for what they
store: ``pack(header, arrays)`` writes, ``unpack(blob)`` reads back the header and read-only
array views into the blob (no copy), checking everything a hostile file could get wrong: the
magic, the header's size and form, every dtype, shape and extent. Layout::

    b"DLBLOB01" | header length (uint64 LE) | header JSON (utf-8) | arrays, each 64-byte aligned

The header JSON holds the delegate's own header under "header" and, under "arrays", one
``[name, dtype, shape, offset]`` entry per array (offsets from the start of the blob).

Example:
    >>> import numpy as np
    >>> from lite import blob
    >>> data = blob.pack({"target": "npu-v1"}, {"w": np.ones((2, 3), np.float16)})
    >>> header, arrays = blob.unpack(data)
    >>> header["target"], arrays["w"].shape, arrays["w"].dtype.name
    ('npu-v1', (2, 3), 'float16')
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Mapping
from typing import Any

import numpy as np

from lite.errors import ModelFormatError

MAGIC = b"DLBLOB01"
ALIGNMENT = 64
MAX_HEADER = 1 << 20  # bytes of JSON a header may take
DTYPES = frozenset({"float16", "float32", "float64", "int8", "uint8", "int16", "int32", "int64", "bool"})
_PREFIX = len(MAGIC) + 8


def pack(header: Mapping[str, Any], arrays: Mapping[str, np.ndarray]) -> bytes:
    """``header`` (JSON data) and ``arrays`` (C-order copies, little-endian) as one blob."""
    entries, offset = [], 0
    contiguous = {name: np.ascontiguousarray(a, dtype=a.dtype.newbyteorder("<")) for name, a in arrays.items()}
    for name, array in contiguous.items():
        if array.dtype.name not in DTYPES:
            raise ValueError(f"blob array {name!r} has dtype {array.dtype.name}; blobs hold {sorted(DTYPES)}")
        entries.append([name, array.dtype.name, list(array.shape), offset])
        offset += _aligned(array.nbytes)
    text = json.dumps({"header": dict(header), "arrays": entries}).encode()
    start = _aligned(_PREFIX + len(text))
    parts = [MAGIC, struct.pack("<Q", len(text)), text, bytes(start - _PREFIX - len(text))]
    for array in contiguous.values():
        parts += [array.tobytes(), bytes(_aligned(array.nbytes) - array.nbytes)]
    return b"".join(parts)


def unpack(blob: bytes | memoryview | np.ndarray) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """The header and the arrays (read-only views into ``blob``) of a blob ``pack`` wrote.

    Raises:
        ModelFormatError: the blob is not one ``pack`` wrote, or any field is out of bounds.
    """
    raw = np.frombuffer(blob, dtype=np.uint8)
    if raw.size < _PREFIX or bytes(raw[:len(MAGIC)]) != MAGIC:
        raise ModelFormatError("delegate blob: not a Delite blob (bad magic)")
    (length,) = struct.unpack("<Q", bytes(raw[len(MAGIC):_PREFIX]))
    if length > min(MAX_HEADER, raw.size - _PREFIX):
        raise ModelFormatError(f"delegate blob: header of {length} bytes does not fit")
    try:
        meta = json.loads(bytes(raw[_PREFIX:_PREFIX + length]).decode())
        header, entries = meta["header"], meta["arrays"]
        if not isinstance(header, dict) or not isinstance(entries, list):
            raise TypeError("header must be an object and arrays a list")
        start = _aligned(_PREFIX + length)
        arrays = dict(_array(raw, start, entry) for entry in entries)
    except (ValueError, KeyError, TypeError, OverflowError) as exc:
        raise ModelFormatError(f"delegate blob: malformed header: {type(exc).__name__}: {exc}") from exc
    return header, arrays


def _array(raw: np.ndarray, start: int, entry: Any) -> tuple[str, np.ndarray]:
    name, dtype_name, shape, offset = entry
    if not isinstance(name, str) or dtype_name not in DTYPES:
        raise ValueError(f"array entry {entry!r}: bad name or dtype")
    if not (isinstance(shape, list) and all(isinstance(d, int) and d >= 0 for d in shape)):
        raise ValueError(f"array {name!r}: bad shape {shape!r}")
    if not isinstance(offset, int) or offset < 0 or offset % ALIGNMENT:
        raise ValueError(f"array {name!r}: bad offset {offset!r}")
    dtype = np.dtype(dtype_name).newbyteorder("<")
    nbytes = math.prod(shape) * dtype.itemsize
    begin = start + offset
    if begin + nbytes > raw.size:
        raise ValueError(f"array {name!r} of {nbytes} bytes at {begin} runs past the blob's {raw.size} bytes")
    array = raw[begin:begin + nbytes].view(dtype).reshape(shape)
    array.flags.writeable = False
    return name, array


def _aligned(size: int) -> int:
    return -(-size // ALIGNMENT) * ALIGNMENT
