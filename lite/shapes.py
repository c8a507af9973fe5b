"""Shape propagation through the native kernels, computing shape-only values on the way."""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np

from lite.aligned import aligned_array
from lite.errors import LiteError, MemoryLimitError, ModelFormatError
from lite.kernels.base import NativeKernel
from lite.scheduler import schedule
from lite.schema.graph import GraphDef
from lite.tensor import Tensor

FOLD_LIMIT = 64 << 20
"""Bytes: a kernel computable at build whose outputs are declared larger is not folded (computed
once and kept): it runs at each predict, its outputs planned with the other activations within
``Context.memory_limit``. The converter folds ONNX nodes by the same limit."""


def classify(kernels: list[NativeKernel], fold_limit: int = FOLD_LIMIT) -> tuple[list[NativeKernel],
                                                                                list[NativeKernel]]:
    """(folded, runtime-shaped) kernels; kernels must be in topological order.

    Folded: outputs known once the input shapes are (shape-only ops, and ops on constants or on
    such values), unless their declared shapes need more than ``fold_limit`` bytes (those run
    at predict); their outputs are marked ``value_known``. Runtime-shaped: their output shapes
    depend on values computed from input data (a Reshape whose target is computed, NonZero), or
    on a runtime-shaped kernel's outputs; they get ``runtime_shapes = True`` and infer shapes at
    every predict. Every other kernel has shapes known from the input shapes alone.
    """
    folded, runtime = [], []
    runtime_tensors: set = set()
    for kernel in kernels:
        reads_runtime = any(t in runtime_tensors for t in kernel.inputs if t is not None)
        if not reads_runtime and _foldable(kernel, fold_limit):
            folded.append(kernel)
            for tensor in kernel.outputs:
                tensor.value_known = True
        elif reads_runtime or any(not t.value_known for t in kernel.shape_inputs()):
            kernel.runtime_shapes = True
            runtime.append(kernel)
            runtime_tensors.update(kernel.outputs)
    return folded, runtime


def _foldable(kernel: NativeKernel, fold_limit: int) -> bool:
    """Whether ``kernel``'s outputs follow from shapes and known values, and are declared small enough
    to compute once at build (a dynamic dim leaves it to ``propagate``, within the memory limit). A
    dequantized constant (a weight-only model's weight) is folded whatever its size: run at predict, it
    would dequantize the same weight every time into an activation as large."""
    if not (kernel.shape_only or all(t is None or t.value_known for t in kernel.inputs)):
        return False
    if kernel.type == "DequantizeLinear" and all(t is None or t.is_const for t in kernel.inputs):
        return True
    return sum(nbytes(t.shape, t.dtype) for t in kernel.outputs if -1 not in t.shape) <= fold_limit


def constant_folded(kernels: list[NativeKernel], folded: set[NativeKernel]) -> frozenset[NativeKernel]:
    """The folded kernels whose outputs follow from constants alone (no shape of an input reaches them):
    ``propagate`` computes them once, whatever the input shapes. ``kernels`` in topological order."""
    constant: set[NativeKernel] = set()
    known: set[Tensor] = set()
    for kernel in kernels:
        if kernel in folded and not kernel.shape_only and all(t is None or t.is_const or t in known
                                                              for t in kernel.inputs):
            constant.add(kernel)
            known.update(kernel.outputs)
    return frozenset(constant)


def nbytes(shape: tuple[int, ...], dtype: np.dtype) -> int:
    """The bytes an array of ``shape`` and ``dtype`` needs (exact for any size, with no overflow)."""
    count = 1
    for d in shape:
        count *= int(d)
    return count * np.dtype(dtype).itemsize


def validate_graph(graph: GraphDef, memory_limit: int) -> None:
    """Checks a graph the way ``Model.build`` would: kernels exist, and (for static input
    shapes) every node's shapes and dtypes work out. Allocates only shape-derived values.

    Raises:
        UnsupportedOpError, ModelFormatError: naming the node at fault.
    """
    tensors = [Tensor.from_def(t) for t in graph.tensors]
    kernels = schedule(graph, tensors)
    folded, _ = classify(kernels)
    if all(-1 not in tensors[i].shape for i in graph.inputs):
        propagate(kernels, set(folded), memory_limit)


FOLDED_SHAPE_SETS = 4
"""How many input shape sets' folded values a model keeps (the last ones used), so a model that
alternates between shapes (a generator's prefill and decode steps, two batch sizes) computes each
set's once."""

Outputs = list[tuple[tuple[int, ...], np.ndarray]]


class FoldedValues:
    """The folded kernels' outputs (shapes and values) of the last ``FOLDED_SHAPE_SETS`` input shape
    sets, together at most ``memory_limit`` bytes: they follow from the input shapes and the
    constants alone, so a set seen before gets them back instead of running the folded kernels
    again (exported transformers compute their masks and reshape targets in hundreds of them)."""

    def __init__(self, memory_limit: int) -> None:
        self.memory_limit = memory_limit
        self.entries: OrderedDict[tuple, tuple[dict[NativeKernel, Outputs], int]] = OrderedDict()

    def get(self, key: tuple) -> dict[NativeKernel, Outputs] | None:
        entry = self.entries.get(key)
        if entry is None:
            return None
        self.entries.move_to_end(key)
        return entry[0]

    def put(self, key: tuple, values: dict[NativeKernel, Outputs], size: int) -> None:
        self.entries[key] = values, size
        self.entries.move_to_end(key)
        while len(self.entries) > FOLDED_SHAPE_SETS or sum(s for _, s in self.entries.values()) > self.memory_limit:
            self.entries.popitem(last=False)


def propagate(kernels: list[NativeKernel], folded: set[NativeKernel], memory_limit: int,
              memo: FoldedValues | None = None, key: tuple = (), constant: frozenset[NativeKernel] = frozenset(),
              deferred: frozenset[NativeKernel] = frozenset()) -> None:
    """Infers every output's shape (in topological order) and computes the folded kernels.

    Runtime-shaped kernels are skipped: ``infer_at_run`` does their part at each predict. The
    ``constant`` folded kernels (``constant_folded``) are computed the first time only: their outputs
    keep their values. With a ``memo``, the other folded kernels' outputs for ``key`` (the model's input
    shapes) come from it where it has them (their shapes and values were checked when they were
    computed), and are kept in it otherwise. ``deferred`` constant ones get their output shapes only:
    their readers compute them if they need them (a 4-bit weight's float32 values).

    Raises:
        ModelFormatError: naming the node whose shapes or dtypes do not work out.
        MemoryLimitError: one output, or all the folded values together (kept as long as the
            model), would need more than ``memory_limit`` bytes; checked before they are computed.
    """
    kept, saved = 0, None if memo is None else memo.get(key)
    if saved is not None:
        _restore(kernels, folded, saved, memory_limit)
        return
    computed: dict[NativeKernel, Outputs] = {}
    for kernel in kernels:
        if kernel.runtime_shapes:
            continue
        if kernel in deferred:
            with blame(kernel):
                set_outputs(kernel, memory_limit)
            continue
        if kernel in constant and all(t.data is not None for t in kernel.outputs):
            kept += sum(t.data.nbytes for t in kernel.outputs)  # NOTE: still held: still counted
            continue
        with blame(kernel):
            set_outputs(kernel, memory_limit)
            if kernel in folded:
                kept += sum(nbytes(t.shape, t.dtype) for t in kernel.outputs)
                _check_folded(kernel, kept, memory_limit)
                for tensor in kernel.outputs:
                    tensor.data = np.empty(tensor.shape, tensor.dtype)
                kernel.resize()
                with np.errstate(all="ignore"):  # NOTE: IEEE results, as at predict (T5's log of position 0)
                    kernel.execute()
                if kernel not in constant:
                    computed[kernel] = [(t.shape, t.data) for t in kernel.outputs]
    if memo is not None:
        memo.put(key, computed, kept)


def _restore(kernels: list[NativeKernel], folded: set[NativeKernel], saved: dict[NativeKernel, Outputs],
             memory_limit: int) -> None:
    """``propagate`` with the folded kernels' outputs from ``saved``: those first (they follow from the input
    shapes alone, and the other kernels read them), then the other kernels' shapes inferred in order."""
    for kernel, outputs in saved.items():
        for tensor, (shape, data) in zip(kernel.outputs, outputs, strict=True):
            tensor.shape = tensor.declared_shape = shape
            tensor.data = data
    kernel = None
    try:  # NOTE: one try for the loop, not a blame() per kernel: a resize to known shapes is mostly this loop
        for kernel in kernels:
            if not kernel.runtime_shapes and kernel not in folded:  # NOTE: constant ones kept their values
                set_outputs(kernel, memory_limit)
    except LiteError:
        raise
    except Exception as exc:
        raise blamed(kernel, "cannot infer its outputs", exc) from exc


def _check_folded(kernel: NativeKernel, kept: int, memory_limit: int) -> None:
    if kept > memory_limit:
        raise MemoryLimitError(f"node {kernel.name!r} ({kernel.type}): the values computed at build from shapes and "
                               f"constants would need {kept} bytes, more than the memory limit of {memory_limit} "
                               "bytes (Context.memory_limit)")


def infer_at_run(kernel: NativeKernel, memory_limit: int) -> None:
    """Shape inference for a runtime-shaped kernel before it executes: its outputs get arrays
    of the shapes the current input values give (kept while the shapes stay the same)."""
    with blame(kernel):
        set_outputs(kernel, memory_limit)
    for tensor in kernel.outputs:
        data = tensor.data
        if data is None or data.shape != tensor.shape or data.dtype != tensor.dtype:
            tensor.data = aligned_array(tensor.shape, tensor.dtype)
    kernel.resize()


def set_outputs(kernel: NativeKernel, memory_limit: int) -> None:
    """Sets the kernel's output shapes from its ``infer_shapes``, checking dtypes and the memory limit."""
    shapes, dtypes = kernel.infer_shapes(), kernel.output_dtypes()
    if len(shapes) != len(kernel.outputs):
        kernel.fail(f"has {len(kernel.outputs)} outputs, but the op produces {len(shapes)}")
    for tensor, shape, dtype in zip(kernel.outputs, shapes, dtypes, strict=True):
        shape = tuple(map(int, shape))
        if dtype is not tensor.dtype and np.dtype(dtype) != tensor.dtype:
            kernel.fail(f"output {tensor.name!r} is declared {tensor.dtype.name}, "
                        f"but the op computes {np.dtype(dtype).name}")
        if min(shape, default=0) < 0:
            kernel.fail(f"output {tensor.name!r} would have invalid shape {shape}")
        if math.prod(shape) * tensor.dtype.itemsize > memory_limit:  # NOTE: Python ints: exact, and fast
            raise MemoryLimitError(f"node {kernel.name!r} ({kernel.type}): output {tensor.name!r} of shape "
                                   f"{shape} would exceed the memory limit of {memory_limit} bytes")
        tensor.shape = tensor.declared_shape = shape


@contextmanager
def blame(kernel: NativeKernel, doing: str = "cannot infer its outputs") -> Iterator[None]:
    """Turns an unexpected error inside a kernel into a ModelFormatError naming it."""
    try:
        yield
    except LiteError:
        raise
    except Exception as exc:  # a hostile file can make any kernel code path fail
        raise blamed(kernel, doing, exc) from exc


def blamed(kernel: NativeKernel, doing: str, exc: Exception) -> ModelFormatError:
    """The ModelFormatError naming ``kernel`` for an unexpected error ``exc`` while ``doing``."""
    return ModelFormatError(f"node {kernel.name!r} ({kernel.type}): {doing}: {type(exc).__name__}: {exc}")
