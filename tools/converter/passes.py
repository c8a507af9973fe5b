"""Graph rewrites: ONNX-level before mapping, .lite-level after.

ONNX level (on ``OnnxGraph``): ``drop_identities``, ``fold_constants``,
``constant_outputs`` and ``fold_batchnorm``. After mapping (on ``GraphDef``):
``fuse_activations`` and ``prune_tensors``. Each pass records what it did in the
``ConversionReport``.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

import numpy as np
import onnx
from onnx import helper

from lite.ops.activation import FUSED_CLIPS, FUSING_OPS
from lite.ops.norm import batchnorm_affine
from lite.ops.quant import same_quantization
from lite.schema.graph import GraphDef, TensorDef
from lite.shapes import FOLD_LIMIT  # NOTE: the runtime folds by the same limit: a node left here is not folded there
from lite.tools.converter.onnx_graph import DEFAULT_DOMAINS, LITE_DTYPES, OnnxGraph

if TYPE_CHECKING:
    from lite.tools.converter.report import ConversionReport

NONDETERMINISTIC = frozenset(
    {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial", "Bernoulli"})
# Kept as nodes although computable: a DequantizeLinear of a constant is a quantized weight, which
# the quantized op reads as integers (and which is a quarter of its float size).
NOT_FOLDED = frozenset({"DequantizeLinear"})


# ---- ONNX level ----------------------------------------------------------------------


def drop_identities(g: OnnxGraph, report: ConversionReport) -> None:
    """Removes Identity, inference-mode Dropout and one-input Concat, Sum, Max, Min and Mean nodes by rewiring
    their readers.

    When the removed node's output is a graph output, its producer writes that name
    instead; a node copying a graph input or a constant to a graph output stays.
    """
    outputs, inputs = set(g.output_names), {i.name for i in g.inputs}
    uses = g.use_counts()
    for node in list(g.nodes):
        if not _is_passthrough(node, g, uses):
            continue
        src, dst = node.input[0], node.output[0]
        produced = src not in g.consts and src not in inputs
        if dst not in outputs:
            g.replace_uses(dst, src)
        elif produced and src not in outputs:
            g.rename_output(src, dst)
        else:
            continue
        g.nodes.remove(node)
        report.removed.append(node.name)


ONE_INPUT_COPIES = frozenset({"Concat", "Sum", "Max", "Min", "Mean"})
"""Variadic ops that copy their input when given one (exporters write a one-input Concat for a cache)."""


def _is_passthrough(node: onnx.NodeProto, g: OnnxGraph, uses: dict[str, int]) -> bool:
    if node.domain not in DEFAULT_DOMAINS or not node.input or not node.input[0]:
        return False
    if node.op_type == "Identity":
        return True
    if node.op_type in ONE_INPUT_COPIES and len(node.input) == 1:  # NOTE: a Concat without its axis stays, to fail
        return node.op_type != "Concat" or any(a.name == "axis" for a in node.attribute)
    if node.op_type != "Dropout" or any(uses.get(o, 0) for o in node.output[1:]):
        return False
    training = g.consts.get(node.input[2]) if len(node.input) > 2 and node.input[2] else np.False_
    return training is not None and not bool(training)




def fold_constants(g: OnnxGraph, report: ConversionReport, limit: int = FOLD_LIMIT) -> int:
    """Replaces every node computable from constants (or from static shapes and types) by constants.

    A node whose outputs would need more than ``limit`` bytes, or whose output shapes shape
    inference does not know, is not evaluated: it stays a node, which the runtime computes within
    its memory limit. Returns the number of nodes folded.
    """
    kept, folded = [], 0
    for node in g.nodes:
        values = _fold(node, g) if _bounded(node, g, limit) else None
        if values is None:
            kept.append(node)
            continue
        for name, value in values.items():
            g.consts[name] = _as_inferred_type(np.asarray(value), g, name)
        report.folded.append(node.name)
        folded += 1
    g.nodes = kept
    return folded


def _bounded(node: onnx.NodeProto, g: OnnxGraph, limit: int) -> bool:
    """Whether every output's shape is known and all of them fit in ``limit`` bytes."""
    total = 0
    for name in filter(None, node.output):
        info = g.tensor_info(name)
        if info.shape is None or min(info.shape, default=0) < 0:
            return False
        itemsize = np.dtype(LITE_DTYPES[info.elem_type]).itemsize if info.elem_type in LITE_DTYPES else 8
        total += int(np.prod(info.shape, dtype=np.float64)) * itemsize
    return total <= limit


def _fold(node: onnx.NodeProto, g: OnnxGraph) -> dict[str, np.ndarray] | None:
    """The node's output values if it can be computed now, else None."""
    if node.domain not in DEFAULT_DOMAINS or node.op_type in NONDETERMINISTIC | NOT_FOLDED:
        return None
    if any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attribute):
        return None
    if all(not name or name in g.consts for name in node.input):
        return _evaluate(node, g)
    if node.op_type in _FROM_METADATA:
        return _FROM_METADATA[node.op_type](node, g)
    return None


def _static_shape(node: onnx.NodeProto, g: OnnxGraph) -> dict[str, np.ndarray] | None:
    """Shape of a tensor whose shape is static."""
    shape = g.tensor_info(node.input[0]).shape
    if shape is None or -1 in shape:
        return None
    attrs = {a.name: a.i for a in node.attribute}
    start, end = attrs.get("start", 0), attrs.get("end", len(shape))
    return {node.output[0]: np.array(shape[start:end], dtype=np.int64)}


def _cast_like(node: onnx.NodeProto, g: OnnxGraph) -> dict[str, np.ndarray] | None:
    """CastLike of a constant: only the element type of the second input matters."""
    dtype = LITE_DTYPES.get(g.tensor_info(node.input[1]).elem_type)
    value = g.consts.get(node.input[0])
    return None if dtype is None or value is None else {node.output[0]: value.astype(dtype)}


# Ops computable from constant inputs plus only the shape or type of the others.
_FROM_METADATA = {"Shape": _static_shape, "CastLike": _cast_like}


def _evaluate(node: onnx.NodeProto, g: OnnxGraph) -> dict[str, np.ndarray] | None:
    """Runs one node in the ONNX reference evaluator; None if it cannot."""
    from onnx.reference import ReferenceEvaluator  # NOTE: imported on the first fold (35 ms a process)

    feeds = {name: g.consts[name] for name in node.input if name}
    outputs = [name for name in node.output if name]
    graph = helper.make_graph(
        [node], "fold", [helper.make_tensor_value_info(k, onnx.TensorProto.UNDEFINED, None) for k in feeds],
        [helper.make_tensor_value_info(o, onnx.TensorProto.UNDEFINED, None) for o in outputs])
    model = helper.make_model(graph, opset_imports=g.model.opset_import)
    try:
        return dict(zip(outputs, ReferenceEvaluator(model).run(None, feeds), strict=True))
    except Exception:  # the evaluator lacks old op versions or rejects odd inputs: keep the node
        return None


def _as_inferred_type(value: np.ndarray, g: OnnxGraph, name: str) -> np.ndarray:
    info = g.info.get(name)
    dtype = LITE_DTYPES.get(info.elem_type) if info is not None else None
    return value.astype(dtype) if dtype is not None and value.dtype != dtype else value


def constant_outputs(g: OnnxGraph) -> None:
    """A graph output that folded into a constant becomes an Identity of a renamed constant."""
    for name in g.output_names:
        if name in g.consts:
            source = g.unique_name(f"{name}_const")
            g.consts[source] = g.consts.pop(name)
            g.info[name] = g.tensor_info(source)
            g.nodes.append(helper.make_node("Identity", [source], [name], name=g.unique_name(f"{name}_identity")))


def fold_batchnorm(g: OnnxGraph, report: ConversionReport) -> None:
    """Folds inference BatchNormalization into a preceding Conv or Gemm with constant weights, and a
    Mul or Add of a per-channel constant (a layer scale: timm's ConvNeXt, PoolFormer) into a
    preceding Conv."""
    producers, uses = g.producers(), g.use_counts()
    nested = any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
                 for node in g.nodes for a in node.attribute)  # NOTE: subgraphs may read a weight unseen
    affines = ("BatchNormalization", "Mul", "Add")
    for node in [n for n in g.nodes if n.op_type in affines and n.domain in DEFAULT_DOMAINS]:
        if node.op_type == "BatchNormalization":
            source, affine = node.input[0], _bn_affine(node, g, uses)
        else:
            source, affine = _channel_affine(node, g, producers)
        prev = producers.get(source) if source is not None else None
        if prev is None or affine is None or uses[source] != 1:  # graph outputs count as uses
            continue
        folder = {"Conv": _fold_into_conv, "Gemm": _fold_into_gemm}.get(prev.op_type)
        weight = prev.input[1] if len(prev.input) > 1 else ""
        if prev.domain in DEFAULT_DOMAINS and folder is not None and folder(prev, *affine, g):
            prev.output[0] = node.output[0]
            g.nodes.remove(node)
            producers[node.output[0]] = prev
            report.bn_folded.append(node.name)
            if uses.get(weight) == 1 and not nested:  # NOTE: no reader left: keep one copy of a weight, not two
                g.consts.pop(weight, None)


def _channel_affine(node: onnx.NodeProto, g: OnnxGraph,
                    producers: dict) -> tuple[str | None, tuple[np.ndarray, np.ndarray] | None]:
    """(the input a Mul or Add applies a per-channel float constant to, as (scale, shift) per channel),
    or (None, None): the other operand a Conv's (N, C, ...) output, the constant of its dtype shaped
    (1, C or 1, 1, ...) once padded on the left to the output's rank (one value a channel, never
    broadcasting the output to more)."""
    for source, other in (node.input, node.input[::-1]):
        value, conv = g.consts.get(other), producers.get(source)
        if value is None or conv is None or conv.op_type != "Conv" or len(conv.input) < 2:
            continue
        weight = g.consts.get(conv.input[1])
        if weight is None or value.dtype.kind != "f" or weight.dtype != value.dtype or value.ndim > weight.ndim:
            continue
        padded, channels = (1,) * (weight.ndim - value.ndim) + value.shape, weight.shape[0]
        if padded[0] != 1 or padded[1] not in (1, channels) or any(d != 1 for d in padded[2:]):
            continue
        factor = np.broadcast_to(value.reshape(-1).astype(np.float64), channels)
        return source, ((factor, np.zeros(channels)) if node.op_type == "Mul" else (np.ones(channels), factor))
    return None, None


def _bn_affine(bn: onnx.NodeProto, g: OnnxGraph, uses: dict[str, int]) -> tuple[np.ndarray, np.ndarray] | None:
    """BN as y = x * scale + shift per channel (float64), or None if it cannot fold."""
    attrs = {a.name: helper.get_attribute_value(a) for a in bn.attribute}
    params = [g.consts.get(name) for name in bn.input[1:5]]
    if len(params) != 4 or any(p is None for p in params) or any(uses.get(o, 0) for o in bn.output[1:]):
        return None
    if attrs.get("training_mode", 0) or not attrs.get("spatial", 1):
        return None
    return batchnorm_affine(*params, attrs.get("epsilon", 1e-5))


def _fold_into_conv(conv: onnx.NodeProto, scale: np.ndarray, shift: np.ndarray, g: OnnxGraph) -> bool:
    weight = g.consts.get(conv.input[1])
    bias = g.consts.get(conv.input[2]) if len(conv.input) > 2 and conv.input[2] else np.zeros(len(scale))
    if weight is None or bias is None or weight.ndim < 3 or weight.shape[0] != scale.size:
        return False
    folded_w = _scaled(weight, scale.reshape(-1, *[1] * (weight.ndim - 1)))
    _set_input(conv, 1, _new_const(g, f"{conv.input[1]}_bn", folded_w))
    _set_input(conv, 2, _new_const(g, f"{conv.name}_bias_bn", (bias * scale + shift).astype(weight.dtype)))
    return True


def _fold_into_gemm(gemm: onnx.NodeProto, scale: np.ndarray, shift: np.ndarray, g: OnnxGraph) -> bool:
    attrs = {a.name: helper.get_attribute_value(a) for a in gemm.attribute}
    weight = g.consts.get(gemm.input[1])
    bias = g.consts.get(gemm.input[2]) if len(gemm.input) > 2 and gemm.input[2] else np.zeros(1)
    n_axis = 0 if attrs.get("transB", 0) else 1
    if weight is None or bias is None or weight.ndim != 2 or weight.shape[n_axis] != scale.size:
        return False
    folded_w = _scaled(weight, scale[:, None] if n_axis == 0 else scale[None, :])
    folded_c = attrs.get("beta", 1.0) * bias * scale + shift
    _set_input(gemm, 1, _new_const(g, f"{gemm.input[1]}_bn", folded_w))
    _set_input(gemm, 2, _new_const(g, f"{gemm.name}_bias_bn", folded_c.astype(weight.dtype)))
    _set_attr(gemm, "beta", 1.0)
    if g.opset < 7:
        _set_attr(gemm, "broadcast", 1)
    return True


def _scaled(weight: np.ndarray, factor: np.ndarray) -> np.ndarray:
    """``(weight * factor).astype(weight.dtype)`` (the product in float64, rounded once), without the
    float64 copy of the whole weight: numpy casts the product into the result in buffered blocks."""
    return np.multiply(weight, factor, out=np.empty_like(weight), casting="unsafe")


def _new_const(g: OnnxGraph, hint: str, value: np.ndarray) -> str:
    name = g.unique_name(hint)
    g.consts[name] = value
    return name


def _set_input(node: onnx.NodeProto, i: int, name: str) -> None:
    while len(node.input) <= i:
        node.input.append("")
    node.input[i] = name


def _set_attr(node: onnx.NodeProto, name: str, value) -> None:
    kept = [a for a in node.attribute if a.name != name]
    del node.attribute[:]
    node.attribute.extend([*kept, helper.make_attribute(name, value)])


# ---- .lite level ---------------------------------------------------------------------


def fuse_activations(graph: GraphDef, report: ConversionReport) -> None:
    """Moves an Activation that a producer can fuse (RELU, RELU6) into its ``activation_type``.

    Only when the producer is a fusible op without an activation, and the
    activation is the only reader of its output, which is not a graph output.
    """
    producer = {t: node for node in graph.nodes for t in node.outputs}
    uses = Counter(t for node in graph.nodes for t in node.inputs)
    outputs = set(graph.outputs)
    kept = []
    for node in graph.nodes:
        prev = producer.get(node.inputs[0]) if node.op_type == "Activation" else None
        if prev is not None and _can_fuse(node, prev, uses, outputs):
            prev.attrs["activation_type"] = node.attrs["activation_type"]
            prev.outputs[0] = node.outputs[0]
            producer[node.outputs[0]] = prev
            report.fused.append(node.name)
            continue
        kept.append(node)
    graph.nodes = kept


def _can_fuse(act, prev, uses: Counter, outputs: set[int]) -> bool:
    source = act.inputs[0]
    return (act.attrs["activation_type"] in FUSED_CLIPS and prev.op_type in FUSING_OPS
            and prev.attrs["activation_type"] == "NO_ACTIVATION" and prev.outputs == [source]
            and uses[source] == 1 and source not in outputs)


def drop_same_type_casts(graph: GraphDef, report: ConversionReport) -> None:
    """Removes each Cast to the type its input already has (exporters write float32-to-float32 Casts
    around a decoder's norms, rotary tables and attention probabilities), its readers reading its
    input; one that writes a graph output stays. Runs after the fusions, so that they match the
    graph as exported."""
    outputs, source, kept = set(graph.outputs), {}, []
    for node in graph.nodes:
        node.inputs = [source.get(t, t) for t in node.inputs]
        if (node.op_type == "Cast" and len(node.inputs) == 1 and node.inputs[0] >= 0 and node.outputs[0] not in outputs
                and _same_type(graph.tensors[node.inputs[0]], graph.tensors[node.outputs[0]])):
            source[node.outputs[0]] = node.inputs[0]
            report.removed.append(node.name)
            continue
        kept.append(node)
    graph.nodes = kept


def _same_type(a: TensorDef, b: TensorDef) -> bool:
    return a.dtype == b.dtype and (a.quant is b.quant or same_quantization(a.quant, b.quant))


def prune_tensors(graph: GraphDef) -> int:
    """Drops tensors that no node, graph input or graph output references; returns how many."""
    used = {t for node in graph.nodes for t in (*node.inputs, *node.outputs) if t >= 0}
    used |= set(graph.inputs) | set(graph.outputs)
    new_index = {old: new for new, old in enumerate(sorted(used))}
    dropped = len(graph.tensors) - len(used)
    graph.tensors = [graph.tensors[old] for old in sorted(used)]
    for node in graph.nodes:
        node.inputs = [new_index[t] if t >= 0 else -1 for t in node.inputs]
        node.outputs = [new_index[t] for t in node.outputs]
    graph.inputs = [new_index[t] for t in graph.inputs]
    graph.outputs = [new_index[t] for t in graph.outputs]
    return dropped
