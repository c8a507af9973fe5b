"""Reductions: ReduceFusion, and Softmax / LogSoftmax over a set of axes."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from lite.kernels.base import NativeKernel
from lite.kernels.elementwise import check_io
from lite.kernels.registry import register
from lite.kernels.shape import normalize_axes
from lite.ops.dtypes import FLOATS, NUMBERS

_UFUNCS = {"MEAN": np.add, "MAX": np.maximum, "MIN": np.minimum, "SUM": np.add, "PROD": np.multiply}


@register("ReduceFusion", NUMBERS)
class ReduceFusion(NativeKernel):
    """reduce_mode over ``axes`` (empty: every axis, or none with noop_with_empty_axes).

    MAX and MIN of an empty set give the lowest and highest value of the dtype; an integer
    MEAN truncates toward zero.
    """

    def check_attrs(self) -> None:
        check_io(self, 1)
        mode = self.attrs["reduce_mode"]
        if mode not in _UFUNCS:
            self.fail(f"reduce_mode must be one of {sorted(_UFUNCS)}, got {mode!r}")
        self.ufunc, self.mean = _UFUNCS[mode], mode == "MEAN"
        self.noop = self.attrs["noop_with_empty_axes"] and not self.attrs["axes"]

    def _axes(self) -> tuple[int, ...]:
        rank = len(self.inputs[0].shape)
        return normalize_axes(self, self.attrs["axes"], rank) if self.attrs["axes"] else tuple(range(rank))

    def infer_shapes(self) -> list[tuple[int, ...]]:
        shape, axes = self.inputs[0].shape, self._axes()
        if self.noop:
            return [shape]
        if self.attrs["keep_dims"]:
            return [tuple(1 if a in axes else d for a, d in enumerate(shape))]
        return [tuple(d for a, d in enumerate(shape) if a not in axes)]

    def resize(self) -> None:
        axes, dtype = self._axes(), self.inputs[0].dtype
        self.kwargs: dict[str, Any] = {"axis": axes, "keepdims": bool(self.attrs["keep_dims"])}
        if self.ufunc is np.maximum:
            self.kwargs["initial"] = -np.inf if dtype.kind == "f" else np.iinfo(dtype).min
        elif self.ufunc is np.minimum:
            self.kwargs["initial"] = np.inf if dtype.kind == "f" else np.iinfo(dtype).max
        self.count = math.prod(self.inputs[0].shape[a] for a in axes)

    def execute(self) -> None:
        x, out = self.inputs[0].data, self.outputs[0].data
        if self.noop:
            np.copyto(out, x)
            return
        self.ufunc.reduce(x, out=out, **self.kwargs)
        if self.mean:
            np.true_divide(out, self.count, out=out, casting="unsafe")


class Normalization(NativeKernel):
    """Base of Softmax and LogSoftmax: normalised over every axis in ``axis``."""

    def check_attrs(self) -> None:
        check_io(self, 1)
        if not self.attrs["axis"]:
            self.fail("axis lists no axis to normalise over")

    def infer_shapes(self) -> list[tuple[int, ...]]:
        normalize_axes(self, self.attrs["axis"], len(self.inputs[0].shape))
        return [self.inputs[0].shape]

    def resize(self) -> None:
        shape = self.inputs[0].shape
        self.axes = normalize_axes(self, self.attrs["axis"], len(shape))
        self.empty = 0 in shape

    def execute(self) -> None:
        if not self.empty:  # NOTE: the log of an empty sum would warn
            self.normalize(self.inputs[0].data, self.outputs[0].data)

    def normalize(self, x: np.ndarray, out: np.ndarray) -> None:
        """Writes the normalised ``x`` into ``out``."""
        raise NotImplementedError

    def shift(self, x: np.ndarray, out: np.ndarray) -> None:
        """out = x - max(x) over the axes (so exp(out) <= 1)."""
        np.subtract(x, np.maximum.reduce(x, axis=self.axes, keepdims=True), out=out)


@register("Softmax", FLOATS)
class Softmax(Normalization):
    """exp(x) / sum(exp(x)) over the axes, shifted by the max for stability."""

    def normalize(self, x: np.ndarray, out: np.ndarray) -> None:
        self.shift(x, out)
        np.exp(out, out=out)
        np.divide(out, np.add.reduce(out, axis=self.axes, keepdims=True), out=out)


@register("LogSoftmax", FLOATS)
class LogSoftmax(Normalization):
    """x - log(sum(exp(x))) over the axes, shifted by the max for stability."""

    def normalize(self, x: np.ndarray, out: np.ndarray) -> None:
        self.shift(x, out)
        exps = np.exp(out, out=self.workspace.array(x.shape, x.dtype))
        total = np.add.reduce(exps, axis=self.axes, keepdims=True)
        np.subtract(out, np.log(total, out=total), out=out)
