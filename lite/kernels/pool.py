"""Pooling kernels: MaxPoolFusion and AvgPoolFusion on (N, C, spatial...), vectorised over the window taps.

The input is padded (with the lowest value for max, 0 for average) and, for overlapping strided
windows, split into stride phases in a workspace buffer (``Planes``); every tap of the window is
then one view combined into the output with np.maximum or np.add. A global pool is one reduction.
The number of spatial axes is the length of kernel_size (a global pool: the input's rank - 2).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import ClassVar

import numpy as np

from lite.kernels import fast
from lite.kernels.base import NativeKernel
from lite.kernels.elementwise import check_io
from lite.kernels.reduce import sum_trailing, summing_ones
from lite.kernels.registry import register
from lite.kernels.window import (
    Geometry,
    Planes,
    check_input_rank,
    check_pads,
    check_window_taps,
    window_list,
    window_rank,
)
from lite.ops.dtypes import FLOATS, NUMBERS
from lite.ops.geometry import ROUND_MODES, ceil_rounds, effective, output_size, window_counts, window_pads

INDICES = np.dtype(np.int64)


class Pool(NativeKernel):
    """Shared geometry of the pools; subclasses combine the taps.

    ``reduce`` is the global reduction, ``lowest`` the value of padded positions for a dtype.
    """

    reduce: ClassVar[np.ufunc]
    max_outputs: ClassVar[int] = 1

    def check_attrs(self) -> None:
        check_io(self, 1, outputs=None)
        if len(self.outputs) > self.max_outputs:
            self.fail(f"expects at most {self.max_outputs} output(s), got {len(self.outputs)}")
        self.is_global = bool(self.attrs["is_global"])
        self.rank = window_rank(self, ("kernel_size", "strides", "dilation", "pad_list"))
        self.kernel_size = window_list(self, "kernel_size", self.rank, empty_means=None)
        check_window_taps(self, self.kernel_size)
        if not self.kernel_size and not self.is_global:
            self.fail("kernel_size is required unless is_global is set")
        self.strides = window_list(self, "strides", self.rank)
        self.dilations = window_list(self, "dilation", self.rank)
        check_pads(self, self.rank)
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
        check_input_rank(self, x, self.rank)
        if self.is_global:
            if not math.prod(x[2:]):
                self.fail(f"cannot pool an empty input of shape {list(x)}")
            return [(*x[:2], *(1,) * self.rank)]
        out_sizes = self.geometry(x)[2]
        if min(out_sizes) < 1:
            self.fail(f"input {list(x)} is smaller than the padded window {list(self.kernel_size)}")
        return [(*x[:2], *out_sizes)]

    def geometry(self, x: tuple[int, ...]):
        """(begins, ends, output sizes) of input shape x; SAME pads ignore round_mode (ONNX)."""
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
            n, c = x.shape[:2]
            count = math.prod(x.shape[2:])
            self.global_reduce(x.reshape(n, c, count), out.reshape(n, c))
            self.finish_global(out, count)
            return
        self.combine(self.planes.fill(x, self.workspace.array(self.planes.shape, x.dtype, 0), self.lowest(x.dtype)),
                     out)

    def global_reduce(self, x: np.ndarray, out: np.ndarray) -> None:
        """``out`` (N, C) = the reduction of ``x`` (N, C, spatial elements) over its last axis."""
        self.reduce.reduce(x, axis=2, out=out)

    def lowest(self, dtype: np.dtype) -> float:
        """The value of padded positions."""
        raise NotImplementedError

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


MAX_POOL_DTYPES = (*fast.FAST_DTYPES, "uint8", "int8")
"""The dtypes of the compiled max pool (``lite.kernels.fast.pool``): the float ones and 8-bit
quantized tensors (a max of bytes is the byte of the max: quantization keeps the order)."""


@register("MaxPoolFusion", dtypes=NUMBERS)
class MaxPoolFusion(Pool):
    """Max pooling (ONNX MaxPool): kernel_size, strides, dilation, pads or SAME/VALID, ceil rounding.

    An optional second output holds the flat index (N, C, spatial... row-major: ONNX's
    storage_order 0) of each maximum in the input; ties go to the first tap, row-major.
    """

    reduce = np.maximum
    max_outputs = 2  # values, indices
    compiled = None  # the plan of lite.kernels.fast.pool's max pool, where it runs (set by resize)

    def check_attrs(self) -> None:
        super().check_attrs()
        if len(self.outputs) == 2 and self.is_global:
            self.fail("a global max pool has no indices output")

    def output_dtypes(self) -> list[np.dtype]:
        return [self.inputs[0].dtype, INDICES][:len(self.outputs)]

    def infer_shapes(self) -> list[tuple[int, ...]]:
        return super().infer_shapes() * len(self.outputs)

    def lowest(self, dtype: np.dtype) -> float:
        return -np.inf if dtype.kind == "f" else np.iinfo(dtype).min

    def resize(self) -> None:
        super().resize()
        x = self.input_shape(0)
        if len(self.outputs) == 2:
            flat = np.arange(math.prod(x), dtype=INDICES).reshape(x)
            self.index_planes = self.planes.fill(flat, np.empty(self.planes.shape, INDICES), -1)
        self.compiled = None
        if self.rank == 2 and not self.is_global and len(self.outputs) == 1 and fast.enabled() \
                and self.inputs[0].dtype.name in MAX_POOL_DTYPES:
            from lite.kernels.fast import pool  # NOTE: imports the compiler: only when used
            from lite.kernels.fast.depthwise import DepthwisePlan

            pool.warm(self.inputs[0].dtype.name)
            begins, ends, out_sizes = self.geometry(x)
            self.compiled = DepthwisePlan(Geometry(x, self.kernel_size, self.strides, self.dilations, begins, ends,
                                                   out_sizes))
            if self.inputs[0].dtype == np.float32 and self.threads.crew() is not None:
                from lite.kernels.fast.crew import warm

                warm(pool.pool_job)
        self.step_key = self.step = None

    def execute(self) -> None:
        x, out = self.inputs[0].data, self.outputs[0].data
        if self.compiled is not None and x.shape == self.planned and fast.takes(x, out):
            if self.step_key is None or self.step_key[0] is not x or self.step_key[1] is not out:
                self.step_key, self.step = (x, out), self.compiled_step(x, out)
            self.step()
        else:
            super().execute()

    def compiled_step(self, x: np.ndarray, out: np.ndarray) -> Callable[[], None]:
        """The compiled max pool of these arrays, its planes shared out among the model's threads
        (on the crew where it runs, for float32)."""
        from lite.kernels.fast import pool

        lowest = x.dtype.type(self.lowest(x.dtype))

        def piece(_: int, first: int, last: int) -> Callable[[], None]:
            return functools.partial(pool.run, self.compiled, x, out, lowest, first, last)

        def jobs(bounds: list[tuple[int, int]]) -> Callable[[], None]:
            return pool.crew_jobs(self.compiled, x, out, lowest, bounds)

        return self.threads.crew_loop(x.shape[0] * x.shape[1], piece, jobs if x.dtype == np.float32 else None)

    def combine(self, source: np.ndarray, out: np.ndarray) -> None:
        if len(self.outputs) == 1:
            super().combine(source, out)
            return
        indices, taps = self.outputs[1].data, self.taps
        np.copyto(out, source[taps[0]])
        np.copyto(indices, self.index_planes[taps[0]])
        better = self.workspace.array(out.shape, np.bool_, 1)
        for index in taps[1:]:
            np.greater(source[index], out, out=better)
            better |= indices < 0  # NOTE: a real value beats a pad even when it equals the pad's lowest value
            np.copyto(out, source[index], where=better)
            np.copyto(indices, self.index_planes[index], where=better)


@register("AvgPoolFusion", dtypes=FLOATS)
class AvgPoolFusion(Pool):
    """Average pooling (ONNX AveragePool): like MaxPoolFusion (dilation when the primitive has it).

    The divisor of each output counts the window's taps inside the input, plus those in the
    pads when count_include_pad is set (never those a CEIL window adds past the end pad).
    """

    reduce = np.add
    ones: np.ndarray | None = None  # what a global sum multiplies by (lite.kernels.reduce.sum_trailing)

    def lowest(self, dtype: np.dtype) -> float:
        return 0.0

    def global_reduce(self, x: np.ndarray, out: np.ndarray) -> None:
        """The sums as one matrix-vector product (``sum_trailing``) where BLAS serves the dtype."""
        if self.ones is None:
            super().global_reduce(x, out)
        else:
            sum_trailing(x, self.ones, out)

    def resize(self) -> None:
        super().resize()
        x = self.input_shape(0)
        self.ones = summing_ones(math.prod(x[2:]), self.inputs[0].dtype) if self.is_global else None
        if not self.is_global:
            counts = functools.reduce(np.multiply.outer, [self.counts(axis, x) for axis in range(self.rank)])
            counts = np.maximum(counts, 1)  # NOTE: a dilated window can fall wholly in the pads; it sums to 0
            first = counts.flat[0]
            uniform = (counts == first).all()
            self.scale = 1.0 / int(first) if uniform else (1.0 / counts).astype(self.inputs[0].dtype)

    def counts(self, axis: int, x: tuple[int, ...]) -> np.ndarray:
        """The divisor along one spatial axis, per output position."""
        begins, ends, sizes = self.geometry(x)
        return window_counts(x[2 + axis], sizes[axis], self.kernel_size[axis], self.strides[axis], begins[axis],
                             ends[axis], bool(self.attrs["count_include_pad"]), self.dilations[axis])

    def combine(self, source: np.ndarray, out: np.ndarray) -> None:
        super().combine(source, out)
        np.multiply(out, self.scale, out=out)

    def finish_global(self, out: np.ndarray, count: int) -> None:
        np.multiply(out, 1.0 / count, out=out)
