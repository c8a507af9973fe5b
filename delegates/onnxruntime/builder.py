"""Writes a partition's kernels back as an ONNX model (opset 17) with the registered emitters."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper

from lite.delegates.onnxruntime import emitters  # noqa: F401  (registers every emitter)
from lite.delegates.onnxruntime.context import (  # noqa: F401  (OPSET, EMITTED_OPS, Unsupported: named here too)
    EMITTED_OPS,
    OPSET,
    PRODUCER,
    GraphBuilder,
    NodeContext,
    Unsupported,
)
from lite.delegates.onnxruntime.emitters.common import ONNX_TYPES
from lite.delegates.onnxruntime.emitters.quant import dequantized, quantized, quantized_group_problem
from lite.delegates.onnxruntime.emitters.registry import REGISTRY
from lite.kernel import Kernel
from lite.tensor import Tensor


class QuantizedContext(NodeContext):
    """What the float emitter of a quantized op sees: its quantized inputs read through
    DequantizeLinear nodes, its outputs written to float tensors that QuantizeLinear nodes quantize."""

    def __init__(self, builder: GraphBuilder, kernel: Kernel):
        super().__init__(builder, kernel)
        self.float_outputs = [builder.unique(f"{t.name}_float") for t in kernel.outputs]
        self._dequantized: dict[int, str] = {}

    def input(self, i: int) -> str:
        name = super().input(i)
        tensor = self.kernel.inputs[i] if self.has_input(i) else None
        if tensor is None or tensor.quant_params is None:
            return name
        if i not in self._dequantized:
            self._dequantized[i] = dequantized(self, tensor, name)
        return self._dequantized[i]

    def output(self, j: int = 0) -> str:
        return self.float_outputs[j]

    def out_dtype(self, j: int = 0) -> np.dtype:
        return np.dtype(np.float32)

    def in_dtype(self, i: int = 0) -> np.dtype:
        quantized = self.kernel.inputs[i].quant_params is not None
        return np.dtype(np.float32) if quantized else super().in_dtype(i)

    def finish(self) -> None:
        for j, tensor in enumerate(self.kernel.outputs):
            quantized(self, tensor, self.float_outputs[j], self.builder.name_of(tensor))


def emit_kernel(builder: GraphBuilder, kernel: Kernel) -> None:
    """Writes one kernel; a quantized one as its QDQ group (see emitters/quant.py)."""
    entry = REGISTRY.find(kernel.primitive.type)
    if not kernel.quantized:
        entry.fn(NodeContext(builder, kernel))
        return
    ctx = QuantizedContext(builder, kernel)
    entry.fn(ctx)
    ctx.finish()


def why_not(kernel: Kernel) -> str | None:
    """Why ``kernel`` cannot be emitted as ONNX (None when it can)."""
    op_type = kernel.primitive.type
    entry = REGISTRY.find(op_type)
    if entry is None:
        return f"{op_type}: no ONNX emitter for this primitive"
    dtype = next((t.dtype for t in kernel.inputs if t is not None), kernel.outputs[0].dtype)
    if kernel.quantized:
        problem = quantized_group_problem(kernel)
        if problem:
            return f"{op_type}: {problem}"
        dtype = np.dtype(np.float32)
    if dtype not in entry.dtypes:
        names = ", ".join(sorted(d.name for d in entry.dtypes))
        return f"{op_type} on {dtype.name}: emitted for {names} inputs only"
    try:
        emit_kernel(GraphBuilder(dry=True), kernel)
    except Unsupported as exc:
        return f"{op_type}: {exc}"
    return None


def emit_partition(kernels: Sequence[Kernel], inputs: Sequence[Tensor], outputs: Sequence[Tensor], name: str,
                   previous: Mapping[str, TensorProto] | None = None
                   ) -> tuple[onnx.ModelProto, bool, dict[str, Tensor]]:
    """The ONNX model computing ``outputs`` from ``inputs`` as ``kernels`` do, whether it is
    specialized (an emitter used a concrete dim, so it holds for the current shapes only), and
    which initializers hold the model's constants (by name).

    Constants become initializers; ``inputs`` and ``outputs`` become the graph inputs and
    outputs with their dtypes and current shapes, unknown (-1) dims symbolic, and dim 0 (the
    batch) symbolic too unless the model is specialized.
    """
    builder = GraphBuilder(previous)
    for tensor in [*inputs, *outputs]:  # NOTE: named first, so they keep the model's names (saved graphs bind by name)
        builder.name_of(tensor)
    for kernel in kernels:
        emit_kernel(builder, kernel)
    batch = not builder.specialized
    graph_inputs = [value_info(builder.name_of(t), t, batch) for t in inputs]
    graph_outputs = [value_info(builder.name_of(t), t, batch) for t in outputs]
    nodes = constant_nodes_first(builder.nodes, {t.name for t in builder.initializers})
    graph = helper.make_graph(nodes, name, graph_inputs, graph_outputs, builder.initializers)
    model = helper.make_model_gen_version(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                                          producer_name=PRODUCER)
    return model, builder.specialized, builder.constants


def constant_nodes_first(nodes: Sequence[onnx.NodeProto], initializers: set[str]) -> list[onnx.NodeProto]:
    """``nodes`` with those reading only initializers (a weight's DequantizeLinear) moved to the front,
    as onnxruntime's quantizer writes them.

    # NOTE: onnxruntime orders its optimized graph from the node order it is given. With each weight's
    # DequantizeLinear beside its Conv, it ran every one of them (and kept their float weights alive)
    # before the first Conv, which measured slower than the same graph in the quantizer's order.
    """
    first = [all(name in initializers or not name for name in node.input) for node in nodes]
    return [n for n, f in zip(nodes, first, strict=True) if f] + [n for n, f in zip(nodes, first, strict=True) if not f]


def value_info(name: str, tensor: Tensor, symbolic_batch: bool) -> onnx.ValueInfoProto:
    """A graph input/output: unknown dims, and dim 0 when ``symbolic_batch``, get a dim_param."""
    dims = [f"{name}_dim{axis}" if d < 0 or (axis == 0 and symbolic_batch) else d
            for axis, d in enumerate(tensor.shape)]
    return helper.make_tensor_value_info(name, ONNX_TYPES[tensor.dtype], dims)

