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
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from lite.aligned import ALIGNMENT, aligned_size
from lite.errors import ModelFormatError

if TYPE_CHECKING:
    from lite.kernel import Kernel
    from lite.tensor import Tensor

MAGIC = b"DLBLOB01"
MAX_HEADER = 1 << 20  # bytes of JSON a header may take
MAX_DEPTH = 64  # how deep a header's arrays and objects may nest
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
        offset += aligned_size(array.nbytes)
    text = json.dumps({"header": dict(header), "arrays": entries}).encode()
    start = aligned_size(_PREFIX + len(text))
    parts = [MAGIC, struct.pack("<Q", len(text)), text, bytes(start - _PREFIX - len(text))]
    for array in contiguous.values():
        parts += [array.tobytes(), bytes(aligned_size(array.nbytes) - array.nbytes)]
    return b"".join(parts)


def position(kernels: Sequence[Kernel], tensor: Tensor) -> list[int]:
    """``[kernel, input]``: where ``kernels`` (a partition, in order) first read ``tensor``. A blob names
    one of the model's tensors this way (a weight it does not copy, a value it baked in)."""
    return next([k, i] for k, kernel in enumerate(kernels) for i, t in enumerate(kernel.inputs) if t is tensor)


def tensor_at(kernels: Sequence[Kernel], place: Any) -> Tensor:
    """The tensor a ``position`` names among ``kernels``.

    Raises:
        ValueError: ``place`` is not two indices of an input of ``kernels`` (a blob is untrusted input).
    """
    k, i = place if isinstance(place, (list, tuple)) and len(place) == 2 else (None, None)
    if not (isinstance(k, int) and isinstance(i, int) and 0 <= k < len(kernels) and 0 <= i < len(kernels[k].inputs)
            and kernels[k].inputs[i] is not None):
        raise ValueError(f"position {place!r} names no input of the partition's kernels")
    return kernels[k].inputs[i]


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
        meta = load_json(bytes(raw[_PREFIX:_PREFIX + length]).decode())
        header, entries = meta["header"], meta["arrays"]
        if not isinstance(header, dict) or not isinstance(entries, list):
            raise TypeError("header must be an object and arrays a list")
        start = aligned_size(_PREFIX + length)
        arrays = dict(_array(raw, start, entry) for entry in entries)
    except (ValueError, KeyError, TypeError, OverflowError) as exc:
        raise ModelFormatError(f"delegate blob: malformed header: {type(exc).__name__}: {exc}") from exc
    return header, arrays


def load_json(text: str, max_depth: int = MAX_DEPTH) -> Any:
    """JSON ``text`` from an untrusted place, whose arrays and objects nest at most ``max_depth`` deep.

    Raises:
        ValueError: ``text`` is not JSON, or nests deeper (JSON nested a few thousand deep made
            ``json.loads`` raise RecursionError, and nested data makes whatever walks it recurse).
    """
    try:
        value = json.loads(text)
    except RecursionError:
        raise ValueError(f"JSON nests deeper than {max_depth} levels") from None
    if nesting_depth(value, max_depth) > max_depth:
        raise ValueError(f"JSON nests deeper than {max_depth} levels")
    return value


def nesting_depth(value: Any, stop: int) -> int:
    """How deep the lists and dicts of ``value`` nest (a scalar: 0), counted without recursion up
    to ``stop + 1`` (a deeper value returns ``stop + 1``)."""
    deepest, level = 0, [value]
    while level:
        containers = [v for v in level if isinstance(v, (list, dict))]
        if not containers:
            break
        deepest += 1
        if deepest > stop:
            break
        level = [item for c in containers for item in (c.values() if isinstance(c, dict) else c)]
    return deepest


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
