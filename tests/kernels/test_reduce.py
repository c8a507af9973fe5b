"""Reduction kernels against onnxruntime on the equivalent single ONNX node."""

from __future__ import annotations

import numpy as np
import pytest

from lite.errors import ModelFormatError
from lite.ops.reduce import ONNX_REDUCTIONS
from tests.support.kernel_harness import assert_matches, run_kernel
from tests.support.oracle import run_onnxruntime, single_node_model

MODES = ONNX_REDUCTIONS


def random(shape: tuple[int, ...], dtype=np.float32, seed: int = 0, scale: float = 1.0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if np.dtype(dtype).kind == "f":
        return np.asarray(rng.uniform(-2, 2, shape) * scale, dtype)
    return np.asarray(rng.integers(-4, 5, shape), dtype)


def onnx_reference(op: str, inputs: list[np.ndarray], opset: int, **attrs) -> np.ndarray:
    feeds = {f"x{i}": a for i, a in enumerate(inputs)}
    model = single_node_model(op, feeds, opset=opset, **attrs)
    return run_onnxruntime(model, feeds)[0]



@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("shape, axes", [
    ((2, 3, 4), ()), ((2, 3, 4), (0,)), ((2, 3, 4), (-1,)), ((2, 3, 4), (2, 0)), ((5,), (0,)), ((), ()),
    ((3, 0, 2), (0,)), ((1, 3, 1), (0, 1, 2)),
])
@pytest.mark.parametrize("keep_dims", [True, False])
@pytest.mark.parametrize("dtype", [np.float32, np.int64])
def test_reduce(mode, shape, axes, keep_dims, dtype):
    if dtype == np.int64 and mode.startswith("LOG"):
        pytest.skip("integer LogSum(Exp) is refused (test_integer_logs_are_refused)")
    x = np.asarray(np.abs(random(shape, dtype)) + 1 if mode == "LOG_SUM" else random(shape, dtype))
    attrs = {"reduce_mode": mode, "axes": axes, "keep_dims": keep_dims}
    [actual] = run_kernel("ReduceFusion", attrs, [x])
    inputs = [x, np.array(axes, np.int64)] if axes else [x]
    assert_matches(actual, onnx_reference(MODES[mode], inputs, 18, keepdims=int(keep_dims)))


@pytest.mark.parametrize("mode", ["LOG_SUM", "LOG_SUM_EXP"])
def test_integer_logs_are_refused(mode):
    with pytest.raises(ModelFormatError, match="floats only"):
        run_kernel("ReduceFusion", {"reduce_mode": mode}, [random((2, 3), np.int64)])


@pytest.mark.parametrize("mode", list(MODES))
def test_reduce_noop_with_empty_axes(mode):
    x = random((2, 3))
    [actual] = run_kernel("ReduceFusion", {"reduce_mode": mode, "noop_with_empty_axes": True}, [x])
    assert_matches(actual, onnx_reference(MODES[mode], [x], 18, noop_with_empty_axes=1))


@pytest.mark.parametrize("mode, dtype, expected", [
    ("MAX", np.float32, -np.inf), ("MIN", np.float32, np.inf), ("SUM", np.float32, 0), ("PROD", np.float32, 1),
    ("MAX", np.int64, np.iinfo(np.int64).min), ("MIN", np.int8, 127),
])
def test_reduce_over_an_empty_axis(mode, dtype, expected):
    x = np.zeros((3, 0), dtype)
    [actual] = run_kernel("ReduceFusion", {"reduce_mode": mode, "axes": (1,), "keep_dims": False}, [x])
    assert actual.dtype == dtype
    np.testing.assert_array_equal(actual, np.full(3, expected, dtype))


@pytest.mark.parametrize("attrs", [{"axes": (3,)}, {"axes": (-4,)}, {"axes": (0, -3)}, {"reduce_mode": "MEDIAN"}])
def test_reduce_rejects(attrs):
    with pytest.raises(ModelFormatError):
        run_kernel("ReduceFusion", attrs, [random((2, 3, 4))])


@pytest.mark.parametrize("mode", ["MAX", "MIN"])
def test_bool_reduces_with_max_and_min(mode):
    x = np.random.default_rng(1).random((3, 4, 5)) < 0.3
    [actual] = run_kernel("ReduceFusion", {"reduce_mode": mode, "axes": (1,)}, [x])
    assert_matches(actual, onnx_reference(MODES[mode], [x, np.array([1])], 20))


def test_bool_mean_is_rejected():
    with pytest.raises(ModelFormatError, match="only MAX and MIN"):
        run_kernel("ReduceFusion", {"reduce_mode": "MEAN"}, [np.zeros((2, 3), bool)])


def test_log_sum_exp_of_large_values_does_not_overflow():
    x = np.array([[1000.0, 1000.0], [-np.inf, -np.inf]], np.float32)
    [actual] = run_kernel("ReduceFusion", {"reduce_mode": "LOG_SUM_EXP", "axes": (1,)}, [x])
    np.testing.assert_allclose(actual, [[1000 + np.log(2)], [-np.inf]], rtol=1e-6)


def test_a_long_sum_makes_no_vector_of_ones_as_large_as_its_input(monkeypatch):
    from lite.kernels import reduce

    assert reduce.summing_ones(reduce.MAX_SUMMING_ONES + 1, np.dtype(np.float32)) is None
    assert reduce.summing_ones(64, np.dtype(np.float32)).shape == (64,)
    monkeypatch.setattr(reduce, "MAX_SUMMING_ONES", 8)
    x = random((3, 4, 5))
    [actual] = run_kernel("ReduceFusion", {"reduce_mode": "SUM", "axes": (1, 2), "keep_dims": False}, [x])
    assert_matches(actual, onnx_reference("ReduceSum", [x, np.array([1, 2], np.int64)], 13, keepdims=0))


@pytest.mark.parametrize("axes", [(1,), (0, 2), ()])
def test_axes_from_input_one_override_the_attribute(axes):
    x = random((2, 3, 4))
    attrs = {"reduce_mode": "SUM", "axes": (0,), "keep_dims": False}
    [actual] = run_kernel("ReduceFusion", attrs, [x, np.array(axes, np.int64)])
    assert_matches(actual, onnx_reference("ReduceSum", [x, np.array(axes, np.int64)], 13, keepdims=0))


NORMALIZATIONS = [("Softmax", "Softmax"), ("LogSoftmax", "LogSoftmax")]


@pytest.mark.parametrize("op_type, onnx_op", NORMALIZATIONS)
@pytest.mark.parametrize("shape, axis", [((2, 3, 4), -1), ((2, 3, 4), 0), ((2, 3, 4), 1), ((7,), 0),
                                         ((0, 3), 1), ((3, 0), 1)])
@pytest.mark.parametrize("scale", [1.0, 1000.0])
def test_normalization_one_axis(op_type, onnx_op, shape, axis, scale):
    x = random(shape, scale=scale)
    [actual] = run_kernel(op_type, {"axis": (axis,)}, [x])
    assert_matches(actual, onnx_reference(onnx_op, [x], 13, axis=axis))


@pytest.mark.parametrize("op_type, onnx_op", NORMALIZATIONS)
@pytest.mark.parametrize("axis", [0, 1, 2])
def test_normalization_flattened_opset_11(op_type, onnx_op, axis):
    """Opset < 13 normalises over every axis from ``axis`` on; the converter lists them."""
    x = random((2, 3, 4, 5), scale=10)
    [actual] = run_kernel(op_type, {"axis": tuple(range(axis, 4))}, [x])
    assert_matches(actual, onnx_reference(onnx_op, [x], 11, axis=axis))


@pytest.mark.parametrize("axes", [(0, 2), (-1, 1), (3, 0, 2)])
def test_normalization_any_axes(axes):
    x = random((2, 3, 4, 5), np.float64, scale=50)
    shifted = x - x.max(axis=axes, keepdims=True)
    log_total = np.log(np.exp(shifted).sum(axis=axes, keepdims=True))
    [softmax] = run_kernel("Softmax", {"axis": axes}, [x])
    [log_softmax] = run_kernel("LogSoftmax", {"axis": axes}, [x])
    np.testing.assert_allclose(softmax, np.exp(shifted - log_total), rtol=1e-12)
    np.testing.assert_allclose(log_softmax, shifted - log_total, rtol=1e-12)


@pytest.mark.parametrize("op_type", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize("axis", [(), (3,), (-4,), (1, 1)])
def test_normalization_rejects(op_type, axis):
    with pytest.raises(ModelFormatError):
        run_kernel(op_type, {"axis": axis}, [random((2, 3, 4))])
