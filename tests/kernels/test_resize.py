"""The Resize kernel against onnxruntime (and the ONNX reference where onnxruntime declines): every
method (NEAREST, LINEAR, CUBIC), coordinate mode, antialias, the roi of TF_CROP_AND_RESIZE and opset
18's keep_aspect_ratio_policy as the converter resolves it."""

from __future__ import annotations

import numpy as np
import pytest
from onnx.reference import ReferenceEvaluator

from lite.errors import ModelFormatError
from lite.kernels.registry import find_kernel
from lite.ops.resize import keep_aspect_ratio
from lite.primitive import Primitive
from lite.schema.primitives import default_attrs
from lite.tensor import Tensor
from tests.support.kernel_harness import run_kernel
from tests.support.oracle import run_onnxruntime, single_node_model

COORDINATE_MODES = ["HALF_PIXEL", "ASYMMETRIC", "ALIGN_CORNERS", "PYTORCH_HALF_PIXEL", "HALF_PIXEL_SYMMETRIC"]
NEAREST_MODES = ["ROUND_PREFER_FLOOR", "ROUND_PREFER_CEIL", "FLOOR", "CEIL"]


def random(shape: tuple[int, ...], dtype=np.float32, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if np.dtype(dtype).kind == "f":
        return np.asarray(rng.standard_normal(shape), dtype)
    return np.asarray(rng.integers(0, 100, shape), dtype)


def resize_model(x: np.ndarray, scales, sizes, attrs: dict, roi=None, **onnx_extra):
    """The ONNX Resize node (opset 19) for the kernel's ``attrs``, and its inputs."""
    feeds = {"x": x}
    if roi is not None:
        feeds["roi"] = np.array(roi, np.float32)
    if scales is not None:
        feeds["scales"] = np.array(scales, np.float32)
    if sizes is not None:
        feeds["sizes"] = np.array(sizes, np.int64)
    names = ["x", "roi" if roi is not None else "", "scales" if scales is not None else ""]
    names += ["sizes"] if sizes is not None else []
    onnx_attrs = {"mode": attrs["method"].lower(),
                  "coordinate_transformation_mode": attrs["coordinate_transform_mode"].lower(),
                  "nearest_mode": attrs.get("nearest_mode", "ROUND_PREFER_FLOOR").lower(),
                  **{k: int(v) if isinstance(v, bool) else v for k, v in attrs.items()
                     if k in ("cubic_coeff_a", "exclude_outside", "extrapolation_value", "antialias")},
                  **onnx_extra}
    model = single_node_model("Resize", feeds, input_names=names, opset=19, **onnx_attrs)
    return model, feeds


def check(x: np.ndarray, scales, sizes, attrs: dict, oracle: str = "onnxruntime", roi=None,
          kernel_inputs: list | None = None, **onnx_extra) -> None:
    model, feeds = resize_model(x, scales, sizes, attrs, roi, **onnx_extra)
    if oracle == "onnxruntime":
        [expected] = run_onnxruntime(model, feeds)
    else:
        [expected] = ReferenceEvaluator(model).run(None, feeds)
    if kernel_inputs is None:
        kernel_inputs = [x, feeds.get("roi"), feeds.get("scales"), feeds.get("sizes")]
    [actual] = run_kernel("Resize", attrs, kernel_inputs)
    assert actual.dtype == expected.dtype and actual.shape == expected.shape
    if actual.dtype.kind == "f":
        np.testing.assert_allclose(actual, expected, rtol=1e-4, atol=1e-5)
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
    ({}, [random((1, 1, 2, 2))]),
    ({}, [random((1, 1, 2, 2)), None, None, None]),
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
    ({"method": "AREA"}, [random((1, 1, 2, 2)), None, SCALES]),
    ({"coordinate_transform_mode": "TF_CROP_AND_RESIZE"}, [random((1, 1, 2, 2)), None, SCALES]),
    ({"coordinate_transform_mode": "TF_CROP_AND_RESIZE"}, [random((1, 1, 2, 2)), np.zeros(4, np.float32), SCALES]),
    ({"coordinate_transform_mode": "TF_CROP_AND_RESIZE"},
     [random((1, 1, 2, 2)), np.array([0, 0, 0, 0, 1, 1, np.nan, 1], np.float32), SCALES]),
    ({"method": "CUBIC"}, [random((1, 1, 2, 2), np.uint8), None, SCALES]),
    ({"method": "NEAREST", "antialias": True}, [random((1, 1, 2, 2)), None, SCALES]),
    ({"nearest_mode": "SIMPLE"}, [random((1, 1, 2, 2)), None, SCALES]),
    ({"method": "LINEAR"}, [random((1, 1, 2, 2), np.int32), None, SCALES]),
])
def test_rejects_bad_models(attrs, inputs):
    with pytest.raises(ModelFormatError):
        run_kernel("Resize", attrs, inputs)


CUBIC_CASES = [  # onnxruntime's cubic takes 2-D inputs and 4-D ones resized on the last two axes
    ((5, 7), [1.5, 0.7], None),
    ((1, 2, 5, 7), [1, 1, 1.5, 0.7], None),
    ((2, 3, 6, 5), [1, 1, 2, 3], None),
    ((1, 2, 9, 8), [1, 1, 0.5, 0.4], None),
    ((1, 2, 5, 7), None, [1, 2, 9, 3]),
    ((4, 4), None, [1, 9]),
]


@pytest.mark.parametrize("shape, scales, sizes", CUBIC_CASES)
@pytest.mark.parametrize("coordinate_mode", COORDINATE_MODES)
@pytest.mark.parametrize("coeff, exclude", [(-0.75, False), (-0.5, True), (-0.6, False)])
def test_cubic(shape, scales, sizes, coordinate_mode, coeff, exclude):
    attrs = {"method": "CUBIC", "coordinate_transform_mode": coordinate_mode, "cubic_coeff_a": coeff,
             "exclude_outside": exclude}
    check(random(shape, seed=len(shape)), scales, sizes, attrs)


@pytest.mark.parametrize("shape, scales, sizes", [((6,), [2.5], None), ((2, 4, 5, 8), [1.5, 0.5, 2, 0.75], None),
                                                  ((2, 3, 4, 5, 2), None, [1, 5, 2, 7, 3])])
@pytest.mark.parametrize("exclude", [False, True])
def test_cubic_any_rank(shape, scales, sizes, exclude):
    """Against the ONNX reference (dim * scale whole: it computes coordinates from that product)."""
    attrs = {"method": "CUBIC", "coordinate_transform_mode": "HALF_PIXEL", "exclude_outside": exclude}
    check(random(shape), scales, sizes, attrs, oracle="reference")


ROIS = [[0, 0, 0.2, 0.3, 1, 1, 0.8, 0.9], [0, 0, -0.2, 0.4, 1, 1, 1.3, 0.6], [0, 0, 0.7, 0.9, 1, 1, 0.2, 0.1]]


@pytest.mark.parametrize("roi", ROIS)
@pytest.mark.parametrize("method", ["NEAREST", "LINEAR", "CUBIC"])
@pytest.mark.parametrize("scales, sizes", [(None, [1, 2, 6, 5]), (None, [1, 2, 1, 7]), ([1, 1, 1.5, 0.6], None)])
def test_tf_crop_and_resize(roi, method, scales, sizes):
    """Outside the input, extrapolation_value (an out-of-range roi reaches there)."""
    attrs = {"method": method, "coordinate_transform_mode": "TF_CROP_AND_RESIZE", "extrapolation_value": 1.5,
             "nearest_mode": "ROUND_PREFER_CEIL"}
    check(random((1, 2, 5, 8), seed=2), scales, sizes, attrs, roi=roi)


def test_tf_crop_and_resize_of_integers_extrapolates_the_cast_value():
    attrs = {"method": "NEAREST", "coordinate_transform_mode": "TF_CROP_AND_RESIZE", "extrapolation_value": 7.0}
    check(random((1, 1, 4, 5), np.int32), None, [1, 1, 6, 6], attrs, roi=ROIS[1])


def test_tf_crop_and_resize_reads_a_computed_roi_at_every_run():
    x = random((1, 1, 4, 5))
    roi_tensor = Tensor("roi", np.float32, (8,))  # not a constant: its value comes at run time
    tensors = [Tensor("x", np.float32, x.shape, data=x, is_const=True), roi_tensor,
               None, Tensor("sizes", np.int64, (4,), data=np.array([1, 1, 3, 4]), is_const=True)]
    out = Tensor("y", np.float32, ())
    attrs = {**default_attrs("Resize"), "method": "LINEAR", "coordinate_transform_mode": "TF_CROP_AND_RESIZE"}
    kernel = find_kernel("Resize", np.float32)(tensors, [out], Primitive("Resize", attrs), "node")
    out.shape = kernel.infer_shapes()[0]
    out.data = np.empty(out.shape, np.float32)
    kernel.resize()
    for roi in ROIS:
        roi_tensor.data = np.array(roi, np.float32)
        kernel.execute()
        model, feeds = resize_model(x, None, [1, 1, 3, 4], attrs, roi)
        np.testing.assert_allclose(out.data, run_onnxruntime(model, feeds)[0], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("method", ["LINEAR", "CUBIC"])
@pytest.mark.parametrize("shape, scales, sizes", [
    ((1, 2, 9, 11), [1, 1, 0.5, 0.6], None), ((1, 2, 8, 8), [1, 1, 0.3, 1.5], None), ((2, 9, 11), None, [2, 4, 3]),
    ((1, 2, 9, 11, 6), [1, 1, 0.5, 0.6, 0.7], None), ((1, 1, 16, 16), None, [1, 1, 3, 5])])
@pytest.mark.parametrize("exclude", [False, True])
def test_antialias(method, shape, scales, sizes, exclude):
    """Opset 18 antialias (the kernel reads it once Resize has the field) against the ONNX reference."""
    attrs = {"method": method, "coordinate_transform_mode": "HALF_PIXEL", "antialias": True,
             "exclude_outside": exclude}
    check(random(shape, seed=3), scales, sizes, attrs, oracle="reference")


@pytest.mark.parametrize("policy", ["not_larger", "not_smaller"])
@pytest.mark.parametrize("method", ["NEAREST", "LINEAR", "CUBIC"])
@pytest.mark.parametrize("shape, sizes", [((1, 2, 7, 9), [1, 2, 4, 6]), ((1, 2, 5, 6), [1, 2, 9, 13]),
                                          ((1, 1, 2, 4), [1, 1, 1, 3])])
def test_keep_aspect_ratio_policy_as_the_converter_resolves_it(policy, method, shape, sizes):
    """The policy's rounded dims with its single scale: sizes and scales both given to the kernel."""
    dims, scales = keep_aspect_ratio(shape, sizes, [2, 3], policy)
    x = random(shape, seed=4)
    attrs = {"method": method, "coordinate_transform_mode": "HALF_PIXEL"}
    kernel_inputs = [x, None, np.array(scales, np.float32), np.array(dims, np.int64)]
    check(x, None, sizes[2:], attrs, kernel_inputs=kernel_inputs, axes=[2, 3], keep_aspect_ratio_policy=policy)
