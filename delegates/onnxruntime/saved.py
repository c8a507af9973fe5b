"""Partitions saved ahead of time (``lite-convert --delegate ort``): ONNX graphs read back from the
``.lite`` file and checked before onnxruntime sees them.

A saved graph comes from a file, so it is treated as hostile. It loads only when it:

- reads no files: no external data but the model's own constants, which the file names by the
  kernel and input that read them (``lite.blob.position``) and which must match them;
- runs only what ``ORTDelegate`` itself emits: op types of ``builder.EMITTED_OPS`` in the default
  domain, no graph attributes (control flow: ``Loop``, ``Scan``, ``If``), no model-local
  functions, no sparse initializers;
- has the partition's boundary, bound by name: its inputs and outputs are named like the model's
  tensors they stand for (whatever their order in the graph or in the file's partition table),
  with the same dtypes and ranks;
- stays within ``Context.memory_limit`` as far as shapes tell before it runs: by ONNX shape
  inference, no value it computes needs more bytes than the limit at the smallest size its
  symbolic dims allow, and no value's size is set by values computed from data (an ``Expand``,
  ``ConstantOfShape``, ``Tile``, ``Resize``, ``OneHot`` or ``Pad`` whose amount is neither a
  constant, nor a value the runtime computes from shapes alone, nor inferable). What such values
  need at the actual shapes is counted at every resize (``lite.delegates.onnxruntime.sizes``).

Anything else raises ModelFormatError: the runtime then leaves the blob unused, and
``ORTDelegate`` emits the partition again.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx

from lite.blob import tensor_at, unpack
from lite.delegates.onnxruntime.builder import EMITTED_OPS
from lite.delegates.onnxruntime.emitters.common import ONNX_TYPES
from lite.delegates.onnxruntime.sizes import SIZE_FROM_VALUES, fully_inferred, inferred_types, skeleton, value_bytes
from lite.errors import ModelFormatError
from lite.kernel import Kernel
from lite.loader import external_tensors
from lite.tensor import Tensor

CONSTANT_LOCATION = "lite-constant"  # a saved graph's initializer whose data is one of the model's constants
DEFAULT_DOMAINS = ("", "ai.onnx")


def load_graph(blob: bytes | memoryview, kernels: Sequence[Kernel], inputs: Sequence[Tensor],
               outputs: Sequence[Tensor], memory_limit: int) -> tuple[onnx.ModelProto, bool, dict[str, Tensor]]:
    """The checked graph a blob holds (its inputs and outputs in the order of ``inputs`` and ``outputs``,
    its constants' data filled in from the model's own), whether it is specialized, and which
    initializers hold the model's constants.

    Raises:
        ModelFormatError: the blob or its graph fails any check of this module.
    """
    header, arrays = unpack(blob)
    if "onnx" not in arrays or not isinstance(header.get("specialized"), bool):
        raise ModelFormatError("ORT blob: no model or no 'specialized' flag")
    model, constants = _parsed(arrays["onnx"], header.get("constants"), kernels)
    _check_reads(model, set(constants))
    _check_ops(model)
    _bind_boundary(model.graph, inputs, outputs)
    _fill_constants(model, constants)
    _check_sizes(model, inputs, memory_limit)
    return model, header["specialized"], constants


def _parsed(data: np.ndarray, places: Any, kernels: Sequence[Kernel]) -> tuple[onnx.ModelProto, dict[str, Tensor]]:
    """The ONNX model of a blob, checked by onnx.checker, and the model's constants its initializers name."""
    try:
        model = onnx.load_from_string(data.tobytes())
        constants = _constants(model.graph, places, kernels)
        onnx.checker.check_model(_without_constants(model, constants))
    except ModelFormatError:
        raise
    except Exception as exc:  # NOTE: protobuf's DecodeError, onnx's ValidationError, a malformed map
        raise ModelFormatError(f"ORT blob: not a valid ONNX model: {type(exc).__name__}: {exc}") from exc
    return model, constants


def _constants(graph: onnx.GraphProto, places: Any, kernels: Sequence[Kernel]) -> dict[str, Tensor]:
    """The model's constants that the saved graph's initializers name, each checked against its initializer."""
    if not isinstance(places, dict):
        raise ModelFormatError("ORT blob: no map of constants")
    declared = {t.name: t for t in graph.initializer}
    constants = {}
    for name, place in places.items():
        try:
            tensor = tensor_at(kernels, place)
        except ValueError:
            tensor = None
        initializer = declared.get(name)
        if (tensor is None or not tensor.is_const or tensor.data is None or initializer is None
                or list(initializer.dims) != list(tensor.shape)
                or initializer.data_type != ONNX_TYPES.get(tensor.dtype)):
            raise ModelFormatError(f"ORT blob: initializer {name!r} does not match the model's constant at "
                                   f"[kernel, input] {place!r}")
        constants[name] = tensor
    return constants


def _without_constants(model: onnx.ModelProto, constants: Mapping[str, Tensor]) -> onnx.ModelProto:
    """A copy of ``model`` for onnx.checker: the initializers still without data declared as graph inputs."""
    check = onnx.ModelProto()
    check.CopyFrom(model)
    kept = [t for t in check.graph.initializer if t.name not in constants]
    for initializer in check.graph.initializer:
        if initializer.name in constants:
            check.graph.input.append(onnx.helper.make_tensor_value_info(initializer.name, initializer.data_type,
                                                                        list(initializer.dims)))
    del check.graph.initializer[:]
    check.graph.initializer.extend(kept)
    return check


def _check_reads(model: onnx.ModelProto, constants: set[str]) -> None:
    """Refuses external data other than the model's constants."""
    graph = model.graph
    ours = [t for t in graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL and t.name in constants]
    if len(list(external_tensors(model))) > len(ours):
        raise ModelFormatError("ORT blob: the model refers to external data files")


def _check_ops(model: onnx.ModelProto) -> None:
    """Refuses what ORTDelegate never emits: other op types or domains, graph attributes (control flow),
    model-local functions and sparse initializers."""
    graph = model.graph
    if model.functions or graph.sparse_initializer:
        raise ModelFormatError("ORT blob: the model defines functions or sparse initializers, which ORTDelegate "
                               "never emits")
    for node in graph.node:
        if node.domain not in DEFAULT_DOMAINS or node.op_type not in EMITTED_OPS:
            op = f"{node.domain}::{node.op_type}" if node.domain else node.op_type
            raise ModelFormatError(f"ORT blob: node {node.name!r} is a {op}, which ORTDelegate never emits; a "
                                   "saved graph may hold only the ops its emitters write")
        nested = [a.name for a in node.attribute if a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
                  or a.HasField("g") or len(a.graphs)]
        if nested:
            raise ModelFormatError(f"ORT blob: node {node.name!r} ({node.op_type}) holds subgraphs in {nested}: "
                                   "control flow, which ORTDelegate never emits")


def _bind_boundary(graph: onnx.GraphProto, inputs: Sequence[Tensor], outputs: Sequence[Tensor]) -> None:
    """Reorders the graph's inputs and outputs as ``inputs`` and ``outputs`` by name, each checked
    against its tensor's dtype and rank; refuses another boundary."""
    for values, tensors, kind in ((graph.input, inputs, "inputs"), (graph.output, outputs, "outputs")):
        names = [t.name for t in tensors]
        by_name = {v.name: v for v in values}
        if len(set(names)) != len(names) or len(by_name) != len(values) or set(by_name) != set(names):
            raise ModelFormatError(f"ORT blob: the graph's {kind} {sorted(by_name)} are not the partition's "
                                   f"{sorted(names)} (bound by name, each once)")
        ordered = [by_name[name] for name in names]
        for value, tensor in zip(ordered, tensors, strict=True):
            kind_of = value.type.tensor_type
            if kind_of.elem_type != ONNX_TYPES.get(tensor.dtype) or len(kind_of.shape.dim) != len(tensor.shape):
                raise ModelFormatError(f"ORT blob: {value.name!r} is not a {len(tensor.shape)}-D "
                                       f"{tensor.dtype.name} like the model's tensor of that name")
        copies = [_copy(v) for v in ordered]
        del values[:]
        values.extend(copies)


def _fill_constants(model: onnx.ModelProto, constants: Mapping[str, Tensor]) -> None:
    for initializer in model.graph.initializer:
        tensor = constants.get(initializer.name)
        if tensor is not None:
            initializer.ClearField("external_data")
            initializer.data_location = onnx.TensorProto.DEFAULT
            initializer.raw_data = np.ascontiguousarray(tensor.data, tensor.dtype.newbyteorder("<")).tobytes()


def _check_sizes(model: onnx.ModelProto, inputs: Sequence[Tensor], limit: int) -> None:
    """Refuses a value that needs more than ``limit`` bytes at its least size by shape inference, or
    whose size values computed from data set."""
    try:
        types = inferred_types(skeleton(model), strict=True)
    except Exception as exc:  # NOTE: onnx's InferenceError, or a shape that contradicts itself
        raise ModelFormatError(f"ORT blob: shape inference fails on the graph: {type(exc).__name__}: {exc}") from exc
    known = {t.name for t in model.graph.initializer} | {t.name for t in inputs if t.value_known}
    for node in model.graph.node:
        for name in node.output:
            least = value_bytes(types.get(name), unknown_as=1) if name else 0
            if least > limit:
                raise ModelFormatError(f"ORT blob: {node.op_type} node {node.name!r} makes {name!r} of at least "
                                       f"{least} bytes, more than the memory limit of {limit} bytes "
                                       "(Context.memory_limit)")
        amounts = [node.input[i] for i in SIZE_FROM_VALUES.get(node.op_type, ()) if i < len(node.input)]
        if any(a and a not in known for a in amounts) and not all(fully_inferred(types.get(o))
                                                                  for o in node.output if o):
            raise ModelFormatError(f"ORT blob: {node.op_type} node {node.name!r} takes its output's size from "
                                   f"values computed from data ({[a for a in amounts if a]}): what it allocates "
                                   "cannot be bounded before it runs")


def _copy(value: onnx.ValueInfoProto) -> onnx.ValueInfoProto:
    copy = onnx.ValueInfoProto()
    copy.CopyFrom(value)
    return copy
