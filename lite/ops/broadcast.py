"""Broadcasting of shapes (numpy rules, as ONNX's multidirectional broadcasting)."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import TypeVar

import numpy as np

Dim = TypeVar("Dim")


def aligned(shape: Sequence[Dim], rank: int) -> list[Dim | int]:
    """``shape`` with 1s in front up to ``rank`` dims (broadcasting lines shapes up at the end)."""
    return [1] * (rank - len(shape)) + list(shape)


def expand_shape(shape: Sequence[Dim], target: Sequence[int],
                 same: Callable[[Dim, int], bool] = lambda dim, value: False) -> list[Dim | int]:
    """ONNX Expand's output shape: each dim is the input's where the target's is 1 (or where
    ``same`` says the input's dim stands for the target's value, e.g. a symbolic batch), else
    the target's. The shapes must broadcast (numpy rules)."""
    rank = max(len(shape), len(target))
    return [s if t == 1 or same(s, t) else t for s, t in zip(aligned(shape, rank), aligned(target, rank),
                                                             strict=True)]


def legacy_broadcast_shape(b_shape: Sequence[int], a_rank: int, axis: int) -> tuple[int, ...]:
    """Opset < 7 ``broadcast=1`` with ``axis``: B's shape with 1s after it, so that numpy
    broadcasting lines B up with A's dims from ``axis`` (in [0, a_rank)) on."""
    return (*b_shape, *[1] * (a_rank - axis - len(b_shape)))


@functools.lru_cache(maxsize=4096)
def broadcast_shapes(*shapes: tuple[int, ...]) -> tuple[int, ...]:
    """``np.broadcast_shapes``, remembered: a model's resizes ask for the same few broadcasts again
    (a decoder's element-wise kernels at every switch between prompt and step shapes). Shapes are
    tuples of ints. Raises ValueError where they do not broadcast (not remembered)."""
    return np.broadcast_shapes(*shapes)
