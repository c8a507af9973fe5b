"""One spelling per computation (the .lite level, before the other fusions): exporters write the
same thing several ways, and the fusions and fast paths match one. Each rule rewrites nodes in
place and records their names in the report:

- ``adds_for_sum``: an AddN of two inputs (ONNX ``Sum``, older exporters' residual) is an
  AddFusion, which the activation fusion and the convolution's residual epilogue take; an AddN of
  more inputs of one shape becomes a chain of AddFusion nodes.
- ``relu_for_max``: a Maximum of x and a constant zero (``Max(x, 0)``) is Activation RELU.
- ``global_for_full_plane``: an average or max pool whose window covers the whole (static) plane
  with no padding is the global pool.
- ``global_for_plane_mean``: a ReduceMean over every spatial axis of an image (2-D or 3-D plane),
  keeping them, is the global average pool (PyTorch's dynamo exporter writes adaptive_avg_pool2d
  so). It runs after the LayerNorm fusion, which takes the means over trailing axes it fuses.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lite.schema.graph import GraphDef, NodeDef, TensorDef
from lite.schema.primitives import default_attrs
from lite.tools.converter.fusions import View

if TYPE_CHECKING:
    from lite.tools.converter.report import ConversionReport


def canonicalize(graph: GraphDef, report: ConversionReport) -> None:
    """Runs every rule once."""
    for rule in (adds_for_sum, relu_for_max, global_for_full_plane):
        rule(graph, report)


def adds_for_sum(graph: GraphDef, report: ConversionReport) -> None:
    nodes = []
    for node in graph.nodes:
        inputs = [t for t in node.inputs if t >= 0]
        if node.op_type != "AddN" or len(inputs) < 2 or not _same_shapes(graph, inputs, node.outputs[0]):
            nodes.append(node)
            continue
        report.canonical.append(node.name)
        nodes += _add_chain(graph, node, inputs)
    graph.nodes = nodes


def _same_shapes(graph: GraphDef, inputs: list[int], output: int) -> bool:
    """Two inputs (any broadcast: AddFusion broadcasts as Sum does), or more of the output's shape."""
    if len(inputs) == 2:
        return True
    shape = graph.tensors[output].shape
    return all(graph.tensors[t].shape == shape and -1 not in shape for t in inputs)


def _add_chain(graph: GraphDef, node: NodeDef, inputs: list[int]) -> list[NodeDef]:
    """((a + b) + c) + ...: the last AddFusion writes the AddN's output and keeps its name."""
    chain, total = [], inputs[0]
    for k, addend in enumerate(inputs[1:], start=1):
        last = k == len(inputs) - 1
        out = node.outputs[0] if last else _new_tensor(graph, graph.tensors[node.outputs[0]], f"_partial{k}")
        name = node.name if last else f"{node.name}/partial{k}"
        chain.append(NodeDef(name, "AddFusion", default_attrs("AddFusion"), [total, addend], [out]))
        total = out
    return chain


def _new_tensor(graph: GraphDef, like: TensorDef, suffix: str) -> int:
    graph.tensors.append(TensorDef(like.name + suffix, like.dtype, like.shape, like.format))
    return len(graph.tensors) - 1


def relu_for_max(graph: GraphDef, report: ConversionReport) -> None:
    view = View(graph)
    for node in graph.nodes:
        if node.op_type != "Maximum" or len(node.inputs) != 2:
            continue
        for x, bound in (node.inputs, node.inputs[::-1]):
            value, out = view.const(bound), graph.tensors[node.outputs[0]]
            if (value is not None and value.size == 1 and float(value.reshape(-1)[0]) == 0.0
                    and graph.tensors[x].dtype.kind == "f" and graph.tensors[x].shape == out.shape):
                node.op_type, node.inputs = "Activation", [x]
                node.attrs = {**default_attrs("Activation"), "activation_type": "RELU"}
                report.canonical.append(node.name)
                break


def global_for_full_plane(graph: GraphDef, report: ConversionReport) -> None:
    for node in graph.nodes:
        if node.op_type not in ("AvgPoolFusion", "MaxPoolFusion") or node.attrs.get("is_global"):
            continue
        x = graph.tensors[node.inputs[0]].shape
        plane, kernel = tuple(x[2:]), tuple(node.attrs.get("kernel_size") or ())
        dilation = tuple(node.attrs.get("dilation") or (1,) * len(kernel))
        if (len(x) >= 3 and -1 not in plane and plane == kernel and not any(node.attrs.get("pad_list") or ())
                and node.attrs.get("pad_mode", "PAD") in ("PAD", "VALID") and all(d == 1 for d in dilation)):
            node.attrs = {**default_attrs(node.op_type), "is_global": True}
            report.canonical.append(node.name)



def global_for_plane_mean(graph: GraphDef, report: ConversionReport) -> None:
    for node in graph.nodes:
        if node.op_type != "ReduceFusion" or len([t for t in node.inputs if t >= 0]) != 1:
            continue
        x = graph.tensors[node.inputs[0]]
        rank, axes = len(x.shape), node.attrs.get("axes") or ()
        if (node.attrs.get("reduce_mode") == "MEAN" and node.attrs.get("keep_dims") and rank >= 4
                and x.dtype.kind == "f" and sorted(a % rank for a in axes) == list(range(2, rank))):
            node.op_type, node.inputs = "AvgPoolFusion", [node.inputs[0]]
            node.attrs = {**default_attrs("AvgPoolFusion"), "is_global": True}
            report.canonical.append(node.name)
