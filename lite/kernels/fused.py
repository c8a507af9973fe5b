"""Activations fused into a producer (Conv2DFusion, MatMulFusion, AddFusion, ...): clips whose
bounds ``lite.ops.activation.FUSED_CLIPS`` gives."""

from __future__ import annotations

from functools import partial

import numpy as np

from lite.kernels.base import NativeKernel, Step, copy_step
from lite.ops.activation import FUSED_ACTIVATIONS, FUSED_CLIPS

try:  # NOTE: the ufunc np.clip dispatches to; calling it skips np.clip's three Python wrapper layers
    from numpy._core.umath import clip as clip_ufunc
except ImportError:  # numpy < 2
    clip_ufunc = np.clip


def fused_activation(kernel: NativeKernel) -> str:
    """The kernel's ``activation_type``; fails unless it is one a producer can fuse."""
    activation = kernel.attrs["activation_type"]
    if activation not in FUSED_ACTIVATIONS:
        kernel.fail(f"activation_type {activation!r} cannot be fused; expected one of {FUSED_ACTIVATIONS}")
    return activation


def apply_fused_activation(out: np.ndarray, activation_type: str) -> None:
    """Applies a fused activation to ``out`` in place."""
    step = activation_step(out, activation_type)
    if step is not None:
        step()


def activation_step(out: np.ndarray, activation_type: str, source: np.ndarray | None = None) -> Step | None:
    """A call writing the fused activation of ``source`` (default: ``out`` itself) into ``out``.

    None for NO_ACTIVATION in place (nothing to do); with another source, a plain copy.
    """
    # NOTE: ReLU as a clip runs faster than np.maximum(x, 0)
    bounds = clip_bounds(activation_type, out.dtype)
    if bounds is not None:
        return partial(clip_ufunc, out if source is None else source, *bounds, out=out)
    return None if source is None else copy_step(out, source)


def clip_bounds(activation_type: str, dtype: np.dtype) -> tuple | None:
    """The clip bounds of a fused activation (None: none) as ``dtype`` can hold them: an integer
    type's range stands in for an infinite bound."""
    bounds = FUSED_CLIPS.get(activation_type)
    if bounds is None or dtype.kind == "f":
        return bounds
    info = np.iinfo(dtype)
    return tuple(dtype.type(min(max(bound, info.min), info.max)) for bound in bounds)
