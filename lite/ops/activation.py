"""Activations: every activation type, the constants of GELU's formulas, and the ones a producer fuses,
each a clip of its output."""

from __future__ import annotations

import math

# Every ActivationType of schema/ops.fbs.
ACTIVATION_TYPES = ("NO_ACTIVATION", "RELU", "RELU6", "LEAKY_RELU", "SIGMOID", "TANH", "HARD_SIGMOID",
                    "HARD_SWISH", "CLIP", "ELU", "SELU", "SOFTPLUS", "SOFTSIGN", "GELU", "GELU_TANH", "MISH", "CELU",
                    "THRESHOLDED_RELU", "SWISH")

# GELU: x * (1 + erf(x * SQRT_HALF)) / 2; GELU_TANH: x * (1 + tanh(SQRT_2_OVER_PI * (x + GELU_TANH_CUBIC * x^3))) / 2.
SQRT_HALF = math.sqrt(0.5)
SQRT_2_OVER_PI = math.sqrt(2 / math.pi)
GELU_TANH_CUBIC = 0.044715

# erf in float32 (Eigen's and XLA's): x * P(x^2) / Q(x^2) on x clamped to [-4, 4], highest power first
# (the numpy kernel, lite.kernels.elementwise.erf_float32, and the compiled GELU both read them).
ERF32_ALPHA = (-2.72614225801306e-10, 2.77068142495902e-08, -2.10102402082508e-06, -5.69250639462346e-05,
               -7.34990630326855e-04, -2.95459980854025e-03, -1.60960333262415e-02)
ERF32_BETA = (-1.45660718464996e-05, -2.13374055278905e-04, -1.68282697438203e-03, -7.37332916720468e-03,
              -1.42647390514189e-02)

# A fused activation clips its producer's output: name -> (low, high).
FUSED_CLIPS: dict[str, tuple[float, float]] = {"RELU": (0.0, math.inf), "RELU6": (0.0, 6.0)}

# The values an ``activation_type`` attribute of a fusing op may take.
FUSED_ACTIVATIONS = ("NO_ACTIVATION", *FUSED_CLIPS)

# Primitives whose ``activation_type`` attribute applies a fused activation to their output.
FUSING_OPS = frozenset({"Conv2DFusion", "Conv2dTransposeFusion", "MatMulFusion", "AddFusion", "SubFusion",
                        "MulFusion", "DivFusion"})


def clip_activation(low: float, high: float) -> str | None:
    """The fused activation a clip to [low, high] is (ONNX Clip(0, 6) is RELU6), or None."""
    return next((name for name, bounds in FUSED_CLIPS.items() if bounds == (low, high)), None)
