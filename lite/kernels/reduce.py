"""Reductions: ReduceFusion, and Softmax / LogSoftmax over a set of axes."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from lite.kernels import fast
from lite.kernels.base import NativeKernel
from lite.kernels.elementwise import check_io
from lite.kernels.registry import register
from lite.kernels.shape import int_vector, normalize_axes
from lite.ops.dtypes import ALL, FLOATS
from lite.ops.reduce import REDUCE_MODES

BLAS_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))
_UFUNCS = {"MEAN": np.add, "MAX": np.maximum, "MIN": np.minimum, "SUM": np.add, "PROD": np.multiply}
# Modes that reduce a transform of x with a sum, then transform the sum.
_SUMMED = {
    "L1": (np.abs, None), "L2": (np.square, np.sqrt), "SUM_SQUARE": (np.square, None), "LOG_SUM": (None, np.log),
}


MAX_SUMMING_ONES = 1 << 20
"""The most elements ``summing_ones`` makes: a longer sum reduces in place, with no vector of ones
as large as the input (memory outside the plan that ``Context.memory_limit`` bounds)."""


def summing_ones(count: int, dtype: np.dtype) -> np.ndarray | None:
    """Ones that sum ``count`` trailing elements with a matrix-vector product (``sum_trailing``), or None
    where BLAS does not serve the dtype, there is nothing to sum, or more than MAX_SUMMING_ONES."""
    return np.ones(count, dtype) if 0 < count <= MAX_SUMMING_ONES and dtype in BLAS_DTYPES else None


def sum_trailing(x: np.ndarray, ones: np.ndarray, out: np.ndarray) -> None:
    """``out`` = the sums of ``x``'s last ``len(ones)`` elements (C order) as one matrix-vector product
    (BLAS): 3-5x faster than np.add.reduce over the last axes (1152 channels at 7x7: 5.5 us against 30;
    256 at 56x56: 25 against 129)."""
    np.matmul(x.reshape(-1, ones.shape[0]), ones, out=out.reshape(-1))


@register("ReduceFusion", ALL)
class ReduceFusion(NativeKernel):
    """reduce_mode over the axes of input 1 when present (computed at run time), else over ``axes``;
    no axes: every axis, or none with noop_with_empty_axes.

    MAX and MIN of an empty set give the lowest and highest value of the dtype; an integer
    MEAN truncates toward zero; L1, L2, SUM_SQUARE, LOG_SUM and LOG_SUM_EXP reduce with a sum
    (LOG_SUM_EXP shifted by the maximum, so it does not overflow; both logs take floats only).
    bool reduces with MAX and MIN.
    """

    value_inputs = (1,)

    def check_attrs(self) -> None:
        check_io(self, 1, 1)
        mode = self.attrs["reduce_mode"]
        if mode not in REDUCE_MODES:
            self.fail(f"reduce_mode must be one of {REDUCE_MODES}, got {mode!r}")
        kind = self.inputs[0].dtype.kind
        if kind == "b" and mode not in ("MAX", "MIN"):
            self.fail(f"{mode} of bool values: only MAX and MIN reduce bool")
        if kind in "iu" and mode in ("LOG_SUM", "LOG_SUM_EXP"):
            self.fail(f"{mode} of integers: its Log and Exp are defined for floats only (ONNX dropped integer "
                      "ReduceLogSum(Exp) in opset 28); Cast the input to a float type first")
        self.mode = mode

    def _axes(self) -> tuple[int, ...] | None:
        """The reduced axes; None for a no-op (no axes with noop_with_empty_axes)."""
        rank = len(self.inputs[0].shape)
        listed = int_vector(self, 1)
        listed = list(self.attrs["axes"]) if listed is None else listed
        if not listed:
            return None if self.attrs["noop_with_empty_axes"] else tuple(range(rank))
        return normalize_axes(self, listed, rank)

    def infer_shapes(self) -> list[tuple[int, ...]]:
        shape, axes = self.inputs[0].shape, self._axes()
        if axes is None:
            return [shape]
        if self.attrs["keep_dims"]:
            return [tuple(1 if a in axes else d for a, d in enumerate(shape))]
        return [tuple(d for a, d in enumerate(shape) if a not in axes)]

    def resize(self) -> None:
        self.axes, dtype = self._axes(), self.inputs[0].dtype
        self.kwargs: dict[str, Any] = {"axis": self.axes, "keepdims": bool(self.attrs["keep_dims"])}
        if self.mode in ("MAX", "MIN"):
            self.kwargs["initial"] = extreme(dtype, lowest=self.mode == "MAX")
        self.count = math.prod(self.inputs[0].shape[a] for a in self.axes or ())
        rank = len(self.inputs[0].shape)
        trailing = self.axes is not None and self.axes == tuple(range(rank - len(self.axes), rank))
        self.ones = summing_ones(self.count, dtype) if trailing and self.mode in ("MEAN", "SUM") else None

    def execute(self) -> None:
        x, out = self.inputs[0].data, self.outputs[0].data
        if self.axes is None:
            np.copyto(out, elementwise_part(self.mode, x), casting="unsafe")
        elif self.mode in _UFUNCS:
            if self.ones is not None and x.flags.c_contiguous and out.flags.c_contiguous:
                sum_trailing(x, self.ones, out)
            else:
                _UFUNCS[self.mode].reduce(x, out=out, **self.kwargs)
            if self.mode == "MEAN":
                np.true_divide(out, self.count, out=out, casting="unsafe")
        elif self.mode == "LOG_SUM_EXP":
            out[...] = log_sum_exp(x, self.axes, self.kwargs["keepdims"])
        else:
            before, after = _SUMMED[self.mode]
            total = np.add.reduce(x if before is None else before(x), **self.kwargs)
            np.copyto(out, total if after is None else after(total), casting="unsafe")


def elementwise_part(mode: str, x: np.ndarray) -> np.ndarray:
    """What a no-op reduction (no axes, noop_with_empty_axes) still does to each element: the
    transforms around the sum (|x| for L1, x^2 for SUM_SQUARE, log x for LOG_SUM, ...)."""
    before, after = _SUMMED.get(mode, (None, None))
    y = x if before is None else before(x)
    return y if after is None else after(y)


def extreme(dtype: np.dtype, lowest: bool):
    """The identity of MAX (the lowest value) or MIN (the highest) for ``dtype``."""
    if dtype == np.bool_:
        return not lowest
    if dtype.kind == "f":
        return -np.inf if lowest else np.inf
    info = np.iinfo(dtype)
    return info.min if lowest else info.max


def log_sum_exp(x: np.ndarray, axes: tuple[int, ...], keepdims: bool) -> np.ndarray:
    """log(sum(exp(x))) over ``axes``, shifted by the (finite) maximum."""
    shift = np.maximum.reduce(x, axis=axes, keepdims=True, initial=-np.inf)
    shift = np.where(np.isfinite(shift), shift, 0).astype(x.dtype)
    total = np.log(np.add.reduce(np.exp(x - shift), axis=axes, keepdims=True)) + shift
    return total if keepdims else np.squeeze(total, axis=axes)


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
    """exp(x) / sum(exp(x)) over the axes, shifted by the max for stability. Over the last axis of
    float32 rows, one compiled pass a row (``lite.kernels.fast.softmax.softmax_rows``) on a copy of x
    in the output."""

    def resize(self) -> None:
        super().resize()
        x = self.inputs[0]
        self.rows = None
        if self.axes == (len(x.shape) - 1,) and x.dtype == np.float32 and not self.empty and fast.enabled():
            from lite.kernels.fast import softmax  # NOTE: imports the compiler: only when used

            softmax.warm()
            width = x.shape[-1]
            self.rows = softmax.softmax_rows, np.array([1, 1, math.prod(x.shape) // width, width], np.int64), \
                *softmax.mask_layout(None, (1, 1, 1, width))

    def normalize(self, x: np.ndarray, out: np.ndarray) -> None:
        if self.rows is not None and out.flags.c_contiguous:
            rows, shape, no_mask, strides = self.rows
            np.copyto(out, x)
            rows(out.reshape(-1), shape, np.float32(1), no_mask, strides, 0, shape[2], False)
            return
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
