"""lite.ops.quantized_arithmetic against onnxruntime's QLinearAdd and QLinearMul (bit for bit) and
ONNX's DequantizeLinear -> op -> QuantizeLinear (within a step), on fresh random data; its fused
multiply-add against exact rational arithmetic."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import lite
from lite.ops.quant import dequantize_tensor, quantize_tensor
from lite.ops.quantized_arithmetic import FLOAT_OPS, fma32, quantized_arithmetic, uses_scale_ratios
from tests.support.quantized import microsoft_op_model, onnxruntime_session

ELEMENTS = 4096
ORT_OPS = {"AddFusion": "QLinearAdd", "MulFusion": "QLinearMul"}
ONNX_TYPES = {np.dtype(np.int8): TensorProto.INT8, np.dtype(np.uint8): TensorProto.UINT8}


def _qlinear_session(op_type: str, dtype: np.dtype, b_shape: tuple[int, ...]) -> ort.InferenceSession:
    kind = ONNX_TYPES[np.dtype(dtype)]
    inputs = [helper.make_tensor_value_info("a", kind, [ELEMENTS]), helper.make_tensor_value_info("b", kind, b_shape)]
    inputs += [helper.make_tensor_value_info(n, TensorProto.FLOAT, []) for n in ("a_s", "b_s", "y_s")]
    inputs += [helper.make_tensor_value_info(n, kind, []) for n in ("a_z", "b_z", "y_z")]
    model = microsoft_op_model(ORT_OPS[op_type], ["a", "a_s", "a_z", "b", "b_s", "b_z", "y_s", "y_z"], inputs,
                               helper.make_tensor_value_info("y", kind, [ELEMENTS]))
    return onnxruntime_session(model)


def _params(scale, zero_point) -> lite.QuantParams:
    return lite.QuantParams(np.float32([scale]), np.int64([zero_point]))


def _draws(rng, op_type: str, dtype, b_shape, trials: int):
    """(a, b, scales, zero points) of ``trials`` random ops: scales over three decades, any zero points."""
    low, high = np.iinfo(dtype).min, np.iinfo(dtype).max
    for _ in range(trials):
        a = rng.integers(low, high + 1, ELEMENTS).astype(dtype)
        b = rng.integers(low, high + 1, b_shape).astype(dtype)
        scales = [np.float32(10 ** rng.uniform(-3, 0)) for _ in range(3)]
        if op_type == "MulFusion":
            scales[2] = np.float32(scales[2] * 64)  # a product's range is wider: fewer saturated results
        yield a, b, scales, [int(z) for z in rng.integers(low, high + 1, 3)]


@pytest.mark.parametrize("b_shape", [(ELEMENTS,), (1,)])
@pytest.mark.parametrize("dtype", [np.int8, np.uint8])
@pytest.mark.parametrize("op_type", ["AddFusion", "MulFusion"])
def test_8_bit_add_and_mul_are_onnxruntimes_qlinear_kernels_bit_for_bit(op_type, dtype, b_shape):
    rng, session = np.random.default_rng(31), _qlinear_session(op_type, dtype, b_shape)
    differing_from_the_definition = 0
    for a, b, scales, zero_points in _draws(rng, op_type, dtype, b_shape, 60):
        a_p, b_p, y_p = (_params(s, z) for s, z in zip(scales, zero_points, strict=True))
        [expected] = session.run(None, _feeds(a, b, scales, zero_points))
        actual = quantized_arithmetic(op_type, a, a_p, b, b_p, y_p, dtype)
        np.testing.assert_array_equal(actual, expected)
        defined = _as_defined(op_type, a, a_p, b, b_p, y_p, dtype)
        assert np.abs(actual.astype(int) - defined.astype(int)).max() <= 1
        differing_from_the_definition += int(np.sum(actual != defined))
    assert differing_from_the_definition < 60 * ELEMENTS * 1e-3


def _feeds(a, b, scales, zero_points) -> dict[str, np.ndarray]:
    return {"a": a, "b": b, **{f"{n}_s": np.array(s, np.float32) for n, s in zip("aby", scales, strict=True)},
            **{f"{n}_z": np.array(z, a.dtype) for n, z in zip("aby", zero_points, strict=True)}}


def _as_defined(op_type, a, a_p, b, b_p, y_p, dtype) -> np.ndarray:
    real = FLOAT_OPS[op_type](dequantize_tensor(a, a_p), dequantize_tensor(b, b_p))
    return quantize_tensor(real, y_p, dtype)


def test_the_known_tie_rounds_as_onnxruntime_rounds_it():
    """An Add whose exact result is 146.50002: the definition gives 147, onnxruntime's QLinearAdd 146."""
    rng, session = np.random.default_rng(5), _qlinear_session("AddFusion", np.dtype(np.uint8), (ELEMENTS,))
    for a, b, scales, zero_points in _draws(rng, "AddFusion", np.uint8, (ELEMENTS,), 400):
        a_p, b_p, y_p = (_params(s, z) for s, z in zip(scales, zero_points, strict=True))
        actual = quantized_arithmetic("AddFusion", a, a_p, b, b_p, y_p, np.uint8)
        defined = _as_defined("AddFusion", a, a_p, b, b_p, y_p, np.uint8)
        if np.any(actual != defined):
            i = int(np.argmax(actual != defined))
            assert actual[i] == session.run(None, _feeds(a, b, scales, zero_points))[0][i]
            return
    pytest.fail("no random Add met a tie the two arithmetics round apart")


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int16])
def test_sub_and_16_bit_ops_keep_the_groups_arithmetic(dtype):
    rng = np.random.default_rng(8)
    low, high = np.iinfo(dtype).min, np.iinfo(dtype).max
    a, b = (rng.integers(low, high + 1, 512).astype(dtype) for _ in range(2))
    a_p, b_p, y_p = _params(0.02, 3), _params(0.05, -1 if low < 0 else 7), _params(0.07, 0)
    op_types = ["SubFusion", "AddFusion", "MulFusion"] if dtype == np.int16 else ["SubFusion"]
    for op_type in op_types:
        assert not uses_scale_ratios(op_type, dtype, dtype, dtype)
        np.testing.assert_array_equal(quantized_arithmetic(op_type, a, a_p, b, b_p, y_p, dtype),
                                      _as_defined(op_type, a, a_p, b, b_p, y_p, dtype))


def test_fma32_rounds_once():
    """Against the exactly rounded x * y + z (rationals), on values whose float64 sum is inexact:
    z tiny or huge next to the product, and sums that cancel."""
    rng = np.random.default_rng(12)
    x = rng.standard_normal(3000).astype(np.float32)
    y = (rng.standard_normal(3000) * 10.0 ** rng.integers(-20, 20, 3000)).astype(np.float32)
    z = (rng.standard_normal(3000) * 10.0 ** rng.integers(-30, 30, 3000)).astype(np.float32)
    z[:500] = -(x[:500].astype(np.float64) * y[:500]).astype(np.float32)  # near cancellation
    actual = fma32(x, y, z)
    expected = np.array([_exactly_rounded(Fraction(float(a)) * Fraction(float(b)) + Fraction(float(c)))
                         for a, b, c in zip(x, y, z, strict=True)], np.float32)
    np.testing.assert_array_equal(actual, expected)


def test_fma32_breaks_a_products_float32_tie_by_a_tiny_addend():
    """(1 + 2^-k)^2 lies halfway between two float32 values; an addend far below float64's last
    bit decides the rounding (a float64 sum rounded again to float32 rounds the tie to even)."""
    k = np.arange(12, 20)
    x = (1 + np.ldexp(1.0, -k)).astype(np.float32)
    for z in (np.float32(1e-30), np.float32(-1e-30)):
        expected = [_exactly_rounded(Fraction(float(a)) ** 2 + Fraction(float(z))) for a in x]
        np.testing.assert_array_equal(fma32(x, x, z), np.array(expected, np.float32))


def _exactly_rounded(value: Fraction) -> np.float32:
    """The float32 nearest ``value``, ties to even (from the two float32 neighbours of its float64)."""
    near = np.float32(float(value))
    candidates = {near, np.nextafter(near, np.float32(np.inf)), np.nextafter(near, np.float32(-np.inf))}
    finite = [c for c in candidates if np.isfinite(c)]
    best = min(finite, key=lambda c: (abs(Fraction(float(c)) - value), int(np.array(c).view(np.int32)) & 1))
    return np.float32(best)
