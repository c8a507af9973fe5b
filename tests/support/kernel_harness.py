"""Runs one native kernel on numpy arrays, as the runtime would, without a model file."""

from __future__ import annotations

import numpy as np

from lite.kernels import registry  # noqa: F401  (imports every kernel family)
from lite.kernels.base import NativeKernel
from lite.kernels.parallel import SINGLE_THREAD, KernelThreads
from lite.kernels.registry import find_kernel
from lite.primitive import Primitive
from lite.schema.primitives import default_attrs
from lite.tensor import Tensor


def run_kernel(op_type: str, attrs: dict, inputs: list[np.ndarray | None],
               n_outputs: int = 1, threads: KernelThreads | None = None) -> list[np.ndarray]:
    """Builds the kernel for ``op_type``, infers shapes, executes, returns the outputs
    (on ``threads``, a model's threads, when given): ``run_kernel_and_keep``'s outputs."""
    return run_kernel_and_keep(op_type, attrs, inputs, n_outputs, threads)[0]


def run_kernel_and_keep(op_type: str, attrs: dict, inputs: list[np.ndarray | None], n_outputs: int = 1,
                        threads: KernelThreads | None = None) -> tuple[list[np.ndarray], NativeKernel]:
    """``run_kernel``'s outputs and the kernel that computed them.

    Every input carries its data (so inputs listed in ``value_inputs`` are known);
    outputs are filled with garbage first so an unwritten element shows up.
    """
    tensors = [None if a is None else Tensor(f"in{i}", a.dtype, a.shape, data=a, is_const=True)
               for i, a in enumerate(inputs)]
    outputs = [Tensor(f"out{j}", np.float32, ()) for j in range(n_outputs)]
    first = next(a for a in inputs if a is not None)
    cls = find_kernel(op_type, first.dtype)
    assert cls is not None, f"no kernel for {op_type} on {first.dtype}"
    kernel = cls(tensors, outputs, Primitive(op_type, {**default_attrs(op_type), **attrs}), name="node")
    if threads is not None:
        kernel.threads = threads
    for tensor, shape, dtype in zip(outputs, kernel.infer_shapes(), kernel.output_dtypes(), strict=True):
        tensor.dtype, tensor.shape = np.dtype(dtype), tuple(shape)
        tensor.data = np.full(shape, 123, dtype=dtype)
    kernel.prepare()
    kernel.resize()
    with (threads or SINGLE_THREAD).lent():
        kernel.execute()
    return [t.data for t in outputs], kernel


def assert_matches(actual: np.ndarray, expected: np.ndarray) -> None:
    """Same dtype and shape; floats within rtol 1e-4 / atol 1e-6, everything else exact."""
    assert actual.dtype == expected.dtype and actual.shape == expected.shape
    if actual.dtype.kind == "f":
        np.testing.assert_allclose(actual, expected, rtol=1e-4, atol=1e-6)
    else:
        np.testing.assert_array_equal(actual, expected)
