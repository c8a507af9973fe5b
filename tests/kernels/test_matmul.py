"""MatMulFusion against onnxruntime's MatMul and Gemm."""

from __future__ import annotations

import numpy as np
import pytest

from lite.errors import ModelFormatError
from lite.kernels.registry import find_kernel
from lite.primitive import Primitive
from lite.schema.primitives import default_attrs
from lite.tensor import Tensor
from tests.support.kernel_harness import run_kernel
from tests.support.matmul import attention_reference, onnx_reference


def random(shape, rng) -> np.ndarray:
    return rng.standard_normal(shape).astype(np.float32)


def swap(x: np.ndarray, flag: bool) -> np.ndarray:
    return np.ascontiguousarray(x.swapaxes(-1, -2)) if flag and x.ndim >= 2 else x


@pytest.mark.parametrize(("a_shape", "b_shape"), [
    ((4, 5), (5, 6)),
    ((2, 3, 4, 5), (5, 6)),
    ((3, 1, 4, 5), (2, 5, 6)),
    ((4, 5), (2, 3, 5, 6)),
    ((5,), (5, 6)),
    ((5,), (2, 5, 6)),
    ((2, 3, 4, 5), (5,)),
    ((5,), (5,)),
    ((1, 7), (7, 1)),
])
@pytest.mark.parametrize(("transpose_a", "transpose_b"), [(False, False), (True, False), (False, True), (True, True)])
def test_matmul_matches_onnxruntime(a_shape, b_shape, transpose_a, transpose_b):
    rng = np.random.default_rng(len(a_shape) * 10 + len(b_shape))
    a, b = random(a_shape, rng), random(b_shape, rng)
    expected = onnx_reference("MatMul", {"a": a, "b": b})
    attrs = {"transpose_a": transpose_a, "transpose_b": transpose_b}
    actual = run_kernel("MatMulFusion", attrs, [swap(a, transpose_a), swap(b, transpose_b)])[0]
    assert actual.shape == expected.shape
    np.testing.assert_allclose(actual, expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("bias_shape", [(6,), (4, 1), (4, 6), (1, 6)])
@pytest.mark.parametrize(("trans_a", "trans_b"), [(0, 0), (1, 0), (0, 1), (1, 1)])
def test_gemm_like_transposes_with_bias_match_onnxruntime_gemm(bias_shape, trans_a, trans_b):
    rng = np.random.default_rng(17)
    a, b, c = random((5, 4) if trans_a else (4, 5), rng), random((6, 5) if trans_b else (5, 6), rng), random(
        bias_shape, rng)
    expected = onnx_reference("Gemm", {"a": a, "b": b, "c": c}, transA=trans_a, transB=trans_b)
    actual = run_kernel("MatMulFusion", {"transpose_a": bool(trans_a), "transpose_b": bool(trans_b)}, [a, b, c])[0]
    np.testing.assert_allclose(actual, expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(("activation", "function"), [
    ("NO_ACTIVATION", lambda y: y), ("RELU", lambda y: np.maximum(y, 0)), ("RELU6", lambda y: np.clip(y, 0, 6))])
def test_batched_matmul_bias_and_activation(activation, function):
    rng = np.random.default_rng(23)
    a, b, bias = random((2, 3, 4, 8), rng) * 2, random((3, 8, 6), rng) * 2, random((6,), rng)
    expected = function(onnx_reference("MatMul", {"a": a, "b": b}) + bias)
    actual = run_kernel("MatMulFusion", {"activation_type": activation}, [a, b, bias])[0]
    np.testing.assert_allclose(actual, expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(("shapes", "attrs", "message"), [
    ([(4, 5), (6, 7)], {}, "inner dims"),
    ([(4, 5), (4, 6)], {"transpose_b": True}, "inner dims"),
    ([(2, 4, 5), (3, 5, 6)], {}, "broadcast"),
    ([(4, 5), (5, 6), (5,)], {}, "bias"),
    ([(4, 5), (5, 6), (2, 4, 6)], {}, "bias"),
    ([(), (5, 6)], {}, "at least one dim"),
    ([(4, 5), (5, 6)], {"activation_type": "TANH"}, "activation"),
])
def test_matmul_rejects_invalid_inputs(shapes, attrs, message):
    rng = np.random.default_rng(0)
    with pytest.raises(ModelFormatError, match=message):
        run_kernel("MatMulFusion", attrs, [random(shape, rng) for shape in shapes])


def test_matmul_shapes_are_the_operands_after_their_transposes():
    rng = np.random.default_rng(2)
    a, b = rng.standard_normal((2, 5, 3)).astype(np.float32), rng.standard_normal((4, 5)).astype(np.float32)
    tensors = [Tensor(name, x.dtype, x.shape, data=x, is_const=True) for name, x in (("a", a), ("b", b))]
    kernel = find_kernel("MatMulFusion", np.float32)(
        tensors, [Tensor("y", np.float32, ())],
        Primitive("MatMulFusion", {**default_attrs("MatMulFusion"), "transpose_a": True, "transpose_b": True}), "mm")
    assert kernel.matmul_shapes() == [((2, 3, 5), (5, 4))]


def test_plans_of_shapes_seen_before_come_back_and_stay_right():
    """A product resized between two row counts (a prompt and a decode step) gets each count's plan (and
    the steps it made) back; its results stay a @ b; a new epilogue drops the kept plans."""
    from dataclasses import replace

    from lite.kernels import matmul

    rng = np.random.default_rng(4)
    b = rng.standard_normal((24, 40)).astype(np.float32)
    a_tensor, b_tensor = Tensor("a", np.float32, (9, 24)), Tensor("b", np.float32, b.shape, data=b, is_const=True)
    out = Tensor("y", np.float32, ())
    kernel = find_kernel("MatMulFusion", np.float32)([a_tensor, b_tensor], [out],
                                                     Primitive("MatMulFusion", default_attrs("MatMulFusion")), "mm")
    plans = {}
    for rows in (9, 1, 9, 1):
        a = rng.standard_normal((rows, 24)).astype(np.float32)
        a_tensor.shape, a_tensor.data = a.shape, a
        out.shape = tuple(kernel.infer_shapes()[0])
        out.data = np.empty(out.shape, np.float32)
        kernel.resize()
        assert plans.setdefault(rows, kernel.plan) is kernel.plan
        kernel.execute()
        np.testing.assert_allclose(out.data, a @ b, rtol=1e-5, atol=1e-5)
    assert len(kernel.plans) == 2
    kernel.set_epilogue(replace(kernel.epilogue))  # NOTE: an equal epilogue keeps them
    assert len(kernel.plans) == 2
    kernel.set_epilogue(replace(kernel.epilogue, absorbed=("SWISH", 1.0)))
    assert not kernel.plans
    for rows in range(1, matmul.PLANS_KEPT + 3):
        a_tensor.shape = (rows, 24)
        kernel.resize()
    assert len(kernel.plans) == matmul.PLANS_KEPT


# ---- Attention ------------------------------------------------------------------------------




@pytest.mark.parametrize(("q", "k", "v", "mask"), [
    ((2, 4, 7, 16), (2, 4, 16, 7), (2, 4, 7, 8), (7, 7)),
    ((3, 5, 8), (3, 8, 6), (3, 6, 8), None),
    ((2, 1, 5, 4), (1, 3, 4, 9), (2, 3, 9, 4), (2, 1, 1, 9)),
])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_attention_matches_the_reference(q, k, v, mask, dtype):
    rng = np.random.default_rng(len(q) + len(k))
    arrays = [(rng.standard_normal(s) * 2).astype(dtype) for s in (q, k, v)]
    mask_array = None if mask is None else (rng.standard_normal(mask) * 3).astype(dtype)
    [actual] = run_kernel("Attention", {"scale": 0.25}, [*arrays, mask_array])
    expected = attention_reference(*arrays, np.zeros((), dtype) if mask is None else mask_array, 0.25)
    assert actual.dtype == dtype and actual.shape == expected.shape
    np.testing.assert_allclose(actual, expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(("shapes", "attrs", "message"), [
    ([(2, 4, 8), (2, 7, 5), (2, 5, 8)], {}, "inner dims"),
    ([(2, 4, 8), (2, 8, 5), (2, 5, 8), (3, 5)], {}, "mask"),
    ([(8,), (8, 5), (5, 8)], {}, "2 or more dims"),
    ([(2, 4, 8), (2, 8, 5), (2, 5, 8)], {"scale": float("inf")}, "finite"),
])
def test_attention_rejects_bad_shapes_and_scale(shapes, attrs, message):
    arrays = [np.ones(s, np.float32) for s in shapes]
    with pytest.raises(ModelFormatError, match=message):
        run_kernel("Attention", attrs, arrays)
