"""Indexing ops: gathers and scatters, cumulative sums, ranges, tiling, top-k and friends."""

from __future__ import annotations

import math

import numpy as np

from lite.kernels.base import NativeKernel
from lite.kernels.elementwise import check_io
from lite.kernels.registry import register
from lite.kernels.shape import checked_dims, int_vector, normalize_axis
from lite.ops.dtypes import ALL, FLOATS, NUMBERS
from lite.ops.indexing import depth_to_space_order, einsum_output_shape, range_length, top_k_order
from lite.schema.graph import DTYPES

INT64 = np.dtype(np.int64)


def scalar(kernel: NativeKernel, index: int, what: str) -> np.generic:
    """The one value of input ``index`` (a scalar or a 1-element tensor)."""
    value = kernel.value(index)
    if value is None or value.size != 1:
        kernel.fail(f"{what} (input {index}) must hold one value, got shape {None if value is None else value.shape}")
    return value.reshape(-1)[0]


def in_range(kernel: NativeKernel, indices: np.ndarray, dim: int) -> np.ndarray:
    """``indices`` with negative ones counted from the end; fails on any outside [-dim, dim)."""
    if indices.size and (indices.min() < -dim or indices.max() >= dim):
        kernel.fail(f"an index is out of range for an axis of size {dim}: {indices.min()}..{indices.max()}")
    return np.where(indices < 0, indices + dim, indices)


class Indexing(NativeKernel):
    """Base: ``io`` is (required inputs, optional inputs); integer index inputs are checked."""

    io: tuple[int, int] = (1, 0)
    n_outputs = 1
    index_inputs: tuple[int, ...] = ()

    def check_attrs(self) -> None:
        check_io(self, *self.io, outputs=self.n_outputs)
        for i in self.index_inputs:
            if i < len(self.inputs) and self.inputs[i] is not None and self.inputs[i].dtype.kind not in "iu":
                self.fail(f"input {i} must be integers, got {self.inputs[i].dtype.name}")


@register("Range", NUMBERS)
class Range(Indexing):
    """start, start + delta, ... up to (not including) limit; three scalar inputs of one dtype."""

    io = (3, 0)
    value_inputs = (0, 1, 2)

    def infer_shapes(self) -> list[tuple[int, ...]]:
        start, limit, delta = (scalar(self, i, what) for i, what in enumerate(("start", "limit", "delta")))
        try:
            n = range_length(start, limit, delta)
        except ValueError as exc:
            self.fail(str(exc))
        self.start, self.delta = start, delta
        return [checked_dims(self, [n], "Range's length")]

    def execute(self) -> None:
        out = self.outputs[0].data
        np.multiply(np.arange(out.size, dtype=out.dtype), self.delta, out=out, casting="unsafe")
        np.add(out, self.start, out=out, casting="unsafe")


@register("CumSum", NUMBERS)
class CumSum(Indexing):
    """Cumulative sum along the axis of input 1 (exclusive: starting at 0; reverse: from the end)."""

    io = (2, 0)
    index_inputs = (1,)

    def infer_shapes(self) -> list[tuple[int, ...]]:
        return [self.inputs[0].shape]

    def execute(self) -> None:
        x, out = self.inputs[0].data, self.outputs[0].data
        axis = normalize_axis(self, int(self.inputs[1].data.reshape(-1)[0]), x.ndim)
        if self.attrs["reverse"]:
            x = np.flip(x, axis)
        total = np.cumsum(x, axis=axis, dtype=out.dtype)
        if self.attrs["exclusive"]:
            total = np.concatenate([np.zeros_like(np.take(total, [0], axis=axis)),
                                    np.take(total, range(x.shape[axis] - 1), axis=axis)], axis=axis)
        np.copyto(out, np.flip(total, axis) if self.attrs["reverse"] else total)


@register("GatherElements", ALL)
class GatherElements(Indexing):
    """out[i][j][k] = data[i][index[i][j][k]][k] along ``axis`` (ONNX GatherElements)."""

    io = (2, 0)
    index_inputs = (1,)

    def infer_shapes(self) -> list[tuple[int, ...]]:
        data, indices = self.inputs[0].shape, self.inputs[1].shape
        self.axis = normalize_axis(self, self.attrs["axis"], len(data))
        if len(indices) != len(data):
            self.fail(f"indices of rank {len(indices)} for data of rank {len(data)}")
        return [indices]

    def execute(self) -> None:
        data = self.inputs[0].data
        indices = in_range(self, self.inputs[1].data, data.shape[self.axis])
        np.copyto(self.outputs[0].data, np.take_along_axis(data, indices, axis=self.axis))


@register("GatherNd", ALL)
class GatherNd(Indexing):
    """Slices of data picked by the index tuples in the last axis of ``indices``, after
    ``batch_dims`` leading axes shared by both (ONNX GatherND)."""

    io = (2, 0)
    index_inputs = (1,)

    def infer_shapes(self) -> list[tuple[int, ...]]:
        data, indices, b = self.inputs[0].shape, self.inputs[1].shape, int(self.attrs["batch_dims"])
        if not indices or not 0 <= b < min(len(data), len(indices)) or data[:b] != indices[:b]:
            self.fail(f"batch_dims {b} does not fit data {list(data)} and indices {list(indices)}")
        depth = indices[-1]
        if b + depth > len(data):
            self.fail(f"index tuples of length {depth} go beyond the rank of data {list(data)}")
        return [indices[:-1] + data[b + depth:]]

    def execute(self) -> None:
        data, indices, b = self.inputs[0].data, self.inputs[1].data, int(self.attrs["batch_dims"])
        batches = math.prod(data.shape[:b])
        flat_data = data.reshape(batches, *data.shape[b:])
        flat_indices = indices.reshape(batches, -1, indices.shape[-1])
        out = self.outputs[0].data.reshape(batches, flat_indices.shape[1], *data.shape[b + indices.shape[-1]:])
        dims = flat_data.shape[1:1 + indices.shape[-1]]
        for batch in range(batches):
            index = tuple(in_range(self, flat_indices[batch, :, k], d) for k, d in enumerate(dims))
            out[batch] = flat_data[batch][index]


_REDUCERS = {"ADD": np.add, "MUL": np.multiply, "MAX": np.maximum, "MIN": np.minimum}


def scatter(kernel: NativeKernel, out: np.ndarray, index: tuple, updates: np.ndarray) -> None:
    """Writes ``updates`` at ``index`` of ``out`` by the kernel's reduction (NONE: assignment)."""
    reduction = kernel.attrs["reduction"]
    if reduction == "NONE":
        out[index] = updates
    elif reduction in _REDUCERS:
        _REDUCERS[reduction].at(out, index, updates)
    else:
        kernel.fail(f"reduction must be one of NONE, {', '.join(_REDUCERS)}, got {reduction!r}")


@register("ScatterNd", ALL)
class ScatterNd(Indexing):
    """A copy of data with ``updates`` written at the index tuples of ``indices`` (ONNX ScatterND)."""

    io = (3, 0)
    index_inputs = (1,)

    def infer_shapes(self) -> list[tuple[int, ...]]:
        data, indices, updates = (self.inputs[i].shape for i in range(3))
        if not indices or indices[-1] > len(data) or updates != indices[:-1] + data[indices[-1]:]:
            self.fail(f"updates {list(updates)} do not fit data {list(data)} and indices {list(indices)}")
        return [data]

    def execute(self) -> None:
        data, indices, updates = (self.inputs[i].data for i in range(3))
        out = self.outputs[0].data
        np.copyto(out, data)
        depth = indices.shape[-1]
        index = tuple(in_range(self, indices[..., k], data.shape[k]) for k in range(depth))
        scatter(self, out, index, updates)


@register("ScatterElements", ALL)
class ScatterElements(Indexing):
    """A copy of data with updates[i][j] written at data[indices[i][j]][j] along ``axis``."""

    io = (3, 0)
    index_inputs = (1,)

    def infer_shapes(self) -> list[tuple[int, ...]]:
        data, indices, updates = (self.inputs[i].shape for i in range(3))
        self.axis = normalize_axis(self, self.attrs["axis"], len(data))
        if indices != updates or len(indices) != len(data):
            self.fail(f"indices {list(indices)} and updates {list(updates)} must match, with data's rank")
        return [data]

    def execute(self) -> None:
        data, indices, updates = (self.inputs[i].data for i in range(3))
        out = self.outputs[0].data
        np.copyto(out, data)
        grid = list(np.indices(indices.shape, sparse=True))
        grid[self.axis] = in_range(self, indices, data.shape[self.axis])
        scatter(self, out, tuple(grid), updates)


@register("TileFusion", ALL)
class TileFusion(Indexing):
    """x repeated ``repeats[i]`` times along axis i (input 1, int64)."""

    io = (2, 0)
    value_inputs = (1,)

    def infer_shapes(self) -> list[tuple[int, ...]]:
        shape, repeats = self.inputs[0].shape, int_vector(self, 1)
        if len(repeats) != len(shape) or min(repeats, default=0) < 0:
            self.fail(f"repeats {repeats} must be {len(shape)} values >= 0")
        self.repeats = repeats
        return [checked_dims(self, [d * r for d, r in zip(shape, repeats, strict=True)], "the tiled shape")]

    def execute(self) -> None:
        np.copyto(self.outputs[0].data, np.tile(self.inputs[0].data, self.repeats))


@register("Trilu", ALL)
class Trilu(Indexing):
    """The upper (or lower) triangle of the last two axes, shifted by the diagonal k of input 1."""

    io = (1, 1)
    index_inputs = (1,)

    def infer_shapes(self) -> list[tuple[int, ...]]:
        if len(self.inputs[0].shape) < 2:
            self.fail(f"needs 2 or more dims, got shape {list(self.inputs[0].shape)}")
        return [self.inputs[0].shape]

    def execute(self) -> None:
        k = int(self.inputs[1].data.reshape(-1)[0]) if len(self.inputs) > 1 and self.inputs[1] is not None else 0
        x = self.inputs[0].data
        keep = np.triu if self.attrs["upper"] else np.tril
        np.copyto(self.outputs[0].data, keep(x, k) if x.size else x)


@register("OneHot", NUMBERS)
class OneHot(Indexing):
    """values[1] where an index names the position along the new ``axis`` of size depth, else
    values[0]; negative indices count from the end, others out of range give all values[0]."""

    io = (3, 0)
    value_inputs = (1,)

    def infer_shapes(self) -> list[tuple[int, ...]]:
        depth = int(scalar(self, 1, "depth"))
        if depth < 0:
            self.fail(f"depth must be >= 0, got {depth}")
        if self.inputs[2].size != 2:
            self.fail(f"values must hold [off, on], got shape {list(self.inputs[2].shape)}")
        shape = list(self.inputs[0].shape)
        self.axis = normalize_axis(self, self.attrs["axis"], len(shape) + 1)
        self.depth = depth
        return [checked_dims(self, shape[:self.axis] + [depth] + shape[self.axis:], "the one-hot shape")]

    def output_dtypes(self) -> list[np.dtype]:
        return [self.inputs[2].dtype]

    def execute(self) -> None:
        indices = self.inputs[0].data.astype(np.int64)
        indices = np.where(indices < 0, indices + self.depth, indices)
        positions = np.arange(self.depth).reshape((-1,) + (1,) * (indices.ndim - self.axis))
        hot = np.expand_dims(indices, self.axis) == positions
        off, on = self.inputs[2].data.reshape(-1)
        np.copyto(self.outputs[0].data, np.where(hot, on, off))


class ArgReduce(Indexing):
    """Index of the max (min) along ``axis``; the first one, or the last with select_last_index."""

    def infer_shapes(self) -> list[tuple[int, ...]]:
        shape = self.inputs[0].shape
        self.axis = normalize_axis(self, self.attrs["axis"], len(shape))
        if shape[self.axis] == 0:
            self.fail(f"cannot take the arg-{self.pick.__name__} of an empty axis {self.axis}")
        if self.attrs["keep_dims"]:
            return [shape[:self.axis] + (1,) + shape[self.axis + 1:]]
        return [shape[:self.axis] + shape[self.axis + 1:]]

    def output_dtypes(self) -> list[np.dtype]:
        return [INT64]

    def execute(self) -> None:
        x, axis = self.inputs[0].data, self.axis
        if self.attrs["select_last_index"]:
            found = x.shape[axis] - 1 - self.pick(np.flip(x, axis), axis=axis, keepdims=True)
        else:
            found = self.pick(x, axis=axis, keepdims=True)
        np.copyto(self.outputs[0].data, found.reshape(self.outputs[0].data.shape))


@register("ArgMaxFusion", NUMBERS)
class ArgMaxFusion(ArgReduce):
    pick = staticmethod(np.argmax)


@register("ArgMinFusion", NUMBERS)
class ArgMinFusion(ArgReduce):
    pick = staticmethod(np.argmin)


@register("TopKFusion", NUMBERS)
class TopKFusion(Indexing):
    """The k largest (or smallest) values along ``axis`` and their int64 indices, sorted, ties
    by lower index first (ONNX TopK)."""

    io = (2, 0)
    n_outputs = 2
    value_inputs = (1,)

    def infer_shapes(self) -> list[tuple[int, ...]]:
        shape, k = self.inputs[0].shape, int(scalar(self, 1, "k"))
        self.axis = normalize_axis(self, self.attrs["axis"], len(shape))
        if not 0 <= k <= shape[self.axis]:
            self.fail(f"k={k} is not in [0, {shape[self.axis]}] (the axis size)")
        self.k = k
        out = shape[:self.axis] + (k,) + shape[self.axis + 1:]
        return [out, out]

    def output_dtypes(self) -> list[np.dtype]:
        return [self.inputs[0].dtype, INT64]

    def execute(self) -> None:
        x = self.inputs[0].data
        order = np.take(top_k_order(x, self.axis, bool(self.attrs["largest"])), range(self.k), axis=self.axis)
        np.copyto(self.outputs[1].data, order)
        np.copyto(self.outputs[0].data, np.take_along_axis(x, order, axis=self.axis))


@register("Einsum", NUMBERS)
class Einsum(Indexing):
    """numpy's einsum of the inputs by ``equation`` (ONNX Einsum)."""

    io = (1, 64)

    def infer_shapes(self) -> list[tuple[int, ...]]:
        try:
            return [einsum_output_shape(self.attrs["equation"], [t.shape for t in self.inputs])]
        except ValueError as exc:
            self.fail(str(exc))

    def execute(self) -> None:
        result = np.einsum(self.attrs["equation"], *(t.data for t in self.inputs))
        np.copyto(self.outputs[0].data, result, casting="unsafe")


@register("DepthToSpace", ALL)
class DepthToSpace(Indexing):
    """(N, C, H, W) -> (N, C / b^2, H * b, W * b), DCR or CRD order (ONNX DepthToSpace)."""

    def infer_shapes(self) -> list[tuple[int, ...]]:
        shape, b = self.inputs[0].shape, int(self.attrs["block_size"])
        if len(shape) != 4 or b < 1 or shape[1] % (b * b):
            self.fail(f"block_size {b} does not divide the channels of a 4-D input {list(shape)} by b^2")
        n, c, h, w = shape
        return [(n, c // (b * b), h * b, w * b)]

    def execute(self) -> None:
        x, b = self.inputs[0].data, int(self.attrs["block_size"])
        n, c, h, w = x.shape
        split, permutation = depth_to_space_order(bool(self.attrs["mode_crd"]))
        dims = [b if part == "b" else c // (b * b) for part in split]
        moved = x.reshape(n, *dims, h, w).transpose(permutation)
        np.copyto(self.outputs[0].data, moved.reshape(self.outputs[0].data.shape))


@register("SpaceToDepth", ALL)
class SpaceToDepth(Indexing):
    """(N, C, H, W) -> (N, C * b^2, H / b, W / b), DCR or CRD order (ONNX SpaceToDepth)."""

    def infer_shapes(self) -> list[tuple[int, ...]]:
        shape, b = self.inputs[0].shape, int(self.attrs["block_size"])
        if len(shape) != 4 or b < 1 or shape[2] % b or shape[3] % b:
            self.fail(f"block_size {b} does not divide the height and width of a 4-D input {list(shape)}")
        n, c, h, w = shape
        return [(n, c * b * b, h // b, w // b)]

    def execute(self) -> None:
        x, b = self.inputs[0].data, int(self.attrs["block_size"])
        n, c, h, w = x.shape
        order = (0, 1, 3, 5, 2, 4) if self.attrs["mode_crd"] else (0, 3, 5, 1, 2, 4)
        moved = x.reshape(n, c, h // b, b, w // b, b).transpose(order)
        np.copyto(self.outputs[0].data, moved.reshape(self.outputs[0].data.shape))


@register("NonZero", ALL)
class NonZero(Indexing):
    """The indices of the non-zero elements, int64 of shape (rank, count): a shape that depends
    on the data, so the runtime infers it at every predict."""

    value_inputs = (0,)

    def infer_shapes(self) -> list[tuple[int, ...]]:
        self.found = np.array(np.nonzero(self.value(0)), dtype=np.int64).reshape(self.inputs[0].data.ndim, -1)
        return [self.found.shape]

    def output_dtypes(self) -> list[np.dtype]:
        return [INT64]

    def execute(self) -> None:
        np.copyto(self.outputs[0].data, self.found)


@register("Size", ALL)
class Size(Indexing):
    """The element count of x, an int64 scalar (known from shapes alone)."""

    shape_only = True

    def infer_shapes(self) -> list[tuple[int, ...]]:
        return [()]

    def output_dtypes(self) -> list[np.dtype]:
        return [INT64]

    def execute(self) -> None:
        self.outputs[0].data[...] = math.prod(self.inputs[0].shape)


@register("Hardmax", FLOATS)
class Hardmax(Indexing):
    """1 at the first maximum along ``axis``, 0 elsewhere."""

    def infer_shapes(self) -> list[tuple[int, ...]]:
        self.axis = normalize_axis(self, self.attrs["axis"], len(self.inputs[0].shape))
        return [self.inputs[0].shape]

    def execute(self) -> None:
        x, out = self.inputs[0].data, self.outputs[0].data
        out[...] = 0
        if x.size:
            np.put_along_axis(out, np.argmax(x, axis=self.axis, keepdims=True), 1, axis=self.axis)


@register("LpNormalization", FLOATS)
class LpNormalization(Indexing):
    """x / ||x||_p along ``axis`` (p = 1 or 2); a zero norm gives 0."""

    def check_attrs(self) -> None:
        super().check_attrs()
        if int(self.attrs["p"]) not in (1, 2):
            self.fail(f"p must be 1 or 2, got {self.attrs['p']}")

    def infer_shapes(self) -> list[tuple[int, ...]]:
        self.axis = normalize_axis(self, self.attrs["axis"], len(self.inputs[0].shape))
        return [self.inputs[0].shape]

    def execute(self) -> None:
        x = self.inputs[0].data
        norm = np.linalg.norm(x, ord=int(self.attrs["p"]), axis=self.axis, keepdims=True) if x.size else x
        np.copyto(self.outputs[0].data, np.where(norm == 0, 0, x / np.where(norm == 0, 1, norm)))


@register("EyeLike", ALL)
class EyeLike(Indexing):
    """A 2-D matrix of x's shape with ones on the diagonal shifted by k (dtype: data_type or x's)."""

    shape_only = True

    def check_attrs(self) -> None:
        super().check_attrs()
        name = self.attrs["data_type"]
        if name != "UNKNOWN" and name not in DTYPES:
            self.fail(f"data_type must be one of {sorted(DTYPES)}, got {name!r}")

    def infer_shapes(self) -> list[tuple[int, ...]]:
        if len(self.inputs[0].shape) != 2:
            self.fail(f"needs a 2-D input, got shape {list(self.inputs[0].shape)}")
        return [self.inputs[0].shape]

    def output_dtypes(self) -> list[np.dtype]:
        name = self.attrs["data_type"]
        return [self.inputs[0].dtype if name == "UNKNOWN" else DTYPES[name]]

    def execute(self) -> None:
        rows, cols = self.inputs[0].shape
        np.copyto(self.outputs[0].data, np.eye(rows, cols, int(self.attrs["k"]), dtype=self.outputs[0].dtype))
