"""ONNX -> .lite converter.

Example::

    from lite.tools import converter

    data = converter.convert("model.onnx", "model.lite")           # bytes, file written
    graph, report = converter.convert_to_graph("model.onnx", fusion=False)
    print(report.summary())

Pipeline: load and check the ONNX model -> shape inference -> ONNX-level passes (drop
Dropout/Identity, fold constant subgraphs, fold BatchNormalization) -> map every node
with the versioned mappers in ``mappers/`` (all unsupported ops are collected and
raised together) -> .lite passes (fuse RELU/RELU6, drop unreferenced tensors) -> write.

Vendor ops: the nodes of a domain named in ``custom_domains`` become ``Custom`` primitives
(op name, domain, attributes) that a kernel registered with ``lite.register_custom_kernel``
runs or a delegate claims; their output types come from the model's ``value_info``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence

import numpy as np
import onnx

from lite.errors import InputError, ModelFormatError, UnsupportedOpError
from lite.kernels.registry import kernel_key, supported_dtypes
from lite.loader import load_onnx
from lite.schema.graph import GraphDef, NodeDef
from lite.schema.primitives import encode_attrs
from lite.schema.reader import DEFAULT_MEMORY_LIMIT
from lite.schema.writer import write_model, write_model_buffer
from lite.shapes import validate_graph
from lite.tools.converter import mappers  # noqa: F401  (registers every mapper)
from lite.tools.converter.canonical import canonicalize, global_for_plane_mean
from lite.tools.converter.context import GraphBuilder, NodeContext, Unsupported
from lite.tools.converter.fusions import (
    fuse_attention,
    fuse_gelu,
    fuse_layer_norm,
    fuse_matmul_bias,
    fuse_swish,
    fuse_transposed_operands,
    store_weights_untransposed,
)
from lite.tools.converter.onnx_graph import DEFAULT_DOMAINS, OnnxGraph, from_model, infer_shapes
from lite.tools.converter.passes import (
    FOLD_LIMIT,
    constant_outputs,
    drop_identities,
    drop_same_type_casts,
    fold_batchnorm,
    fold_constants,
    fuse_activations,
    prune_tensors,
)
from lite.tools.converter.qdq import group_quantized_ops
from lite.tools.converter.qoperator import expand_quantized_operators
from lite.tools.converter.registry import REGISTRY, Mapper
from lite.tools.converter.report import ConversionReport

__all__ = ["ConversionReport", "convert", "convert_to_graph"]

ModelSource = str | os.PathLike | bytes | onnx.ModelProto
_MAPPER_ERRORS = (ValueError, TypeError, IndexError, KeyError, ArithmeticError)


def convert(model: ModelSource, output_path: str | os.PathLike | None = None, *, fusion: bool = True,
            input_shapes: dict[str, Sequence[int]] | None = None, custom_domains: Sequence[str] = (),
            memory_limit: int = DEFAULT_MEMORY_LIMIT) -> bytes:
    """Converts an ONNX model to .lite bytes, and writes them to ``output_path`` if given.

    Args:
        model: a path to an .onnx file, its bytes, or an ``onnx.ModelProto`` (not modified).
        output_path: where to write the .lite file; written only when conversion succeeds.
        fusion: fold BatchNormalization into Conv/Gemm, fuse RELU/RELU6 into their producer,
            and fuse decomposed LayerNorm, GELU, attention and MatMul + bias blocks into one primitive each
            (constant folding and Dropout/Identity removal always run).
        input_shapes: new shapes for graph inputs, ``{name: dims}``; -1 keeps a dim dynamic.
        custom_domains: ONNX domains (``"com.example"``) whose nodes become ``Custom``
            primitives instead of unsupported ops. Their outputs' types come from the model's
            ``value_info`` (else their first input's type). Where no kernel is registered for a
            custom op in this process, what is computed from it is validated when the model is built.
        memory_limit: the most bytes one tensor may need while converting (a dense sparse
            initializer, a folded constant is at most 64 MiB and also within this, and every
            tensor the runtime's shape inference computes), as ``lite.Context.memory_limit``.

    Returns:
        The .lite model bytes.

    Raises:
        ModelFormatError: the ONNX model cannot be read or is malformed.
        UnsupportedOpError: some ops or attribute values are not supported; lists all of them.
        InputError: ``input_shapes`` names a tensor that is not a graph input, or
            ``custom_domains`` names the standard domain.
        MemoryLimitError: conversion would need a tensor larger than ``memory_limit``.

    Example:
        >>> from lite.tools import converter
        >>> data = converter.convert("mobilenet_v2.onnx", "mobilenet_v2.lite")  # doctest: +SKIP
    """
    graph, _ = convert_to_graph(model, fusion=fusion, input_shapes=input_shapes, custom_domains=custom_domains,
                                memory_limit=memory_limit)
    del model  # NOTE: a ModelProto only the caller's call held (its weights' size) goes before the writer's copy
    data = write_model(graph)
    if output_path is not None:
        with open(output_path, "wb") as f:
            f.write(data)
    return data


def convert_to_buffer(model: ModelSource, *, memory_limit: int = DEFAULT_MEMORY_LIMIT) -> np.ndarray:
    """``convert`` with fusion, returning a read-only uint8 view of the writer's buffer (which
    ``read_model`` reads in place) instead of a copy of it as bytes; a
    ModelProto passed as the only reference to it is freed before the model is written (the runtime
    builds ONNX files through this: one copy of the weights at a time, not three)."""
    graph, _ = convert_to_graph(model, memory_limit=memory_limit)
    del model
    return write_model_buffer(graph)


def convert_to_graph(model: ModelSource, *, fusion: bool = True, input_shapes: dict[str, Sequence[int]] | None = None,
                     custom_domains: Sequence[str] = (), memory_limit: int = DEFAULT_MEMORY_LIMIT,
                     progress: Callable[[str], None] | None = None) -> tuple[GraphDef, ConversionReport]:
    """Like ``convert`` but returns the in-memory ``GraphDef`` and a ``ConversionReport``.

    ``progress``, when given, is called with the name of each stage as it starts (lite-convert
    prints them for big models).
    """
    stage = progress or (lambda _: None)
    custom = _custom_domains(custom_domains)
    stage("reading the ONNX model and inferring its shapes")
    g = from_model(load_onnx(model), {k: list(v) for k, v in (input_shapes or {}).items()}, memory_limit)
    report = ConversionReport(opset=g.opset, onnx_nodes=len(g.nodes))
    stage(f"folding constants and rewriting {len(g.nodes)} ONNX nodes")
    problems = expand_quantized_operators(g, report)
    _onnx_passes(g, report, fusion, min(FOLD_LIMIT, memory_limit))
    stage(f"mapping {len(g.nodes)} nodes to .lite primitives")
    graph = _map_graph(g, custom, problems)
    if g.shape_error:
        raise ModelFormatError(f"the model's shapes do not agree (ONNX strict shape inference): {g.shape_error}")
    if fusion:
        stage("fusing LayerNorm, GELU, attention, MatMul + bias and activations")
        canonicalize(graph, report)
        fuse_layer_norm(graph, report)
        global_for_plane_mean(graph, report)
        fuse_gelu(graph, report)
        fuse_attention(graph, report)
        fuse_matmul_bias(graph, report)
        store_weights_untransposed(graph)
        fuse_transposed_operands(graph, report)
        fuse_swish(graph, report)
        fuse_activations(graph, report)
        group_quantized_ops(graph, report)
        drop_same_type_casts(graph, report)
    report.pruned_tensors = prune_tensors(graph)
    report.lite_nodes = len(graph.nodes)
    stage(f"checking the {len(graph.nodes)} nodes' shapes as the runtime will")
    validate_graph(_checkable(graph), memory_limit)  # the runtime's own shape inference, as Model.build runs it
    return graph, report


def _custom_domains(domains: Sequence[str]) -> frozenset[str]:
    if isinstance(domains, str):
        raise InputError(f"custom_domains is a sequence of domain names, such as ({domains!r},)")
    standard = set(domains) & set(DEFAULT_DOMAINS)
    if standard:
        raise InputError(f"custom_domains names the standard ONNX domain {standard.pop()!r}; it names vendor "
                         "domains such as 'com.example'")
    return frozenset(domains)


def _checkable(graph: GraphDef) -> GraphDef:
    """``graph`` less its custom nodes that no kernel is registered for in this process, and less
    what is computed from them (the runtime reports the missing kernels when the model is built).
    What such a node reads becomes a graph output, so that it is still checked."""
    cut: set[int] = set()  # tensors computed from a custom node without a kernel
    nodes: list[NodeDef] = []
    reads: list[int] = []
    for node in graph.nodes:
        if cut.intersection(node.inputs) or _no_custom_kernel(node):
            cut.update(node.outputs)
            reads += node.inputs
        else:
            nodes.append(node)
    outputs = [t for t in dict.fromkeys(graph.outputs + reads) if t >= 0 and t not in cut]
    return GraphDef(graph.tensors, nodes, graph.inputs, outputs)


def _no_custom_kernel(node: NodeDef) -> bool:
    return node.op_type == "Custom" and not supported_dtypes(kernel_key(node.op_type, node.attrs))


def _onnx_passes(g: OnnxGraph, report: ConversionReport, fusion: bool, fold_limit: int) -> None:
    infer_shapes(g)
    drop_identities(g, report)
    while fold_constants(g, report, fold_limit):
        infer_shapes(g)  # folding can make more shapes static, and so more Shape nodes foldable
    drop_identities(g, report)
    constant_outputs(g)
    if fusion:
        fold_batchnorm(g, report)


def _map_graph(g: OnnxGraph, custom_domains: frozenset[str],
               expansion_problems: list[tuple[str, str, str]]) -> GraphDef:
    """Maps every node; every unsupported op or value is collected and raised at once (with the
    QOperator nodes that could not be expanded)."""
    builder = GraphBuilder(g)
    problems = [(op, name, g.opset, reason) for op, name, reason in expansion_problems]
    unexpanded = {name for _, name, _ in expansion_problems}
    for value in g.inputs:
        try:
            builder.graph.inputs.append(builder.tensor(value.name))
        except Unsupported as exc:
            problems.append(("graph input", value.name, g.opset, exc.reason))
    for node in g.nodes:
        if node.name in unexpanded:
            continue
        try:
            _map_node(builder, node, g.opset, custom_domains)
        except Unsupported as exc:
            problems.append((node.op_type, node.name, g.opset, exc.reason))
    if problems:
        raise UnsupportedOpError(problems)
    builder.graph.outputs = [builder.tensor(name) for name in g.output_names]
    producer = g.model.producer_name or "unknown producer"
    builder.graph.description = f"converted by lite-convert from ONNX opset {g.opset} ({producer})"
    return builder.graph


def _map_node(builder: GraphBuilder, node: onnx.NodeProto, opset: int, custom_domains: frozenset[str]) -> None:
    fn = _mapper(node, opset, custom_domains)
    try:
        fn(NodeContext(builder, node, opset))
    except _MAPPER_ERRORS as exc:
        raise ModelFormatError(f"malformed ONNX node {node.name!r} ({node.op_type}, opset {opset}): "
                               f"{type(exc).__name__}: {exc}") from exc


def _mapper(node: onnx.NodeProto, opset: int, custom_domains: frozenset[str]) -> Mapper:
    if node.domain in custom_domains:
        return _map_custom
    if node.domain not in DEFAULT_DOMAINS:
        raise Unsupported(f"ops of domain {node.domain!r} are not supported; only standard ONNX (ai.onnx) "
                          "ops convert, and vendor ops of a domain declared custom (custom_domains="
                          f"[{node.domain!r}], lite-convert --custom-domain {node.domain}) become Custom ops")
    fn = REGISTRY.find(node.op_type, opset)
    if fn is None:
        raise Unsupported(REGISTRY.why_missing(node.op_type, opset))
    return fn


def _map_custom(ctx: NodeContext) -> None:
    """A node of a custom domain -> a ``Custom`` primitive carrying its name, domain and attributes."""
    node = ctx.node
    attrs = {"type": node.op_type, "domain": node.domain,
             "attrs": {a.name: ctx.attr(a.name) for a in node.attribute}}
    try:
        encode_attrs("Custom", attrs)  # the checks the writer makes, reported as an unsupported op
    except ValueError as exc:
        ctx.unsupported(f"custom op {node.op_type!r}: {exc}")
    ctx.emit("Custom", attrs, ctx.inputs())
