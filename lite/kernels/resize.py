"""ONNX Resize: NEAREST, LINEAR and CUBIC, separably along each resized axis, any rank.

What the coordinates, rounding and interpolation weights are is ``lite.ops.resize``'s.
"""

from __future__ import annotations

import math

import numpy as np

from lite.kernels.base import NativeKernel
from lite.kernels.elementwise import check_io
from lite.kernels.registry import register
from lite.kernels.shape import checked_dims, int_vector
from lite.ops.dtypes import NUMBERS
from lite.ops.resize import (
    COORDINATE_MODES,
    METHODS,
    NEAREST_MODES,
    interpolation_taps,
    nearest_index,
    outside,
    resize_scale,
    resized_dim,
    source_coordinates,
)


@register("Resize", NUMBERS)
class Resize(NativeKernel):
    """ONNX Resize (inputs x, roi, scales, sizes): NEAREST with every nearest_mode, LINEAR or CUBIC
    (cubic_coeff_a, exclude_outside; antialias when the primitive has it), every coordinate mode;
    TF_CROP_AND_RESIZE reads the roi and writes extrapolation_value outside it.

    Output dims are ``sizes``, else floor(dim * scale); coordinates follow ``scales``, else
    sizes / dims (both given: a converter-resolved keep_aspect_ratio_policy). ``resize``
    precomputes, per resized axis, the gather indices and weights of every tap; ``execute``
    gathers along one axis at a time. A roi computed from input data is read at every run.
    """

    value_inputs = (2, 3)

    def check_attrs(self) -> None:
        check_io(self, 1, 3)
        for name, allowed in (("method", METHODS), ("coordinate_transform_mode", COORDINATE_MODES),
                              ("nearest_mode", NEAREST_MODES)):
            if self.attrs[name] not in allowed:
                self.fail(f"{name} must be one of {allowed}, got {self.attrs[name]!r}")
        self.method = self.attrs["method"]
        if self.method != "NEAREST" and self.inputs[0].dtype.kind != "f":
            self.fail(f"{self.method} needs a float input, got {self.inputs[0].dtype.name}")
        self.antialias = bool(self.attrs.get("antialias", False))
        if self.antialias and self.method == "NEAREST":
            self.fail("antialias applies to LINEAR and CUBIC only")
        self.crop = self.attrs["coordinate_transform_mode"] == "TF_CROP_AND_RESIZE"
        roi = self.inputs[1] if len(self.inputs) > 1 else None
        if self.crop and roi is None:
            self.fail("TF_CROP_AND_RESIZE needs the roi input")
        self.roi_at_run = self.crop and not roi.value_known

    def _given(self, index: int) -> np.ndarray | None:
        value = self.value(index)
        return value if value is not None and value.size else None

    def _target(self) -> tuple[tuple[int, ...], list[float]]:
        """Output dims and the per-axis scales the coordinate transform uses."""
        shape = self.inputs[0].shape
        scales, sizes = self._given(2), self._given(3)
        if scales is None and sizes is None:
            self.fail("needs scales or sizes")
        if scales is not None:
            if scales.dtype.kind != "f" or scales.shape != (len(shape),) or not all(
                    0 < s < math.inf for s in scales.tolist()):
                self.fail(f"scales must be {len(shape)} finite floats > 0, got {scales}")
            scales = scales.astype(np.float32)
            if any(n * s >= 2.0**62 for n, s in zip(shape, scales.tolist(), strict=True)):
                self.fail(f"scales {scales} give an absurd output shape for {shape}")
        if sizes is None:
            dims = [resized_dim(n, s) for n, s in zip(shape, scales, strict=True)]
            return checked_dims(self, dims, "output shape"), scales.tolist()
        dims = checked_dims(self, int_vector(self, 3), "sizes")
        if len(dims) != len(shape) or any(n == 0 < d for n, d in zip(shape, dims, strict=True)):
            self.fail(f"sizes {dims} must have {len(shape)} dims, 0 on the empty axes of {shape}")
        if scales is not None:
            return dims, scales.tolist()
        return dims, [float(resize_scale(n, d)) if n else 1.0 for n, d in zip(shape, dims, strict=True)]

    def _roi(self) -> list[tuple[float, float]]:
        """(start, end) of each axis: the roi input for TF_CROP_AND_RESIZE, else the whole axis."""
        rank = len(self.inputs[0].shape)
        if not self.crop:
            return [(0.0, 1.0)] * rank
        roi = self.inputs[1].data
        if roi is None or roi.dtype.kind != "f" or roi.shape != (2 * rank,) or not np.isfinite(roi).all():
            self.fail(f"roi must be {2 * rank} finite floats [starts..., ends...], got {roi}")
        values = roi.astype(np.float32).tolist()
        return list(zip(values[:rank], values[rank:], strict=True))

    def infer_shapes(self) -> list[tuple[int, ...]]:
        return [self._target()[0]]

    def resize(self) -> None:
        self.target = self._target()
        if not self.roi_at_run:
            self.plan(self._roi())

    def plan(self, roi: list[tuple[float, float]]) -> None:
        """The per-axis steps: (axis, shape after it, tap indices, tap weights or None, outside mask or None)."""
        shape, dtype = list(self.inputs[0].shape), self.outputs[0].dtype
        mode, steps = self.attrs["coordinate_transform_mode"], []
        for axis, (n_out, scale, span) in enumerate(zip(*self.target, roi, strict=True)):
            if n_out == shape[axis] and scale == 1.0 and span == (0.0, 1.0):
                continue
            n_in, shape[axis] = shape[axis], n_out
            along = [n_out if a == axis else 1 for a in range(len(shape))]
            coords = source_coordinates(mode, n_out, n_in, scale, span)
            if self.method == "NEAREST":
                indices, weights = [nearest_index(coords, self.attrs["nearest_mode"], n_in)], None
            else:
                taps, tap_weights = interpolation_taps(self.method, coords, n_in, scale, self.attrs["cubic_coeff_a"],
                                                       bool(self.attrs["exclude_outside"]), self.antialias)
                indices = [np.ascontiguousarray(taps[:, t]) for t in range(taps.shape[1])]
                weights = [tap_weights[:, t].astype(dtype).reshape(along) for t in range(taps.shape[1])]
            mask = outside(coords, n_in).reshape(along) if self.crop else None
            steps.append((axis, tuple(shape), indices, weights, mask if mask is not None and mask.any() else None))
        self.steps = steps

    def execute(self) -> None:
        if self.roi_at_run:
            self.plan(self._roi())
        source, out = self.inputs[0].data, self.outputs[0].data
        last = len(self.steps) - 1
        if last < 0:
            np.copyto(out, source)
        for k, (axis, shape, indices, weights, mask) in enumerate(self.steps):
            # NOTE: scratch holds this step's result (unless it is the last) and one more tap.
            n_scratch = (k < last) + (len(indices) > 1)
            scratch = self.workspace.array((n_scratch, *shape), out.dtype, k % 2) if n_scratch else None
            target = out if k == last else scratch[0, ...]
            np.take(source, indices[0], axis=axis, out=target, mode="clip")
            if weights is not None:
                target *= weights[0]
                for index, weight in zip(indices[1:], weights[1:], strict=True):
                    tap = np.take(source, index, axis=axis, out=scratch[-1, ...], mode="clip")
                    tap *= weight
                    target += tap
            if mask is not None:
                np.copyto(target, self.attrs["extrapolation_value"], where=mask, casting="unsafe")
            source = target
