"""The in-memory model graph that the converter writes and the reader returns.

It mirrors schema/model.fbs: tensors referenced by index, nodes with a primitive
type name and its attributes (snake_case names, enum values as their names).
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass, field
from typing import Any

import ml_dtypes
import numpy as np

FORMAT_VERSION = 3  # 2: quantized tensors (QuantParams) and the quantization primitives; 3: int4/uint4,
# int2/uint2, float8 and float4 data types (the 4- and 2-bit ones packed in the file)
OLDEST_FORMAT_VERSION = 1  # the oldest version this runtime still reads (the schema only grows)
FILE_IDENTIFIER = b"DLIT"
DATA_ALIGNMENT = 64

# DataType enum name -> numpy dtype (schema/ops.fbs DataType).
DTYPES: dict[str, np.dtype] = {
    "FLOAT32": np.dtype(np.float32),
    "FLOAT16": np.dtype(np.float16),
    "FLOAT64": np.dtype(np.float64),
    "INT8": np.dtype(np.int8),
    "UINT8": np.dtype(np.uint8),
    "INT16": np.dtype(np.int16),
    "INT32": np.dtype(np.int32),
    "INT64": np.dtype(np.int64),
    "BOOL": np.dtype(np.bool_),
    "UINT16": np.dtype(np.uint16),
    "UINT32": np.dtype(np.uint32),
    "UINT64": np.dtype(np.uint64),
    "BFLOAT16": np.dtype(ml_dtypes.bfloat16),
    "INT4": np.dtype(ml_dtypes.int4),
    "UINT4": np.dtype(ml_dtypes.uint4),
    "INT2": np.dtype(ml_dtypes.int2),
    "UINT2": np.dtype(ml_dtypes.uint2),
    "FLOAT8E4M3FN": np.dtype(ml_dtypes.float8_e4m3fn),
    "FLOAT8E5M2": np.dtype(ml_dtypes.float8_e5m2),
    "FLOAT4E2M1": np.dtype(ml_dtypes.float4_e2m1fn),
}
DTYPE_NAMES: dict[np.dtype, str] = {dtype: name for name, dtype in DTYPES.items()}
# The narrow integers ml_dtypes gives numpy (dtype.kind "V", so they need naming): signed?, bits.
NARROW_INTS: dict[np.dtype, tuple[bool, int]] = {
    np.dtype(ml_dtypes.int4): (True, 4),
    np.dtype(ml_dtypes.uint4): (False, 4),
    np.dtype(ml_dtypes.int2): (True, 2),
    np.dtype(ml_dtypes.uint2): (False, 2),
}
# The float8/float4 types (ml_dtypes; float8_e5m2 has kind "f", the others "V").
NARROW_FLOATS = (np.dtype(ml_dtypes.float8_e4m3fn), np.dtype(ml_dtypes.float8_e5m2),
                 np.dtype(ml_dtypes.float4_e2m1fn))


def integer_kind(dtype: np.dtype | type) -> str:
    """``"i"`` for a signed integer dtype (int4 and int2 included), ``"u"`` for an unsigned one, else ``""``."""
    dtype = np.dtype(dtype)
    if dtype in NARROW_INTS:
        return "i" if NARROW_INTS[dtype][0] else "u"
    return dtype.kind if dtype.kind in "iu" else ""


def integer_bits(dtype: np.dtype | type) -> int:
    """The width in bits of an integer dtype's values (4 for int4, 8 for int8, ...)."""
    dtype = np.dtype(dtype)
    return NARROW_INTS[dtype][1] if dtype in NARROW_INTS else dtype.itemsize * 8


class Format(enum.IntEnum):
    """Memory layout of a 4-D tensor."""

    NCHW = 0
    NHWC = 1


@dataclass(frozen=True, eq=False)
class QuantParams:
    """How an integer tensor's values map to real ones: ``real = (q - zero_point) * scale``.

    Attributes:
        scale: float32, one per tensor (size 1), one per index of ``shape[axis]`` (per axis),
            or, when ``block_size > 0``, one per block of ``block_size`` elements along ``axis``
            (ONNX blocked quantization; shaped like the tensor with ``shape[axis]`` replaced by
            ``ceil(shape[axis] / block_size)``). Finite and positive.
        zero_point: int64, as many as ``scale``; within the range of ``bits``.
        axis: the quantized axis (0 <= axis < rank; 0 for a scalar).
        bits: significant bits of each value (8 for int8/uint8, 4 for int4/uint4 or int4 held in an int8).
        block_size: 0, or the block length of blocked quantization.
    """

    scale: np.ndarray
    zero_point: np.ndarray
    axis: int = 0
    bits: int = 8
    block_size: int = 0

    def __post_init__(self) -> None:
        for field_name, dtype in (("scale", np.float32), ("zero_point", np.int64)):
            array = np.array(getattr(self, field_name), dtype=dtype, copy=True)
            array.flags.writeable = False
            object.__setattr__(self, field_name, array)

    @property
    def per_tensor(self) -> bool:
        return self.scale.size == 1 and self.block_size == 0

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, QuantParams):
            return NotImplemented
        return ((self.axis, self.bits, self.block_size) == (other.axis, other.bits, other.block_size)
                and np.array_equal(self.scale, other.scale) and np.array_equal(self.zero_point, other.zero_point))

    __hash__ = None  # type: ignore[assignment]


def quant_params_error(quant: QuantParams, dtype: np.dtype, shape: tuple[int, ...]) -> str | None:
    """Why ``quant`` cannot describe a tensor of ``dtype`` and ``shape`` (-1: dynamic dim), or None."""
    dtype = np.dtype(dtype)
    kind, width = integer_kind(dtype), integer_bits(dtype)
    if not kind:
        return f"quantization parameters on a {dtype.name} tensor (only integer tensors are quantized)"
    if not 1 <= quant.bits <= width:
        return f"bits={quant.bits} does not fit its {dtype.name} values (1 to {width})"
    scale, zero_point = quant.scale, quant.zero_point
    if scale.size == 0 or not np.all(np.isfinite(scale)) or not np.all(scale >= np.finfo(np.float32).tiny):
        return f"its scales must be finite, positive and normal float32 numbers, got {_summary(scale)}"
    if zero_point.size not in (0, scale.size):
        return f"it has {zero_point.size} zero points for {scale.size} scales"
    bits = quant.bits
    low, high = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if kind == "i" else (0, (1 << bits) - 1)
    if zero_point.size and (zero_point.min() < low or zero_point.max() > high):
        return f"its zero points {_summary(zero_point)} are outside [{low}, {high}] of {quant.bits}-bit {dtype.name}"
    rank = len(shape)
    if not (0 <= quant.axis < rank or quant.axis == 0 == rank):
        return f"axis={quant.axis} is out of range for rank {rank}"
    if quant.block_size < 0:
        return f"block_size={quant.block_size} is negative"
    if quant.block_size == 0 and scale.size == 1:
        return None
    if rank == 0:
        return f"{scale.size} scales on a scalar"
    dims = list(shape)
    dim = dims[quant.axis]
    if quant.block_size:
        dims[quant.axis] = -1 if dim < 0 else -(-dim // quant.block_size)
        want = "blocks"
    else:
        dims = [dim]
        want = f"indices of dim {quant.axis}"
    if all(d >= 0 for d in dims) and math.prod(dims) != scale.size:
        return f"it has {scale.size} scales for {math.prod(dims)} {want} of dims {tuple(shape)}"
    return None


def _summary(values: np.ndarray) -> str:
    shown = ", ".join(str(v) for v in values.ravel()[:4].tolist())
    return f"[{shown}{', ...' if values.size > 4 else ''}]"


@dataclass
class TensorDef:
    name: str
    dtype: np.dtype
    shape: tuple[int, ...]  # -1 marks a dynamic dimension
    format: Format = Format.NCHW
    data: np.ndarray | None = None  # constant data, or None
    quant: QuantParams | None = None  # for quantized integer tensors

    @property
    def is_const(self) -> bool:
        return self.data is not None


@dataclass
class NodeDef:
    name: str
    op_type: str
    attrs: dict[str, Any]
    inputs: list[int]  # -1 marks an absent optional input
    outputs: list[int]


@dataclass
class PartitionDef:
    """A delegate partition compiled ahead of time (schema ``DelegatePartition``).

    ``nodes`` index ``GraphDef.nodes`` (the covered nodes, which stay in the graph);
    ``inputs``/``outputs`` index ``GraphDef.tensors``; ``blob`` is the delegate's bytes (a
    read-only view into the model buffer when read) and ``digest`` their sha256.
    """

    delegate: str
    target: str
    name: str
    nodes: list[int]
    inputs: list[int]
    outputs: list[int]
    blob: np.ndarray | bytes
    digest: str = ""


@dataclass
class GraphDef:
    tensors: list[TensorDef] = field(default_factory=list)
    nodes: list[NodeDef] = field(default_factory=list)
    inputs: list[int] = field(default_factory=list)
    outputs: list[int] = field(default_factory=list)
    name: str = ""
    description: str = ""
    partitions: list[PartitionDef] = field(default_factory=list)
