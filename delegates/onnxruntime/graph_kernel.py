"""ORTGraphKernel: one partition, emitted as an ONNX model and run by an onnxruntime session."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx

import lite
from lite.blob import pack, position, tensor_at, unpack
from lite.delegates.onnxruntime.builder import emit_partition
from lite.delegates.onnxruntime.emitters.common import ONNX_TYPES
from lite.loader import external_tensors

SessionFactory = Callable[[bytes], Any]  # serialized ONNX model -> onnxruntime.InferenceSession
CONSTANT_LOCATION = "lite-constant"  # a saved graph's initializer whose data is one of the model's constants


class ORTGraphKernel(lite.Kernel):
    """Runs one partition in onnxruntime.

    Built in ``ORTDelegate.create_graph_kernel``, where the partition is emitted as ONNX
    (``onnx_model``, checked with onnx.checker; constants become initializers, so the model
    may release its own copies after prepare). ``prepare`` creates the session.
    ``resize`` keeps the session when only symbolic dims changed (dim 0, the batch, and
    dims unknown at build, unless an emitter specialized the graph to the current dims, as
    a Split into uneven equal parts does); other changes re-emit the model for the new
    shapes and create a new session. ``execute`` runs with IO binding: onnxruntime reads the input arrays and
    writes straight into the runtime's preallocated output arrays, without copies.

    Args:
        kernels: the partition's native kernels, in topological order.
        inputs: tensors it reads from outside (``DelegateModel.subgraph_inputs``).
        outputs: tensors read after it (``DelegateModel.subgraph_outputs``).
        name: the kernel's name, also the ONNX graph's.
        new_session: creates an InferenceSession from serialized ONNX model bytes.

    Attributes:
        onnx_model: the emitted ``onnx.ModelProto`` (opset 17).
        session: the ``onnxruntime.InferenceSession``; None before ``prepare``.
    """

    def __init__(self, kernels: Sequence[lite.Kernel], inputs: list[lite.Tensor], outputs: list[lite.Tensor],
                 name: str, new_session: SessionFactory, saved: bytes | memoryview | None = None):
        super().__init__(inputs, outputs, name=name)
        self.kernels = list(kernels)
        self.new_session = new_session
        self.session = None
        self._binding = None
        self._bound: list[np.ndarray | None] = []
        self.specialized = False
        self.constants: dict[str, lite.Tensor] = {}  # initializer name -> the model's constant it holds
        self.onnx_model = self._emit({}) if saved is None else self._load(saved)

    def saved(self) -> bytes:
        """What ``ORTDelegate.save_graph_kernel`` stores: the emitted graph without the data of the
        model's own constants (the .lite file has them: each is named by the kernel and input that
        read it), and whether the graph is specialized."""
        graph = onnx.ModelProto()
        graph.CopyFrom(self.onnx_model)
        places = {}
        for initializer in graph.graph.initializer:
            tensor = self.constants.get(initializer.name)
            if tensor is not None:
                places[initializer.name] = position(self.kernels, tensor)
                initializer.ClearField("raw_data")
                initializer.data_location = onnx.TensorProto.EXTERNAL
                initializer.external_data.add(key="location", value=CONSTANT_LOCATION)
        model = np.frombuffer(graph.SerializeToString(), np.uint8)
        return pack({"specialized": self.specialized, "constants": places}, {"onnx": model})

    def prepare(self) -> None:
        """Creates the InferenceSession for the emitted model."""
        self.session = self.new_session(self.onnx_model.SerializeToString())
        self._binding = None

    def resize(self) -> None:
        """Keeps the session if the new shapes fit the emitted model, else re-emits and re-creates it."""
        if not self._fits():
            previous = {tensor.name: tensor for tensor in self.onnx_model.graph.initializer}
            self.onnx_model = self._emit(previous)
            self.prepare()

    def execute(self) -> None:
        """Runs the session; rebinds first if the runtime gave a tensor a new array (after a resize)."""
        arrays = [t.data for t in self.inputs] + [t.data for t in self.outputs]
        if self._binding is None or any(a is not b for a, b in zip(arrays, self._bound, strict=True)):
            self._bind(arrays)
        self.session.run_with_iobinding(self._binding)

    def dump(self, directory: str | os.PathLike) -> list[Path]:
        """Writes the emitted model to ``directory/<name>.onnx``; returns the paths written."""
        path = Path(directory) / f"{self.name}.onnx"
        path.parent.mkdir(parents=True, exist_ok=True)
        onnx.save_model(self.onnx_model, path)
        return [path]

    def _emit(self, previous: Mapping[str, onnx.TensorProto]) -> onnx.ModelProto:
        model, self.specialized, self.constants = emit_partition(self.kernels, self.inputs, self.outputs, self.name,
                                                                 previous)
        onnx.checker.check_model(model)
        self._plan(model)
        return model

    def _plan(self, model: onnx.ModelProto) -> None:
        values = [*model.graph.input, *model.graph.output]
        self._names = [v.name for v in values]
        tensors = [*self.inputs, *self.outputs]
        self._planned = [list(t.shape) for t in tensors] if self.specialized else [_planned_dims(v) for v in values]

    def _load(self, blob: bytes | memoryview) -> onnx.ModelProto:
        """The graph a blob holds, checked like a model file (no files read, no subgraphs, the
        partition's boundary), its constants' data filled in from the model's own constants."""
        header, arrays = unpack(blob)
        if "onnx" not in arrays or not isinstance(header.get("specialized"), bool):
            raise lite.ModelFormatError("ORT blob: no model or no 'specialized' flag")
        try:
            model = onnx.load_from_string(arrays["onnx"].tobytes())
            self.constants = _constants(model.graph, header.get("constants"), self.kernels)
            onnx.checker.check_model(_without_constants(model, self.constants))
        except lite.ModelFormatError:
            raise
        except Exception as exc:  # NOTE: protobuf's DecodeError, onnx's ValidationError, a malformed map
            raise lite.ModelFormatError(f"ORT blob: not a valid ONNX model: {type(exc).__name__}: {exc}") from exc
        _check_saved_graph(model, [*self.inputs, *self.outputs], len(self.inputs), set(self.constants))
        for initializer in model.graph.initializer:
            tensor = self.constants.get(initializer.name)
            if tensor is not None:
                initializer.ClearField("external_data")
                initializer.data_location = onnx.TensorProto.DEFAULT
                initializer.raw_data = np.ascontiguousarray(tensor.data, tensor.dtype.newbyteorder("<")).tobytes()
        self.specialized = header["specialized"]
        self._plan(model)
        return model

    def _fits(self) -> bool:
        """Whether every boundary tensor's shape fits the shapes the model was emitted for (None: any)."""
        for dims, tensor in zip(self._planned, [*self.inputs, *self.outputs], strict=True):
            if len(dims) != len(tensor.shape):
                return False
            if any(d is not None and d != s for d, s in zip(dims, tensor.shape, strict=True)):
                return False
        return True

    def _bind(self, arrays: list[np.ndarray | None]) -> None:
        from onnxruntime import OrtValue

        binding = self.session.io_binding()
        count = len(self.inputs)
        for k, (name, array) in enumerate(zip(self._names, arrays, strict=True)):
            # NOTE: an OrtValue made from a numpy array on the CPU wraps its buffer: no copy.
            value = OrtValue.ortvalue_from_numpy(array)
            (binding.bind_ortvalue_input if k < count else binding.bind_ortvalue_output)(name, value)
        self._binding, self._bound = binding, arrays


def _constants(graph: onnx.GraphProto, places, kernels: list[lite.Kernel]) -> dict[str, lite.Tensor]:
    """The model's constants that the saved graph's initializers name, each checked against its initializer."""
    if not isinstance(places, dict):
        raise lite.ModelFormatError("ORT blob: no map of constants")
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
            raise lite.ModelFormatError(f"ORT blob: initializer {name!r} does not match the model's constant at "
                                        f"[kernel, input] {place!r}")
        constants[name] = tensor
    return constants


def _without_constants(model: onnx.ModelProto, constants: Mapping[str, lite.Tensor]) -> onnx.ModelProto:
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


def _check_saved_graph(model: onnx.ModelProto, boundary: list[lite.Tensor], input_count: int,
                       constants: set[str]) -> None:
    """Refuses a saved graph that reads files (external data other than the model's constants), nests
    graphs, or has another boundary."""
    graph = model.graph
    ours = [t for t in graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL and t.name in constants]
    if len(list(external_tensors(model))) > len(ours):
        raise lite.ModelFormatError("ORT blob: the model refers to external data files")
    if any(a.g.node or a.graphs for n in graph.node for a in n.attribute):
        raise lite.ModelFormatError("ORT blob: the model holds subgraphs, which ORTDelegate never emits")
    values = [*graph.input, *graph.output]
    if len(graph.input) != input_count or len(values) != len(boundary):
        raise lite.ModelFormatError(f"ORT blob: {len(graph.input)} inputs and {len(graph.output)} outputs, the "
                                    f"partition has {input_count} and {len(boundary) - input_count}")
    for value, tensor in zip(values, boundary, strict=True):
        kind = value.type.tensor_type
        if kind.elem_type != ONNX_TYPES.get(tensor.dtype) or len(kind.shape.dim) != len(tensor.shape):
            raise lite.ModelFormatError(f"ORT blob: {value.name!r} is not a {len(tensor.shape)}-D "
                                        f"{tensor.dtype.name} like {tensor.name!r}")


def _planned_dims(info: onnx.ValueInfoProto) -> list[int | None]:
    """The emitted dims of a graph input/output, None where symbolic."""
    return [d.dim_value if d.HasField("dim_value") else None for d in info.type.tensor_type.shape.dim]
