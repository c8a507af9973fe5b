"""Sliding windows shared by convolutions and pools: attribute checks, and ``Planes``, the
padded (and stride-phase split) input every window tap reads from.

What the pads and output sizes are is ``lite.ops.geometry``'s.
"""

from __future__ import annotations

import math
from functools import partial

import numpy as np

from lite.errors import UnsupportedOpError
from lite.kernels.base import NativeKernel, Step, copy_step
from lite.ops.geometry import PAD_MODES

MAX_WINDOW_TAPS = 1 << 16  # a 256 x 256 window; global pooling has its own flag


def check_window_taps(kernel: NativeKernel, kernel_size: tuple[int, ...]) -> None:
    """Refuses windows of more than MAX_WINDOW_TAPS taps (each tap costs one numpy call)."""
    taps = math.prod(kernel_size)
    if taps > MAX_WINDOW_TAPS:
        raise UnsupportedOpError([(kernel.type, kernel.name, None, (
            f"a {'x'.join(map(str, kernel_size))} window has {taps} taps, more than the {MAX_WINDOW_TAPS} "
            "this runtime supports (use a global pool, or a smaller window)"))])


def window_list(kernel: NativeKernel, name: str, rank: int = 2, empty_means: int | None = 1) -> tuple[int, ...]:
    """A positive per-spatial-axis attribute (kernel size, stride, dilation).

    An empty list becomes ``empty_means`` on every axis, or ``()`` when that is None.
    """
    values = tuple(int(v) for v in kernel.attrs.get(name) or ())
    if not values:
        return () if empty_means is None else (empty_means,) * rank
    if len(values) != rank or min(values) < 1:
        kernel.fail(f"{name} must be {rank} positive integers, got {list(values)}")
    return values


def check_pads(kernel: NativeKernel, rank: int = 2) -> None:
    """Fails for an unknown pad_mode or a pad_list that is not 2 * rank non-negative integers."""
    if kernel.attrs["pad_mode"] not in PAD_MODES:
        kernel.fail(f"unknown pad_mode {kernel.attrs['pad_mode']!r}; expected one of {PAD_MODES}")
    pads = tuple(kernel.attrs.get("pad_list") or ())
    if pads and (len(pads) != 2 * rank or min(pads) < 0):
        kernel.fail(f"pad_list must be {2 * rank} non-negative integers [begins..., ends...], got {list(pads)}")


class Planes:
    """An NCHW input padded with a fill value and, when that pays, split into stride phases.

    Split, phase (a, b) holds padded rows a, a + sh, ... and columns b, b + sw, ..., so every
    tap of a strided window is a unit-stride window of one phase (worth one strided copy of
    the input when the kernel has more taps than the stride has phases). Unsplit, there is
    one plane and a tap steps by the stride; when no window reaches past x, x is that plane.
    Planes are as large as the windows reach, plus one spare row when ``spare_row`` (a tap
    flattened over full rows then stays inside).
    """

    def __init__(self, x: tuple[int, ...], begins: tuple[int, int], kernel_size: tuple[int, int],
                 strides: tuple[int, int], dilations: tuple[int, int], out_sizes: tuple[int, int],
                 spare_row: bool = False, split: bool | None = None):
        if split is None:
            split = math.prod(kernel_size) > math.prod(strides)
        self.phases = strides if split else (1, 1)
        self.steps = (1, 1) if split else strides
        self.dilations, self.kernel_size = dilations, kernel_size
        height, self.width = ((k - 1) * d // p + (o - 1) * s + 1 for k, d, p, o, s in
                              zip(kernel_size, dilations, self.phases, out_sizes, self.steps, strict=True))
        if self.phases == (1, 1) and not spare_row and begins == (0, 0) and height <= x[2] and self.width <= x[3]:
            height, self.width = x[2], x[3]  # NOTE: every window lies inside x: x itself is the plane, uncopied
        self.height = height + spare_row
        self.shape = (*self.phases, x[0], x[1], self.height, self.width)
        self.identity = begins == (0, 0) and self.shape[:2] == (1, 1) and (self.height, self.width) == tuple(x[2:])
        self.copies = []
        for a, b in {phase for phase, _, _ in self.taps()}:
            rows = phase_span(x[2], begins[0], a, self.phases[0], self.height)
            cols = phase_span(x[3], begins[1], b, self.phases[1], self.width)
            if rows and cols:
                self.copies.append(((a, b, slice(None), slice(None), rows[0], cols[0]),
                                    (slice(None), slice(None), rows[1], cols[1])))

    def taps(self) -> list[tuple[tuple[int, int], int, int]]:
        """((phase a, phase b), row, column) where each tap of the window at output (0, 0) reads, row-major."""
        (kh, kw), (dh, dw), (ph, pw) = self.kernel_size, self.dilations, self.phases
        return [((i * dh % ph, j * dw % pw), i * dh // ph, j * dw // pw) for i in range(kh) for j in range(kw)]

    def windows(self, out_sizes: tuple[int, int]) -> list[tuple[int, ...]]:
        """Per tap, row-major, the index of its (N, C, OH, OW) window in the planes."""
        (out_h, out_w), (sh, sw) = out_sizes, self.steps
        return [(*phase, Ellipsis, slice(row, row + (out_h - 1) * sh + 1, sh),
                 slice(col, col + (out_w - 1) * sw + 1, sw)) for phase, row, col in self.taps()]

    def tap_groups(self) -> list[tuple[tuple[int, int], slice, slice, int, tuple[int, int]]]:
        """The taps grouped by the phase they read, each group a regular grid.

        Returns ((a, b), tap rows, tap columns, first element, (row step, column step)):
        the kernel rows and columns of the group as slices, the plane element (row * width +
        column) the first tap reads and the plane offsets between neighbouring taps.
        """
        rows = axis_groups(self.kernel_size[0], self.dilations[0], self.phases[0])
        cols = axis_groups(self.kernel_size[1], self.dilations[1], self.phases[1])
        return [((a, b), row_taps, col_taps, row * self.width + col, (row_step * self.width, col_step))
                for a, row_taps, row, row_step in rows for b, col_taps, col, col_step in cols]

    def fill(self, x: np.ndarray, buffer: np.ndarray, value: float) -> np.ndarray:
        """The planes of x in ``buffer`` (of ``self.shape``); x itself, viewed, when nothing changes."""
        planes, steps = self.fill_steps(x, buffer, value)
        for step in steps:
            step()
        return planes

    def fill_steps(self, x: np.ndarray, buffer: np.ndarray, value: float) -> tuple[np.ndarray, list[Step]]:
        """The planes ``fill`` returns, and the calls that fill them (none when x is the plane)."""
        if self.identity:
            return x[None, None], []
        return buffer, [partial(buffer.fill, value), *(copy_step(buffer[target], x[source])
                                                       for target, source in self.copies)]


def axis_groups(kernel: int, dilation: int, stride: int) -> list[tuple[int, slice, int, int]]:
    """Along one axis: (phase, kernel taps, first plane index, plane step) of each phase read.

    The taps i with i * dilation = phase (mod stride) are evenly spaced, so each group is a slice.
    """
    groups: dict[int, list[int]] = {}
    for i in range(kernel):
        groups.setdefault(i * dilation % stride, []).append(i)
    result = []
    for phase, taps in groups.items():
        step = taps[1] - taps[0] if len(taps) > 1 else 1
        result.append((phase, slice(taps[0], taps[-1] + 1, step), taps[0] * dilation // stride,
                       step * dilation // stride))
    return result


def strided_view(array: np.ndarray, shape: tuple[int, ...], strides: tuple[int, ...], offset: int = 0) -> np.ndarray:
    """A view of the C-contiguous ``array`` with ``shape``; ``strides`` and ``offset`` in bytes."""
    return np.ndarray(shape, array.dtype, array, offset, strides)


def phase_span(size: int, begin: int, phase: int, stride: int, count: int) -> tuple[slice, slice] | None:
    """(plane slice, input slice) of the input positions along one axis that land in ``phase``.

    Plane index r holds padded position phase + stride * r, i.e. input position
    phase + stride * r - begin; None when no input position lands in the first ``count``.
    """
    first = max(0, -(-(begin - phase) // stride))
    stop = min(count, -(-(size + begin - phase) // stride))
    if stop <= first:
        return None
    start = phase + stride * first - begin
    return slice(first, stop), slice(start, start + (stop - first - 1) * stride + 1, stride)
