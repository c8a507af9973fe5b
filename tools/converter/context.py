"""What mappers work with: the .lite graph being built and a view of one ONNX node.

A mapper reads its node through ``NodeContext`` (attributes with defaults, input tensor
indices, constant values, known shapes) and emits .lite nodes with ``emit``. It calls
``unsupported(reason)`` for a value it cannot honour; the converter collects those from
every node before it raises one ``UnsupportedOpError``.
"""

from __future__ import annotations

from typing import Any, NoReturn

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from lite.errors import ModelFormatError
from lite.ops.naming import unique_name
from lite.schema.graph import DTYPE_NAMES, GraphDef, NodeDef, TensorDef
from lite.schema.primitives import default_attrs
from lite.tools.converter.onnx_graph import LITE_DTYPES, OnnxGraph

_REQUIRED = object()
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


class Unsupported(Exception):
    """A node cannot be converted; ``reason`` says why and what to do."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


class GraphBuilder:
    """The .lite ``GraphDef`` under construction; tensors keep their ONNX names."""

    def __init__(self, g: OnnxGraph):
        self.g = g
        self.graph = GraphDef(name=g.model.graph.name)
        self.index: dict[str, int] = {}
        self.uses = g.use_counts()
        self.node_names: set[str] = set()

    def tensor(self, name: str) -> int:
        """The index of the ONNX tensor ``name``, created from its constant or inferred type."""
        if name not in self.index:
            self.index[name] = self.add(self._tensor_def(name))
        return self.index[name]

    def _tensor_def(self, name: str) -> TensorDef:
        if name in self.g.consts:
            data = self.g.consts[name]
            return TensorDef(name, _storable(data.dtype, name), tuple(data.shape), data=data)
        info = self.g.info.get(name)
        if info is None or info.elem_type == TensorProto.UNDEFINED:
            raise Unsupported(f"ONNX shape inference found no element type for tensor {name!r}; "
                              "give the graph inputs typed shapes (or run onnx.shape_inference)")
        if info.elem_type not in LITE_DTYPES:
            known = info.elem_type in TensorProto.DataType.values()
            type_name = TensorProto.DataType.Name(info.elem_type) if known else f"{info.elem_type} (not an ONNX type)"
            raise Unsupported(f"tensor {name!r} has element type {type_name}, which .lite cannot store")
        return TensorDef(name, LITE_DTYPES[info.elem_type], info.shape if info.shape is not None else ())

    def add(self, tensor: TensorDef) -> int:
        self.graph.tensors.append(tensor)
        return len(self.graph.tensors) - 1

    def node_name(self, hint: str) -> str:
        return unique_name(hint, self.node_names)


def _storable(dtype: np.dtype, name: str) -> np.dtype:
    if np.dtype(dtype) not in DTYPE_NAMES:
        raise Unsupported(f"constant {name!r} has dtype {dtype}, which .lite cannot store")
    return np.dtype(dtype)


class NodeContext:
    """One ONNX node as its mapper sees it."""

    def __init__(self, builder: GraphBuilder, node: onnx.NodeProto, opset: int):
        self.builder = builder
        self.node = node
        self.opset = opset

    @property
    def name(self) -> str:
        return self.node.name

    # ---- reading the ONNX node ----------------------------------------------------

    def attr(self, name: str, default: Any = _REQUIRED) -> Any:
        """The attribute's Python value (strings decoded, tensors as numpy), or ``default``.

        Raises:
            ModelFormatError: a required attribute (no default given) is missing.
        """
        for attribute in self.node.attribute:
            if attribute.name == name:
                return _attribute_value(attribute)
        if default is _REQUIRED:
            self.invalid(f"required attribute {name!r} is missing")
        return default

    def has_attr(self, name: str) -> bool:
        return any(a.name == name for a in self.node.attribute)

    @property
    def n_inputs(self) -> int:
        return len(self.node.input)

    def has_input(self, i: int) -> bool:
        return i < len(self.node.input) and bool(self.node.input[i])

    def input(self, i: int, optional: bool = False) -> int:
        """Tensor index of input ``i``; -1 for an absent optional input."""
        if not self.has_input(i):
            if optional:
                return -1
            self.invalid(f"required input #{i} is missing (the node has {self.n_inputs} inputs)")
        return self.builder.tensor(self.node.input[i])

    def inputs(self) -> list[int]:
        """Indices of every input, -1 for absent ones."""
        return [self.input(i, optional=True) for i in range(self.n_inputs)]

    def const(self, i: int) -> np.ndarray | None:
        """The value of input ``i`` if it is a constant (None if computed or absent)."""
        return self.builder.g.consts.get(self.node.input[i]) if self.has_input(i) else None

    def const_input(self, i: int, what: str) -> np.ndarray:
        """The value of input ``i``, which must be a constant (``what`` names it in the reason)."""
        value = self.const(i)
        if value is None:
            self.unsupported(f"{what} (input #{i}, {self.node.input[i]!r}) must be a constant, but it is "
                             "computed at run time (if it derives from input shapes, --input-shape can fold it)")
        return value

    def shape(self, i: int) -> tuple[int, ...] | None:
        """Input ``i``'s shape from constants or shape inference (-1 = unknown dim, None = unknown)."""
        return self.builder.g.tensor_info(self.node.input[i]).shape if self.has_input(i) else None

    def rank(self, i: int) -> int | None:
        shape = self.shape(i)
        return None if shape is None else len(shape)

    def dtype(self, i: int) -> np.dtype | None:
        """Input ``i``'s numpy dtype, or None if unknown or not storable."""
        if not self.has_input(i):
            return None
        return LITE_DTYPES.get(self.builder.g.tensor_info(self.node.input[i]).elem_type)

    def output(self, i: int) -> int:
        """Tensor index of output ``i``."""
        if i >= len(self.node.output) or not self.node.output[i]:
            self.invalid(f"output #{i} is missing (the node has {len(self.node.output)} outputs)")
        return self.builder.tensor(self.node.output[i])

    def output_used(self, i: int) -> bool:
        """Whether output ``i`` exists and is read by a node or is a graph output."""
        names = self.node.output
        return i < len(names) and bool(names[i]) and self.builder.uses.get(names[i], 0) > 0

    # ---- building the .lite graph --------------------------------------------------

    def add_const(self, hint: str, value: np.ndarray) -> int:
        """A new constant tensor named after ``hint``; returns its index."""
        array = np.asarray(value, order="C")
        name = self.builder.g.unique_name(hint)
        return self.builder.add(TensorDef(name, _storable(array.dtype, name), array.shape, data=array))

    def add_tensor(self, hint: str, dtype: np.dtype, shape: tuple[int, ...]) -> int:
        """A new intermediate tensor named after ``hint``; returns its index."""
        name = self.builder.g.unique_name(hint)
        return self.builder.add(TensorDef(name, np.dtype(dtype), tuple(shape)))

    def emit(self, op_type: str, attrs: dict[str, Any] | None, inputs: list[int],
             outputs: list[int] | None = None) -> NodeDef:
        """Appends a .lite node; ``attrs`` override the schema defaults; outputs default to the node's.

        The node writing one of the ONNX node's outputs takes its name; helpers get ``name/op_type``.
        """
        full = default_attrs(op_type)
        unknown = set(attrs or {}) - set(full)
        if unknown:
            raise ValueError(f"{op_type} has no attribute(s) {sorted(unknown)}")
        full.update(attrs or {})
        wide = next((key for key, value in full.items() if _past_int64(value)), None)
        if wide is not None:
            self.invalid(f"attribute {wide}={full[wide]} does not fit in int64")  # e.g. a float axis=1e30
        if outputs is None:
            outputs = [self.output(j) for j, name in enumerate(self.node.output) if name]
        own = {self.builder.index.get(name) for name in self.node.output if name}
        hint = self.name if own.intersection(outputs) else f"{self.name}/{op_type}"
        node = NodeDef(self.builder.node_name(hint), op_type, full, list(inputs), list(outputs))
        self.builder.graph.nodes.append(node)
        return node

    def unsupported(self, reason: str) -> NoReturn:
        """Reports that this node cannot be converted (collected, then raised together)."""
        raise Unsupported(reason)

    def invalid(self, message: str) -> NoReturn:
        """Raises ModelFormatError for a malformed node."""
        raise ModelFormatError(
            f"malformed ONNX node {self.name!r} ({self.node.op_type}, opset {self.opset}): {message}")


def _past_int64(value: Any) -> bool:
    """Whether an attribute value (a number or a list of them) holds an integer .lite cannot store as int64."""
    items = value if isinstance(value, (list, tuple)) else [value]
    return any(isinstance(v, int) and not _INT64_MIN <= v <= _INT64_MAX for v in items)


def _attribute_value(attribute: onnx.AttributeProto) -> Any:
    value = helper.get_attribute_value(attribute)
    if isinstance(value, bytes):
        return value.decode("utf-8")
    if isinstance(value, TensorProto):
        return numpy_helper.to_array(value)
    if isinstance(value, list) and value and isinstance(value[0], bytes):
        return [v.decode("utf-8") for v in value]
    return value
