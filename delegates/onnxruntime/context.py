"""What emitters work with: the ONNX graph of a partition being written (``GraphBuilder``) and a
view of one kernel (``NodeContext``). The emitters and the builder both import this module, which
imports neither."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NoReturn

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from lite.kernel import Kernel
from lite.ops.naming import unique_name
from lite.ops.reduce import ONNX_REDUCTIONS
from lite.tensor import Tensor

OPSET = 17
PRODUCER = "delite ORTDelegate"
EMITTED_OPS = frozenset({
    # NOTE: every ONNX op type (default domain) an emitter writes; a saved graph may hold these alone
    # (graph_kernel.check_saved_graph), and GraphBuilder.add_node refuses any other
    "Abs", "Acos", "Acosh", "Add", "And", "ArgMax", "ArgMin", "Asin", "Asinh", "Atan", "Atanh", "AveragePool",
    "BatchNormalization", "BitShift", "Cast", "Ceil", "Celu", "Clip", "Concat", "ConstantOfShape", "Conv",
    "ConvTranspose", "Cos", "Cosh", "CumSum", "DepthToSpace", "Div", "Einsum", "Elu", "Equal", "Erf", "Exp",
    "Expand", "Flatten", "Floor", "Gather", "GatherElements", "GatherND", "Gemm", "GlobalAveragePool",
    "GlobalMaxPool", "Greater", "GreaterOrEqual", "HardSigmoid", "HardSwish", "Hardmax", "Identity",
    "InstanceNormalization", "IsInf", "IsNaN", "LRN", "LayerNormalization", "LeakyRelu", "Less", "LessOrEqual",
    "Log", "LogSoftmax", "LpNormalization", "MatMul", "Max", "MaxPool", "Min", "Mod", "Mul", "Neg", "Not",
    "OneHot", "Or", "PRelu", "Pad", "Pow", "Reciprocal", "Relu", "Reshape", "Resize", "Round", "ScatterElements",
    "ScatterND", "Selu", "Shape", "Shrink", "Sigmoid", "Sign", "Sin", "Sinh", "Slice", "Softmax", "Softplus",
    "Softsign", "SpaceToDepth", "Split", "Sqrt", "Squeeze", "Sub", "Sum", "Tan", "Tanh", "ThresholdedRelu",
    "Tile", "TopK", "Transpose", "Trilu", "Unsqueeze", "Where", "Xor", *ONNX_REDUCTIONS.values(),
    "QuantizeLinear", "DequantizeLinear",
})


class Unsupported(Exception):
    """Raised by an emitter that cannot express a kernel's attribute values; the message says why."""


class GraphBuilder:
    """The ONNX nodes, initializers and unique names of one partition being emitted.

    Args:
        previous: initializers of an earlier emission of the same partition, by name: used
            for constants whose data the model has released since.
        dry: only check that every kernel can be emitted (constants are not converted).
    """

    def __init__(self, previous: Mapping[str, TensorProto] | None = None, dry: bool = False):
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[TensorProto] = []
        self.previous = previous or {}
        self.dry = dry
        self.specialized = False  # an emitter used a concrete dim: the graph fits only these shapes
        self.constants: dict[str, Tensor] = {}  # initializer name -> the model's constant it holds
        self._names: dict[Tensor, str] = {}
        self._taken: set[str] = set()
        self._node_names: set[str] = set()

    def name_of(self, tensor: Tensor) -> str:
        """The ONNX name of ``tensor``; a constant becomes an initializer on first use."""
        name = self._names.get(tensor)
        if name is None:
            name = self._names[tensor] = self.unique(tensor.name)
            if tensor.is_const and not self.dry:
                self.initializers.append(self._initializer(tensor, name))
                self.constants[name] = tensor
        return name

    def unique(self, hint: str) -> str:
        """A tensor name not used yet in this graph, based on ``hint``."""
        return unique_name(hint or "t", self._taken)

    def constant(self, value: np.ndarray, hint: str) -> str:
        """A new initializer holding ``value``; returns its name."""
        name = self.unique(hint)
        if not self.dry:
            self.initializers.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def add_node(self, op_type: str, inputs: Sequence[str], outputs: Sequence[str], hint: str,
                 **attrs: Any) -> None:
        if op_type not in EMITTED_OPS and attrs.get("domain", "") in ("", "ai.onnx"):
            raise RuntimeError(f"an emitter wrote {op_type}, which is not in EMITTED_OPS: list it there (saved "
                               "graphs holding any other op are refused)")  # NOTE: other domains: lite-inspect's
                               # annotated picture of a model (saved graphs refuse them)
        name = unique_name(hint, self._node_names)
        self.nodes.append(helper.make_node(op_type, list(inputs), list(outputs), name=name, **attrs))

    def _initializer(self, tensor: Tensor, name: str) -> TensorProto:
        if name in self.previous:
            return self.previous[name]
        if tensor.data is None:
            raise RuntimeError(f"the data of constant {tensor.name!r} was released before it was emitted")
        return numpy_helper.from_array(tensor.data, name)


class NodeContext:
    """What an emitter sees: one kernel, its primitive's attributes, and ways to add ONNX nodes.

    Emitters read ``attrs``, name the kernel's tensors with ``input``/``output``, add nodes
    with ``node``/``op`` and constants with ``const``, and call ``unsupported`` for
    attribute values ONNX cannot express.
    """

    def __init__(self, builder: GraphBuilder, kernel: Kernel):
        self.builder = builder
        self.kernel = kernel
        self.attrs = kernel.primitive.attrs
        self.name = kernel.name

    def has_input(self, i: int) -> bool:
        return i < len(self.kernel.inputs) and self.kernel.inputs[i] is not None

    def input(self, i: int) -> str:
        """The ONNX name of input ``i`` ("" when absent, as ONNX writes an omitted optional input)."""
        return self.builder.name_of(self.kernel.inputs[i]) if self.has_input(i) else ""

    def inputs(self) -> list[str]:
        """Every input's name, trailing absent ones dropped."""
        names = [self.input(i) for i in range(len(self.kernel.inputs))]
        while names and not names[-1]:
            names.pop()
        return names

    def output(self, j: int = 0) -> str:
        return self.builder.name_of(self.kernel.outputs[j])

    def outputs(self) -> list[str]:
        return [self.output(j) for j in range(len(self.kernel.outputs))]

    def shape(self, i: int) -> tuple[int, ...]:
        """Input ``i``'s current shape (-1 for a dim not known yet)."""
        return self.kernel.inputs[i].shape

    def rank(self, i: int) -> int:
        return len(self.shape(i))

    def dim(self, i: int, axis: int) -> int:
        """A current dim of input ``i`` (-1 if not known yet); the graph then holds for these shapes only."""
        self.builder.specialized = True
        return self.shape(i)[axis]

    def out_dtype(self, j: int = 0) -> np.dtype:
        return self.kernel.outputs[j].dtype

    def in_dtype(self, i: int = 0) -> np.dtype:
        return self.kernel.inputs[i].dtype

    def node(self, op_type: str, inputs: Sequence[str], outputs: Sequence[str] | None = None,
             **attrs: Any) -> list[str]:
        """Adds an ONNX node; ``outputs`` None: one fresh output. Returns the output names."""
        outputs = list(outputs) if outputs is not None else [self.builder.unique(f"{self.name}_{op_type}")]
        self.builder.add_node(op_type, inputs, outputs, self.name, **attrs)
        return outputs

    def op(self, op_type: str, inputs: Sequence[str], output: str | None = None, **attrs: Any) -> str:
        """Adds a one-output node; returns its output name."""
        return self.node(op_type, inputs, None if output is None else [output], **attrs)[0]

    def const(self, value: Any, hint: str, dtype: np.dtype | type | None = None) -> str:
        """A constant (an initializer named after this kernel and ``hint``)."""
        return self.builder.constant(np.asarray(value, dtype=dtype), f"{self.name}_{hint}")

    def unsupported(self, reason: str) -> NoReturn:
        raise Unsupported(reason)
