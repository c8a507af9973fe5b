"""Normalisation kernels: BatchNorm (inference form) and LRN, channel axis 1."""

from __future__ import annotations

import numpy as np

from lite.kernels.base import NativeKernel
from lite.kernels.elementwise import check_io
from lite.kernels.registry import register
from lite.ops.dtypes import FLOATS
from lite.ops.norm import batchnorm_affine, lrn_window


@register("BatchNorm", dtypes=FLOATS)
class BatchNorm(NativeKernel):
    """y = (x - mean) / sqrt(var + epsilon) * scale + bias over channel axis 1.

    Inputs x (N, C, ...), scale, bias, mean, var (each (C,)). The statistics fold into one
    multiplier and one offset per channel (in prepare when they are constants), so execute
    is a multiply and an add.
    """

    def check_attrs(self) -> None:
        check_io(self, 5)
        self.epsilon = float(self.attrs["epsilon"])
        if not self.epsilon >= 0:
            self.fail(f"epsilon must be non-negative, got {self.epsilon}")
        self.folded: tuple[np.ndarray, np.ndarray] | None = None

    def infer_shapes(self) -> list[tuple[int, ...]]:
        x = self.input_shape(0)
        if len(x) < 2:
            self.fail(f"expects an input of rank 2 or more (N, C, ...), got shape {list(x)}")
        for tensor in self.inputs[1:]:
            if tensor.shape != (x[1],):
                self.fail(f"{tensor.name!r} must have shape ({x[1]},) for {x[1]} channels, got {list(tensor.shape)}")
        return [x]

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
