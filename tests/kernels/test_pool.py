"""MaxPoolFusion and AvgPoolFusion against onnxruntime's MaxPool, AveragePool and global pools."""

from __future__ import annotations

import numpy as np
import pytest

from lite.errors import ModelFormatError
from lite.kernels.registry import find_kernel
from lite.primitive import Primitive
from lite.schema.primitives import default_attrs
from lite.tensor import Tensor
from tests.kernels.harness import run_kernel
from tests.oracle import onnx_type, run_onnxruntime, single_node_model

AUTO_PADS = {"PAD": "NOTSET", "SAME_UPPER": "SAME_UPPER", "SAME_LOWER": "SAME_LOWER", "VALID": "VALID"}


def onnx_reference(op_type: str, x: np.ndarray, **attrs) -> np.ndarray:
    model = single_node_model(op_type, {"x": x}, **attrs)
    model.graph.output[0].type.tensor_type.elem_type = onnx_type(x.dtype)  # onnxruntime needs a typed output
    return run_onnxruntime(model, {"x": x})[0]


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
    ({"kernel_size": (3,)}, "kernel_size"),
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


def test_pool_rejects_non_4d_input():
    with pytest.raises(ModelFormatError, match="4-D"):
        run_kernel("MaxPoolFusion", {"kernel_size": (2, 2)}, [random_input((2, 6, 6), 0)])


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
