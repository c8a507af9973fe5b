"""lite.ops.activation: the activation types of the schema, fused activations as clips (onnxruntime), GELU's
constants (onnxruntime's Gelu)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from lite.ops.activation import (
    ACTIVATION_TYPES,
    FUSED_ACTIVATIONS,
    FUSED_CLIPS,
    FUSING_OPS,
    GELU_TANH_CUBIC,
    SQRT_2_OVER_PI,
    SQRT_HALF,
    clip_activation,
)
from lite.schema.fb.ActivationType import ActivationType
from lite.schema.primitives import PRIMITIVE_TYPES, default_attrs, enum_names
from tests.support.op_reference import run_ort

ONNX_OPS = {"RELU": ("Relu", {}), "RELU6": ("Clip", {"min": 0.0, "max": 6.0})}


def test_activation_types_are_the_schemas():
    assert set(ACTIVATION_TYPES) == set(enum_names(ActivationType).values())
    assert FUSED_ACTIVATIONS[0] == "NO_ACTIVATION" and set(FUSED_ACTIVATIONS) <= set(ACTIVATION_TYPES)


def test_fusing_ops_carry_an_activation_type():
    assert set(PRIMITIVE_TYPES) >= FUSING_OPS
    assert all(default_attrs(op)["activation_type"] == "NO_ACTIVATION" for op in FUSING_OPS)


@pytest.mark.parametrize("kind", sorted(FUSED_CLIPS))
def test_fused_clip_bounds_compute_the_onnx_activation(kind):
    x = np.random.default_rng(3).uniform(-10, 10, (4, 50)).astype(np.float32)
    op_type, bounds = ONNX_OPS[kind]
    inputs = {"x": x, **{k: np.array(v, np.float32) for k, v in bounds.items()}}
    [expected] = run_ort(op_type, inputs)
    np.testing.assert_array_equal(np.clip(x, *FUSED_CLIPS[kind]), expected)


def test_clip_activation_names_fused_clips_only():
    assert clip_activation(0.0, 6.0) == "RELU6" and clip_activation(0, math.inf) == "RELU"
    assert clip_activation(-1.0, 1.0) is None and clip_activation(0.0, 5.0) is None
    assert all(clip_activation(*bounds) == kind for kind, bounds in FUSED_CLIPS.items())


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_constants_compute_onnx_gelu(approximate):
    x = np.random.default_rng(4).uniform(-6, 6, (4, 50)).astype(np.float32)
    t = x.astype(np.float64)
    if approximate == "none":
        expected = t * (1 + np.vectorize(math.erf)(t * SQRT_HALF)) / 2
    else:
        expected = t * (1 + np.tanh(SQRT_2_OVER_PI * (t + GELU_TANH_CUBIC * t**3))) / 2
    [actual] = run_ort("Gelu", {"x": x}, opset=20, approximate=approximate)
    np.testing.assert_allclose(expected, actual, rtol=1e-5, atol=1e-6)
