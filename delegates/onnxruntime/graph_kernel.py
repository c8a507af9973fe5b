"""ORTGraphKernel: one partition, emitted as an ONNX model and run by an onnxruntime session."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx

import lite
from lite.blob import pack, position
from lite.delegates.onnxruntime.builder import emit_partition
from lite.delegates.onnxruntime.saved import CONSTANT_LOCATION, load_graph
from lite.delegates.onnxruntime.sizes import SMALL_INITIALIZER, check_activations, skeleton
from lite.schema.reader import DEFAULT_MEMORY_LIMIT

SessionFactory = Callable[[bytes], Any]  # serialized ONNX model -> onnxruntime.InferenceSession


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

    ``prepare`` and ``resize`` count what the graph's tensors need at the boundary's shapes
    (``lite.delegates.onnxruntime.sizes``) and refuse more than ``memory_limit`` bytes, as the
    native plan refuses activations over ``Context.memory_limit``; a graph whose sizes depend on
    values computed from data is refused too (onnxruntime offers no limit per session).

    Args:
        kernels: the partition's native kernels, in topological order.
        inputs: tensors it reads from outside (``DelegateModel.subgraph_inputs``).
        outputs: tensors read after it (``DelegateModel.subgraph_outputs``).
        name: the kernel's name, also the ONNX graph's.
        new_session: creates an InferenceSession from serialized ONNX model bytes.
        saved: a blob ``saved()`` wrote (``ORTDelegate.load_graph_kernel``): its graph, checked
            (``lite.delegates.onnxruntime.saved``), instead of emitting one.
        memory_limit: the most bytes the graph's tensors may need at once (``Context.memory_limit``).

    Raises:
        lite.ModelFormatError: ``saved`` fails a check.
        lite.MemoryLimitError: (``prepare``, ``resize``) the tensors would need more than
            ``memory_limit`` bytes at the current shapes.

    Attributes:
        onnx_model: the emitted ``onnx.ModelProto`` (opset 17).
        session: the ``onnxruntime.InferenceSession``; None before ``prepare``.
    """

    def __init__(self, kernels: Sequence[lite.Kernel], inputs: list[lite.Tensor], outputs: list[lite.Tensor],
                 name: str, new_session: SessionFactory, saved: bytes | memoryview | None = None,
                 memory_limit: int = DEFAULT_MEMORY_LIMIT):
        super().__init__(inputs, outputs, name=name)
        self.memory_limit = memory_limit
        self.kernels = list(kernels)
        self.new_session = new_session
        self.session = None
        self._binding = None
        self._bound: list[np.ndarray | None] = []
        self.specialized = False
        # initializer name -> the model's constant it holds (not ``Kernel.constants``: read at emission only)
        self.initializer_constants: dict[str, lite.Tensor] = {}
        self.onnx_model = self._emit({}) if saved is None else self._load(saved)

    def saved(self) -> bytes:
        """What ``ORTDelegate.save_graph_kernel`` stores: the emitted graph without the data of the
        model's own constants (the .lite file has them: each is named by the kernel and input that
        read it), and whether the graph is specialized."""
        graph = onnx.ModelProto()
        graph.CopyFrom(self.onnx_model)
        places = {}
        for initializer in graph.graph.initializer:
            tensor = self.initializer_constants.get(initializer.name)
            if tensor is not None:
                places[initializer.name] = position(self.kernels, tensor)
                initializer.ClearField("raw_data")
                initializer.data_location = onnx.TensorProto.EXTERNAL
                initializer.external_data.add(key="location", value=CONSTANT_LOCATION)
        model = np.frombuffer(graph.SerializeToString(), np.uint8)
        return pack({"specialized": self.specialized, "constants": places}, {"onnx": model})

    def prepare(self) -> None:
        """Creates the InferenceSession for the emitted model (after the memory check, where shapes are known)."""
        if all(-1 not in t.shape for t in [*self.inputs, *self.outputs]):
            self._check_memory()
        self.session = self.new_session(self.onnx_model.SerializeToString())
        self._binding = None

    def resize(self) -> None:
        """Keeps the session if the new shapes fit the emitted model, else re-emits and re-creates it."""
        if not self._fits():
            previous = {tensor.name: tensor for tensor in self.onnx_model.graph.initializer}
            self.onnx_model = self._emit(previous)
            self.prepare()
        else:
            self._check_memory()

    def execute(self) -> None:
        """Runs the session; first rebinds the tensors whose arrays changed (after a resize, or an input
        the runtime views in the caller's array)."""
        arrays = [t.data for t in self.inputs] + [t.data for t in self.outputs]
        if self._binding is None:
            self._bind(arrays)
        else:
            changed = [k for k, (a, b) in enumerate(zip(arrays, self._bound, strict=True))
                       if not _same_buffer(a, b) or not _wrapped(a)]
            if changed:
                self._rebind(arrays, changed)
        self.session.run_with_iobinding(self._binding)
        for k, value in self._copied_outputs:
            np.copyto(arrays[k], value.numpy())

    def dump(self, directory: str | os.PathLike) -> list[Path]:
        """Writes the emitted model to ``directory/<name>.onnx``; returns the paths written."""
        path = Path(directory) / f"{self.name}.onnx"
        path.parent.mkdir(parents=True, exist_ok=True)
        onnx.save_model(self.onnx_model, path)
        return [path]

    def _emit(self, previous: Mapping[str, onnx.TensorProto]) -> onnx.ModelProto:
        model, self.specialized, self.initializer_constants = emit_partition(
            self.kernels, self.inputs, self.outputs, self.name, previous)
        onnx.checker.check_model(model)
        self._plan(model)
        return model

    def _plan(self, model: onnx.ModelProto) -> None:
        values = [*model.graph.input, *model.graph.output]
        self._names = [v.name for v in values]
        self._skeleton = skeleton(model)
        tensors = [*self.inputs, *self.outputs]
        self._planned = [list(t.shape) for t in tensors] if self.specialized else [_planned_dims(v) for v in values]

    def _load(self, blob: bytes | memoryview) -> onnx.ModelProto:
        """The graph a blob holds, checked (``lite.delegates.onnxruntime.saved``), its inputs and outputs
        bound to the partition's by name."""
        model, self.specialized, self.initializer_constants = load_graph(
            blob, self.kernels, self.inputs, self.outputs, self.memory_limit)
        self._plan(model)
        return model

    def _check_memory(self) -> None:
        """Raises MemoryLimitError when the graph's tensors would need more than ``memory_limit`` at the
        boundary's current shapes (and the values the runtime computed from shapes)."""
        boundary = [*self.inputs, *self.outputs]
        shapes = {name: t.shape for name, t in zip(self._names, boundary, strict=True)}
        values = {name: t.data for name, t in zip(self._names[:len(self.inputs)], self.inputs, strict=True)
                  if t.value_known and t.data is not None and t.data.nbytes <= SMALL_INITIALIZER}
        check_activations(self._skeleton, shapes, values, self.memory_limit, f"graph kernel {self.name!r}")

    def _fits(self) -> bool:
        """Whether every boundary tensor's shape fits the shapes the model was emitted for (None: any)."""
        for dims, tensor in zip(self._planned, [*self.inputs, *self.outputs], strict=True):
            if len(dims) != len(tensor.shape):
                return False
            if any(d is not None and d != s for d, s in zip(dims, tensor.shape, strict=True)):
                return False
        return True

    def _bind(self, arrays: list[np.ndarray | None]) -> None:
        self._binding = self.session.io_binding()
        self._bound = list(arrays)
        self._copied_outputs: list[tuple[int, object]] = []
        self._rebind(arrays, range(len(arrays)))

    def _rebind(self, arrays: list[np.ndarray | None], indices: Sequence[int]) -> None:
        """Binds ``arrays[k]`` for each k in ``indices`` (a name bound again replaces its earlier array).

        An OrtValue made from a C-contiguous numpy array on the CPU wraps its buffer: no copy. One made
        from a strided view (an input or output viewing part of a larger buffer) holds a copy: such an
        input is bound again at every run, and such an output is written into a buffer of its own and
        copied out after the run."""
        from onnxruntime import OrtValue

        count = len(self.inputs)
        copied = dict(self._copied_outputs)
        for k in indices:
            array = arrays[k]
            value = OrtValue.ortvalue_from_numpy(array if _wrapped(array) or k < count else np.empty_like(array))
            bind = self._binding.bind_ortvalue_input if k < count else self._binding.bind_ortvalue_output
            bind(self._names[k], value)
            self._bound[k] = array
            copied.pop(k, None)
            if k >= count and not _wrapped(array):
                copied[k] = value
        self._copied_outputs = sorted(copied.items())


def _wrapped(array: np.ndarray | None) -> bool:
    """Whether an OrtValue made from ``array`` wraps its buffer (C-contiguous) rather than a copy."""
    return array is None or array.flags.c_contiguous


def _same_buffer(a: np.ndarray | None, b: np.ndarray | None) -> bool:
    """Whether ``a`` is ``b`` or views the same memory as it, with the same dtype and shape (``b`` is
    still referenced, so its memory cannot have been reused for another array)."""
    if a is b:
        return True
    if a is None or b is None:
        return False
    return (a.__array_interface__["data"][0] == b.__array_interface__["data"][0] and a.shape == b.shape
            and a.dtype == b.dtype and a.strides == b.strides)


def _planned_dims(info: onnx.ValueInfoProto) -> list[int | None]:
    """The emitted dims of a graph input/output, None where symbolic."""
    return [d.dim_value if d.HasField("dim_value") else None for d in info.type.tensor_type.shape.dim]
