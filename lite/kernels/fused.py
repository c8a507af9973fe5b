"""Activations fused into a producer (Conv2DFusion, MatMulFusion, AddFusion, ...)."""

from __future__ import annotations

from functools import partial

import numpy as np

from lite.kernels.base import Step, copy_step

try:  # NOTE: the ufunc np.clip dispatches to; calling it skips np.clip's three Python wrapper layers
    from numpy._core.umath import clip as clip_ufunc
except ImportError:  # numpy < 2
    clip_ufunc = np.clip

FUSED_ACTIVATIONS = ("NO_ACTIVATION", "RELU", "RELU6")
_BOUNDS = {"RELU": (0, np.inf), "RELU6": (0, 6)}  # NOTE: ReLU as a clip runs faster than np.maximum(x, 0)


def apply_fused_activation(out: np.ndarray, activation_type: str) -> None:
    """Applies a fused activation to ``out`` in place."""
    step = activation_step(out, activation_type)
    if step is not None:
        step()


def activation_step(out: np.ndarray, activation_type: str, source: np.ndarray | None = None) -> Step | None:
    """A call writing the fused activation of ``source`` (default: ``out`` itself) into ``out``.

    None for NO_ACTIVATION in place (nothing to do); with another source, a plain copy.
    """
    bounds = _BOUNDS.get(activation_type)
    if bounds is not None:
        return partial(clip_ufunc, out if source is None else source, *bounds, out=out)
    return None if source is None else copy_step(out, source)
