"""BatchNorm and LRN against onnxruntime's BatchNormalization and LRN; LayerNorm against the ONNX reference."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper
from onnx.reference import ReferenceEvaluator

from lite.errors import ModelFormatError
from lite.kernels.registry import find_kernel
from lite.primitive import Primitive
from lite.schema.primitives import default_attrs
from lite.tensor import Tensor
from tests.support.kernel_harness import run_kernel
from tests.support.oracle import onnx_type, run_onnxruntime, single_node_model


def onnx_reference(op_type: str, x: np.ndarray, initializers: dict | None = None, **attrs) -> np.ndarray:
    model = single_node_model(op_type, {"x": x}, initializers=initializers, **attrs)
    model.graph.output[0].type.tensor_type.elem_type = onnx_type(x.dtype)  # onnxruntime needs a typed output
    return run_onnxruntime(model, {"x": x})[0]


def batch_norm_inputs(shape, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    channels = shape[1]
    x = rng.standard_normal(shape).astype(np.float32)
    scale, bias, mean = (rng.standard_normal(channels).astype(np.float32) for _ in range(3))
    var = rng.uniform(0.2, 2.0, channels).astype(np.float32)
    return [x, scale, bias, mean, var]


def batch_norm_reference(inputs: list[np.ndarray], epsilon: float) -> np.ndarray:
    x, *params = inputs
    names = ["scale", "bias", "mean", "var"]
    return onnx_reference("BatchNormalization", x, dict(zip(names, params, strict=True)), epsilon=epsilon)


@pytest.mark.parametrize("shape", [(2, 5), (2, 4, 7), (1, 8, 6, 5), (3, 4, 2, 3, 4)])
@pytest.mark.parametrize("epsilon", [1e-5, 1e-3])
def test_batch_norm_matches_onnxruntime(shape, epsilon):
    inputs = batch_norm_inputs(shape, sum(shape))
    expected = batch_norm_reference(inputs, epsilon)
    actual = run_kernel("BatchNorm", {"epsilon": epsilon}, inputs)[0]
    np.testing.assert_allclose(actual, expected, rtol=1e-4, atol=1e-5)


def test_batch_norm_const_statistics_fold_once():
    inputs = batch_norm_inputs((2, 6, 5, 5), 3)
    tensors = [Tensor(f"in{i}", a.dtype, a.shape, data=a, is_const=i > 0) for i, a in enumerate(inputs)]
    output = Tensor("y", np.float32, inputs[0].shape, data=np.empty_like(inputs[0]))
    kernel = find_kernel("BatchNorm", np.float32)(tensors, [output], Primitive("BatchNorm", default_attrs("BatchNorm")))
    kernel.prepare()
    for seed in (4, 5):
        tensors[0].data = np.random.default_rng(seed).standard_normal(inputs[0].shape).astype(np.float32)
        kernel.execute()
        expected = batch_norm_reference([tensors[0].data, *inputs[1:]], 1e-5)
        np.testing.assert_allclose(output.data, expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(("shapes", "attrs", "message"), [
    ([(2, 4, 3), (4,), (4,), (3,), (4,)], {}, "channels"),
    ([(2, 4, 3), (4, 1), (4,), (4,), (4,)], {}, "channels"),
    ([(4,), (4,), (4,), (4,), (4,)], {}, "rank 2"),
    ([(2, 4, 3), (4,), (4,), (4,)], {}, "inputs"),
    ([(2, 4, 3), (4,), (4,), (4,), (4,)], {"epsilon": -1.0}, "epsilon"),
])
def test_batch_norm_rejects_invalid_inputs(shapes, attrs, message):
    rng = np.random.default_rng(0)
    with pytest.raises(ModelFormatError, match=message):
        run_kernel("BatchNorm", attrs, [rng.standard_normal(s).astype(np.float32) for s in shapes])


def lrn_by_definition(x: np.ndarray, size: int, alpha: float, beta: float, bias: float) -> np.ndarray:
    """ONNX's LRN formula channel by channel (onnxruntime only runs odd sizes)."""
    channels = x.shape[1]
    square_sum = np.stack([np.sum(x[:, max(0, c - (size - 1) // 2):min(channels, c + size // 2 + 1)] ** 2, axis=1)
                           for c in range(channels)], axis=1)
    return x / (bias + alpha / size * square_sum) ** beta


@pytest.mark.parametrize("size", [1, 2, 3, 4, 5, 6, 11, 40])
@pytest.mark.parametrize("shape", [(1, 7, 5, 5), (2, 16, 3, 4)])
def test_lrn_matches_onnxruntime_and_definition(shape, size):
    x = np.random.default_rng(size).standard_normal(shape).astype(np.float32)
    attrs = {"size": size, "alpha": 0.02, "beta": 0.75, "bias": 1.5}
    expected = lrn_by_definition(x.astype(np.float64), **attrs)
    if size % 2:
        np.testing.assert_allclose(onnx_reference("LRN", x, **attrs), expected, rtol=1e-4, atol=1e-5)
    actual = run_kernel("LRN", attrs, [x])[0]
    np.testing.assert_allclose(actual, expected, rtol=1e-4, atol=1e-5)


def test_lrn_default_attributes_match_onnxruntime():
    x = np.random.default_rng(1).standard_normal((1, 9, 6, 6)).astype(np.float32) * 10
    expected = onnx_reference("LRN", x, size=5)
    np.testing.assert_allclose(run_kernel("LRN", {"size": 5}, [x])[0], expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("size", [0, -3])
def test_lrn_rejects_non_positive_size(size):
    with pytest.raises(ModelFormatError, match="size"):
        run_kernel("LRN", {"size": size}, [np.ones((1, 3, 2, 2), np.float32)])


# ---- LayerNormFusion ----------------------------------------------------------------------------


def layer_norm_reference(x, scale, bias, axis, epsilon, n_out):
    names = ["x", "s"] + (["b"] if bias is not None else [])
    node = helper.make_node("LayerNormalization", names, ["y", "m", "i"][:n_out], axis=axis, epsilon=epsilon)
    feeds = dict(zip(names, [x, scale, bias], strict=False))
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(k, onnx_type(v.dtype), v.shape)
                                            for k, v in feeds.items()],
                              [helper.make_tensor_value_info(o, 0, None) for o in node.output])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return ReferenceEvaluator(model).run(None, feeds)


@pytest.mark.parametrize(("shape", "axis"), [((2, 5, 16), -1), ((2, 5, 16), 1), ((3, 4), 0), ((2, 3, 4, 5), -2)])
@pytest.mark.parametrize("bias", [True, False])
def test_layer_norm_matches_the_reference(shape, axis, bias):
    rng = np.random.default_rng(len(shape) + axis)
    x = (rng.standard_normal(shape) * 3 + 1).astype(np.float32)
    scale, b = (rng.standard_normal(shape[axis:]).astype(np.float32) for _ in range(2))
    inputs = [x, scale, b if bias else None]
    actual = run_kernel("LayerNormFusion", {"begin_norm_axis": axis, "epsilon": 1e-3}, inputs, n_outputs=3)
    expected = layer_norm_reference(x, scale, b if bias else None, axis, 1e-3, 3)
    for got, want in zip(actual, expected, strict=True):
        assert got.dtype == np.float32 and got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("dtype", [np.float64, np.float16])
def test_layer_norm_keeps_the_dtype_and_takes_statistics_in_float32_or_wider(dtype):
    rng = np.random.default_rng(3)
    x = rng.standard_normal((4, 64)).astype(dtype)
    scale = rng.standard_normal(64).astype(dtype)
    y, mean, inv_std = run_kernel("LayerNormFusion", {}, [x, scale], n_outputs=3)
    expected = layer_norm_reference(x.astype(np.float64), scale.astype(np.float64), None, -1, 1e-5, 3)
    assert y.dtype == dtype and mean.dtype == inv_std.dtype == np.float32
    tolerance = 1e-12 if dtype == np.float64 else 2e-3
    np.testing.assert_allclose(y, expected[0], rtol=tolerance, atol=tolerance * 4)
    np.testing.assert_allclose(mean, expected[1], rtol=1e-5, atol=1e-6)


def test_layer_norm_scale_broadcasts_over_the_normalised_axes():
    rng = np.random.default_rng(4)
    x = rng.standard_normal((2, 3, 8)).astype(np.float32)
    scale = np.full((1,), 2.5, np.float32)
    [y] = run_kernel("LayerNormFusion", {"begin_norm_axis": 1}, [x, scale])
    [plain] = run_kernel("LayerNormFusion", {"begin_norm_axis": 1}, [x, np.ones((3, 8), np.float32)])
    np.testing.assert_allclose(y, 2.5 * plain, rtol=1e-6)


@pytest.mark.parametrize(("attrs", "scale_shape", "message"), [
    ({"begin_norm_axis": 3}, (8,), "out of range"),
    ({"begin_norm_axis": -4}, (8,), "out of range"),
    ({}, (7,), "does not broadcast"),
    ({"epsilon": -1.0}, (8,), "epsilon"),
])
def test_layer_norm_rejects_bad_attributes_and_shapes(attrs, scale_shape, message):
    x = np.zeros((2, 3, 8), np.float32)
    with pytest.raises(ModelFormatError, match=message):
        run_kernel("LayerNormFusion", attrs, [x, np.ones(scale_shape, np.float32)])


# ---- InstanceNorm and GroupNorm ----------------------------------------------------------------


def channel_norm_reference(op: str, x, scale, bias, opset: int, **attrs):
    names = ["x", "s", "b"]
    node = helper.make_node(op, names, ["y"], **attrs)
    feeds = dict(zip(names, [x, scale, bias], strict=True))
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(k, onnx_type(v.dtype), v.shape)
                                            for k, v in feeds.items()], [helper.make_tensor_value_info("y", 0, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    return ReferenceEvaluator(model).run(None, feeds)[0]


@pytest.mark.parametrize("shape", [(2, 3, 5), (1, 4, 3, 3), (2, 6, 2, 2, 2)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_instance_norm_matches_the_reference(shape, dtype):
    rng = np.random.default_rng(len(shape))
    x = (rng.standard_normal(shape) * 2 + 1).astype(dtype)
    scale, bias = (rng.standard_normal(shape[1]).astype(dtype) for _ in range(2))
    [actual] = run_kernel("InstanceNorm", {"epsilon": 1e-3}, [x, scale, bias])
    expected = channel_norm_reference("InstanceNormalization", x, scale, bias, 6, epsilon=1e-3)
    assert actual.dtype == dtype
    np.testing.assert_allclose(actual, expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(("shape", "groups"), [((2, 6, 5), 3), ((1, 4, 3, 3), 1), ((2, 8, 2, 2), 8)])
def test_group_norm_matches_the_reference(shape, groups):
    rng = np.random.default_rng(groups)
    x = (rng.standard_normal(shape) * 3).astype(np.float32)
    scale, bias = (rng.standard_normal(shape[1]).astype(np.float32) for _ in range(2))
    [actual] = run_kernel("GroupNorm", {"num_groups": groups}, [x, scale, bias])
    expected = channel_norm_reference("GroupNormalization", x, scale, bias, 21, num_groups=groups)
    np.testing.assert_allclose(actual, expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(("op", "attrs", "channels", "message"), [
    ("GroupNorm", {"num_groups": 4}, 6, "divide"), ("GroupNorm", {"num_groups": 0}, 6, "divide"),
    ("InstanceNorm", {}, 5, "must have shape"), ("InstanceNorm", {"epsilon": -1.0}, 6, "epsilon"),
])
def test_channel_norms_reject_bad_groups_and_shapes(op, attrs, channels, message):
    x = np.zeros((2, 6, 3), np.float32)
    with pytest.raises(ModelFormatError, match=message):
        run_kernel(op, attrs, [x, np.ones(channels, np.float32), np.zeros(channels, np.float32)])
