"""Shape and data-movement kernels: reshapes, transposes, slicing, padding, gathering, casts."""

from __future__ import annotations

import itertools
import math
from typing import ClassVar

import numpy as np

from lite.kernels import fast
from lite.kernels.base import NativeKernel
from lite.kernels.elementwise import check_io
from lite.kernels.registry import register
from lite.ops.dtypes import ALL, BFLOAT16, NARROW_FLOATS, NARROW_INTS, saturating_cast
from lite.ops.padding import PADDING_MODES, begins_ends, full_rank_pads, kept
from lite.ops.slicing import clamped_slice
from lite.ops.split import split_offsets, split_sizes
from lite.schema.graph import DTYPES


def int_vector(kernel: NativeKernel, index: int) -> list[int] | None:
    """The value of input ``index`` as a list of ints (None when the input is absent)."""
    value = kernel.value(index)
    if value is None:
        return None
    if value.dtype.kind not in "iu" or value.ndim != 1:
        kernel.fail(f"input {index} must be a 1-D integer tensor, got {value.dtype.name} {value.shape}")
    return value.tolist()


def checked_dims(kernel: NativeKernel, dims: list[int], what: str) -> tuple[int, ...]:
    """``dims`` as a shape; fails on a negative dim or more bytes than an array can hold."""
    if any(d < 0 for d in dims) or math.prod(dims) > np.iinfo(np.intp).max // 16:
        kernel.fail(f"{what} {dims} is not a shape (a dim is negative or the size is absurd)")
    return tuple(dims)


def normalize_axis(kernel: NativeKernel, axis: int, rank: int) -> int:
    """``axis`` in [-rank, rank) as a non-negative axis."""
    if not -rank <= axis < rank:
        kernel.fail(f"axis {axis} is out of range for rank {rank}")
    return axis % rank


def normalize_axes(kernel: NativeKernel, axes: list[int] | tuple[int, ...], rank: int) -> tuple[int, ...]:
    """Distinct axes in [-rank, rank) as non-negative axes, in the given order."""
    normalized = tuple(normalize_axis(kernel, axis, rank) for axis in axes)
    if len(set(normalized)) != len(normalized):
        kernel.fail(f"axes {tuple(axes)} repeat an axis")
    return normalized


class DataMovement(NativeKernel):
    """Base of the family: ``io`` is (required inputs, optional inputs)."""

    io: ClassVar[tuple[int, int]] = (1, 0)

    def check_attrs(self) -> None:
        check_io(self, *self.io)


class Copy(DataMovement):
    """Base of ops whose output is the input's elements in order under a new shape: where the memory
    plan made the output a view of the input (``viewing``: those two arrays, ``lite.memory.view_aliases``)
    and the tensors still hold them, nothing to do."""

    may_view: ClassVar[bool] = True
    viewing: tuple[np.ndarray, np.ndarray] | None = None

    def execute(self) -> None:
        x, out = self.inputs[0].data, self.outputs[0].data
        if self.viewing is not None and self.viewing[0] is x and self.viewing[1] is out:
            return
        np.copyto(out, x.reshape(out.shape))


@register("Identity", ALL)
class Identity(Copy):
    """A copy of the input."""

    def infer_shapes(self) -> list[tuple[int, ...]]:
        return [self.inputs[0].shape]


@register("Reshape", ALL)
class Reshape(Copy):
    """ONNX Reshape: 0 copies the input dim (unless allowzero), -1 is inferred."""

    io = (2, 0)
    value_inputs = (1,)

    def infer_shapes(self) -> list[tuple[int, ...]]:
        shape, target = self.inputs[0].shape, int_vector(self, 1)
        allowzero = self.attrs["allowzero"]
        if allowzero and 0 in target and -1 in target:
            self.fail(f"shape {target} has both 0 and -1 with allowzero")
        if any(d < -1 for d in target) or target.count(-1) > 1:
            self.fail(f"shape {target} has a dim below -1 or more than one -1")
        if not allowzero and 0 in target[len(shape):]:
            self.fail(f"shape {target} copies (0) a dim that input shape {shape} lacks")
        dims = [shape[i] if d == 0 and not allowzero else d for i, d in enumerate(target)]
        size, known = math.prod(shape), math.prod(d for d in dims if d != -1)
        if -1 in dims:
            if not known or size % known:
                self.fail(f"cannot infer the -1 of shape {target} for input shape {shape}")
            dims[dims.index(-1)] = size // known
        if math.prod(dims) != size:
            self.fail(f"cannot reshape {shape} to {target}")
        return [tuple(dims)]


@register("Flatten", ALL)
class Flatten(Copy):
    """Collapses the dims before ``axis`` and those from it on into a 2-D shape."""

    def infer_shapes(self) -> list[tuple[int, ...]]:
        shape, axis = self.inputs[0].shape, self.attrs["axis"]
        if not -len(shape) <= axis <= len(shape):
            self.fail(f"axis {axis} is out of range for rank {len(shape)}")
        axis += len(shape) if axis < 0 else 0
        return [(math.prod(shape[:axis]), math.prod(shape[axis:]))]


def axes_input_or_attr(kernel: NativeKernel) -> list[int]:
    """The axes of input 1 (int64) when present, else the ``axis`` attribute."""
    axes = int_vector(kernel, 1)
    return list(kernel.attrs["axis"]) if axes is None else axes


@register("Squeeze", ALL)
class Squeeze(Copy):
    """Removes the listed size-1 dims (every size-1 dim when there are none): the axes of
    input 1 when present (computed at run time), else the ``axis`` attribute."""

    io = (1, 1)
    value_inputs = (1,)

    def infer_shapes(self) -> list[tuple[int, ...]]:
        shape = self.inputs[0].shape
        axes = normalize_axes(self, axes_input_or_attr(self), len(shape))
        if any(shape[a] != 1 for a in axes):
            self.fail(f"cannot squeeze axes {axes} of shape {shape}: a dim is not 1")
        drop = axes or [a for a, d in enumerate(shape) if d == 1]
        return [tuple(d for a, d in enumerate(shape) if a not in drop)]


@register("Unsqueeze", ALL)
class Unsqueeze(Copy):
    """Inserts size-1 dims at the axes (of the output) of input 1 when present, else of ``axis``."""

    io = (1, 1)
    value_inputs = (1,)

    def infer_shapes(self) -> list[tuple[int, ...]]:
        shape, axes = self.inputs[0].shape, axes_input_or_attr(self)
        axes = normalize_axes(self, axes, len(shape) + len(axes))
        dims = iter(shape)
        return [tuple(1 if a in axes else next(dims) for a in range(len(shape) + len(axes)))]


@register("Transpose", ALL)
class Transpose(DataMovement):
    """Permutes the axes by ``perm`` (empty: reverses them)."""

    def check_attrs(self) -> None:
        super().check_attrs()
        perm = self.attrs["perm"]
        if sorted(perm) != list(range(len(perm))):
            self.fail(f"perm {perm} is not a permutation")
        self.perm = perm or None

    def infer_shapes(self) -> list[tuple[int, ...]]:
        shape = self.inputs[0].shape
        perm = self.attrs["perm"] or tuple(reversed(range(len(shape))))
        if len(perm) != len(shape):
            self.fail(f"perm {perm} does not fit rank {len(shape)}")
        return [tuple(shape[a] for a in perm)]

    def resize(self) -> None:
        x = self.inputs[0]
        perm = self.perm or tuple(reversed(range(len(x.shape))))
        self.planes = swapped_planes(x.shape, perm) if x.dtype.itemsize == 4 and fast.enabled() else None
        if self.planes is not None:
            from lite.kernels.fast import transpose  # NOTE: imports the compiler: only when used

            transpose.warm()
            self.transpose_planes = transpose.transpose_planes

    def execute(self) -> None:
        x, out = self.inputs[0].data, self.outputs[0].data
        if self.planes is not None and x.flags.c_contiguous and out.flags.c_contiguous:
            self.transpose_planes(x.reshape(-1).view(np.uint32), out.reshape(-1).view(np.uint32), *self.planes)
        else:
            np.copyto(out, x.transpose(self.perm))


def swapped_planes(shape: tuple[int, ...], perm: tuple[int, ...] | list[int]) -> tuple[int, int, int] | None:
    """(B, R, C) where transposing ``shape`` by ``perm`` swaps the two dims of B planes of R x C (size-1
    axes dropped, and axes that stay neighbours in order merged: NCHW -> NHWC is 1 x C x HW), else None."""
    kept = [a for a in perm if shape[a] != 1]
    rank = {a: i for i, a in enumerate(sorted(kept))}
    runs: list[list[int]] = []
    for a in kept:
        if runs and rank[a] == rank[runs[-1][-1]] + 1:
            runs[-1].append(a)
        else:
            runs.append([a])
    sizes = {run[0]: math.prod(shape[a] for a in run) for run in runs}
    order = sorted(sizes)
    moved = [order.index(run[0]) for run in runs]
    if moved == [1, 0]:
        return 1, sizes[order[0]], sizes[order[1]]
    if moved == [0, 2, 1]:
        return sizes[order[0]], sizes[order[1]], sizes[order[2]]
    return None


@register("Concat", ALL)
class Concat(DataMovement):
    """Joins the inputs along ``axis``."""

    def check_attrs(self) -> None:
        check_io(self, max(len(self.inputs), 1))
        if len({t.dtype for t in self.inputs}) > 1:
            self.fail(f"inputs must share one dtype, got {[t.dtype.name for t in self.inputs]}")

    def infer_shapes(self) -> list[tuple[int, ...]]:
        shapes = [t.shape for t in self.inputs]
        axis = normalize_axis(self, self.attrs["axis"], len(shapes[0]))
        rest = {s[:axis] + s[axis + 1:] if len(s) == len(shapes[0]) else None for s in shapes}
        if len(rest) != 1 or None in rest:
            self.fail(f"input shapes {shapes} differ outside axis {axis}")
        return [shapes[0][:axis] + (sum(s[axis] for s in shapes),) + shapes[0][axis + 1:]]

    def resize(self) -> None:
        self.axis = self.attrs["axis"] % len(self.inputs[0].shape)
        self.slots: tuple[np.ndarray, list[np.ndarray]] | None = None

    def execute(self) -> None:
        """Copies each input into its slice of the output, except those the memory plan laid out
        there already (``lite.memory.concat_slots``): their producers wrote them in place."""
        out = self.outputs[0].data
        if self.slots is None or self.slots[0] is not out:
            bounds = itertools.accumulate((t.shape[self.axis] for t in self.inputs), initial=0)
            head = (slice(None),) * self.axis
            self.slots = out, [out[(*head, slice(a, b))] for a, b in itertools.pairwise(bounds)]
        for tensor, slot in zip(self.inputs, self.slots[1], strict=True):
            if not _in_place(tensor.data, slot):
                np.copyto(slot, tensor.data)


def _in_place(data: np.ndarray, slot: np.ndarray) -> bool:
    """Whether ``data`` is ``slot``: the same bytes under the same shape and strides."""
    return data is slot or (data.__array_interface__["data"][0] == slot.__array_interface__["data"][0]
                            and data.shape == slot.shape and data.strides == slot.strides)


@register("PadFusion", ALL)
class PadFusion(DataMovement):
    """ONNX Pad: pads (begins then ends, negative crops), CONSTANT / REFLECT / EDGE / WRAP,
    optionally for the axes of input 3 only."""

    io = (2, 2)
    value_inputs = (1, 2, 3)

    def check_attrs(self) -> None:
        super().check_attrs()
        self.mode = self.attrs["padding_mode"]
        if self.mode not in PADDING_MODES:
            self.fail(f"padding_mode must be one of {PADDING_MODES}, got {self.mode!r}")

    def _pads(self) -> list[tuple[int, int, int]]:
        """(dim, begin, end) per axis."""
        shape, pads, axes = self.inputs[0].shape, int_vector(self, 1), int_vector(self, 3)
        if axes is not None:
            try:
                pads = full_rank_pads(pads, axes, len(shape))
            except ValueError as exc:
                self.fail(str(exc))
        if len(pads) != 2 * len(shape):
            self.fail(f"pads {pads} must have 2 * rank = {2 * len(shape)} values")
        return list(zip(shape, *begins_ends(pads, len(shape)), strict=True))

    def infer_shapes(self) -> list[tuple[int, ...]]:
        pads = self._pads()
        for d, b, e in pads:
            length, grow = d + min(b, 0) + min(e, 0), max(b, e, 0)
            if length < 0:
                self.fail(f"pads {b}, {e} crop more than axis length {d}")
            if grow and (self.mode in ("EDGE", "WRAP") and length < 1 or self.mode == "REFLECT" and grow >= length):
                self.fail(f"{self.mode} padding of {grow} needs a longer axis than {length} (after cropping)")
        return [tuple(d + b + e for d, b, e in pads)]

    def resize(self) -> None:
        pads = self._pads()
        if self.mode == "CONSTANT":
            value = self.value(2)
            self.fill = value.reshape(-1)[0] if value is not None and value.size else 0
            self.source = tuple(kept(d, b, e) for d, b, e in pads)
            self.target = tuple(slice(max(b, 0), max(b, 0) + d + min(b, 0) + min(e, 0)) for d, b, e in pads)
        else:
            index = {"REFLECT": _reflect_index, "EDGE": _edge_index, "WRAP": _wrap_index}[self.mode]
            self.source = np.ix_(*[index(np.arange(-b, d + e), d, b, e) for d, b, e in pads])

    def execute(self) -> None:
        out, x = self.outputs[0].data, self.inputs[0].data
        if self.mode == "CONSTANT":
            out.fill(self.fill)
            out[self.target] = x[self.source]
        else:
            out[...] = x[self.source]


def _edge_index(positions: np.ndarray, dim: int, begin: int, end: int) -> np.ndarray:
    return np.clip(positions, 0, dim - 1)


def _wrap_index(positions: np.ndarray, dim: int, begin: int, end: int) -> np.ndarray:
    """Repeats the part of the axis that negative pads leave (onnxruntime crops, then wraps)."""
    part = kept(dim, begin, end)
    return part.start + (positions - part.start) % (part.stop - part.start)


def _reflect_index(positions: np.ndarray, dim: int, begin: int, end: int) -> np.ndarray:
    """Mirrors positions before 0 and after dim - 1 (at most dim - 1 beyond either end)."""
    return dim - 1 - np.abs(dim - 1 - np.abs(positions))


@register("StridedSlice", ALL)
class StridedSlice(DataMovement):
    """ONNX Slice: starts, ends, axes (optional), steps (optional), clamped to the dims."""

    io = (3, 2)
    value_inputs = (1, 2, 3, 4)

    def _slices(self) -> tuple[slice, ...]:
        shape = self.inputs[0].shape
        starts, ends, axes, steps = (int_vector(self, i) for i in range(1, 5))
        axes = normalize_axes(self, list(range(len(starts))) if axes is None else axes, len(shape))
        steps = [1] * len(starts) if steps is None else steps
        if not len(starts) == len(ends) == len(axes) == len(steps) or 0 in steps:
            self.fail(f"starts {starts}, ends {ends}, axes {axes}, steps {steps} must have one "
                      "length, and steps no 0")
        slices = [slice(None)] * len(shape)
        for start, end, axis, step in zip(starts, ends, axes, steps, strict=True):
            slices[axis] = clamped_slice(start, end, step, shape[axis])
        return tuple(slices)

    def infer_shapes(self) -> list[tuple[int, ...]]:
        return [tuple(len(range(d)[s]) for s, d in zip(self._slices(), self.inputs[0].shape, strict=True))]

    def resize(self) -> None:
        self.slices = self._slices()

    def execute(self) -> None:
        np.copyto(self.outputs[0].data, self.inputs[0].data[self.slices])


@register("Split", ALL)
class Split(DataMovement):
    """Splits along ``axis`` by the sizes of input 1 (computed at run time) when present, else
    by ``size_splits``, else into equal parts, one per output (the last one smaller when the
    dim does not divide, as in ONNX opset 18)."""

    value_inputs = (1,)

    def check_attrs(self) -> None:
        check_io(self, 1, 1, outputs=None)
        sizes = self.attrs["size_splits"]
        if sizes and (len(sizes) != len(self.outputs) or min(sizes) < 0):
            self.fail(f"size_splits {sizes} must be {len(self.outputs)} sizes >= 0, one per output")

    def _sizes(self) -> tuple[int, list[int]]:
        shape = self.inputs[0].shape
        axis = normalize_axis(self, self.attrs["axis"], len(shape))
        sizes = int_vector(self, 1) or self.attrs["size_splits"]
        if len(sizes) not in (0, len(self.outputs)) or min(sizes, default=0) < 0:
            self.fail(f"split sizes {sizes} must be {len(self.outputs)} sizes >= 0, one per output")
        if not sizes:
            sizes = split_sizes(shape[axis], len(self.outputs))
        if sum(sizes) != shape[axis]:
            self.fail(f"size_splits {sizes} do not add up to dim {shape[axis]} of axis {axis}")
        return axis, sizes

    def infer_shapes(self) -> list[tuple[int, ...]]:
        shape, (axis, sizes) = self.inputs[0].shape, self._sizes()
        return [shape[:axis] + (size,) + shape[axis + 1:] for size in sizes]

    def resize(self) -> None:
        axis, sizes = self._sizes()
        bounds = split_offsets(sizes)
        self.slices = [(slice(None),) * axis + (slice(a, b),) for a, b in itertools.pairwise(bounds)]

    def execute(self) -> None:
        x = self.inputs[0].data
        for out, index in zip(self.outputs, self.slices, strict=True):
            np.copyto(out.data, x[index])


@register("Gather", ALL)
class Gather(DataMovement):
    """Picks entries along ``axis`` by integer indices (negative ones count from the end)."""

    io = (2, 0)

    def check_attrs(self) -> None:
        super().check_attrs()
        if self.inputs[1].dtype.kind not in "iu":
            self.fail(f"indices must be integers, got {self.inputs[1].dtype.name}")

    def infer_shapes(self) -> list[tuple[int, ...]]:
        shape = self.inputs[0].shape
        axis = normalize_axis(self, self.attrs["axis"], len(shape))
        return [shape[:axis] + self.inputs[1].shape + shape[axis + 1:]]

    def resize(self) -> None:
        self.axis = self.attrs["axis"] % len(self.inputs[0].shape)

    def execute(self) -> None:
        np.take(self.inputs[0].data, self.inputs[1].data, axis=self.axis, out=self.outputs[0].data)


@register("BroadcastTo", ALL)
class BroadcastTo(DataMovement):
    """ONNX Expand: the input broadcast with ``shape`` (both ways)."""

    io = (2, 0)
    value_inputs = (1,)

    def infer_shapes(self) -> list[tuple[int, ...]]:
        shape, target = self.inputs[0].shape, checked_dims(self, int_vector(self, 1), "shape")
        try:
            return [np.broadcast_shapes(shape, target)]
        except ValueError:
            self.fail(f"input shape {shape} does not broadcast with {target}")

    def execute(self) -> None:
        np.copyto(self.outputs[0].data, self.inputs[0].data)


@register("Shape", ALL)
class Shape(DataMovement):
    """The input's shape from ``start`` to ``end`` (clamped, negative counts from the end), int64."""

    shape_only = True

    def output_dtypes(self) -> list[np.dtype]:
        return [np.dtype(np.int64)]

    def _dims(self) -> tuple[int, ...]:
        return self.inputs[0].shape[slice(self.attrs["start"], self.attrs["end"])]

    def infer_shapes(self) -> list[tuple[int, ...]]:
        return [(len(self._dims()),)]

    def resize(self) -> None:
        self.dims = np.array(self._dims(), dtype=np.int64)

    def execute(self) -> None:
        np.copyto(self.outputs[0].data, self.dims)


@register("ConstantOfShape", [np.int64])
class ConstantOfShape(DataMovement):
    """A tensor of the shape given by the input, filled with ``value`` as ``data_type``."""

    value_inputs = (0,)

    def check_attrs(self) -> None:
        super().check_attrs()
        if self.attrs["data_type"] not in DTYPES:
            self.fail(f"data_type must be one of {sorted(DTYPES)}, got {self.attrs['data_type']!r}")
        self.dtype = DTYPES[self.attrs["data_type"]]
        self.fill = np.array(self.attrs["value"]).astype(self.dtype)[()]

    def output_dtypes(self) -> list[np.dtype]:
        return [self.dtype]

    def infer_shapes(self) -> list[tuple[int, ...]]:
        return [checked_dims(self, int_vector(self, 0), "shape")]

    def execute(self) -> None:
        self.outputs[0].data.fill(self.fill)


@register("Cast", ALL + (BFLOAT16,) + NARROW_INTS + NARROW_FLOATS)
class Cast(DataMovement):
    """Converts to ``to`` (float to integer truncates toward zero, to int4/int2 wraps around; to
    bfloat16, float8 and float4 rounds to nearest even, float8/float4 clipped where ``saturate``)."""

    def check_attrs(self) -> None:
        super().check_attrs()
        if self.attrs["to"] not in DTYPES:
            self.fail(f"to must be one of {sorted(DTYPES)}, got {self.attrs['to']!r}")

    def output_dtypes(self) -> list[np.dtype]:
        return [DTYPES[self.attrs["to"]]]

    def infer_shapes(self) -> list[tuple[int, ...]]:
        return [self.inputs[0].shape]

    def execute(self) -> None:
        out = self.outputs[0]
        if out.dtype in NARROW_FLOATS:
            out.data[...] = saturating_cast(self.inputs[0].data, out.dtype, self.attrs["saturate"])
        else:
            np.copyto(out.data, self.inputs[0].data, casting="unsafe")
