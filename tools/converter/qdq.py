"""DequantizeLinear -> op -> QuantizeLinear groups become one quantized op (the .lite level).

As TFLite's and MindSpore Lite's converters do, and as onnxruntime's execution providers and
ExecuTorch's partitioners see such a group: the op reads the quantized tensors the
DequantizeLinear nodes read and writes the tensor the QuantizeLinear writes, and those tensors'
QuantParams carry the scales and zero points. A delegate sees one int8 ``Conv2DFusion``, not
three nodes; the native backend runs it by the meaning ``lite/ops/quant.py`` gives it.

A node is grouped when
- each float input is a DequantizeLinear's output whose quantized input has constant
  parameters (QuantParams), or, for a convolution's or product's bias, a float constant (it
  becomes int32 with scale x_scale * w_scale, as QLinearConv's bias is);
- each output is float32, read only by QuantizeLinear nodes with the same parameters, and not
  a graph output;
- its other inputs (shapes, indices, axes) are not floats.
What no op absorbs stays: explicit QuantizeLinear and DequantizeLinear primitives.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from lite.ops.quant import ACCUMULATING_OPS, BOUNDARY_OPS, quantize
from lite.schema.graph import GraphDef, NodeDef, QuantParams, TensorDef
from lite.tools.converter.fusions import View

if TYPE_CHECKING:
    from lite.tools.converter.report import ConversionReport

_FLOAT32 = np.dtype(np.float32)
_UNGROUPED = BOUNDARY_OPS | {"Custom", "Shape", "Size"}


def group_quantized_ops(graph: GraphDef, report: ConversionReport) -> None:
    """Rewrites each DequantizeLinear -> op -> QuantizeLinear group into the quantized op, in place."""
    view = View(graph)
    removed: set[int] = set()
    for node in list(graph.nodes):
        if node.op_type in _UNGROUPED or id(node) in removed:
            continue
        plan = _group_of(view, node)
        if plan is None:
            continue
        inputs, quantizers = plan
        node.inputs = inputs
        node.outputs = [q.outputs[0] for q in quantizers]
        removed.update(id(q) for q in quantizers)
        report.quantized_ops.append(node.name)
    graph.nodes = [n for n in graph.nodes if id(n) not in removed]
    _drop_unread_dequantizers(graph)


def _group_of(view: View, node: NodeDef) -> tuple[list[int], list[NodeDef]] | None:
    """(the node's new inputs, the QuantizeLinear per output), or None where it is no group."""
    quantizers = [_sole_quantizer(view, t) for t in node.outputs]
    if not node.outputs or None in quantizers:
        return None
    inputs = []
    for position, tensor in enumerate(node.inputs):
        source = _quantized_source(view, node, position, tensor, quantizers[0])
        if source is None:
            return None
        inputs.append(source)
    if not any(view.graph.tensors[t].quant is not None for t in inputs if t >= 0):
        return None
    return inputs, quantizers


def _sole_quantizer(view: View, tensor: int) -> NodeDef | None:
    """The QuantizeLinear that alone reads float32 ``tensor`` (with constant parameters)."""
    if view.graph.tensors[tensor].dtype != _FLOAT32 or tensor in view.graph_outputs:
        return None
    readers = view.readers.get(tensor, [])
    if len(readers) != 1 or readers[0].op_type != "QuantizeLinear" or readers[0].inputs[0] != tensor:
        return None
    quantized = view.graph.tensors[readers[0].outputs[0]]
    return readers[0] if quantized.quant is not None else None


def _quantized_source(view: View, node: NodeDef, position: int, tensor: int, quantizer: NodeDef) -> int | None:
    """What the grouped node reads in place of input ``tensor``: the DequantizeLinear's quantized
    input, the tensor itself where it is no float, a quantized bias; None where it cannot group."""
    if tensor < 0:
        return tensor
    info = view.graph.tensors[tensor]
    if info.dtype.kind != "f":
        return tensor
    dequantizer = view.producer.get(tensor)
    if dequantizer is not None and dequantizer.op_type == "DequantizeLinear" and info.dtype == _FLOAT32:
        source = dequantizer.inputs[0]
        return source if view.graph.tensors[source].quant is not None else None
    if info.is_const and position == 2 and node.op_type in ACCUMULATING_OPS:
        return _quantized_bias(view, node, tensor)
    return None


def _quantized_bias(view: View, node: NodeDef, bias: int) -> int | None:
    """A float constant bias as int32 with scale x_scale * w_scale (per output channel), zero
    point 0: what QLinearConv's bias is. None where x's or w's parameters do not allow it."""
    x, w = (_dequantized(view, t) for t in node.inputs[:2])
    if x is None or w is None or not x.per_tensor or w.block_size:
        return None
    value = view.graph.tensors[bias].data.astype(np.float32)
    scale = (x.scale * w.scale).astype(np.float32)
    if value.ndim != 1 or scale.size not in (1, value.size):
        return None
    scale = np.broadcast_to(scale, value.shape)
    data = quantize(value, scale, None, np.int32, axis=0)
    name = f"{view.graph.tensors[bias].name}_quantized"
    params = QuantParams(scale, np.zeros(scale.size, np.int64), 0, 32)
    view.graph.tensors.append(TensorDef(name, np.dtype(np.int32), data.shape, data=data, quant=params))
    return len(view.graph.tensors) - 1


def _dequantized(view: View, tensor: int) -> QuantParams | None:
    producer = view.producer.get(tensor)
    if producer is None or producer.op_type != "DequantizeLinear":
        return None
    return view.graph.tensors[producer.inputs[0]].quant


def _drop_unread_dequantizers(graph: GraphDef) -> None:
    """DequantizeLinear nodes whose outputs nothing reads any more go."""
    while True:
        read = {t for node in graph.nodes for t in node.inputs} | set(graph.outputs)
        kept = [n for n in graph.nodes if n.op_type != "DequantizeLinear" or n.outputs[0] in read]
        if len(kept) == len(graph.nodes):
            return
        graph.nodes = kept
