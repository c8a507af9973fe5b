"""The Activation kernel, PReLUFusion, Clip and Shrink against onnxruntime on the equivalent single ONNX node
(the ONNX reference evaluator where onnxruntime has no kernel for the types)."""

from __future__ import annotations

import numpy as np
import pytest

from lite.errors import ModelFormatError
from tests.support.elementwise import NUMBER_DTYPES, check_typed, operands
from tests.support.kernel_harness import run_kernel
from tests.support.oracle import run_onnxruntime, single_node_model

SELU = {"alpha": 1.6732632, "gamma": 1.050701}

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
    ("ELU", {"alpha": 1.0}, "Elu", {}),
    ("ELU", {"alpha": 0.3}, "Elu", {"alpha": 0.3}),
    ("SELU", {"alpha": SELU["alpha"], "beta": SELU["gamma"]}, "Selu", {}),
    ("SELU", {"alpha": 2.0, "beta": 0.5}, "Selu", {"alpha": 2.0, "gamma": 0.5}),
    ("SOFTPLUS", {}, "Softplus", {}),
    ("SOFTSIGN", {}, "Softsign", {}),
    ("GELU", {}, "Gelu", {}),
    ("GELU_TANH", {}, "Gelu", {"approximate": "tanh"}),
    ("MISH", {}, "Mish", {}),
    ("CELU", {"alpha": 1.0}, "Celu", {}),
    ("CELU", {"alpha": 0.4}, "Celu", {"alpha": 0.4}),
    ("THRESHOLDED_RELU", {"alpha": 1.0}, "ThresholdedRelu", {}),
    ("THRESHOLDED_RELU", {"alpha": -0.5}, "ThresholdedRelu", {"alpha": -0.5}),
    ("SWISH", {"alpha": 1.0}, "Swish", {}),
    ("SWISH", {"alpha": 0.6}, "Swish", {"alpha": 0.6}),
]
OPSETS = {"Gelu": 20, "Mish": 18, "Swish": 24}  # the rest: 17
NEW_TYPES = [c for c in CASES if c[0] in ("ELU", "SELU", "SOFTPLUS", "SOFTSIGN", "GELU", "GELU_TANH", "MISH", "CELU",
                                          "THRESHOLDED_RELU", "SWISH")]


def onnx_reference(op: str, x: np.ndarray, attrs: dict) -> np.ndarray:
    inputs, initializers = {"x": x}, {}
    if op == "Clip":  # opset 11+: min and max are inputs
        initializers = {"min": np.array(attrs.pop("min"), x.dtype), "max": np.array(attrs.pop("max"), x.dtype)}
    model = single_node_model(op, inputs, opset=OPSETS.get(op, 17), initializers=initializers, **attrs)
    return run_onnxruntime(model, inputs)[0]


@pytest.mark.parametrize("kind, attrs, onnx_op, onnx_attrs", CASES)
@pytest.mark.parametrize("shape", [(2, 3, 4, 5), (7,), (), (0, 3)])
def test_matches_onnxruntime(kind, attrs, onnx_op, onnx_attrs, shape):
    x = np.asarray(np.random.default_rng(11).uniform(-8, 8, shape), np.float32)
    [actual] = run_kernel("Activation", {"activation_type": kind, **attrs}, [x])
    expected = onnx_reference(onnx_op, x, dict(onnx_attrs))
    assert actual.dtype == np.float32 and actual.shape == expected.shape
    np.testing.assert_allclose(actual, expected, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("kind, attrs, onnx_op, onnx_attrs", NEW_TYPES)
@pytest.mark.parametrize("dtype", [np.float64, np.float16])
def test_new_types_on_other_floats(kind, attrs, onnx_op, onnx_attrs, dtype):
    x = np.asarray(np.random.default_rng(13).uniform(-6, 6, (3, 40)), dtype)
    check_typed("Activation", onnx_op, [x], OPSETS.get(onnx_op, 22), {"activation_type": kind, **attrs}, **onnx_attrs)


@pytest.mark.parametrize("kind", ["ELU", "SELU", "SOFTPLUS", "GELU", "GELU_TANH", "MISH", "CELU", "SWISH"])
def test_new_types_are_stable_at_the_extremes(kind):
    """No overflow; far above 0 each is x (alpha = beta = 1)."""
    x = np.array([-1e4, -100, -30, -1e-6, 0, 1e-6, 30, 100, 1e4], np.float32)
    with np.errstate(over="raise", invalid="raise", divide="raise"):
        [actual] = run_kernel("Activation", {"activation_type": kind, "alpha": 1.0, "beta": 1.0}, [x])
    assert np.isfinite(actual).all()
    np.testing.assert_allclose(actual[-3:], x[-3:], rtol=1e-6)


@pytest.mark.parametrize("x_shape, slope_shape", [((2, 3, 4, 5), (3, 1, 1)), ((2, 3, 4), ()), ((3, 4), (3, 4)),
                                                  ((2, 3, 4), (4,)), ((0, 3), (3,))])
@pytest.mark.parametrize("dtype", NUMBER_DTYPES)
def test_prelu(x_shape, slope_shape, dtype):
    rng = np.random.default_rng(14)
    x, slope = operands(rng, dtype, [x_shape, slope_shape], -9, 9)
    check_typed("PReLUFusion", "PRelu", [x, slope], 16)


@pytest.mark.parametrize("bounds", [(-2, 3), (None, 3), (-2, None), (4, -1)])
@pytest.mark.parametrize("dtype", NUMBER_DTYPES)
def test_clip_with_bounds_as_inputs(bounds, dtype):
    """Bounds of one value each (a 1-element vector too); min above max gives max everywhere."""
    x = operands(np.random.default_rng(15), dtype, [(4, 6)], -8, 8)[0]
    if np.dtype(dtype).kind == "u":
        bounds = tuple(None if b is None else abs(b) for b in bounds)
    low, high = (None if b is None else np.array(b, dtype).reshape(shape)
                 for b, shape in zip(bounds, ((), (1,)), strict=True))
    arrays = [x, low, high] if high is not None else [x, low]
    check_typed("Clip", "Clip", arrays, 13)


def test_clip_keeps_nan():
    x = np.array([np.nan, -5.0, 5.0, 0.5], np.float32)
    [actual] = run_kernel("Clip", {}, [x, np.array(-1, np.float32), np.array(1, np.float32)])
    np.testing.assert_array_equal(actual, [np.nan, -1, 1, 0.5])


@pytest.mark.parametrize("attrs", [{}, {"bias": 1.5, "lambd": 1.5}, {"bias": -0.5, "lambd": 2.0}])
@pytest.mark.parametrize("dtype", NUMBER_DTYPES)
def test_shrink(attrs, dtype):
    x = operands(np.random.default_rng(16), dtype, [(5, 8)], -6, 6)[0]
    check_typed("Shrink", "Shrink", [x], 9, attrs, **attrs)


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


@pytest.mark.parametrize("op_type, attrs, arrays", [
    ("Activation", {"activation_type": "SQUARE"}, [np.zeros(3, np.float32)]),
    ("Activation", {"activation_type": "RELU"}, [np.zeros(3, np.float32), np.zeros(3, np.float32)]),
    ("PReLUFusion", {}, [np.zeros((2, 3), np.float32), np.zeros((2, 3, 1), np.float32)]),
    ("PReLUFusion", {}, [np.zeros((2, 3), np.float32), np.zeros(3, np.float64)]),
    ("Clip", {}, [np.zeros(3, np.float32), np.zeros(2, np.float32)]),
    ("Clip", {}, [np.zeros(3, np.int32), np.zeros((), np.int64)]),
    ("Shrink", {}, [np.zeros(3, np.float32), np.zeros(3, np.float32)]),
])
def test_rejects_bad_models(op_type, attrs, arrays):
    with pytest.raises(ModelFormatError):
        run_kernel(op_type, attrs, arrays)
