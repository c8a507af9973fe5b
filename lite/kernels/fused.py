"""Activations fused into a producer (Conv2DFusion, MatMulFusion, AddFusion, ...)."""

from __future__ import annotations

import numpy as np

FUSED_ACTIVATIONS = ("NO_ACTIVATION", "RELU", "RELU6")


def apply_fused_activation(out: np.ndarray, activation_type: str) -> None:
    """Applies a fused activation to ``out`` in place."""
    if activation_type == "RELU":
        np.clip(out, 0, np.inf, out=out)  # NOTE: numpy's clip loop is ~20% faster than maximum with a scalar
    elif activation_type == "RELU6":
        np.clip(out, 0, 6, out=out)
