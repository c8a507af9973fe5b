"""Base of the native numpy kernels: shape inference, attribute checks, scratch memory."""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial
from typing import ClassVar, NoReturn

import numpy as np

from lite.aligned import aligned_empty
from lite.errors import MemoryLimitError, ModelFormatError, UnsupportedOpError
from lite.kernel import Kernel
from lite.kernels.parallel import SINGLE_THREAD, KernelThreads
from lite.primitive import Primitive
from lite.tensor import Tensor

Step = Callable[[], object]  # one numpy call with its arrays bound (functools.partial)


def copy_step(target: np.ndarray, source: np.ndarray) -> Step:
    """A call copying ``source`` into ``target`` (ndarray assignment: no np.copyto dispatch layer)."""
    return partial(target.__setitem__, Ellipsis, source)


class Workspace:
    """Scratch memory shared by the kernels of one model (they run one at a time).

    A kernel asks for ``array(shape, dtype, slot)`` inside ``execute`` and must not rely on
    what the array held before; the buffer of a slot only grows, so after the first
    predict no call allocates. A request above ``limit`` bytes is refused.
    """

    def __init__(self, limit: int | None = None) -> None:
        self._buffers: dict[int, np.ndarray] = {}
        self.limit = limit

    def array(self, shape: tuple[int, ...], dtype: np.dtype | type, slot: int = 0) -> np.ndarray:
        dtype = np.dtype(dtype)
        nbytes = math.prod(shape) * dtype.itemsize
        buffer = self._buffers.get(slot)
        if buffer is None or buffer.size < nbytes:
            if self.limit is not None and nbytes > self.limit:
                raise MemoryLimitError(f"a kernel needs {nbytes} bytes of scratch memory, more than the memory "
                                       f"limit of {self.limit} bytes (Context.memory_limit)")
            buffer = aligned_empty(nbytes)
            self._buffers[slot] = buffer
        return buffer[:nbytes].view(dtype).reshape(shape)


class NativeKernel(Kernel):
    """A numpy kernel for one primitive type.

    Subclasses implement ``infer_shapes`` (output shapes from input shapes and, for the
    inputs listed in ``value_inputs``, their values) and ``execute`` (write into the
    preallocated ``self.outputs[j].data``). ``check_attrs`` rejects attribute values a
    hostile file could carry; ``prepare`` precomputes from constants; ``resize`` caches
    what depends on shapes and runs before the first ``execute`` once shapes are known
    (code that runs native kernels itself, such as a delegate, calls it the same way).

    Class attributes:
        value_inputs: input indices whose values shape inference needs (e.g. Reshape's shape).
        shape_only: True when the outputs depend only on input shapes (Shape), so the
            runtime can compute them as soon as shapes are known.

    Attributes:
        runtime_shapes: set by the runtime when the output shapes depend on values computed
            from input data; shape inference (reading those values) then runs at every predict.
        node_index: the node's index in the model file (set by the scheduler; -1 otherwise).
    """

    value_inputs: ClassVar[tuple[int, ...]] = ()
    shape_only: ClassVar[bool] = False
    threads: KernelThreads = SINGLE_THREAD  # the model's threads (set by the runtime): large products split
    node_index: int = -1

    def __init__(self, inputs: list[Tensor | None], outputs: list[Tensor], primitive: Primitive,
                 name: str = ""):
        super().__init__(inputs, outputs, primitive, name)
        self.attrs = primitive.attrs
        self.workspace = Workspace()
        self.runtime_shapes = False
        self.check_attrs()

    def check_attrs(self) -> None:
        """Raises ModelFormatError (via ``fail``) for attribute values the kernel cannot run."""

    def infer_shapes(self) -> list[tuple[int, ...]]:
        """Output shapes from the current input shapes."""
        raise NotImplementedError(f"{type(self).__name__}.infer_shapes")

    def output_dtypes(self) -> list[np.dtype]:
        """Output dtypes; by default every output has the first input's dtype."""
        first = next(t for t in self.inputs if t is not None)
        return [first.dtype] * len(self.outputs)

    def value(self, index: int) -> np.ndarray | None:
        """The value of input ``index`` at shape-inference time (None when absent)."""
        tensor = self.inputs[index] if index < len(self.inputs) else None
        if tensor is None:
            return None
        if not (tensor.value_known or self.runtime_shapes):
            raise UnsupportedOpError([(self.type, self.name, None, (
                f"its output shape depends on the values of input {tensor.name!r}, which are computed from "
                f"input data, but {index} is not among the kernel's value_inputs {list(self.value_inputs)}"))])
        return tensor.data

    def packed_constants(self) -> list[Tensor]:
        """The constant weight (input 1) where the current plan reads it only as it packed it."""
        plan, weight = getattr(self, "plan", None), self.inputs[1] if len(self.inputs) > 1 else None
        return [weight] if getattr(plan, "packs", False) and weight is not None and weight.is_const else []

    def shape_inputs(self) -> list[Tensor]:
        """The present inputs listed in ``value_inputs``."""
        return [self.inputs[i] for i in self.value_inputs if i < len(self.inputs) and self.inputs[i] is not None]

    def matmul_shapes(self) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
        """Operand shapes of the matmuls one ``execute`` runs, once it has run (none by default).

        ``lite-benchmark --gemm-floor`` times them alone: the least time the kernels can take.
        """
        return []

    def fail(self, message: str) -> NoReturn:
        """Raises ModelFormatError prefixed with this node's name and op type."""
        raise ModelFormatError(f"node {self.name!r} ({self.type}): {message}")

    def input_shape(self, index: int) -> tuple[int, ...]:
        return self.inputs[index].shape
