"""The graph as Delite runs it, written back as ONNX with each node's placement in its metadata,
so that the model opens in Netron (or any ONNX tool) showing where each node runs and why.

Every node of the ``.lite`` graph becomes the ONNX nodes the onnxruntime delegate's emitters
write for it (a fused Conv with its activation becomes Conv then Relu, for instance); a
primitive that ONNX cannot express becomes one opaque node: a custom op keeps its own type and
domain, any other primitive is named after itself in the ``delite`` domain.
Each ONNX node carries:

- ``doc_string``: "runs on ExampleNPUDelegate in example_npu_0" or "native: <why not delegated>"
  (Netron shows it as the node's description);
- ``metadata_props``: ``delite.node``, ``delite.runs_on``, ``delite.graph_kernel`` and
  ``delite.reason``.

Intermediate tensors get their shapes as ``value_info``, so Netron labels every edge.
"""

from __future__ import annotations

from collections import Counter

import onnx
from onnx import helper

from lite.context import Context
from lite.delegates.onnxruntime.builder import OPSET, GraphBuilder, NodeContext, value_info, why_not
from lite.delegates.onnxruntime.emitters.registry import REGISTRY
from lite.engine import Engine
from lite.kernel import Kernel
from lite.model import PartitionRow
from lite.schema.graph import GraphDef

DOMAIN = "delite"


def annotated_onnx(graph: GraphDef, rows: list[PartitionRow]) -> onnx.ModelProto:
    """``graph`` as an ONNX model whose nodes say where they run, as ``rows`` (the partition report) says."""
    engine = Engine(graph, Context())
    placement = {row.node: row for row in rows}
    builder = GraphBuilder()
    domains = {DOMAIN}
    for kernel in engine.shape_kernels:
        first = len(builder.nodes)
        domains.add(_emit(builder, kernel))
        for node in builder.nodes[first:]:
            _annotate(node, placement[kernel.name])
    graph_inputs = [value_info(builder.name_of(t), t, False) for t in engine.inputs]
    graph_outputs = [value_info(builder.name_of(t), t, False) for t in engine.outputs]
    passed = [t for k in engine.shape_kernels for t in k.outputs if t is not None and t not in engine.outputs]
    shapes = [value_info(builder.name_of(t), t, False) for t in passed if -1 not in t.shape]
    onnx_graph = helper.make_graph(builder.nodes, graph.name or "delite", graph_inputs, graph_outputs,
                                   builder.initializers, value_info=shapes)
    model = helper.make_model(onnx_graph, producer_name="delite lite-inspect",
                              opset_imports=[helper.make_opsetid("", OPSET)]
                              + [helper.make_opsetid(d, 1) for d in sorted(domains - {""})])
    helper.set_model_props(model, {"delite.placement": _summary(rows)})
    return model


def _emit(builder: GraphBuilder, kernel: Kernel) -> str:
    """Adds the kernel's ONNX nodes, or one opaque node when no emitter can write it; returns the domain used.

    An opaque node is a custom op's own type and domain, or the primitive's type in the ``delite`` domain.
    """
    context = NodeContext(builder, kernel)
    if why_not(kernel) is None:
        REGISTRY.find(kernel.type).fn(context)
        return ""
    attrs = kernel.primitive.attrs
    op_type, domain = (attrs["type"], attrs["domain"]) if kernel.type == "Custom" else (kernel.type, DOMAIN)
    builder.add_node(op_type, context.inputs(), context.outputs(), kernel.name, domain=domain)
    return domain


def _annotate(node: onnx.NodeProto, row: PartitionRow) -> None:
    if row.graph_kernel:
        node.doc_string = f"runs on {row.runs_on} in {row.graph_kernel}"
    else:
        node.doc_string = row.runs_on + (f": {row.reason}" if row.reason else "")
    props = {"delite.node": row.node, "delite.runs_on": row.runs_on, "delite.graph_kernel": row.graph_kernel,
             "delite.reason": row.reason}
    for key, value in props.items():
        node.metadata_props.add(key=key, value=value)


def _summary(rows: list[PartitionRow]) -> str:
    return ", ".join(f"{place}: {count}" for place, count in Counter(r.runs_on for r in rows).items())
