"""Serialises a GraphDef to .lite bytes (used by the converter)."""

from __future__ import annotations

import flatbuffers
import numpy as np

from lite.schema.fb import DelegatePartition as fb_partition
from lite.schema.fb import Model as fb_model
from lite.schema.fb import Node as fb_node
from lite.schema.fb import QuantParams as fb_quant
from lite.schema.fb import Tensor as fb_tensor
from lite.schema.fb.DataType import DataType
from lite.schema.graph import (
    DATA_ALIGNMENT,
    DTYPE_NAMES,
    FILE_IDENTIFIER,
    FORMAT_VERSION,
    GraphDef,
    NodeDef,
    PartitionDef,
    QuantParams,
    TensorDef,
)
from lite.schema.packed import pack
from lite.schema.primitives import PRIMITIVE_TYPES, encode_attrs


def write_model(graph: GraphDef) -> bytes:
    """Returns the .lite bytes of ``graph``; const data is 64-byte aligned in them."""
    return write_model_buffer(graph).tobytes()


def write_model_buffer(graph: GraphDef) -> np.ndarray:
    """``write_model`` without its copy: a read-only uint8 view of the writer's own buffer, starting on
    a 64-byte boundary where the buffer's slack allows, which ``read_model`` then reads in place (a
    build from an ONNX file holds one copy of the weights, not two)."""
    builder = flatbuffers.Builder(_size_hint(graph))
    tensors = [_write_tensor(builder, t) for t in graph.tensors]
    nodes = [_write_node(builder, n) for n in graph.nodes]
    partitions = [_write_partition(builder, p) for p in graph.partitions]
    name = builder.CreateString(graph.name)
    description = builder.CreateString(graph.description)
    tensor_vec = _offset_vector(builder, fb_model.StartTensorsVector, tensors)
    node_vec = _offset_vector(builder, fb_model.StartNodesVector, nodes)
    inputs = builder.CreateNumpyVector(np.asarray(graph.inputs, dtype=np.int32))
    outputs = builder.CreateNumpyVector(np.asarray(graph.outputs, dtype=np.int32))
    partition_vec = _offset_vector(builder, fb_model.StartPartitionsVector, partitions) if partitions else None
    fb_model.Start(builder)
    fb_model.AddVersion(builder, FORMAT_VERSION)
    fb_model.AddName(builder, name)
    fb_model.AddDescription(builder, description)
    fb_model.AddTensors(builder, tensor_vec)
    fb_model.AddNodes(builder, node_vec)
    fb_model.AddInputs(builder, inputs)
    fb_model.AddOutputs(builder, outputs)
    if partition_vec is not None:
        fb_model.AddPartitions(builder, partition_vec)
    builder.Finish(fb_model.End(builder), file_identifier=FILE_IDENTIFIER)
    return _aligned_start(builder.Bytes, builder.Head())  # NOTE: Output() would copy


def _aligned_start(buffer: bytearray, head: int) -> np.ndarray:
    """The finished model (``buffer[head:]``) moved down within ``buffer`` to start on a 64-byte
    boundary where the slack before it allows (its data is aligned relative to its start, and its
    length is a multiple of the alignment), as a read-only uint8 array."""
    whole, length = np.frombuffer(buffer, np.uint8), len(buffer) - head
    shift = (whole.ctypes.data + head) % DATA_ALIGNMENT
    start = head if shift > head else head - shift
    if start != head:  # NOTE: a memoryview moves overlapping bytes in place (numpy would copy them first)
        memoryview(buffer)[start:start + length] = memoryview(buffer)[head:]
    view = whole[start:start + length]
    view.flags.writeable = False
    return view


def _size_hint(graph: GraphDef) -> int:
    """Bytes the builder starts with: the data, its alignment and room for the rest, so that it never grows
    (a flatbuffers builder grows by doubling, copying everything written so far, twice the data at once)."""
    data = sum(t.data.nbytes + DATA_ALIGNMENT for t in graph.tensors if t.data is not None)
    data += sum(len(memoryview(p.blob)) + DATA_ALIGNMENT for p in graph.partitions)
    return data + 512 * (len(graph.tensors) + len(graph.nodes)) + (1 << 16)


def _offset_vector(builder: flatbuffers.Builder, start, offsets: list[int]) -> int:
    start(builder, len(offsets))
    for offset in reversed(offsets):
        builder.PrependUOffsetTRelative(offset)
    return builder.EndVector()


def _aligned_bytes(builder: flatbuffers.Builder, raw: bytes | memoryview) -> int:
    raw = memoryview(raw).cast("B")
    builder.StartVector(1, len(raw), DATA_ALIGNMENT)
    builder.head -= len(raw)
    builder.Bytes[builder.head : builder.head + len(raw)] = raw
    return builder.EndVector()


def _write_tensor(builder: flatbuffers.Builder, tensor: TensorDef) -> int:
    name = builder.CreateString(tensor.name)
    dims = builder.CreateNumpyVector(np.asarray(tensor.shape, dtype=np.int64))
    data = None
    if tensor.data is not None:
        data = _aligned_bytes(builder, pack(np.asarray(tensor.data, dtype=tensor.dtype)))
    quant = None if tensor.quant is None else _write_quant(builder, tensor.quant)
    fb_tensor.Start(builder)
    fb_tensor.AddName(builder, name)
    fb_tensor.AddDataType(builder, getattr(DataType, DTYPE_NAMES[np.dtype(tensor.dtype)]))
    fb_tensor.AddDims(builder, dims)
    fb_tensor.AddFormat(builder, int(tensor.format))
    if data is not None:
        fb_tensor.AddData(builder, data)
    if quant is not None:
        fb_tensor.AddQuantParams(builder, quant)
    return fb_tensor.End(builder)


def _write_quant(builder: flatbuffers.Builder, quant: QuantParams) -> int:
    scale = builder.CreateNumpyVector(np.asarray(quant.scale, dtype="<f4").ravel())
    zero_point = builder.CreateNumpyVector(np.asarray(quant.zero_point, dtype="<i8").ravel())
    fb_quant.Start(builder)
    fb_quant.AddScale(builder, scale)
    fb_quant.AddZeroPoint(builder, zero_point)
    fb_quant.AddAxis(builder, quant.axis)
    fb_quant.AddBits(builder, quant.bits)
    fb_quant.AddBlockSize(builder, quant.block_size)
    return fb_quant.End(builder)


def _write_node(builder: flatbuffers.Builder, node: NodeDef) -> int:
    name = builder.CreateString(node.name)
    primitive = encode_attrs(node.op_type, node.attrs).Pack(builder)
    inputs = builder.CreateNumpyVector(np.asarray(node.inputs, dtype=np.int32))
    outputs = builder.CreateNumpyVector(np.asarray(node.outputs, dtype=np.int32))
    fb_node.Start(builder)
    fb_node.AddName(builder, name)
    fb_node.AddPrimitiveType(builder, PRIMITIVE_TYPES[node.op_type])
    fb_node.AddPrimitive(builder, primitive)
    fb_node.AddInputs(builder, inputs)
    fb_node.AddOutputs(builder, outputs)
    return fb_node.End(builder)


def _write_partition(builder: flatbuffers.Builder, partition: PartitionDef) -> int:
    texts = [builder.CreateString(text) for text in (partition.delegate, partition.target, partition.name,
                                                      partition.digest)]
    indices = [builder.CreateNumpyVector(np.asarray(values, dtype=np.int32))
               for values in (partition.nodes, partition.inputs, partition.outputs)]
    blob = _aligned_bytes(builder, memoryview(partition.blob))
    fb_partition.Start(builder)
    fb_partition.AddDelegate(builder, texts[0])
    fb_partition.AddTarget(builder, texts[1])
    fb_partition.AddName(builder, texts[2])
    fb_partition.AddDigest(builder, texts[3])
    fb_partition.AddNodes(builder, indices[0])
    fb_partition.AddInputs(builder, indices[1])
    fb_partition.AddOutputs(builder, indices[2])
    fb_partition.AddBlob(builder, blob)
    return fb_partition.End(builder)
