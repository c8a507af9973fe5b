"""The Activation kernel against onnxruntime on the equivalent single ONNX node."""

from __future__ import annotations

import numpy as np
import pytest

from lite.errors import ModelFormatError
from tests.kernels.harness import run_kernel
from tests.oracle import run_onnxruntime, single_node_model

# activation_type, its attributes, the ONNX op and that op's attributes.
CASES = [
    ("RELU", {}, "Relu", {}),
    ("RELU6", {}, "Clip", {"min": 0.0, "max": 6.0}),
    ("LEAKY_RELU", {"alpha": 0.1}, "LeakyRelu", {"alpha": 0.1}),
    ("LEAKY_RELU", {"alpha": 1.7}, "LeakyRelu", {"alpha": 1.7}),
    ("SIGMOID", {}, "Sigmoid", {}),
    ("TANH", {}, "Tanh", {}),
    ("HARD_SIGMOID", {"alpha": 0.2, "beta": 0.5}, "HardSigmoid", {"alpha": 0.2, "beta": 0.5}),
    ("HARD_SIGMOID", {"alpha": 0.3, "beta": 0.1}, "HardSigmoid", {"alpha": 0.3, "beta": 0.1}),
    ("HARD_SWISH", {}, "HardSwish", {}),
    ("CLIP", {"min_val": -1.5, "max_val": 2.5}, "Clip", {"min": -1.5, "max": 2.5}),
    ("NO_ACTIVATION", {}, "Identity", {}),
]


def onnx_reference(op: str, x: np.ndarray, attrs: dict) -> np.ndarray:
    inputs, initializers = {"x": x}, {}
    if op == "Clip":  # opset 11+: min and max are inputs
        initializers = {"min": np.array(attrs.pop("min"), x.dtype), "max": np.array(attrs.pop("max"), x.dtype)}
    model = single_node_model(op, inputs, initializers=initializers, **attrs)
    return run_onnxruntime(model, inputs)[0]


@pytest.mark.parametrize("kind, attrs, onnx_op, onnx_attrs", CASES)
@pytest.mark.parametrize("shape", [(2, 3, 4, 5), (7,), (), (0, 3)])
def test_matches_onnxruntime(kind, attrs, onnx_op, onnx_attrs, shape):
    x = np.asarray(np.random.default_rng(11).uniform(-8, 8, shape), np.float32)
    [actual] = run_kernel("Activation", {"activation_type": kind, **attrs}, [x])
    expected = onnx_reference(onnx_op, x, dict(onnx_attrs))
    assert actual.dtype == np.float32 and actual.shape == expected.shape
    np.testing.assert_allclose(actual, expected, rtol=1e-4, atol=1e-6)


def test_sigmoid_is_stable_at_the_extremes():
    x = np.array([-1000, -80, -30, 0, 30, 100, 1000, np.inf, -np.inf], np.float32)
    with np.errstate(over="raise", invalid="raise", divide="raise"):
        [actual] = run_kernel("Activation", {"activation_type": "SIGMOID"}, [x])
    with np.errstate(over="ignore"):
        expected = 1 / (1 + np.exp(-x.astype(np.float64)))
    np.testing.assert_allclose(actual, expected, rtol=1e-6, atol=0)


@pytest.mark.parametrize("dtype", [np.float64, np.float16])
def test_other_float_dtypes(dtype):
    x = np.random.default_rng(12).uniform(-6, 6, (3, 5)).astype(dtype)
    [actual] = run_kernel("Activation", {"activation_type": "SIGMOID"}, [x])
    assert actual.dtype == dtype
    np.testing.assert_allclose(actual, 1 / (1 + np.exp(-x.astype(np.float64))), rtol=1e-3)


@pytest.mark.parametrize("attrs, arrays", [
    ({"activation_type": "GELU"}, [np.zeros(3, np.float32)]),
    ({"activation_type": "RELU"}, [np.zeros(3, np.float32), np.zeros(3, np.float32)]),
])
def test_rejects_bad_models(attrs, arrays):
    with pytest.raises(ModelFormatError):
        run_kernel("Activation", attrs, arrays)
