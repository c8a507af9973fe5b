"""Test delegates written against the public API only."""

from __future__ import annotations

import numpy as np

import lite


class NativeGraphKernel(lite.Kernel):
    """A graph kernel that runs the native kernels it replaced, keeping inner tensors private."""

    def __init__(self, kernels, inputs, outputs, events: list, name: str):
        weights = [t for k in kernels for t in k.inputs]
        super().__init__(inputs, outputs, name=name, constants=weights)  # the model keeps the constants
        self.kernels = kernels
        self.events = events
        outs = set(outputs)
        self.inner = [t for k in kernels for t in k.outputs if t not in outs]

    def _allocate_inner(self) -> None:
        for tensor in self.inner:
            tensor.data = np.empty(tensor.shape, tensor.dtype)

    def prepare(self) -> None:
        self.events.append(("prepare", self.name))
        for kernel in self.kernels:
            kernel.prepare()
        if all(-1 not in t.shape for t in self.inner):  # static shapes: ready to run now
            self._allocate_inner()
            for kernel in self.kernels:
                kernel.resize()

    def resize(self) -> None:
        self.events.append(("resize", self.name))
        self._allocate_inner()
        for kernel in self.kernels:
            kernel.resize()

    def execute(self) -> None:
        self.events.append(("execute", self.name))
        for kernel in self.kernels:
            kernel.execute()


class CountingDelegate(lite.SimpleDelegate):
    """Takes the op types it is given; records every lifecycle call in ``events``."""

    def __init__(self, ops: set[str], events: list | None = None, label: str = "counting"):
        self.ops = ops
        self.events = events if events is not None else []
        self.label = label
        self.made: list[NativeGraphKernel] = []

    def init(self) -> None:
        self.events.append(("init", self.label))

    def build(self, model: lite.DelegateModel) -> None:
        self.events.append(("build", self.label))
        super().build(model)

    def is_supported(self, kernel, primitive):
        return primitive.type in self.ops or f"{primitive.type} is not in {sorted(self.ops)}"

    def create_graph_kernel(self, kernels, inputs, outputs):
        kernel = NativeGraphKernel(kernels, inputs, outputs, self.events, f"{self.label}_{len(self.made)}")
        self.made.append(kernel)
        return kernel


class ConvAndConcat(CountingDelegate):
    """A no-argument delegate for command-line tests (``tests.delegate_support:ConvAndConcat``)."""

    def __init__(self, label: str = "npu"):
        super().__init__({"Conv2DFusion", "Concat"}, label=label)
