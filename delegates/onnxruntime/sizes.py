"""What an ONNX Runtime partition allocates: its tensors' sizes from ONNX shape inference, against
``Context.memory_limit``.

Native kernels' activations are planned, and refused above the limit, before anything is
allocated (``lite.memory``); onnxruntime plans its own. So an ``ORTGraphKernel`` infers the
shape of every value of its graph for the boundary's actual shapes (``onnx.shape_inference``
with data propagation) and counts, node by node in execution order, the bytes of the values
alive at once, its boundary included: above the limit it raises MemoryLimitError, as the
native plan does. A value whose shape cannot be inferred from the boundary's shapes and the
graph's constants (an ``Expand`` whose shape is computed from data) cannot be counted before
it runs, so it is refused too. onnxruntime's own arena limit (``OrtArenaCfg.max_mem``) cannot
stand in: it applies to allocators shared by the whole process, not to one session.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence

import numpy as np
import onnx
from onnx import helper, numpy_helper, shape_inference

from lite.errors import MemoryLimitError

SMALL_INITIALIZER = 1 << 12  # bytes: constants up to this size keep their values for inference (shapes, axes)
SIZE_FROM_VALUES = {  # op type -> inputs whose values (not shapes) set the output's size
    "Expand": (1,), "ConstantOfShape": (0,), "Tile": (1,), "Resize": (2, 3), "OneHot": (1,), "Pad": (1,),
}


def skeleton(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` without the data of its large constants (declared as graph inputs instead), for shape
    inference: what it reads of them is their shapes, and the values of small ones."""
    graph = model.graph
    small = [t for t in graph.initializer if t.ByteSize() <= SMALL_INITIALIZER]
    large = [helper.make_tensor_value_info(t.name, t.data_type, list(t.dims))
             for t in graph.initializer if t.ByteSize() > SMALL_INITIALIZER]
    bare = helper.make_graph(list(graph.node), graph.name, [*graph.input, *large], list(graph.output), small)
    return helper.make_model(bare, opset_imports=list(model.opset_import), ir_version=model.ir_version)


def inferred_types(model: onnx.ModelProto, shapes: Mapping[str, Sequence[int]] | None = None,
                   values: Mapping[str, np.ndarray] | None = None, strict: bool = False) -> dict[str, onnx.TypeProto]:
    """Every value's type (with its inferred shape) by name: the graph inputs of ``shapes`` at those
    shapes, those of ``values`` holding those values (shape values the runtime computed), the others
    as declared.

    Raises:
        onnx.shape_inference.InferenceError: with ``strict``, where the graph contradicts itself.
    """
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    values = values or {}
    for value in probe.graph.input:
        if shapes is not None and value.name in shapes:
            dims = value.type.tensor_type.shape.dim
            del dims[:]
            for size in shapes[value.name]:
                dims.add().dim_value = int(size)
    kept = [v for v in probe.graph.input if v.name not in values]
    del probe.graph.input[:]
    probe.graph.input.extend(kept)
    probe.graph.initializer.extend(numpy_helper.from_array(np.asarray(a), name) for name, a in values.items())
    inferred = shape_inference.infer_shapes(probe, check_type=strict, strict_mode=strict, data_prop=True)
    graph = inferred.graph
    types = {v.name: v.type for v in [*graph.input, *graph.value_info, *graph.output]}
    types.update({t.name: helper.make_tensor_type_proto(t.data_type, list(t.dims)) for t in graph.initializer})
    return types


def fully_inferred(kind: onnx.TypeProto | None) -> bool:
    """Whether shape inference gave every dim of ``kind`` a number or a name (a symbolic dim of the boundary)."""
    if kind is None or not kind.HasField("tensor_type") or not kind.tensor_type.HasField("shape"):
        return False
    return all(d.HasField("dim_value") or d.HasField("dim_param") for d in kind.tensor_type.shape.dim)


def value_bytes(kind: onnx.TypeProto | None, unknown_as: int | None = None) -> int | None:
    """The bytes of a tensor of type ``kind``; dims that are not numbers count as ``unknown_as`` (None: the
    size is unknown, and so is the result)."""
    if kind is None or not kind.HasField("tensor_type") or not kind.tensor_type.HasField("shape"):
        return None if unknown_as is None else 0
    dims = [d.dim_value if d.HasField("dim_value") and d.dim_value >= 0 else unknown_as
            for d in kind.tensor_type.shape.dim]
    if None in dims:
        return None
    return math.prod(dims) * _itemsize(kind)


def peak_bytes(graph: onnx.GraphProto, sizes: Mapping[str, int | None], boundary: Iterable[str]) -> int:
    """The most bytes alive at once running ``graph``'s nodes in order: the ``boundary`` values
    throughout, each value a node makes from that node to its last reader.

    Raises:
        MemoryLimitError: a value's size is unknown (``sizes`` holds None or lacks it).
    """
    last_read = {name: i for i, node in enumerate(graph.node) for name in node.input}
    kept = set(boundary)
    live = peak = sum(_known(sizes, name) for name in kept)
    ending: dict[int, list[str]] = {}
    for i, node in enumerate(graph.node):
        for name in node.output:
            if name and name not in kept:
                live += _known(sizes, name)
                ending.setdefault(max(i, last_read.get(name, i)), []).append(name)
        peak = max(peak, live)
        live -= sum(_known(sizes, name) for name in ending.pop(i, ()))
    return peak


def check_activations(model: onnx.ModelProto, shapes: Mapping[str, Sequence[int]],
                      values: Mapping[str, np.ndarray], limit: int, where: str) -> None:
    """Refuses running ``model`` (a ``skeleton``) at these boundary ``shapes`` (by name; ``values``: the
    inputs whose values the runtime computed from shapes) when its values alive at once would need
    more than ``limit`` bytes, or their sizes cannot be inferred.

    Raises:
        MemoryLimitError: naming the partition, the bytes and the limit.
    """
    try:
        types = inferred_types(model, shapes, values)
    except Exception as exc:  # NOTE: onnx's own errors; the sizes are then unknown
        raise MemoryLimitError(f"{where}: shape inference failed ({type(exc).__name__}: {exc}), so "
                               "Context.memory_limit cannot be kept") from exc
    sizes = {name: value_bytes(kind) for name, kind in types.items()}
    for name, shape in shapes.items():
        kind = types.get(name)
        sizes[name] = math.prod(shape) * (_itemsize(kind) if kind is not None else 8)
    try:
        total = peak_bytes(model.graph, sizes, shapes)
    except MemoryLimitError as exc:
        raise MemoryLimitError(f"{where}: {exc}, so Context.memory_limit cannot be kept") from exc
    if total > limit:
        raise MemoryLimitError(f"{where}: its tensors would need {total} bytes at once for these input shapes, "
                               f"more than the memory limit of {limit} bytes (Context.memory_limit)")


def _known(sizes: Mapping[str, int | None], name: str) -> int:
    size = sizes.get(name)
    if size is None:
        raise MemoryLimitError(f"the size of {name!r} cannot be inferred before it runs")
    return size


def _itemsize(kind: onnx.TypeProto) -> int:
    try:
        return helper.tensor_dtype_to_np_dtype(kind.tensor_type.elem_type).itemsize
    except (KeyError, ValueError, TypeError):
        return 8  # NOTE: no numpy dtype (strings, float8s...): counted at the widest
