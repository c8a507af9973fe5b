"""The same model spelled as other exporters write it (ONNX-level rewrites with onnx.helper), for the
tests that every spelling reaches the same kernels: residual Adds as Sum or with their operands
swapped, Relu as Max(x, 0), GlobalAveragePool as an AveragePool over the whole plane or as a
ReduceMean over it (PyTorch's dynamo exporter), Gemm as MatMul + Add, initializers listed as graph
inputs (IR 3, as older exporters wrote them)."""

from __future__ import annotations

import copy

import numpy as np
import onnx
from onnx import helper, numpy_helper


def _replace(model: onnx.ModelProto, rewrite) -> onnx.ModelProto:
    """A copy of ``model`` with each node replaced by what ``rewrite(node, model)`` returns (a list)."""
    out = copy.deepcopy(model)
    nodes = [new for node in out.graph.node for new in rewrite(node, out)]
    del out.graph.node[:]
    out.graph.node.extend(nodes)
    return out


def _zero(model: onnx.ModelProto, name: str) -> str:
    model.graph.initializer.append(numpy_helper.from_array(np.zeros((), np.float32), name))
    return name


def sum_for_add(model: onnx.ModelProto) -> onnx.ModelProto:
    """Every two-input Add as Sum, its operands swapped."""
    def rewrite(node, _):
        if node.op_type != "Add":
            return [node]
        return [helper.make_node("Sum", list(node.input)[::-1], list(node.output), name=node.name)]
    return _replace(model, rewrite)


def max_for_relu(model: onnx.ModelProto) -> onnx.ModelProto:
    """Every Relu as Max(x, 0)."""
    def rewrite(node, out):
        if node.op_type != "Relu":
            return [node]
        return [helper.make_node("Max", [node.input[0], _zero(out, f"{node.name}_zero")], list(node.output),
                                 name=node.name)]
    return _replace(model, rewrite)


def average_pool_for_global(model: onnx.ModelProto) -> onnx.ModelProto:
    """Every GlobalAveragePool as an AveragePool whose window is the (static) input plane."""
    shapes = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim]
              for v in onnx.shape_inference.infer_shapes(model).graph.value_info}

    def rewrite(node, _):
        if node.op_type != "GlobalAveragePool":
            return [node]
        plane = shapes[node.input[0]][2:]
        return [helper.make_node("AveragePool", list(node.input), list(node.output), name=node.name,
                                 kernel_shape=plane)]
    return _replace(model, rewrite)


def mean_for_global(model: onnx.ModelProto) -> onnx.ModelProto:
    """Every GlobalAveragePool as a ReduceMean over the plane's axes, kept (axes an input from opset 18,
    given as the last axes, negative, as PyTorch's dynamo exporter writes adaptive_avg_pool2d)."""
    opset = next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))

    def rewrite(node, out):
        if node.op_type != "GlobalAveragePool":
            return [node]
        axes = [-2, -1]
        if opset < 18:
            return [helper.make_node("ReduceMean", list(node.input), list(node.output), name=node.name, axes=axes)]
        name = f"{node.name}_axes"
        out.graph.initializer.append(numpy_helper.from_array(np.array(axes, np.int64), name))
        return [helper.make_node("ReduceMean", [node.input[0], name], list(node.output), name=node.name)]
    return _replace(model, rewrite)


def matmul_add_for_gemm(model: onnx.ModelProto) -> onnx.ModelProto:
    """Every Gemm (alpha = beta = 1, a constant transposed weight) as MatMul, then Add of the bias."""
    consts = {t.name: t for t in model.graph.initializer}

    def rewrite(node, out):
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        if node.op_type != "Gemm" or attrs.get("transA") or node.input[1] not in consts:
            return [node]
        weight = numpy_helper.to_array(consts[node.input[1]])
        name = f"{node.name}_weight_kn"
        out.graph.initializer.append(numpy_helper.from_array(weight.T.copy() if attrs.get("transB") else weight, name))
        product = f"{node.output[0]}_product"
        return [helper.make_node("MatMul", [node.input[0], name], [product], name=f"{node.name}_matmul"),
                helper.make_node("Add", [product, node.input[2]], list(node.output), name=node.name)]
    return _replace(model, rewrite)


def initializers_as_inputs(model: onnx.ModelProto) -> onnx.ModelProto:
    """Every initializer also a graph input (IR 3)."""
    out = copy.deepcopy(model)
    listed = {v.name for v in out.graph.input}
    out.graph.input.extend(helper.make_tensor_value_info(t.name, t.data_type, t.dims)
                           for t in out.graph.initializer if t.name not in listed)
    out.ir_version = 3
    return out


SPELLINGS = {
    "sum_swapped_max": lambda m: max_for_relu(sum_for_add(m)),
    "pool_gemm": lambda m: matmul_add_for_gemm(average_pool_for_global(m)),
    "mean": mean_for_global,
    "all_with_inputs": lambda m: initializers_as_inputs(
        matmul_add_for_gemm(average_pool_for_global(max_for_relu(sum_for_add(m))))),
}
