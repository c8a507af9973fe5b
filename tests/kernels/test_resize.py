"""The Resize kernel against onnxruntime (and the ONNX reference where onnxruntime declines)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx.reference import ReferenceEvaluator

from lite.errors import ModelFormatError
from tests.kernels.harness import run_kernel
from tests.oracle import run_onnxruntime, single_node_model

COORDINATE_MODES = ["HALF_PIXEL", "ASYMMETRIC", "ALIGN_CORNERS", "PYTORCH_HALF_PIXEL"]
NEAREST_MODES = ["ROUND_PREFER_FLOOR", "ROUND_PREFER_CEIL", "FLOOR", "CEIL"]


def random(shape: tuple[int, ...], dtype=np.float32, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if np.dtype(dtype).kind == "f":
        return np.asarray(rng.standard_normal(shape), dtype)
    return np.asarray(rng.integers(0, 100, shape), dtype)


def resize_model(x: np.ndarray, scales, sizes, attrs: dict):
    """The ONNX Resize node for the kernel's ``attrs``, and its inputs (roi absent)."""
    feeds = {"x": x}
    if scales is not None:
        feeds["scales"] = np.array(scales, np.float32)
    else:
        feeds["sizes"] = np.array(sizes, np.int64)
    names = ["x", "", "scales"] if scales is not None else ["x", "", "", "sizes"]
    onnx_attrs = {"mode": attrs["method"].lower(),
                  "coordinate_transformation_mode": attrs["coordinate_transform_mode"].lower(),
                  "nearest_mode": attrs.get("nearest_mode", "ROUND_PREFER_FLOOR").lower()}
    model = single_node_model("Resize", feeds, input_names=names, **onnx_attrs)
    return model, feeds


def check(x: np.ndarray, scales, sizes, attrs: dict, oracle: str = "onnxruntime") -> None:
    model, feeds = resize_model(x, scales, sizes, attrs)
    if oracle == "onnxruntime":
        [expected] = run_onnxruntime(model, feeds)
    else:
        [expected] = ReferenceEvaluator(model).run(None, feeds)
    kernel_inputs = [x, None, feeds.get("scales"), feeds.get("sizes")]
    [actual] = run_kernel("Resize", attrs, kernel_inputs)
    assert actual.dtype == expected.dtype and actual.shape == expected.shape
    if actual.dtype.kind == "f":
        np.testing.assert_allclose(actual, expected, rtol=1e-4, atol=1e-6)
    else:
        np.testing.assert_array_equal(actual, expected)


NEAREST_CASES = [
    ((1, 2, 5, 7), [1, 1, 2, 2], None),
    ((1, 2, 5, 7), [1, 1, 0.5, 0.6], None),
    ((1, 2, 5, 7), [1, 1, 1.7, 0.35], None),
    ((1, 2, 5, 7), [1, 1, 3, 1], None),
    ((6, 7), [1.5, 0.7], None),
    ((2, 5, 7), [2, 2, 2], None),
    ((1, 2, 5, 7), None, [1, 2, 9, 4]),
    ((1, 2, 5, 7), None, [1, 2, 1, 1]),
    ((1, 2, 5, 7), None, [1, 2, 5, 7]),
    ((6, 4), None, [4, 6]),
    ((6,), None, [4]),
]


@pytest.mark.parametrize("shape, scales, sizes", NEAREST_CASES)
@pytest.mark.parametrize("coordinate_mode", COORDINATE_MODES)
@pytest.mark.parametrize("nearest_mode", NEAREST_MODES)
def test_nearest(shape, scales, sizes, coordinate_mode, nearest_mode):
    attrs = {"method": "NEAREST", "coordinate_transform_mode": coordinate_mode, "nearest_mode": nearest_mode}
    check(random(shape), scales, sizes, attrs)


def test_nearest_keeps_the_scale_of_an_axis_whose_length_stays():
    """Scale 1.3 on 3 -> 3: coordinates follow the scale, as the ONNX reference does
    (onnxruntime copies such an axis unchanged)."""
    attrs = {"method": "NEAREST", "coordinate_transform_mode": "HALF_PIXEL", "nearest_mode": "FLOOR"}
    check(random((3, 4)), [1.3, 2.0], None, attrs, oracle="reference")


@pytest.mark.parametrize("dtype", [np.uint8, np.int8, np.int32])
def test_nearest_integers(dtype):
    check(random((1, 3, 4, 5), dtype), [1, 1, 1.5, 2.5], None,
          {"method": "NEAREST", "coordinate_transform_mode": "ASYMMETRIC", "nearest_mode": "FLOOR"})


LINEAR_CASES = [
    ((5, 7), [1.5, 0.7], None),
    ((2, 5, 7), [1, 2, 2], None),
    ((2, 5, 7), [2, 2, 2], None),
    ((2, 3, 5, 7), [1, 1, 1.5, 0.7], None),
    ((2, 3, 5, 7), [1, 1, 2, 2], None),
    ((1, 3, 8, 9), [1, 1, 0.5, 0.34], None),
    ((1, 1, 3, 4, 5), [1, 1, 2, 0.6, 2], None),
    ((2, 3, 5, 7), None, [2, 3, 11, 3]),
    ((2, 3, 5, 7), None, [2, 3, 1, 1]),
    ((4, 4), None, [4, 9]),
]


@pytest.mark.parametrize("shape, scales, sizes", LINEAR_CASES)
@pytest.mark.parametrize("coordinate_mode", COORDINATE_MODES)
def test_linear(shape, scales, sizes, coordinate_mode):
    check(random(shape), scales, sizes, {"method": "LINEAR", "coordinate_transform_mode": coordinate_mode})


@pytest.mark.parametrize("shape, scales, sizes", [
    ((6,), [2.5], None), ((2, 4, 5, 8), [1.5, 0.5, 2, 0.75], None), ((3, 4, 5, 2), None, [5, 2, 5, 6]),
])
@pytest.mark.parametrize("coordinate_mode", COORDINATE_MODES)
def test_linear_any_rank(shape, scales, sizes, coordinate_mode):
    """onnxruntime's linear resize refuses these shapes; the ONNX reference takes them (dim * scale
    is whole here: the reference's ALIGN_CORNERS and PYTORCH_HALF_PIXEL use its unfloored value)."""
    attrs = {"method": "LINEAR", "coordinate_transform_mode": coordinate_mode}
    check(random(shape), scales, sizes, attrs, oracle="reference")


@pytest.mark.parametrize("method", ["NEAREST", "LINEAR"])
@pytest.mark.parametrize("shape, scales, expected", [((0, 3, 4, 4), [1, 1, 2, 2], (0, 3, 8, 8)),
                                                     ((1, 3, 5, 4), [1, 1, 0.1, 1], (1, 3, 0, 4))])
def test_empty(method, shape, scales, expected):
    [actual] = run_kernel("Resize", {"method": method}, [random(shape), None, np.array(scales, np.float32)])
    assert actual.shape == expected


def test_float64():
    x = random((1, 1, 4, 5), np.float64)
    attrs = {"method": "LINEAR", "coordinate_transform_mode": "ALIGN_CORNERS"}
    [actual] = run_kernel("Resize", attrs, [x, None, np.array([1, 1, 2, 2], np.float32)])
    [expected] = run_kernel("Resize", attrs, [x.astype(np.float32), None, np.array([1, 1, 2, 2], np.float32)])
    assert actual.dtype == np.float64
    np.testing.assert_allclose(actual, expected, rtol=1e-5)


SCALES = np.array([1, 1, 2, 2], np.float32)


@pytest.mark.parametrize("attrs, inputs", [
    ({}, [random((1, 1, 2, 2)), None, SCALES, np.array([1, 1, 4, 4], np.int64)]),
    ({}, [random((1, 1, 2, 2))]),
    ({}, [random((1, 1, 2, 2)), None, None, np.array([1, 1, -4, 4], np.int64)]),
    ({}, [random((1, 1, 2, 2)), None, None, np.array([1, 4, 4], np.int64)]),
    ({}, [random((1, 0, 2, 2)), None, None, np.array([1, 1, 4, 4], np.int64)]),
    ({}, [random((1, 1, 2, 2)), None, np.array([1, 1, 0, 2], np.float32)]),
    ({}, [random((1, 1, 2, 2)), None, np.array([1, 1, np.nan, 2], np.float32)]),
    ({}, [random((1, 1, 2, 2)), None, np.array([1, 2, 2], np.float32)]),
    ({}, [random((1, 1, 2, 2)), None, np.array([1, 1, 2, 2], np.int64)]),
    ({}, [random((1, 1, 2, 2)), None, np.array([1, 1, 3e38, 1], np.float32)]),
    ({}, [random((1, 1, 2, 2)), None, np.array([1, 1, 1e9, 1e9], np.float32)]),
    ({}, [random((1, 1, 2, 2)), None, None, np.array([1, 1, 2**40, 2**40], np.int64)]),
    ({"method": "CUBIC"}, [random((1, 1, 2, 2)), None, SCALES]),
    ({"coordinate_transform_mode": "TF_CROP_AND_RESIZE"}, [random((1, 1, 2, 2)), None, SCALES]),
    ({"nearest_mode": "SIMPLE"}, [random((1, 1, 2, 2)), None, SCALES]),
    ({"method": "LINEAR"}, [random((1, 1, 2, 2), np.int32), None, SCALES]),
])
def test_rejects_bad_models(attrs, inputs):
    with pytest.raises(ModelFormatError):
        run_kernel("Resize", attrs, inputs)
