"""Algorithms as ranked tables, chosen once per input shape (onnxruntime's ``MLAS_CONV_ALGORITHM``,
picked in ``MlasConvPrepare``).

A kernel with several ways to run lists them in a table, best first. Each ``Algorithm`` says
whether it fits a layer (``fits``: shapes, dtype, attributes, whether compiled kernels run) and
makes the ``Plan`` for it. ``choose`` takes the first that fits; the kernel keeps the plan until
its input shape changes and names what it runs (``kernel.algorithm``: the entry's name) for
tests and reports. Adding a way to run (int8 kernels) is adding an entry.

What runs after the product, the ``Epilogue``, is a value the kernel hands its plan when the plan
makes its steps; the kernels fused at build (``lite.fusion``) change it through the kernel's
``set_epilogue``, never by writing the kernel's attributes.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from lite.kernels.base import Workspace
from lite.tensor import Tensor


@dataclass(frozen=True)
class Epilogue:
    """What a producer applies to its product, in order: ``bias``; then its own ``activation``
    (``activation_type``, a clip), or, where a ``residual`` is added (``lite.fusion.ConvResidual``),
    the residual and the Add's ``residual_activation``; then ``absorbed``, the (type, alpha) of an
    Activation kernel whose work it does last (``lite.fusion.ProducerActivation``)."""

    bias: Tensor | None = None
    activation: str = "NO_ACTIVATION"
    residual: Tensor | None = None
    residual_activation: str = "NO_ACTIVATION"
    absorbed: tuple[str, float] | None = None


class Plan:
    """One algorithm's plan for one input shape: the scratch it asks the workspace for, and what its
    epilogue takes: a residual (``takes_residual``), the producer's epilogue applied to its input as
    it reads it (``takes_prologue``), or its own epilogue left to a reader that takes it
    (``leaves_epilogue``)."""

    takes_residual: ClassVar[bool] = False
    takes_prologue: ClassVar[bool] = False
    leaves_epilogue: ClassVar[bool] = False
    packs: ClassVar[bool] = False  # the kernel reads its weight (input 1) only as the plan packed it
    scratch: Scratch | None = None


@dataclass(frozen=True)
class Algorithm:
    """An entry of a kernel's table: its ``name``, whether it ``fits`` a layer (no compiling, no
    allocation), and ``plan(layer, kernel)``, which makes its plan (compiling what it runs)."""

    name: str
    fits: Callable[[Any], bool]
    plan: Callable[[Any, Any], Plan]


def first_fit(table: Sequence[Algorithm], layer: Any) -> Algorithm:
    """The first entry of ``table`` that fits ``layer`` (a table's last entry fits every layer)."""
    for entry in table:
        if entry.fits(layer):
            return entry
    raise LookupError(f"no algorithm of {[e.name for e in table]} fits {layer}")


def choose(table: Sequence[Algorithm], layer: Any, kernel: Any) -> tuple[str, Plan]:
    """(name, plan) of the first entry of ``table`` that fits ``layer``, its plan made for ``kernel``."""
    entry = first_fit(table, layer)
    return entry.name, entry.plan(layer, kernel)


class Derived:
    """Arrays a kernel's plans make from one of its constant inputs (a Winograd transform, a packed
    matrix), kept across resizes and made again only when the input's array is another."""

    def __init__(self) -> None:
        self.made: dict[str, tuple[np.ndarray, np.ndarray]] = {}

    def get(self, name: str, source: np.ndarray, make: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
        kept = self.made.get(name)
        if kept is None or kept[0] is not source:
            kept = self.made[name] = (source, make(source))
        return kept[1]


class Scratch:
    """Workspace arrays of several shapes carved from one request (each request has a fixed cost)."""

    def __init__(self, *shapes: tuple[int, ...]):
        self.parts, self.total = [], 0
        for shape in shapes:
            size = math.prod(shape)
            self.parts.append((self.total, size, shape))
            self.total += -(-size // 16) * 16  # NOTE: keeps every part 64-byte aligned for float32
        self.total = max(self.total, 1)

    def arrays(self, workspace: Workspace, dtype: np.dtype) -> list[np.ndarray]:
        buffer = workspace.array((self.total,), dtype)
        return [buffer[start:start + size].reshape(shape) for start, size, shape in self.parts]
