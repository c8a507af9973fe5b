"""Pooling kernels: MaxPoolFusion and AvgPoolFusion on NCHW, vectorised over the window taps.

The input is padded (with -inf for max, 0 for average) and, for overlapping strided windows,
split into stride phases in a workspace buffer (``Planes``); every tap of the window is then
one view combined into the output with np.maximum or np.add. A global pool is one reduction.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from lite.kernels.base import NativeKernel
from lite.kernels.elementwise import check_io
from lite.kernels.registry import register
from lite.kernels.window import Planes, check_pads, check_window_taps, window_list
from lite.ops.dtypes import FLOATS
from lite.ops.geometry import ROUND_MODES, ceil_rounds, effective, output_size, window_counts, window_pads


class Pool(NativeKernel):
    """Shared geometry of the 2-D pools; subclasses combine the taps.

    ``fill`` is the value of padded positions; ``reduce`` the global reduction.
    """

    fill: ClassVar[float]
    reduce: ClassVar[np.ufunc]

    def check_attrs(self) -> None:
        check_io(self, 1)
        self.is_global = bool(self.attrs["is_global"])
        self.kernel_size = window_list(self, "kernel_size", empty_means=None)
        check_window_taps(self, self.kernel_size)
        if not self.kernel_size and not self.is_global:
            self.fail("kernel_size is required unless is_global is set")
        self.strides = window_list(self, "strides")
        self.dilations = window_list(self, "dilation") if "dilation" in self.attrs else (1, 1)
        check_pads(self)
        if self.attrs["round_mode"] not in ROUND_MODES:
            self.fail(f"unknown round_mode {self.attrs['round_mode']!r}; expected one of {ROUND_MODES}")
        pads = tuple(self.attrs["pad_list"] or ())
        if self.kernel_size and pads and self.attrs["pad_mode"] == "PAD":
            extents = [effective(k, d) for k, d in zip(self.kernel_size, self.dilations, strict=True)] * 2
            if any(p >= e for p, e in zip(pads, extents, strict=True)):
                self.fail(f"every pad must be smaller than the kernel extent, got pad_list {list(pads)} "
                          f"for kernel_size {list(self.kernel_size)}")
        self.planned: tuple[int, ...] | None = None

    def infer_shapes(self) -> list[tuple[int, ...]]:
        x = self.input_shape(0)
        if len(x) != 4:
            self.fail(f"expects a 4-D NCHW input, got shape {list(x)}")
        if self.is_global:
            if not x[2] * x[3]:
                self.fail(f"cannot pool an empty input of shape {list(x)}")
            return [(x[0], x[1], 1, 1)]
        out_h, out_w = self.geometry(x)[2]
        if out_h < 1 or out_w < 1:
            self.fail(f"input {list(x)} is smaller than the padded window {list(self.kernel_size)}")
        return [(x[0], x[1], out_h, out_w)]

    def geometry(self, x: tuple[int, ...]):
        """(begins, ends, (OH, OW)) of input shape x; SAME pads ignore round_mode (ONNX)."""
        mode = self.attrs["pad_mode"]
        begins, ends = window_pads(mode, self.attrs["pad_list"], x[2:], self.kernel_size, self.strides,
                                   self.dilations)
        ceil = ceil_rounds(self.attrs["round_mode"], mode)
        sizes = tuple(output_size(*args, ceil=ceil) for args in zip(
            x[2:], self.kernel_size, self.strides, self.dilations, begins, ends, strict=True))
        return begins, ends, sizes

    def resize(self) -> None:
        x = self.input_shape(0)
        self.planned = x
        if self.is_global:
            return
        begins, _, out_sizes = self.geometry(x)
        # NOTE: the planes reach as far as the windows do, past the end pads for CEIL windows.
        self.planes = Planes(x, begins, self.kernel_size, self.strides, self.dilations, out_sizes)
        self.taps = self.planes.windows(out_sizes)

    def execute(self) -> None:
        x, out = self.inputs[0].data, self.outputs[0].data
        if x.shape != self.planned:
            self.resize()
        if self.is_global:
            n, c, h, w = x.shape
            self.reduce.reduce(x.reshape(n, c, h * w), axis=2, out=out.reshape(n, c))
            self.finish_global(out, h * w)
            return
        self.combine(self.planes.fill(x, self.workspace.array(self.planes.shape, x.dtype, 0), self.fill), out)

    def combine(self, source: np.ndarray, out: np.ndarray) -> None:
        """Combines the taps of ``source`` into ``out``."""
        taps = self.taps
        if len(taps) == 1:
            np.copyto(out, source[taps[0]])
            return
        self.reduce(source[taps[0]], source[taps[1]], out=out)
        for index in taps[2:]:
            self.reduce(out, source[index], out=out)

    def finish_global(self, out: np.ndarray, count: int) -> None:
        """Turns the global reduction of ``count`` elements into the result."""


@register("MaxPoolFusion", dtypes=FLOATS)
class MaxPoolFusion(Pool):
    """Max pooling (ONNX MaxPool): kernel_size, strides, dilation, pads or SAME/VALID, ceil rounding."""

    fill = -np.inf
    reduce = np.maximum


@register("AvgPoolFusion", dtypes=FLOATS)
class AvgPoolFusion(Pool):
    """Average pooling (ONNX AveragePool): like MaxPoolFusion, without dilation.

    The divisor of each output counts the window's positions inside the input, plus those in
    the pads when count_include_pad is set (never those a CEIL window adds past the end pad).
    """

    fill = 0.0
    reduce = np.add

    def resize(self) -> None:
        super().resize()
        if not self.is_global:
            x = self.input_shape(0)
            counts = np.multiply.outer(*[self.counts(axis, x) for axis in (0, 1)])
            uniform = (counts == counts[0, 0]).all()
            self.scale = 1.0 / int(counts[0, 0]) if uniform else (1.0 / counts).astype(self.inputs[0].dtype)

    def counts(self, axis: int, x: tuple[int, ...]) -> np.ndarray:
        """The divisor along one spatial axis, per output position."""
        begins, ends, sizes = self.geometry(x)
        return window_counts(x[2 + axis], sizes[axis], self.kernel_size[axis], self.strides[axis], begins[axis],
                             ends[axis], bool(self.attrs["count_include_pad"]))

    def combine(self, source: np.ndarray, out: np.ndarray) -> None:
        super().combine(source, out)
        np.multiply(out, self.scale, out=out)

    def finish_global(self, out: np.ndarray, count: int) -> None:
        np.multiply(out, 1.0 / count, out=out)
