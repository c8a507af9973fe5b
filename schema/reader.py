"""Reads and validates .lite bytes into a GraphDef.

Model files are untrusted: every count, index, enum and size is checked before it is
used, nothing is allocated from a size the file claims without a bound, and any
failure is a ``ModelFormatError`` naming the tensor or node at fault.
"""

from __future__ import annotations

import contextlib
import struct
from collections.abc import Iterator

import numpy as np

from lite.aligned import aligned_empty
from lite.errors import ModelFormatError
from lite.schema.fb.DataType import DataType
from lite.schema.fb.Model import Model as FbModel
from lite.schema.graph import (
    DATA_ALIGNMENT,
    DTYPES,
    FILE_IDENTIFIER,
    FORMAT_VERSION,
    OLDEST_FORMAT_VERSION,
    Format,
    GraphDef,
    NodeDef,
    PartitionDef,
    QuantParams,
    TensorDef,
    quant_params_error,
)
from lite.schema.packed import PACKED_BITS, storage_nbytes, unpack
from lite.schema.primitives import PRIMITIVE_NAMES, decode_attrs, enum_names

DEFAULT_MEMORY_LIMIT = 4 << 30  # bytes one tensor may need, unless the caller says otherwise
_DATA_TYPE_NAMES = enum_names(DataType)
_PARSE_ERRORS = (
    struct.error, IndexError, ValueError, TypeError, OverflowError, UnicodeDecodeError,
    AttributeError, KeyError,
)


def aligned_copy(buf: bytes | bytearray | memoryview | np.ndarray) -> np.ndarray:
    """Copies ``buf`` into a uint8 array whose first byte is 64-byte aligned."""
    raw = np.frombuffer(buf, dtype=np.uint8) if not isinstance(buf, np.ndarray) else buf.view(np.uint8).ravel()
    aligned = aligned_empty(raw.size)
    aligned[:] = raw
    return aligned


def read_model(buf: bytes | bytearray | memoryview | np.ndarray,
               memory_limit: int = DEFAULT_MEMORY_LIMIT) -> GraphDef:
    """Parses and validates a .lite buffer.

    Const tensors are read-only views into the (64-byte aligned) buffer, so the
    caller must keep it alive; ``aligned_copy`` makes such a buffer from any bytes.

    Raises:
        ModelFormatError: the buffer is not a valid Delite model.
    """
    data = buf if _is_aligned_u8(buf) else aligned_copy(buf)
    _check_header(data)
    with _context("model header"):
        root = FbModel.GetRootAs(data, 0)
        version = root.Version()
    if not OLDEST_FORMAT_VERSION <= version <= FORMAT_VERSION:
        raise ModelFormatError(
            f"model format version {version} is not supported (this runtime reads versions "
            f"{OLDEST_FORMAT_VERSION} to {FORMAT_VERSION}); convert the model again with this version's lite-convert")
    reader = _Reader(data, memory_limit)
    graph = reader.graph(root)
    _check_graph(graph)
    return graph


def _is_aligned_u8(buf) -> bool:
    return (isinstance(buf, np.ndarray) and buf.dtype == np.uint8 and buf.ndim == 1
            and buf.flags.c_contiguous and buf.ctypes.data % DATA_ALIGNMENT == 0)


def _check_header(data: np.ndarray) -> None:
    if data.size < 8:
        raise ModelFormatError(f"model buffer is {data.size} bytes, too short for a .lite file")
    ident = bytes(data[4:8])
    if ident != FILE_IDENTIFIER:
        raise ModelFormatError(
            f"not a Delite .lite model: file identifier is {ident!r}, expected {FILE_IDENTIFIER!r}"
            " (an .onnx file must be built with ModelType.ONNX or converted with lite-convert)")


@contextlib.contextmanager
def _context(where: str) -> Iterator[None]:
    try:
        yield
    except ModelFormatError:
        raise
    except (*_PARSE_ERRORS, RecursionError, MemoryError) as exc:
        raise ModelFormatError(f"malformed model: {where}: {type(exc).__name__}: {exc}") from exc


class _Reader:
    def __init__(self, data: np.ndarray, memory_limit: int):
        self.data = data
        self.memory_limit = memory_limit
        self.max_count = data.size // 4  # no vector can hold more offsets than this

    def graph(self, root: FbModel) -> GraphDef:
        with _context("model header"):
            name, description = _text(root.Name()), _text(root.Description())
            n_tensors = self._count(root.TensorsLength(), "tensors")
            n_nodes = self._count(root.NodesLength(), "nodes")
        tensors = [self.tensor(root, i) for i in range(n_tensors)]
        nodes = [self.node(root, i, n_tensors) for i in range(n_nodes)]
        with _context("graph inputs/outputs"):
            inputs = self._indices(root.InputsAsNumpy(), root.InputsLength(), n_tensors, "graph input")
            outputs = self._indices(root.OutputsAsNumpy(), root.OutputsLength(), n_tensors, "graph output")
        with _context("delegate partitions"):
            n_partitions = self._count(root.PartitionsLength(), "delegate partitions")
        partitions = [self.partition(root, i, n_tensors, n_nodes) for i in range(n_partitions)]
        return GraphDef(tensors, nodes, inputs, outputs, name, description, partitions)

    def _count(self, n: int, what: str) -> int:
        if n > self.max_count:
            raise ModelFormatError(f"malformed model: {what} count {n} exceeds what the file can hold")
        return n

    def _indices(self, values, length: int, count: int, what: str, allow_absent=False,
                 kind: str = "tensor") -> list[int]:
        if length == 0:
            return []
        out = [int(v) for v in values]
        low = -1 if allow_absent else 0
        for v in out:
            if not low <= v < count:
                raise ModelFormatError(f"{what} refers to {kind} index {v}, but the model has {count} {kind}s")
        return out

    def tensor(self, root: FbModel, i: int) -> TensorDef:
        with _context(f"tensor #{i}"):
            t = root.Tensors(i)
            name = _text(t.Name()) or f"tensor_{i}"
        with _context(f"tensor {name!r}"):
            dtype = _dtype(t.DataType(), name)
            shape = tuple(int(d) for d in t.DimsAsNumpy()) if t.DimsLength() else ()
            if any(d < -1 for d in shape):
                raise ModelFormatError(f"tensor {name!r} has invalid dims {shape}")
            fmt = t.Format()
            if fmt not in (Format.NCHW, Format.NHWC):
                raise ModelFormatError(f"tensor {name!r} has unknown format {fmt}")
            self._check_size(name, dtype, shape)
            data = None if t.DataIsNone() else self._const_data(t, name, dtype, shape)
            quant = self._quant_params(t.QuantParams(), name, dtype, shape)
        return TensorDef(name, dtype, shape, Format(fmt), data, quant)

    def _quant_params(self, q, name: str, dtype: np.dtype, shape: tuple[int, ...]) -> QuantParams | None:
        if q is None:
            return None
        scale = q.ScaleAsNumpy() if self._count(q.ScaleLength(), f"tensor {name!r} scales") else np.zeros(0)
        zero_point = q.ZeroPointAsNumpy() if self._count(q.ZeroPointLength(), f"tensor {name!r} zero points") else ()
        quant = QuantParams(scale, zero_point, int(q.Axis()), int(q.Bits()), int(q.BlockSize()))
        error = quant_params_error(quant, dtype, shape)
        if error:
            raise ModelFormatError(f"tensor {name!r} has invalid quantization parameters: {error}")
        return quant

    def _check_size(self, name: str, dtype: np.dtype, shape: tuple[int, ...]) -> None:
        static = [d for d in shape if d >= 0]
        nbytes = dtype.itemsize
        for d in static:
            nbytes *= d
            if nbytes > self.memory_limit:
                raise ModelFormatError(
                    f"tensor {name!r} with dims {shape} would need more than the memory limit "
                    f"of {self.memory_limit} bytes")

    def _const_data(self, t, name: str, dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
        if -1 in shape:
            raise ModelFormatError(f"const tensor {name!r} has dynamic dims {shape}")
        count = int(np.prod(shape, dtype=np.int64))
        length, need = t.DataLength(), storage_nbytes(dtype, count)
        if length != need:
            packed = f" (packed, {8 // PACKED_BITS[dtype]} per byte)" if dtype in PACKED_BITS else ""
            raise ModelFormatError(
                f"const tensor {name!r}: data has {length} bytes, but dims {shape} of "
                f"{dtype.name}{packed} need {need}")
        raw = t.DataAsNumpy()  # a view into the buffer; frombuffer checks the bounds
        if raw.ctypes.data % dtype.itemsize:
            raise ModelFormatError(f"const tensor {name!r}: data is misaligned for {dtype.name}")
        array = unpack(raw, dtype, shape)  # a view, or (packed types) a copy of at most 4 x length bytes
        array.flags.writeable = False
        return array

    def node(self, root: FbModel, i: int, n_tensors: int) -> NodeDef:
        with _context(f"node #{i}"):
            n = root.Nodes(i)
            name = _text(n.Name()) or f"node_{i}"
        with _context(f"node {name!r}"):
            tag = n.PrimitiveType()
            if tag not in PRIMITIVE_NAMES:
                raise ModelFormatError(f"node {name!r} has unknown primitive type {tag}")
            op_type = PRIMITIVE_NAMES[tag]
            table = n.Primitive()
            if table is None:
                raise ModelFormatError(f"node {name!r} ({op_type}) has no primitive table")
            attrs = decode_attrs(op_type, table)
            inputs = self._indices(n.InputsAsNumpy(), n.InputsLength(), n_tensors,
                                   f"node {name!r} input", allow_absent=True)
            outputs = self._indices(n.OutputsAsNumpy(), n.OutputsLength(), n_tensors,
                                    f"node {name!r} output")
        if not outputs:
            raise ModelFormatError(f"node {name!r} ({op_type}) has no outputs")
        return NodeDef(name, op_type, attrs, inputs, outputs)


    def partition(self, root: FbModel, i: int, n_tensors: int, n_nodes: int) -> PartitionDef:
        """One embedded delegate partition: indices in range, node ids unique, the blob within the memory limit."""
        with _context(f"delegate partition #{i}"):
            p = root.Partitions(i)
            delegate, target, name, digest = (_text(p.Delegate()), _text(p.Target()), _text(p.Name()),
                                              _text(p.Digest()))
            where = f"delegate partition #{i} ({delegate or 'no delegate'})"
            nodes = self._indices(p.NodesAsNumpy(), p.NodesLength(), n_nodes, f"{where} node", kind="node")
            inputs = self._indices(p.InputsAsNumpy(), p.InputsLength(), n_tensors, f"{where} input")
            outputs = self._indices(p.OutputsAsNumpy(), p.OutputsLength(), n_tensors, f"{where} output")
            if not delegate or not nodes or not outputs or len(set(nodes)) != len(nodes):
                raise ModelFormatError(f"{where} names no delegate, covers no nodes, has no outputs or "
                                       "lists a node twice")
            if p.BlobLength() > self.memory_limit:
                raise ModelFormatError(f"{where}: its blob of {p.BlobLength()} bytes exceeds the memory limit "
                                       f"of {self.memory_limit} bytes")
            blob = p.BlobAsNumpy() if p.BlobLength() else np.zeros(0, np.uint8)
            blob.flags.writeable = False
        return PartitionDef(delegate, target, name, nodes, inputs, outputs, blob, digest)


def _text(raw: bytes | None) -> str:
    return raw.decode("utf-8") if raw else ""


def _dtype(tag: int, name: str) -> np.dtype:
    type_name = _DATA_TYPE_NAMES.get(tag)
    if type_name not in DTYPES:
        raise ModelFormatError(
            f"tensor {name!r} has unknown data type {tag} (this runtime reads {', '.join(DTYPES)}); "
            "a newer lite-convert may have written it: update Delite, or convert the model with this version")
    return DTYPES[type_name]


def _check_graph(graph: GraphDef) -> None:
    """Checks that do not need kernels: who produces what, and graph inputs/outputs."""
    producer: dict[int, str] = {}
    for node in graph.nodes:
        for t in node.outputs:
            if t in producer:
                raise ModelFormatError(
                    f"tensor {graph.tensors[t].name!r} is produced by both node "
                    f"{producer[t]!r} and node {node.name!r}")
            if graph.tensors[t].is_const:
                raise ModelFormatError(f"node {node.name!r} writes const tensor {graph.tensors[t].name!r}")
            producer[t] = node.name
    for t in graph.inputs:
        if t in producer or graph.tensors[t].is_const:
            raise ModelFormatError(
                f"graph input {graph.tensors[t].name!r} is a constant or produced by a node")
    if len(set(graph.inputs)) != len(graph.inputs):
        raise ModelFormatError("a tensor is listed twice among the graph inputs")
    if not graph.outputs:
        raise ModelFormatError("the model has no outputs")
