"""The ONNX graph the converter rewrites: loading, validation, tensor types from shape inference.

``OnnxGraph`` keeps the nodes as ``onnx.NodeProto`` and every constant as a numpy array,
so the passes can fold and rewire without re-serialising weights; ``infer_shapes``
builds a light model (large constants declared as typed inputs) for ONNX shape inference.
"""

from __future__ import annotations

import heapq
import math
from collections import defaultdict
from dataclasses import dataclass, field

import ml_dtypes
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from lite.errors import InputError, MemoryLimitError, ModelFormatError
from lite.ops.naming import unique_name
from lite.schema.reader import DEFAULT_MEMORY_LIMIT

DEFAULT_DOMAINS = ("", "ai.onnx")
# Element types a .lite file can store, as numpy dtypes.
LITE_DTYPES: dict[int, np.dtype] = {
    TensorProto.FLOAT: np.dtype(np.float32),
    TensorProto.FLOAT16: np.dtype(np.float16),
    TensorProto.DOUBLE: np.dtype(np.float64),
    TensorProto.INT8: np.dtype(np.int8),
    TensorProto.UINT8: np.dtype(np.uint8),
    TensorProto.INT16: np.dtype(np.int16),
    TensorProto.INT32: np.dtype(np.int32),
    TensorProto.INT64: np.dtype(np.int64),
    TensorProto.BOOL: np.dtype(np.bool_),
    TensorProto.UINT16: np.dtype(np.uint16),
    TensorProto.UINT32: np.dtype(np.uint32),
    TensorProto.UINT64: np.dtype(np.uint64),
    TensorProto.BFLOAT16: np.dtype(ml_dtypes.bfloat16),
    TensorProto.INT4: np.dtype(ml_dtypes.int4),  # numpy_helper unpacks ONNX's packed raw_data/int32_data
    TensorProto.UINT4: np.dtype(ml_dtypes.uint4),
    TensorProto.INT2: np.dtype(ml_dtypes.int2),
    TensorProto.UINT2: np.dtype(ml_dtypes.uint2),
    TensorProto.FLOAT8E4M3FN: np.dtype(ml_dtypes.float8_e4m3fn),
    TensorProto.FLOAT8E5M2: np.dtype(ml_dtypes.float8_e5m2),
    TensorProto.FLOAT4E2M1: np.dtype(ml_dtypes.float4_e2m1fn),
}
ONNX_TYPE_NAMES: dict[str, int] = dict(TensorProto.DataType.items())  # "FLOAT" -> 1, ...
_BOOL_OUTPUTS = frozenset({"Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "And", "Or", "Xor", "Not",
                           "IsNaN", "IsInf"})
_INT64_OUTPUTS = frozenset({"Shape", "Size", "ArgMax", "ArgMin", "NonZero"})
_INLINE_CONST_SIZE = 4096  # consts up to this many elements are given to shape inference by value
# Ops whose ONNX data propagation reads their inputs' values, and the most elements of 1-D
# tensors they may read in all for it to run (see _data_propagation_is_bounded).
_DATA_PROPAGATING = frozenset({"Cast", "Squeeze", "Unsqueeze", "Gather", "Slice", "Concat", "Add", "Sub", "Mul",
                               "Div"})
DATA_PROP_LIMIT = 1 << 20
_INFERENCE_ERRORS = (onnx.shape_inference.InferenceError, RuntimeError, ValueError, onnx.checker.ValidationError)


@dataclass
class TensorInfo:
    """Element type (TensorProto enum, 0 = unknown) and shape (None = unknown rank, -1 = unknown dim)."""

    elem_type: int = 0
    shape: tuple[int, ...] | None = None


@dataclass
class OnnxGraph:
    nodes: list[onnx.NodeProto]
    consts: dict[str, np.ndarray]
    inputs: list[onnx.ValueInfoProto]
    outputs: list[onnx.ValueInfoProto]
    opset: int
    model: onnx.ModelProto  # the source model's metadata: opset imports, IR version, graph name
    info: dict[str, TensorInfo] = field(default_factory=dict)
    taken: set[str] = field(default_factory=set)
    shape_error: str = ""  # what strict shape inference found wrong (shapes that do not agree)
    foreign_info: list[onnx.ValueInfoProto] = field(default_factory=list)  # see _foreign_value_info

    @property
    def output_names(self) -> list[str]:
        return [o.name for o in self.outputs]

    def producers(self) -> dict[str, onnx.NodeProto]:
        return {name: node for node in self.nodes for name in node.output if name}

    def use_counts(self) -> dict[str, int]:
        """How many node inputs read each tensor (graph outputs count once too)."""
        counts: dict[str, int] = defaultdict(int)
        for name in [i for node in self.nodes for i in node.input] + self.output_names:
            counts[name] += 1
        return counts

    def unique_name(self, hint: str) -> str:
        """A tensor or node name no other tensor or node has, based on ``hint``."""
        return unique_name(hint, self.taken)

    def replace_uses(self, old: str, new: str) -> None:
        """Every node input named ``old`` now reads ``new``."""
        for node in self.nodes:
            for k, name in enumerate(node.input):
                if name == old:
                    node.input[k] = new

    def rename_output(self, old: str, new: str) -> None:
        """The tensor ``old`` (a node output) is called ``new`` from now on."""
        self.replace_uses(old, new)
        for node in self.nodes:
            for k, name in enumerate(node.output):
                if name == old:
                    node.output[k] = new
        for value in self.foreign_info:
            if value.name == old:
                value.name = new

    def tensor_info(self, name: str) -> TensorInfo:
        if name in self.consts:
            array = self.consts[name]
            return TensorInfo(_elem_type(array.dtype), tuple(array.shape))
        return self.info.get(name, TensorInfo())


def from_model(model: onnx.ModelProto, input_shapes: dict[str, list[int]] | None = None,
               memory_limit: int = DEFAULT_MEMORY_LIMIT) -> OnnxGraph:
    """Checks the model's structure and returns its graph with inputs resized per ``input_shapes``.

    Raises:
        ModelFormatError: the model is structurally invalid (names, cycles, weights).
        MemoryLimitError: a sparse initializer would need more than ``memory_limit`` bytes dense.
        InputError: ``input_shapes`` names a tensor that is not a graph input.
    """
    if not model.HasField("graph") or not model.graph.output:
        raise ModelFormatError("ONNX model has no graph or its graph has no outputs")
    graph = model.graph
    consts = {t.name: _initializer(t) for t in graph.initializer}
    consts |= {t.values.name: _dense(t, memory_limit) for t in graph.sparse_initializer}
    g = OnnxGraph(
        nodes=_copies(graph.node), consts=consts,
        inputs=_copies(i for i in graph.input if i.name not in consts),
        outputs=_copies(graph.output), opset=_default_opset(model), model=_header(model),
        foreign_info=_foreign_value_info(graph),
    )
    _name_nodes(g)
    _check_names(g)
    g.nodes = _topological_order(g.nodes, set(consts) | {i.name for i in g.inputs})
    _apply_input_shapes(g, input_shapes or {})
    return g


def _copies(protos):
    """Copies of ``protos``: the passes edit nodes and inputs in place, never the caller's model."""
    result = []
    for proto in protos:
        result.append(type(proto)())
        result[-1].CopyFrom(proto)
    return result


def _foreign_value_info(graph: onnx.GraphProto) -> list[onnx.ValueInfoProto]:
    """The declared types of what non-standard-domain nodes write: ONNX cannot infer them, and
    shape inference needs them to type what is computed from those tensors."""
    foreign = {name for node in graph.node if node.domain not in DEFAULT_DOMAINS for name in node.output}
    return _copies(v for v in graph.value_info if v.name in foreign)


def _header(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model's metadata that conversion uses, without the graph's nodes and weights."""
    header = onnx.ModelProto(ir_version=model.ir_version, producer_name=model.producer_name)
    header.opset_import.extend(model.opset_import)
    header.functions.extend(model.functions)
    header.graph.name = model.graph.name
    return header


def _initializer(tensor: TensorProto) -> np.ndarray:
    try:
        return numpy_helper.to_array(tensor)
    except Exception as exc:  # onnx raises many exception types for broken tensors
        raise ModelFormatError(
            f"initializer {tensor.name!r} cannot be read ({type(exc).__name__}: {exc}); if it uses "
            "external data, pass the model's path instead of a ModelProto") from exc


def _dense(sparse: onnx.SparseTensorProto, memory_limit: int) -> np.ndarray:
    """A sparse initializer as a dense array (indices are flat [NNZ] or coordinates [NNZ, rank]).

    Raises:
        MemoryLimitError: the dense array would need more than ``memory_limit`` bytes.
        ModelFormatError: the sparse tensor is malformed.
    """
    name = sparse.values.name
    values = _initializer(sparse.values)
    dims = tuple(int(d) for d in sparse.dims)
    if any(d < 0 for d in dims):
        raise ModelFormatError(f"sparse initializer {name!r} has negative dims {list(dims)}")
    nbytes = math.prod(dims) * values.dtype.itemsize
    if nbytes > memory_limit:
        raise MemoryLimitError(f"sparse initializer {name!r} of dims {list(dims)} would need {nbytes} bytes dense, "
                               f"more than the memory limit of {memory_limit} bytes")
    try:
        indices = numpy_helper.to_array(sparse.indices)
        flat = indices if indices.ndim == 1 else np.ravel_multi_index(tuple(indices.T), dims)
        dense = np.zeros(math.prod(dims), dtype=values.dtype)
        dense[flat] = values
    except Exception as exc:  # out-of-range indices, mismatched counts
        raise ModelFormatError(f"sparse initializer {name!r} is malformed: {type(exc).__name__}: {exc}") from exc
    return dense.reshape(dims)


def _default_opset(model: onnx.ModelProto) -> int:
    for opset in model.opset_import:
        if opset.domain in DEFAULT_DOMAINS:
            return int(opset.version)
    raise ModelFormatError("ONNX model imports no default-domain (ai.onnx) opset")


def _name_nodes(g: OnnxGraph) -> None:
    """Gives every node a unique name (ONNX names may be empty or repeated)."""
    g.taken = {n for node in g.nodes for n in node.output} | set(g.consts) | {i.name for i in g.inputs}
    g.taken |= set(g.output_names)
    seen: set[str] = set()
    for k, node in enumerate(g.nodes):
        if not node.name or node.name in seen:
            node.name = g.unique_name(f"{node.name or node.op_type}_{k}")
        seen.add(node.name)
        g.taken.add(node.name)


def _check_names(g: OnnxGraph) -> None:
    defined = set(g.consts) | {i.name for i in g.inputs}
    for node in g.nodes:
        for name in node.output:
            if name and name in defined:
                raise ModelFormatError(
                    f"node {node.name!r} ({node.op_type}) writes tensor {name!r}, which is already a graph "
                    "input, an initializer or another node's output")
            defined.add(name)
    for node in g.nodes:
        for name in node.input:
            if name and name not in defined:
                raise ModelFormatError(
                    f"node {node.name!r} ({node.op_type}) reads {name!r}, which names no graph input, "
                    "initializer or node output")
    for name in g.output_names:
        if name not in defined:
            raise ModelFormatError(f"graph output {name!r} is not produced by any node or input")


def _topological_order(nodes: list[onnx.NodeProto], available: set[str]) -> list[onnx.NodeProto]:
    """Kahn's algorithm, keeping the file's order among ready nodes."""
    producer = {name: k for k, node in enumerate(nodes) for name in node.output if name}
    waiting = [{producer[i] for i in node.input if i in producer and i not in available} for node in nodes]
    readers = defaultdict(list)
    for k, deps in enumerate(waiting):
        for d in deps:
            readers[d].append(k)
    ready = [k for k, deps in enumerate(waiting) if not deps]
    heapq.heapify(ready)
    order = []
    while ready:
        k = heapq.heappop(ready)
        order.append(nodes[k])
        for r in readers[k]:
            waiting[r].discard(k)
            if not waiting[r]:
                heapq.heappush(ready, r)
    if len(order) != len(nodes):
        stuck = sorted({nodes[k].name for k, deps in enumerate(waiting) if deps})
        raise ModelFormatError(f"ONNX graph has a cycle through nodes {stuck[:5]}")
    return order


def _apply_input_shapes(g: OnnxGraph, input_shapes: dict[str, list[int]]) -> None:
    by_name = {i.name: i for i in g.inputs}
    for name, dims in input_shapes.items():
        if name not in by_name:
            raise InputError(f"--input-shape names {name!r}, but the graph inputs are {list(by_name)}")
        shape = by_name[name].type.tensor_type.shape
        shape.ClearField("dim")
        for d in dims:
            dim = shape.dim.add()
            if int(d) >= 0:
                dim.dim_value = int(d)


def infer_shapes(g: OnnxGraph) -> None:
    """Runs ONNX shape inference and records every tensor's element type and shape in ``g.info``."""
    small = {k: v for k, v in g.consts.items() if v.size <= _INLINE_CONST_SIZE}
    large = [helper.make_tensor_value_info(k, _elem_type(v.dtype), v.shape)
             for k, v in g.consts.items() if k not in small]
    graph = helper.make_graph(g.nodes, g.model.graph.name or "graph", [*g.inputs, *large], g.outputs,
                              [numpy_helper.from_array(v, k) for k, v in small.items()], value_info=g.foreign_info)
    model = helper.make_model(graph, opset_imports=g.model.opset_import, ir_version=max(g.model.ir_version, 4))
    model.functions.extend(g.model.functions)
    data = model.SerializeToString()  # NOTE: serialized once for the passes below
    data_prop = _data_propagation_is_bounded(model, data)
    try:
        inferred = onnx.shape_inference.infer_shapes(data, strict_mode=True, data_prop=data_prop).graph
    except onnx.shape_inference.InferenceError as exc:
        g.shape_error = str(exc).strip()  # raised once mapping has listed any unsupported ops
        inferred = _lenient_inference(data, data_prop)
    except (RuntimeError, ValueError, onnx.checker.ValidationError) as exc:
        raise ModelFormatError(f"ONNX shape inference rejects the model: {exc}") from exc
    g.info = {v.name: _value_info(v) for v in [*inferred.input, *inferred.value_info, *inferred.output]}
    _fill_missing_types(g)


def _lenient_inference(model: onnx.ModelProto | bytes, data_prop: bool = True) -> onnx.GraphProto:
    try:
        return onnx.shape_inference.infer_shapes(model, data_prop=data_prop).graph
    except _INFERENCE_ERRORS as exc:
        raise ModelFormatError(f"ONNX shape inference rejects the model: {exc}") from exc


def _data_propagation_is_bounded(model: onnx.ModelProto, data: bytes) -> bool:
    """Whether ONNX data propagation (values of shape computations) can run on ``model`` in bounded memory.

    It spells every 1-D tensor of known length N that a data-propagating op reads as N protobuf
    dims, tens of bytes each: a Range or ConstantOfShape of 2**31 elements feeding a Cast takes
    all memory. So it runs only while those tensors hold at most DATA_PROP_LIMIT elements in all,
    as a pass without it finds them, and never into subgraphs or model-local functions, whose
    tensors that pass does not list (the converter refuses their ops anyway). ``data``: the model serialized.
    NOTE: a length only data propagation works out (a Reshape to a shape it computes) is not seen.
    """
    graph = model.graph
    local = {(f.domain, f.name) for f in model.functions}
    if any((n.domain, n.op_type) in local or any(a.HasField("g") or a.graphs for a in n.attribute) for n in graph.node):
        return False
    try:
        inferred = onnx.shape_inference.infer_shapes(data).graph
    except _INFERENCE_ERRORS:
        return False  # the inference that follows reports it
    lengths = {v.name: _value_info(v).shape for v in [*inferred.input, *inferred.value_info, *inferred.output]}
    lengths |= {t.name: tuple(t.dims) for t in graph.initializer}
    read = (lengths.get(name) for n in graph.node if n.op_type in _DATA_PROPAGATING for name in n.input)
    return sum(shape[0] for shape in read if shape is not None and len(shape) == 1) <= DATA_PROP_LIMIT


def _fill_missing_types(g: OnnxGraph) -> None:
    """Old op versions (Mul-1, Cast-1, ...) have no ONNX type inference: type their outputs here."""
    for node in g.nodes:
        for name in node.output:
            info = g.info.get(name, TensorInfo())
            if name and info.elem_type == TensorProto.UNDEFINED:
                g.info[name] = TensorInfo(_output_type(node, g), info.shape)


def _output_type(node: onnx.NodeProto, g: OnnxGraph) -> int:
    if node.op_type == "Cast":
        to = _attribute(node, "to", TensorProto.UNDEFINED)
        if isinstance(to, bytes):
            return ONNX_TYPE_NAMES.get(to.decode(errors="replace"), TensorProto.UNDEFINED)
        return to if isinstance(to, int) else TensorProto.UNDEFINED
    if node.op_type in _BOOL_OUTPUTS:
        return TensorProto.BOOL
    if node.op_type in _INT64_OUTPUTS:
        return TensorProto.INT64
    if node.op_type == "ConstantOfShape":
        value = _attribute(node, "value", TensorProto(data_type=TensorProto.FLOAT))
        return value.data_type if isinstance(value, TensorProto) else TensorProto.UNDEFINED
    known = (g.tensor_info(i).elem_type for i in node.input if i)
    return next((t for t in known if t != TensorProto.UNDEFINED), TensorProto.UNDEFINED)


def _attribute(node: onnx.NodeProto, name: str, default):
    """The value of ``node``'s attribute ``name``, ``default`` when it has none, None when its type is not ONNX's."""
    for attribute in node.attribute:
        if attribute.name == name:
            try:
                return helper.get_attribute_value(attribute)
            except ValueError:
                return None
    return default


def _value_info(value: onnx.ValueInfoProto) -> TensorInfo:
    if not value.type.HasField("tensor_type"):
        return TensorInfo()
    tensor = value.type.tensor_type
    if not tensor.HasField("shape"):
        return TensorInfo(tensor.elem_type)
    dims = tuple(d.dim_value if d.HasField("dim_value") else -1 for d in tensor.shape.dim)
    return TensorInfo(tensor.elem_type, dims)


def _elem_type(dtype: np.dtype) -> int:
    try:
        return helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    except (KeyError, TypeError, ValueError):
        return TensorProto.UNDEFINED
