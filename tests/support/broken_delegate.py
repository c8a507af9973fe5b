"""A deliberately broken delegate for lite-delegate-test's own tests: one fault per op type.

It takes Add (correct), Relu (wrong values), Neg (raises in prepare), Abs (different noise at every
predict), Exp (an output of the wrong shape) and declines Sigmoid with a reason. The kit must report
them as SUCCESS, OUTPUT_MISMATCH, PREPARE_FAIL, NONDETERMINISTIC, RUN_FAIL and SUCCESS_UNDELEGATED.
"""

from __future__ import annotations

import os
import time

import numpy as np

import lite

EXPECTED = {  # ONNX op -> the category lite-delegate-test gives its node cases
    "Add": "SUCCESS", "Relu": "OUTPUT_MISMATCH", "Neg": "PREPARE_FAIL", "Abs": "NONDETERMINISTIC",
    "Exp": "RUN_FAIL", "Sigmoid": "SUCCESS_UNDELEGATED",
}
TAKEN = {"AddFusion": "add", "Activation": "relu", "Neg": "neg", "Abs": "abs", "ExpFusion": "exp"}


class BrokenKernel(lite.Kernel):
    """One node, computed with numpy, with its op's fault."""

    def __init__(self, native: lite.Kernel, name: str):
        operands = [t for t in native.inputs if t is not None]
        super().__init__(operands, list(native.outputs), name=name, constants=[t for t in operands if t.is_const])
        self.op = TAKEN[native.type]
        self.calls = 0

    def prepare(self) -> None:
        if self.op == "neg":
            raise RuntimeError("the device compiler rejected Neg")

    def execute(self) -> None:
        x = self.inputs[0].data
        self.calls += 1
        if self.op == "add":
            result = x + self.inputs[1].data
        elif self.op == "relu":
            result = np.maximum(x, 0) + 1  # wrong values
        elif self.op == "abs":
            result = np.abs(x) + np.asarray(self.calls * 1e-7).astype(x.dtype)  # differs between predicts
        elif self.op == "exp":
            self.outputs[0].data = np.exp(x).reshape(1, -1)  # the wrong shape
            return
        else:
            result = -x
        self.outputs[0].data[...] = result


class BrokenDelegate(lite.SimpleDelegate):
    """Takes the op types of ``TAKEN`` (Relu alone among activations); declines Sigmoid with a reason."""

    def is_supported(self, kernel: lite.Kernel, primitive: lite.Primitive) -> bool | str:
        if primitive.type == "Activation":
            kind = primitive.attrs["activation_type"]
            return True if kind == "RELU" else f"activation {kind}: the broken NPU has no unit for it"
        if primitive.type == "AddFusion" and primitive.attrs["activation_type"] != "NO_ACTIVATION":
            return "fused activation"
        return True if primitive.type in TAKEN else f"{primitive.type}: not supported"

    def create_graph_kernel(self, kernels, inputs, outputs, model):
        return BrokenKernel(kernels[0], model.kernel_name("broken"))


class StuckKernel(BrokenKernel):
    """Add, which never returns (``mode="hang"``) or ends the process (``mode="crash"``)."""

    def __init__(self, native: lite.Kernel, name: str, mode: str):
        super().__init__(native, name)
        self.mode = mode

    def execute(self) -> None:
        if self.mode == "crash":
            os._exit(3)
        time.sleep(3600)


class StuckDelegate(BrokenDelegate):
    """Takes Add and hangs or crashes in execute(): the kit's time bound and worker replacement."""

    def __init__(self, mode: str = "hang"):
        self.mode = mode

    def create_graph_kernel(self, kernels, inputs, outputs, model):
        return StuckKernel(kernels[0], model.kernel_name("stuck"), self.mode)
