"""Normalisation kernels: BatchNorm (inference form) and LRN over channel axis 1, LayerNorm over trailing axes."""

from __future__ import annotations

import math
import operator

import numpy as np

from lite.kernels import fast
from lite.kernels.base import NativeKernel
from lite.kernels.elementwise import check_io
from lite.kernels.registry import register
from lite.ops.dtypes import FLOATS
from lite.ops.norm import batchnorm_affine, lrn_window, norm_axis, stats_dtype


def checked_epsilon(kernel: NativeKernel) -> float:
    """The kernel's ``epsilon`` attribute; fails unless it is a non-negative number."""
    epsilon = float(kernel.attrs["epsilon"])
    if not epsilon >= 0:
        kernel.fail(f"epsilon must be non-negative, got {epsilon}")
    return epsilon


def per_channel_shapes(kernel: NativeKernel) -> tuple[int, ...]:
    """x's shape, once x is (N, C, ...) and every other input has shape (C,)."""
    x = kernel.input_shape(0)
    if len(x) < 2:
        kernel.fail(f"expects an input of rank 2 or more (N, C, ...), got shape {list(x)}")
    for tensor in kernel.inputs[1:]:
        if tensor.shape != (x[1],):
            kernel.fail(f"{tensor.name!r} must have shape ({x[1]},) for {x[1]} channels, got {list(tensor.shape)}")
    return x


@register("BatchNorm", dtypes=FLOATS)
class BatchNorm(NativeKernel):
    """y = (x - mean) / sqrt(var + epsilon) * scale + bias over channel axis 1.

    Inputs x (N, C, ...), scale, bias, mean, var (each (C,)). The statistics fold into one
    multiplier and one offset per channel (in prepare when they are constants), so execute
    is a multiply and an add.
    """

    def check_attrs(self) -> None:
        check_io(self, 5)
        self.epsilon = checked_epsilon(self)
        self.folded: tuple[np.ndarray, np.ndarray] | None = None

    def infer_shapes(self) -> list[tuple[int, ...]]:
        return [per_channel_shapes(self)]

    def prepare(self) -> None:
        if all(t.is_const for t in self.inputs[1:]):
            self.folded = self.fold()

    def fold(self) -> tuple[np.ndarray, np.ndarray]:
        """(multiplier, offset) per channel, computed in float64 and cast to x's dtype."""
        multiplier, offset = batchnorm_affine(*(t.data for t in self.inputs[1:]), self.epsilon)
        dtype = self.inputs[0].dtype
        return multiplier.astype(dtype), offset.astype(dtype)

    def execute(self) -> None:
        x, out = self.inputs[0].data, self.outputs[0].data
        multiplier, offset = self.folded if self.folded is not None else self.fold()
        channel = (-1,) + (1,) * (x.ndim - 2)
        np.multiply(x, multiplier.reshape(channel), out=out)
        np.add(out, offset.reshape(channel), out=out)


@register("LRN", dtypes=FLOATS)
class LRN(NativeKernel):
    """Local response normalisation across channels (ONNX LRN).

    y = x / (bias + alpha / size * sum(x^2 over channels c - (size-1)//2 .. c + size//2)) ** beta.
    The squares go into a channel-padded workspace buffer and the window sum is one add
    per window position.
    """

    def check_attrs(self) -> None:
        check_io(self, 1)
        self.size = int(self.attrs["size"])
        if self.size < 1:
            self.fail(f"size must be a positive integer, got {self.size}")
        self.alpha, self.beta, self.bias = (float(self.attrs[k]) for k in ("alpha", "beta", "bias"))

    def infer_shapes(self) -> list[tuple[int, ...]]:
        x = self.input_shape(0)
        if len(x) < 2:
            self.fail(f"expects an input of rank 2 or more (N, C, ...), got shape {list(x)}")
        return [x]

    def execute(self) -> None:
        x, out = self.inputs[0].data, self.outputs[0].data
        channels = x.shape[1]
        # NOTE: channels farther than C - 1 away never fall in a window, so the pads stop there.
        before, after = (min(reach, channels - 1) for reach in lrn_window(self.size))
        squares = self.workspace.array((x.shape[0], before + channels + after, *x.shape[2:]), x.dtype, 0)
        squares[:, :before] = 0
        squares[:, before + channels:] = 0
        np.square(x, out=squares[:, before:before + channels])
        window = self.workspace.array(x.shape, x.dtype, 1)
        np.copyto(window, squares[:, :channels])
        for start in range(1, before + after + 1):
            np.add(window, squares[:, start:start + channels], out=window)
        np.multiply(window, self.alpha / self.size, out=window)
        np.add(window, self.bias, out=window)
        np.power(window, -self.beta, out=window)
        np.multiply(x, window, out=out)


@register("LayerNormFusion", dtypes=FLOATS)
class LayerNormFusion(NativeKernel):
    """y = (x - mean) / sqrt(var + epsilon) * scale + bias, statistics over the trailing axes.

    Inputs x, scale and an optional bias, both broadcasting to ``x.shape[axis:]``. The
    statistics are taken in ``stats_dtype`` (float32 for float16 x, as ONNX's stash_type=1);
    the optional second and third outputs are the mean and 1 / sqrt(var + epsilon) in float32,
    shaped ``x.shape[:axis] + (1,) * (rank - axis)``.
    """

    def check_attrs(self) -> None:
        check_io(self, 2, 1, outputs=None)
        if len(self.outputs) > 3:
            self.fail(f"has at most 3 outputs (y, mean, inverse std dev), got {len(self.outputs)}")
        self.epsilon = checked_epsilon(self)

    def infer_shapes(self) -> list[tuple[int, ...]]:
        x = self.input_shape(0)
        try:
            self.axis = norm_axis(len(x), int(self.attrs["begin_norm_axis"]))
        except ValueError as exc:
            self.fail(str(exc))
        normalised = x[self.axis:]
        for tensor in self.inputs[1:]:
            if tensor is not None and not _broadcasts_to(tensor.shape, normalised):
                self.fail(f"{tensor.name!r} of shape {list(tensor.shape)} does not broadcast to the "
                          f"normalised shape {list(normalised)}")
        stats = x[:self.axis] + (1,) * len(normalised)
        return [x, stats, stats][:len(self.outputs)]

    def output_dtypes(self) -> list[np.dtype]:
        return [self.inputs[0].dtype] + [np.dtype(np.float32)] * (len(self.outputs) - 1)

    def resize(self) -> None:
        self.compiled = len(self.outputs) == 1 and self.inputs[0].dtype.name in fast.FAST_DTYPES and fast.enabled()
        self.affine_key: tuple | None = None
        if self.compiled:
            from lite.kernels.fast import norm  # NOTE: imports the compiler: only when used

            norm.warm(self.inputs[0].dtype.name)
            self.layer_norm = norm.layer_norm

    def execute(self) -> None:
        if self.compiled:
            self.execute_compiled()
        else:
            self.execute_numpy()

    def affine(self) -> tuple[np.ndarray, np.ndarray]:
        """Scale and bias as writable (D,) arrays of x's dtype, D the normalised size."""
        x = self.inputs[0]
        normalised = x.shape[self.axis:]
        bias = self.inputs[2] if len(self.inputs) > 2 else None
        return tuple(np.array(np.broadcast_to(v, normalised).reshape(-1), x.dtype, copy=True)
                     for v in (self.inputs[1].data, 0 if bias is None else bias.data))

    def execute_compiled(self) -> None:
        """``lite.kernels.fast.norm.layer_norm``: one pass per row."""
        x, out = self.inputs[0].data, self.outputs[0].data
        key = tuple(None if t is None else t.data for t in self.inputs[1:])
        if self.affine_key is None or not all(map(operator.is_, key, self.affine_key)):
            self.affine_key, self.scale_bias = key, self.affine()  # NOTE: once, for constant scale and bias
        rows = math.prod(x.shape[:self.axis])
        flat = fast.taken(x.reshape(rows, -1))  # NOTE: the type it was compiled for
        self.layer_norm(flat, *self.scale_bias, x.dtype.type(self.epsilon), out.reshape(rows, -1))

    def execute_numpy(self) -> None:
        x, out = self.inputs[0].data, self.outputs[0].data
        rows = math.prod(x.shape[:self.axis])
        dtype = stats_dtype(x.dtype)
        flat = x.reshape(rows, -1)
        mean = flat.mean(axis=1, keepdims=True, dtype=dtype)
        centered = self.workspace.array(flat.shape, dtype, 0)
        np.subtract(flat, mean, out=centered)
        squares = self.workspace.array(flat.shape, dtype, 1)
        np.multiply(centered, centered, out=squares)
        inv_std = 1.0 / np.sqrt(squares.mean(axis=1, keepdims=True) + dtype.type(self.epsilon))
        np.multiply(centered, inv_std, out=centered)
        np.multiply(centered.reshape(x.shape), self.inputs[1].data, out=out)
        if len(self.inputs) > 2 and self.inputs[2] is not None:
            np.add(out, self.inputs[2].data, out=out)
        for tensor, value in zip(self.outputs[1:], (mean, inv_std), strict=False):
            tensor.data[...] = value.reshape(tensor.shape)


def _broadcasts_to(shape: tuple[int, ...], target: tuple[int, ...]) -> bool:
    try:
        return np.broadcast_shapes(shape, target) == target
    except ValueError:
        return False


class ChannelGroupNorm(NativeKernel):
    """Base of InstanceNorm and GroupNorm: statistics per sample over groups of channels and the
    spatial axes, then a per-channel affine (inputs x (N, C, ...), scale (C), bias (C))."""

    def check_attrs(self) -> None:
        check_io(self, 3)
        self.epsilon = checked_epsilon(self)

    def groups(self, channels: int) -> int:
        raise NotImplementedError

    def infer_shapes(self) -> list[tuple[int, ...]]:
        x = per_channel_shapes(self)
        self.n_groups = self.groups(x[1])
        return [x]

    def resize(self) -> None:
        self.compiled = self.inputs[0].dtype.name in fast.FAST_DTYPES and fast.enabled()
        self.affine_key: tuple | None = None
        if self.compiled:
            from lite.kernels.fast import norm  # NOTE: imports the compiler: only when used

            norm.warm_group_norm(self.inputs[0].dtype.name)
            self.group_norm = norm.group_norm

    def execute(self) -> None:
        if self.compiled:
            self.execute_compiled()
        else:
            self.execute_numpy()

    def execute_compiled(self) -> None:
        """``lite.kernels.fast.norm.group_norm`` on x viewed as (N, groups, channels a group, positions)."""
        x, out = self.inputs[0].data, self.outputs[0].data
        key = (self.inputs[1].data, self.inputs[2].data)
        if self.affine_key is None or not all(map(operator.is_, key, self.affine_key)):
            self.affine_key = key  # NOTE: once, for constant scale and bias
            self.scale_bias = tuple(np.array(v.reshape(self.n_groups, -1), x.dtype, copy=True) for v in key)
        grouped = fast.taken(x.reshape(x.shape[0], self.n_groups, x.shape[1] // self.n_groups, -1))
        self.group_norm(grouped, *self.scale_bias, x.dtype.type(self.epsilon), out.reshape(grouped.shape))

    def execute_numpy(self) -> None:
        x, out = self.inputs[0].data, self.outputs[0].data
        dtype = stats_dtype(x.dtype)
        grouped = x.reshape(x.shape[0], self.n_groups, -1).astype(dtype, copy=False)
        mean = grouped.mean(axis=2, keepdims=True)
        centered = grouped - mean
        inv_std = 1.0 / np.sqrt((centered * centered).mean(axis=2, keepdims=True) + dtype.type(self.epsilon))
        channel = (-1,) + (1,) * (x.ndim - 2)
        normalised = (centered * inv_std).reshape(x.shape)
        np.multiply(normalised, self.inputs[1].data.reshape(channel), out=out, casting="same_kind")
        np.add(out, self.inputs[2].data.reshape(channel), out=out)


@register("InstanceNorm", dtypes=FLOATS)
class InstanceNorm(ChannelGroupNorm):
    """(x - mean) / sqrt(var + epsilon) * scale + bias, statistics per sample and channel (ONNX
    InstanceNormalization)."""

    def groups(self, channels: int) -> int:
        return channels


@register("GroupNorm", dtypes=FLOATS)
class GroupNorm(ChannelGroupNorm):
    """Statistics per sample over each of ``num_groups`` groups of C / num_groups channels, then
    a per-channel scale and bias (ONNX GroupNormalization, opset 21)."""

    def groups(self, channels: int) -> int:
        groups = int(self.attrs["num_groups"])
        if groups < 1 or channels % groups:
            self.fail(f"num_groups {groups} must be >= 1 and divide the {channels} channels")
        return groups
