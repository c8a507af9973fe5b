"""Native kernel fusion at build: a convolution takes over the residual Add that reads it.

ResNet-style blocks end in ``Add(conv(x), shortcut)`` and an activation. Where the
convolution's output is read by that Add alone, the two run as one ``ConvResidual`` kernel:
the convolution's epilogue adds its bias and the shortcut and applies the Add's activation in
one pass (compiled, ``lite.kernels.fast``), writing straight into the Add's output. Delegates
never see this: it runs after they built, on the native kernels they left, and
``partition_report()`` still lists both nodes.
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from lite.aligned import aligned_array
from lite.kernel import Kernel
from lite.kernels import fast
from lite.kernels.base import NativeKernel
from lite.tensor import Tensor


class ConvResidual(Kernel):
    """A Conv2DFusion and the AddFusion that adds ``residual`` to its output, run as one kernel.

    ``parts`` are the two native kernels (a profile charges the time to the convolution). When
    the shapes or the convolution's plan do not allow the fused epilogue, the two run one after
    the other, the convolution into an array of its own.
    """

    def __init__(self, conv: NativeKernel, add: NativeKernel, residual: Tensor):
        super().__init__([*conv.inputs, residual], list(add.outputs), name=f"{conv.name}+{add.name}")
        self.conv, self.add, self.residual = conv, add, residual
        self.parts = (conv, add)
        self.fused = False

    @property
    def type(self) -> str:
        return f"{self.conv.type}+{self.add.type}"

    def resize(self) -> None:
        conv, inner, out = self.conv, self.conv.outputs[0], self.outputs[0]
        self.fused = inner.shape == self.residual.shape == out.shape
        conv.residual = self.residual if self.fused else None
        conv.residual_activation = self.add.activation
        conv.resize()
        if self.fused and not conv.takes_residual:
            self.fused, conv.residual = False, None
        if not self.fused:
            inner.data = aligned_array(inner.shape, inner.dtype)
        self.add.resize()

    def execute(self) -> None:
        if self.fused:
            self.conv.outputs[0].data = self.outputs[0].data
            self.conv.execute()
        else:
            self.conv.execute()
            self.add.execute()


def fuse_residuals(kernels: list[Kernel], shape_kernels: list[NativeKernel], outputs: list[Tensor],
                   native: set[Kernel]) -> list[Kernel]:
    """``kernels`` with each fusable convolution + residual Add pair replaced by a ConvResidual
    at the Add's place (the convolution's inputs are still alive there: the Add reads its output).

    Args:
        kernels: what runs, in order.
        shape_kernels: every native kernel (to count every reader of a tensor, delegated or not).
        outputs: the model's outputs (a convolution's output that is one is never fused away).
        native: the kernels of ``kernels`` that run natively, with static output shapes.
    """
    if not native or not fast.enabled():  # NOTE: nothing native (a whole delegated model): numba stays unloaded
        return kernels
    readers = Counter(t for k in shape_kernels for t in k.inputs if t is not None)
    producer = {t: k for k in kernels if k in native for t in k.outputs}
    fused: dict[Kernel, ConvResidual] = {}
    for add in kernels:
        pair = _residual_pair(add, producer, readers, outputs, native)
        if pair is not None and pair[0] not in fused:
            fused[pair[0]] = fused[add] = ConvResidual(*pair)
    return [fused.get(k, k) for k in kernels if not (k in fused and fused[k].conv is k)]


def _residual_pair(add: Kernel, producer: dict[Tensor, Kernel], readers: Counter, outputs: list[Tensor],
                   native: set[Kernel]) -> tuple[NativeKernel, NativeKernel, Tensor] | None:
    """(convolution, add, residual) when ``add`` adds a residual to a convolution that only it reads."""
    if add.type != "AddFusion" or add not in native or len(add.inputs) != 2 or None in add.inputs:
        return None
    for side in (0, 1):
        inner, residual = add.inputs[side], add.inputs[1 - side]
        conv = producer.get(inner)
        if (conv is not None and conv.type == "Conv2DFusion" and conv.activation == "NO_ACTIVATION"
                and readers[inner] == 1 and inner not in outputs and inner is not residual
                and not (residual.is_const or residual.value_known)
                and np.dtype(inner.dtype).name in fast.FAST_DTYPES and residual.dtype == inner.dtype):
            return conv, add, residual
    return None
