"""ONNX Resize: NEAREST and (separable, any rank) LINEAR interpolation."""

from __future__ import annotations

import math

import numpy as np

from lite.kernels.base import NativeKernel
from lite.kernels.elementwise import check_io
from lite.kernels.registry import register
from lite.kernels.shape import checked_dims, int_vector
from lite.ops.dtypes import NUMBERS
from lite.ops.resize import resize_scale, resized_dim

METHODS = ("NEAREST", "LINEAR")
COORDINATE_MODES = ("HALF_PIXEL", "ASYMMETRIC", "ALIGN_CORNERS", "PYTORCH_HALF_PIXEL")
NEAREST_MODES = ("ROUND_PREFER_FLOOR", "ROUND_PREFER_CEIL", "FLOOR", "CEIL")


def source_coordinates(mode: str, n_out: int, n_in: int, scale: float) -> np.ndarray:
    """Input coordinates of the ``n_out`` output positions, in float32 as onnxruntime does."""
    x, scale = np.arange(n_out, dtype=np.float32), np.float32(scale)
    if mode == "ASYMMETRIC":
        return x / scale
    if mode == "ALIGN_CORNERS":
        return x * np.float32(n_in - 1) / np.float32(n_out - 1) if n_out > 1 else np.zeros_like(x)
    if mode == "PYTORCH_HALF_PIXEL" and n_out <= 1:
        return np.zeros_like(x)
    return (x + 0.5) / scale - 0.5


# NOTE: coordinates within this of a half count as exact halves, as in onnxruntime: the
# float32 coordinate of an exact tie (7 -> 2 asymmetric: 3.5) can land an ulp to either side.
TIE_TOLERANCE = 1e-6


def nearest_index(coords: np.ndarray, mode: str, n_in: int) -> np.ndarray:
    """The input index each coordinate rounds to under ``mode``, clamped to [0, n_in)."""
    floor = np.floor(coords)
    if mode == "CEIL":
        floor = np.ceil(coords)
    elif mode != "FLOOR":
        fraction = coords - floor
        tie = np.abs(fraction - 0.5) <= TIE_TOLERANCE
        floor += (fraction > 0.5) | tie if mode == "ROUND_PREFER_CEIL" else (fraction > 0.5) & ~tie
    return np.clip(floor, 0, n_in - 1).astype(np.intp)


def linear_taps(coords: np.ndarray, n_in: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Lower and upper input indices and their weights for each coordinate."""
    coords = np.clip(coords, 0, n_in - 1)
    lower = np.floor(coords)
    upper_weight = coords - lower
    lower = lower.astype(np.intp)
    return lower, np.minimum(lower + 1, n_in - 1), 1 - upper_weight, upper_weight


@register("Resize", NUMBERS)
class Resize(NativeKernel):
    """ONNX Resize (inputs x, roi ignored, scales or sizes): NEAREST with every nearest_mode, or
    LINEAR separably along each resized axis; output dims are floor(dim * scale) for scales.

    ``resize`` precomputes, per resized axis, the gather indices (and LINEAR weights);
    ``execute`` gathers along one axis at a time.
    """

    value_inputs = (2, 3)

    def check_attrs(self) -> None:
        check_io(self, 1, 3)
        for name, allowed in (("method", METHODS), ("coordinate_transform_mode", COORDINATE_MODES),
                              ("nearest_mode", NEAREST_MODES)):
            if self.attrs[name] not in allowed:
                self.fail(f"{name} must be one of {allowed}, got {self.attrs[name]!r}")
        self.linear = self.attrs["method"] == "LINEAR"
        if self.linear and self.inputs[0].dtype.kind != "f":
            self.fail(f"LINEAR needs a float input, got {self.inputs[0].dtype.name}")

    def _given(self, index: int) -> np.ndarray | None:
        value = self.value(index)
        return value if value is not None and value.size else None

    def _target(self) -> tuple[tuple[int, ...], list[float]]:
        """Output dims and the per-axis scales the coordinate transform uses."""
        shape = self.inputs[0].shape
        scales, sizes = self._given(2), self._given(3)
        if (scales is None) == (sizes is None):
            self.fail("needs exactly one of scales and sizes")
        if sizes is not None:
            dims = checked_dims(self, int_vector(self, 3), "sizes")
            if len(dims) != len(shape) or any(n == 0 < d for n, d in zip(shape, dims, strict=True)):
                self.fail(f"sizes {dims} must have {len(shape)} dims, 0 on the empty axes of {shape}")
            pairs = zip(shape, dims, strict=True)
            return dims, [float(resize_scale(n, d)) if n else 1.0 for n, d in pairs]
        if scales.dtype.kind != "f" or scales.shape != (len(shape),) or not all(
                0 < s < math.inf for s in scales.tolist()):
            self.fail(f"scales must be {len(shape)} finite floats > 0, got {scales}")
        scales = scales.astype(np.float32)
        if any(n * s >= 2.0**62 for n, s in zip(shape, scales.tolist(), strict=True)):
            self.fail(f"scales {scales} give an absurd output shape for {shape}")
        dims = [resized_dim(n, s) for n, s in zip(shape, scales, strict=True)]
        return checked_dims(self, dims, "output shape"), scales.tolist()

    def infer_shapes(self) -> list[tuple[int, ...]]:
        return [self._target()[0]]

    def resize(self) -> None:
        shape = list(self.inputs[0].shape)
        mode, steps = self.attrs["coordinate_transform_mode"], []
        for axis, (n_out, scale) in enumerate(zip(*self._target(), strict=True)):
            if scale == 1.0:
                continue
            n_in, shape[axis] = shape[axis], n_out
            coords = source_coordinates(mode, n_out, n_in, scale)
            if self.linear:
                lower, upper, w_lower, w_upper = linear_taps(coords, n_in)
                along = [n_out if a == axis else 1 for a in range(len(shape))]
                steps.append((axis, tuple(shape), lower, upper, w_lower.reshape(along), w_upper.reshape(along)))
            else:
                steps.append((axis, tuple(shape), nearest_index(coords, self.attrs["nearest_mode"], n_in)))
        self.steps = steps

    def execute(self) -> None:
        source, out = self.inputs[0].data, self.outputs[0].data
        last = len(self.steps) - 1
        if last < 0:
            np.copyto(out, source)
        for k, (axis, shape, index, *linear) in enumerate(self.steps):
            # NOTE: scratch holds this step's result (unless it is the last) and the upper taps.
            n_scratch = (k < last) + bool(linear)
            scratch = self.workspace.array((n_scratch, *shape), out.dtype, k % 2) if n_scratch else None
            target = out if k == last else scratch[0, ...]
            np.take(source, index, axis=axis, out=target, mode="clip")
            if linear:
                upper, w_lower, w_upper = linear
                above = np.take(source, upper, axis=axis, out=scratch[-1, ...], mode="clip")
                target *= w_lower
                above *= w_upper
                target += above
            source = target
