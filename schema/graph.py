"""The in-memory model graph that the converter writes and the reader returns.

It mirrors schema/model.fbs: tensors referenced by index, nodes with a primitive
type name and its attributes (snake_case names, enum values as their names).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

import ml_dtypes
import numpy as np

FORMAT_VERSION = 1
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
}
DTYPE_NAMES: dict[np.dtype, str] = {dtype: name for name, dtype in DTYPES.items()}


class Format(enum.IntEnum):
    """Memory layout of a 4-D tensor."""

    NCHW = 0
    NHWC = 1


@dataclass
class TensorDef:
    name: str
    dtype: np.dtype
    shape: tuple[int, ...]  # -1 marks a dynamic dimension
    format: Format = Format.NCHW
    data: np.ndarray | None = None  # constant data, or None

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
