"""Sliding windows shared by convolutions and pools of any number of spatial axes: attribute
checks, and ``Planes``, the padded (and stride-phase split) input every window tap reads from.

What the pads and output sizes are is ``lite.ops.geometry``'s.
"""

from __future__ import annotations

import itertools
import math
import operator
from dataclasses import dataclass
from functools import partial

import numpy as np

from lite.errors import UnsupportedOpError
from lite.kernels.base import NativeKernel, Step, copy_step
from lite.ops.geometry import PAD_MODES

MAX_WINDOW_TAPS = 1 << 16  # a 256 x 256 window; global pooling has its own flag


@dataclass(frozen=True)
class Geometry:
    """A 2-D window's shapes: input (N, C, H, W), kernel, strides, dilations, pads, output."""

    x: tuple[int, int, int, int]
    kernel: tuple[int, int]
    strides: tuple[int, int]
    dilations: tuple[int, int]
    begins: tuple[int, int]
    ends: tuple[int, int]
    out: tuple[int, int]


def check_window_taps(kernel: NativeKernel, kernel_size: tuple[int, ...]) -> None:
    """Refuses windows of more than MAX_WINDOW_TAPS taps (each tap costs one numpy call)."""
    taps = math.prod(kernel_size)
    if taps > MAX_WINDOW_TAPS:
        raise UnsupportedOpError([(kernel.type, kernel.name, None, (
            f"a {'x'.join(map(str, kernel_size))} window has {taps} taps, more than the {MAX_WINDOW_TAPS} "
            "this runtime supports (use a global pool, or a smaller window)"))])


def window_rank(kernel: NativeKernel, names: tuple[str, ...]) -> int:
    """The number of spatial axes: the length of the non-empty per-axis attributes among ``names``
    (``pad_list`` counts half), else the first input's rank minus 2 (N, C)."""
    lengths = {name: len(kernel.attrs.get(name) or ()) // (2 if name == "pad_list" else 1) for name in names}
    ranks = {n for n in lengths.values() if n}
    if len(ranks) > 1:
        kernel.fail(f"{', '.join(names)} must have one value per spatial axis (pad_list two), got "
                    + ", ".join(f"{name} {list(kernel.attrs.get(name) or ())}" for name in names))
    rank = ranks.pop() if ranks else len(kernel.inputs[0].shape) - 2
    if rank < 1:
        kernel.fail(f"needs at least one spatial axis (an N, C, spatial... input), got shape "
                    f"{list(kernel.inputs[0].shape)}")
    return rank


def window_list(kernel: NativeKernel, name: str, rank: int, empty_means: int | None = 1) -> tuple[int, ...]:
    """A positive per-spatial-axis attribute (kernel size, stride, dilation).

    An empty list becomes ``empty_means`` on every axis, or ``()`` when that is None.
    """
    values = tuple(int(v) for v in kernel.attrs.get(name) or ())
    if not values:
        return () if empty_means is None else (empty_means,) * rank
    if len(values) != rank or min(values) < 1:
        kernel.fail(f"{name} must be {rank} positive integers, got {list(values)}")
    return values


def check_pads(kernel: NativeKernel, rank: int) -> None:
    """Fails for an unknown pad_mode or a pad_list that is not 2 * rank non-negative integers."""
    if kernel.attrs["pad_mode"] not in PAD_MODES:
        kernel.fail(f"unknown pad_mode {kernel.attrs['pad_mode']!r}; expected one of {PAD_MODES}")
    pads = tuple(kernel.attrs.get("pad_list") or ())
    if pads and (len(pads) != 2 * rank or min(pads) < 0):
        kernel.fail(f"pad_list must be {2 * rank} non-negative integers [begins..., ends...], got {list(pads)}")


def check_input_rank(kernel: NativeKernel, shape: tuple[int, ...], rank: int) -> None:
    """Fails unless ``shape`` is (N, C, one dim per spatial axis)."""
    if len(shape) != rank + 2:
        kernel.fail(f"expects a {rank + 2}-D (N, C, {rank} spatial) input for its {rank}-D window, "
                    f"got shape {list(shape)}")


class Planes:
    """An (N, C, spatial...) input padded with a fill value and, when that pays, split into stride phases.

    Split, phase (a, b, ...) holds padded positions (a + sa * i, b + sb * j, ...), so every tap
    of a strided window is a unit-stride window of one phase (worth one strided copy of the
    input when the kernel has more taps than the stride has phases). Unsplit, there is one
    plane and a tap steps by the stride; when no window reaches past x, x is that plane.
    Planes are as large as the windows reach, plus one spare row (along the first spatial
    axis) when ``spare_row`` (a tap flattened over full rows then stays inside).
    """

    def __init__(self, x: tuple[int, ...], begins: tuple[int, ...], kernel_size: tuple[int, ...],
                 strides: tuple[int, ...], dilations: tuple[int, ...], out_sizes: tuple[int, ...],
                 spare_row: bool = False, split: bool | None = None):
        ones = (1,) * len(kernel_size)
        if split is None:
            split = math.prod(kernel_size) > math.prod(strides)
        self.phases = tuple(strides) if split else ones
        self.steps = ones if split else tuple(strides)
        self.dilations, self.kernel_size = tuple(dilations), tuple(kernel_size)
        dims = [(k - 1) * d // p + (o - 1) * s + 1 for k, d, p, o, s in
                zip(kernel_size, dilations, self.phases, out_sizes, self.steps, strict=True)]
        if self.phases == ones and not spare_row and not any(begins) and all(map(operator.le, dims, x[2:])):
            dims = list(x[2:])  # NOTE: every window lies inside x: x itself is the plane, uncopied
        dims[0] += spare_row
        self.dims = tuple(dims)
        self.elements = tuple(math.prod(self.dims[a + 1:]) for a in range(len(dims)))  # a plane's strides
        self.shape = (*self.phases, x[0], x[1], *self.dims)
        self.identity = not any(begins) and self.phases == ones and self.dims == tuple(x[2:])
        self.copies = []
        for phase in sorted({phase for phase, _ in self.taps()}):
            spans = [phase_span(*args) for args in zip(x[2:], begins, phase, self.phases, self.dims, strict=True)]
            if all(spans):
                self.copies.append(((*phase, slice(None), slice(None), *(plane for plane, _ in spans)),
                                    (slice(None), slice(None), *(source for _, source in spans))))

    def taps(self) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
        """(phase, position in it) each tap of the window at output 0 reads, row-major."""
        axes = [[(i * d % p, i * d // p) for i in range(k)]
                for k, d, p in zip(self.kernel_size, self.dilations, self.phases, strict=True)]
        return [(tuple(phase for phase, _ in tap), tuple(at for _, at in tap)) for tap in itertools.product(*axes)]

    def windows(self, out_sizes: tuple[int, ...]) -> list[tuple]:
        """Per tap, row-major, the index of its (N, C, out_sizes...) window in the planes."""
        return [(*phase, Ellipsis, *(slice(at, at + (out - 1) * step + 1, step)
                                     for at, out, step in zip(position, out_sizes, self.steps, strict=True)))
                for phase, position in self.taps()]

    def tap_groups(self) -> list[tuple[tuple[int, ...], tuple[slice, ...], int, tuple[int, ...]]]:
        """The taps grouped by the phase they read, each group a regular grid.

        Returns (phase, tap slices, first element, steps): the kernel taps of the group along
        each axis as slices, the plane element the first tap reads (flat, row-major) and the
        plane offsets between neighbouring taps along each axis.
        """
        axes = [axis_groups(k, d, p) for k, d, p in zip(self.kernel_size, self.dilations, self.phases, strict=True)]
        return [(tuple(g[0] for g in group), tuple(g[1] for g in group),
                 sum(g[2] * e for g, e in zip(group, self.elements, strict=True)),
                 tuple(g[3] * e for g, e in zip(group, self.elements, strict=True)))
                for group in itertools.product(*axes)]

    def fill(self, x: np.ndarray, buffer: np.ndarray, value: float) -> np.ndarray:
        """The planes of x in ``buffer`` (of ``self.shape``); x itself, viewed, when nothing changes."""
        planes, steps = self.fill_steps(x, buffer, value)
        for step in steps:
            step()
        return planes

    def fill_steps(self, x: np.ndarray, buffer: np.ndarray, value: float) -> tuple[np.ndarray, list[Step]]:
        """The planes ``fill`` returns, and the calls that fill them (none when x is the plane)."""
        if self.identity:
            return x[(None,) * len(self.phases)], []
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
