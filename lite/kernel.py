"""Kernel: the unit the runtime executes, native or a delegate's fused subgraph."""

from __future__ import annotations

import time
from collections.abc import Iterable

from lite.ops.quant import BOUNDARY_OPS
from lite.primitive import Primitive
from lite.tensor import Tensor


class Kernel:
    """Base class of native kernels and of delegate graph (subgraph) kernels.

    Lifecycle: ``prepare()`` once in ``Model.build`` after every delegate has built;
    ``resize()`` in ``Model.resize`` (and on an implicit resize) after input shapes
    changed; ``execute()`` in every ``Model.predict``: read ``self.inputs[i].data``
    and write ``self.outputs[j].data`` (preallocated, C-contiguous) or call
    ``set_data_from_numpy`` on an output.

    Shapes: the runtime infers every tensor's shape, including tensors inside a
    delegate's partition. When the model's input shapes are static, all shapes are set
    before ``prepare()`` (plan for them there: no ``resize()`` follows at build); when
    they are dynamic, shapes hold -1 at ``prepare()`` and are set before the
    ``resize()`` that the first predict triggers.

    Arrays: the runtime assigns output arrays after ``prepare()`` and before each
    ``resize()``; read ``tensor.data`` in ``execute()`` rather than keeping it from
    ``prepare()``.

    Weights: after every kernel's ``prepare()``, the model releases the constant data that
    no kernel reads any more, including the weights of the native kernels a graph kernel
    replaced. A graph kernel takes (copies, converts, uploads) what it needs in ``prepare()``;
    one that reads constants later (to recompile in ``resize()``, say) names them in
    ``constants``: the model keeps those, and can also fall back to the native kernels when
    such a graph kernel fails in ``resize()``.

    Args:
        inputs: tensors the kernel reads (None for an absent optional input).
        outputs: tensors the kernel writes.
        primitive: the op's Primitive for a native kernel; usually None for a graph kernel.
        name: a name shown in reports and errors.
        constants: tensors the kernel reads after ``prepare()``; the constant ones among them
            (each once) are kept by the model.
    """

    def __init__(self, inputs: list[Tensor | None], outputs: list[Tensor],
                 primitive: Primitive | None = None, name: str = "", constants: Iterable[Tensor] = ()):
        self.inputs = list(inputs)
        self.outputs = list(outputs)
        self.primitive = primitive
        self.name = name or type(self).__name__
        self.constants = list(dict.fromkeys(t for t in constants if t is not None and t.is_const))

    @property
    def type(self) -> str:
        """The op type for a native kernel; the class name for a graph kernel."""
        return self.primitive.type if self.primitive is not None else type(self).__name__

    @property
    def quantized(self) -> bool:
        """Whether this is a quantized op: its first input and first output carry quantization
        parameters (``Tensor.quant_params``), so it computes ``quantize(op(dequantize(inputs)))``."""
        first = next((t for t in self.inputs if t is not None), None)
        return (self.type not in BOUNDARY_OPS and first is not None and first.quant_params is not None
                and bool(self.outputs) and self.outputs[0].quant_params is not None)

    def prepare(self) -> None:
        """Called once at build, after every delegate has built."""

    def resize(self) -> None:
        """Called after the model's input shapes changed (output shapes are already set)."""

    def execute(self) -> None:
        """Computes outputs from inputs."""
        raise NotImplementedError(f"{type(self).__name__}.execute")

    def packed_constants(self) -> list[Tensor]:
        """The constant inputs this kernel no longer reads in their original layout at its current
        shapes (it keeps a packed or transformed copy). None by default: a kernel that reads a
        constant's ``data`` after ``prepare()`` must not list it. The model may release the
        memory of constants every reader lists; reading them again still works, only slower."""
        return []

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r} ({self.type})>"


def charge(profile: dict[Kernel, float], kernel: Kernel, seconds: float) -> None:
    """Adds a kernel's time to the profile; a fused kernel's goes to its first part (the rest get 0)."""
    first, *rest = getattr(kernel, "parts", (kernel,))
    profile[first] = profile.get(first, 0.0) + seconds
    for part in rest:
        profile.setdefault(part, 0.0)


def execute_charged(kernel: Kernel, profile: dict[Kernel, float], start: float) -> None:
    """Runs a native kernel and charges its seconds since ``start`` to the profile; a kernel that
    charges its parts itself (``charges_parts``: a blocked chain) is given the profile instead."""
    if getattr(kernel, "charges_parts", False):
        kernel.execute(profile)
    else:
        kernel.execute()
        charge(profile, kernel, time.perf_counter() - start)
