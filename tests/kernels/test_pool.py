"""MaxPoolFusion and AvgPoolFusion against onnxruntime's MaxPool, AveragePool and global pools, of 1, 2 and 3
spatial axes."""

from __future__ import annotations

import numpy as np
import pytest

from lite.errors import ModelFormatError
from lite.kernels.registry import find_kernel
from lite.primitive import Primitive
from lite.schema.primitives import default_attrs
from lite.tensor import Tensor
from tests.support.kernel_harness import run_kernel
from tests.support.oracle import onnx_type, run_onnxruntime, single_node_model

AUTO_PADS = {"PAD": "NOTSET", "SAME_UPPER": "SAME_UPPER", "SAME_LOWER": "SAME_LOWER", "VALID": "VALID"}


def onnx_reference(op_type: str, x: np.ndarray, n_outputs: int = 1, opset: int = 17, **attrs) -> np.ndarray:
    """The first output of ``op_type`` in onnxruntime (all of them when ``n_outputs`` > 1)."""
    model = single_node_model(op_type, {"x": x}, n_outputs, opset, **attrs)
    for output, dtype in zip(model.graph.output, [x.dtype, np.int64][:n_outputs], strict=True):  # typed for ORT
        output.type.tensor_type.elem_type = onnx_type(dtype)
    outputs = run_onnxruntime(model, {"x": x})
    return outputs if n_outputs > 1 else outputs[0]


def onnx_attrs(attrs: dict) -> dict:
    """ONNX MaxPool/AveragePool attributes for primitive attrs."""
    out = {"kernel_shape": list(attrs["kernel_size"]), "auto_pad": AUTO_PADS[attrs.get("pad_mode", "PAD")],
           "ceil_mode": int(attrs.get("round_mode") == "CEIL")}
    for ours, theirs in (("strides", "strides"), ("dilation", "dilations")):
        if attrs.get(ours):
            out[theirs] = list(attrs[ours])
    if attrs.get("pad_list") and out["auto_pad"] == "NOTSET":
        out["pads"] = list(attrs["pad_list"])
    if "count_include_pad" in attrs:
        out["count_include_pad"] = int(attrs["count_include_pad"])
    return out


def random_input(shape, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


WINDOWS = [
    ((1, 4, 12, 12), {"kernel_size": (3, 3), "strides": (2, 2), "pad_list": (1, 1, 1, 1)}),
    ((2, 3, 8, 8), {"kernel_size": (2, 2), "strides": (2, 2)}),
    ((1, 3, 9, 7), {"kernel_size": (3, 2), "strides": (1, 2), "pad_list": (0, 1, 2, 0)}),
    ((1, 3, 8, 8), {"kernel_size": (3, 3), "strides": (2, 2), "round_mode": "CEIL"}),
    ((1, 3, 10, 9), {"kernel_size": (3, 3), "strides": (2, 2), "pad_list": (1, 1, 1, 1), "round_mode": "CEIL"}),
    ((1, 3, 11, 10), {"kernel_size": (4, 3), "strides": (3, 2), "pad_list": (2, 0, 1, 2), "round_mode": "CEIL"}),
    ((1, 3, 11, 10), {"kernel_size": (2, 3), "strides": (2, 2), "pad_mode": "SAME_UPPER"}),
    ((1, 3, 11, 10), {"kernel_size": (2, 3), "strides": (2, 2), "pad_mode": "SAME_LOWER"}),
    ((1, 3, 11, 10), {"kernel_size": (4, 4), "strides": (3, 3), "pad_mode": "SAME_UPPER", "round_mode": "CEIL"}),
    ((1, 3, 11, 10), {"kernel_size": (3, 3), "strides": (2, 2), "pad_mode": "VALID"}),
    ((1, 3, 11, 10), {"kernel_size": (3, 3), "strides": (2, 2), "pad_mode": "VALID", "round_mode": "CEIL"}),
    ((1, 2, 6, 6), {"kernel_size": (1, 1), "strides": (2, 2)}),
    ((1, 3, 11, 10), {"kernel_size": (3, 3), "strides": (3, 3), "pad_list": (1, 0, 0, 1), "round_mode": "CEIL"}),
]


@pytest.mark.parametrize(("shape", "attrs"), WINDOWS)
def test_max_pool_matches_onnxruntime(shape, attrs):
    x = random_input(shape, sum(shape))
    expected = onnx_reference("MaxPool", x, **onnx_attrs(attrs))
    actual = run_kernel("MaxPoolFusion", attrs, [x])[0]
    np.testing.assert_array_equal(actual, expected)


@pytest.mark.parametrize(("shape", "attrs"), [
    ((1, 3, 12, 12), {"kernel_size": (3, 3), "dilation": (2, 2), "pad_list": (2, 2, 2, 2)}),
    ((1, 3, 12, 11), {"kernel_size": (2, 3), "strides": (2, 1), "dilation": (3, 2), "pad_list": (1, 0, 1, 2)}),
    ((1, 3, 12, 11), {"kernel_size": (2, 2), "strides": (2, 2), "dilation": (2, 2), "round_mode": "CEIL"}),
])
def test_dilated_max_pool_matches_onnxruntime(shape, attrs):
    x = random_input(shape, 11)
    expected = onnx_reference("MaxPool", x, **onnx_attrs(attrs))
    np.testing.assert_array_equal(run_kernel("MaxPoolFusion", attrs, [x])[0], expected)


@pytest.mark.parametrize("count_include_pad", [False, True])
@pytest.mark.parametrize(("shape", "attrs"), WINDOWS)
def test_avg_pool_matches_onnxruntime(shape, attrs, count_include_pad):
    x = random_input(shape, sum(shape))
    attrs = {**attrs, "count_include_pad": count_include_pad}
    expected = onnx_reference("AveragePool", x, **onnx_attrs(attrs))
    actual = run_kernel("AvgPoolFusion", attrs, [x])[0]
    np.testing.assert_allclose(actual, expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(("op_type", "onnx_op"), [("MaxPoolFusion", "GlobalMaxPool"),
                                                  ("AvgPoolFusion", "GlobalAveragePool")])
@pytest.mark.parametrize("shape", [(1, 8, 7, 7), (3, 5, 4, 9), (2, 4, 1, 1)])
def test_global_pool_matches_onnxruntime(op_type, onnx_op, shape):
    x = random_input(shape, 5)
    expected = onnx_reference(onnx_op, x)
    actual = run_kernel(op_type, {"is_global": True}, [x])[0]
    np.testing.assert_allclose(actual, expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(("attrs", "message"), [
    ({}, "kernel_size"),
    ({"kernel_size": (3,)}, "3-D"),
    ({"kernel_size": (3,), "strides": (1, 1)}, "one value per spatial axis"),
    ({"kernel_size": (3, 0)}, "kernel_size"),
    ({"kernel_size": (3, 3), "strides": (0, 1)}, "strides"),
    ({"kernel_size": (3, 3), "pad_list": (3, 0, 0, 0)}, "smaller than the kernel"),
    ({"kernel_size": (3, 3), "pad_list": (1, 1)}, "pad_list"),
    ({"kernel_size": (3, 3), "round_mode": "NEAREST"}, "round_mode"),
    ({"kernel_size": (9, 9)}, "smaller than the padded window"),
])
@pytest.mark.parametrize("op_type", ["MaxPoolFusion", "AvgPoolFusion"])
def test_pool_rejects_invalid_attributes(op_type, attrs, message):
    with pytest.raises(ModelFormatError, match=message):
        run_kernel(op_type, attrs, [random_input((1, 2, 6, 6), 0)])


@pytest.mark.parametrize(("attrs", "shape", "message"), [
    ({"kernel_size": (2, 2)}, (2, 6, 6), "4-D"), ({"is_global": True}, (2, 6), "at least one spatial axis"),
    ({"is_global": True}, (2, 3, 0, 4), "empty")])
def test_pool_rejects_inputs_of_the_wrong_rank(attrs, shape, message):
    with pytest.raises(ModelFormatError, match=message):
        run_kernel("MaxPoolFusion", attrs, [random_input(shape, 0)])


@pytest.mark.parametrize(("op_type", "onnx_op"), [("MaxPoolFusion", "MaxPool"), ("AvgPoolFusion", "AveragePool")])
def test_pool_runs_again_on_new_shapes_without_resize(op_type, onnx_op):
    attrs = {"kernel_size": (3, 3), "strides": (2, 2), "pad_list": (1, 1, 1, 1)}
    first = random_input((1, 2, 8, 8), 1)
    tensor, output = Tensor("x", np.float32, first.shape, data=first), Tensor("y", np.float32, ())
    primitive = Primitive(op_type, {**default_attrs(op_type), **attrs})
    kernel = find_kernel(op_type, np.float32)([tensor], [output], primitive)
    for shape in [(1, 2, 8, 8), (2, 3, 11, 6)]:
        tensor.data, tensor.shape = random_input(shape, 2), shape
        output.shape = kernel.infer_shapes()[0]
        output.data = np.empty(output.shape, np.float32)
        kernel.execute()
        expected = onnx_reference(onnx_op, tensor.data, **onnx_attrs(attrs))
        np.testing.assert_allclose(output.data, expected, rtol=1e-4, atol=1e-5)


WINDOWS_1D_3D = [
    ((2, 3, 11), {"kernel_size": (3,), "strides": (2,), "pad_list": (1, 1)}),
    ((1, 3, 10), {"kernel_size": (4,), "strides": (3,), "pad_list": (2, 1), "round_mode": "CEIL"}),
    ((1, 2, 9), {"kernel_size": (2,), "strides": (2,), "pad_mode": "SAME_UPPER"}),
    ((1, 2, 9), {"kernel_size": (3,), "pad_mode": "SAME_LOWER"}),
    ((1, 2, 5, 6, 7), {"kernel_size": (2, 2, 2), "strides": (2, 2, 2)}),
    ((1, 2, 6, 7, 8), {"kernel_size": (3, 2, 3), "strides": (2, 1, 2), "pad_list": (1, 0, 1, 1, 1, 0)}),
    ((2, 2, 7, 6, 5), {"kernel_size": (3, 3, 2), "strides": (2, 2, 2), "round_mode": "CEIL"}),
    ((1, 2, 7, 6, 5), {"kernel_size": (2, 3, 2), "strides": (2, 2, 1), "pad_mode": "SAME_UPPER"}),
    ((1, 2, 7, 6, 5), {"kernel_size": (3, 3, 3), "strides": (2, 2, 2), "pad_mode": "VALID", "round_mode": "CEIL"}),
]


@pytest.mark.parametrize(("shape", "attrs"), WINDOWS_1D_3D)
def test_max_pool_1d_and_3d_match_onnxruntime(shape, attrs):
    x = random_input(shape, sum(shape))
    np.testing.assert_array_equal(run_kernel("MaxPoolFusion", attrs, [x])[0],
                                  onnx_reference("MaxPool", x, **onnx_attrs(attrs)))


@pytest.mark.parametrize("count_include_pad", [False, True])
@pytest.mark.parametrize(("shape", "attrs"), WINDOWS_1D_3D)
def test_avg_pool_1d_and_3d_match_onnxruntime(shape, attrs, count_include_pad):
    x = random_input(shape, sum(shape))
    attrs = {**attrs, "count_include_pad": count_include_pad}
    np.testing.assert_allclose(run_kernel("AvgPoolFusion", attrs, [x])[0],
                               onnx_reference("AveragePool", x, **onnx_attrs(attrs)), rtol=1e-4, atol=1e-5)


DILATED = [
    ((1, 2, 13), {"kernel_size": (3,), "strides": (2,), "dilation": (3,), "pad_list": (2, 1)}),
    ((1, 3, 12, 11), {"kernel_size": (2, 3), "strides": (2, 1), "dilation": (3, 2), "pad_list": (1, 0, 1, 2)}),
    ((1, 3, 12, 11), {"kernel_size": (2, 2), "strides": (3, 3), "dilation": (2, 2), "pad_list": (1, 1, 1, 1),
                      "round_mode": "CEIL"}),
    ((1, 1, 9, 10, 11), {"kernel_size": (3, 2, 3), "strides": (2, 3, 2), "dilation": (2, 3, 2),
                         "pad_list": (1, 1, 2, 2, 0, 1), "round_mode": "CEIL"}),
]


@pytest.mark.parametrize(("shape", "attrs"), DILATED)
def test_dilated_max_pool_of_any_rank_matches_onnxruntime(shape, attrs):
    x = random_input(shape, 13)
    np.testing.assert_array_equal(run_kernel("MaxPoolFusion", attrs, [x])[0],
                                  onnx_reference("MaxPool", x, **onnx_attrs(attrs)))


@pytest.mark.parametrize("count_include_pad", [False, True])
@pytest.mark.parametrize(("shape", "attrs"), DILATED)
def test_dilated_avg_pool_matches_onnxruntime(shape, attrs, count_include_pad):
    """AveragePool-19 dilations; the primitive carries them once AvgPoolFusion has the field."""
    x = random_input(shape, 17)
    attrs = {**attrs, "count_include_pad": count_include_pad}
    expected = onnx_reference("AveragePool", x, opset=19, **onnx_attrs(attrs))
    np.testing.assert_allclose(run_kernel("AvgPoolFusion", attrs, [x])[0], expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("dtype", [np.uint8, np.int8, np.int32, np.float64])
@pytest.mark.parametrize(("shape", "attrs"), [WINDOWS[0], WINDOWS[5], WINDOWS_1D_3D[1], WINDOWS_1D_3D[5]])
def test_max_pool_of_other_dtypes_pads_with_their_lowest_value(dtype, shape, attrs):
    x = np.random.default_rng(3).integers(-128 if dtype != np.uint8 else 0, 127, shape).astype(dtype)
    expected = onnx_reference("MaxPool", x.astype(np.float64), **onnx_attrs(attrs)).astype(dtype)
    np.testing.assert_array_equal(run_kernel("MaxPoolFusion", attrs, [x])[0], expected)


@pytest.mark.parametrize(("shape", "attrs"), [*WINDOWS, *WINDOWS_1D_3D, *DILATED])
def test_max_pool_indices_match_onnxruntime(shape, attrs):
    x = np.round(random_input(shape, 23) * 2)  # NOTE: repeated values: ties go to the first tap
    values, indices = run_kernel("MaxPoolFusion", attrs, [x], n_outputs=2)
    expected_values, expected_indices = onnx_reference("MaxPool", x, n_outputs=2, **onnx_attrs(attrs))
    np.testing.assert_array_equal(values, expected_values)
    assert indices.dtype == np.int64
    np.testing.assert_array_equal(indices, expected_indices)


def test_max_pool_indices_of_an_integer_input_never_point_at_pads():
    x = np.full((1, 1, 3, 3), np.iinfo(np.int8).min, np.int8)
    attrs = {"kernel_size": (2, 2), "pad_list": (1, 1, 0, 0)}
    values, indices = run_kernel("MaxPoolFusion", attrs, [x], n_outputs=2)
    expected = onnx_reference("MaxPool", x, n_outputs=2, **onnx_attrs(attrs))
    np.testing.assert_array_equal(values, expected[0])
    assert indices.min() >= 0


@pytest.mark.parametrize("attrs", [{"is_global": True}, {"kernel_size": (2, 2)}])
def test_max_pool_rejects_a_third_output_and_global_indices(attrs):
    outputs = 3 if not attrs.get("is_global") else 2
    with pytest.raises(ModelFormatError, match="output"):
        run_kernel("MaxPoolFusion", attrs, [random_input((1, 2, 4, 4), 0)], n_outputs=outputs)


@pytest.mark.parametrize(("op_type", "onnx_op"), [("MaxPoolFusion", "GlobalMaxPool"),
                                                  ("AvgPoolFusion", "GlobalAveragePool")])
@pytest.mark.parametrize("shape", [(2, 3, 7), (1, 4, 3, 5, 6), (2, 2, 2, 3, 2, 3)])
def test_global_pool_of_any_rank_matches_onnx(op_type, onnx_op, shape):
    """onnxruntime pools up to 3 spatial axes (and the ONNX reference's GlobalMaxPool reduces the last two
    only): numpy's max / mean over the spatial axes beyond."""
    x = random_input(shape, 9)
    numpy = {"GlobalMaxPool": np.max, "GlobalAveragePool": np.mean}[onnx_op]
    spatial = tuple(range(2, len(shape)))
    expected = onnx_reference(onnx_op, x) if len(shape) <= 5 else numpy(x, axis=spatial, keepdims=True)
    np.testing.assert_allclose(run_kernel(op_type, {"is_global": True}, [x])[0], expected, rtol=1e-4, atol=1e-5)
