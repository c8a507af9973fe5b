"""Element-wise kernels against onnxruntime on the equivalent single ONNX node (the ONNX reference evaluator
where onnxruntime has no kernel for the types)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from onnx.reference import ReferenceEvaluator

from lite.errors import ModelFormatError
from lite.kernels.elementwise import erf_float32, erf_float64
from tests.support.elementwise import (
    FLOAT_DTYPES,
    INT_DTYPES,
    NUMBER_DTYPES,
    check_typed,
    operands,
    random,
    typed_model,
)
from tests.support.kernel_harness import assert_matches, run_kernel
from tests.support.oracle import run_onnxruntime, single_node_model

SHAPE_PAIRS = [
    ((2, 3, 4), (2, 3, 4)),
    ((2, 3, 4), (4,)),
    ((3, 1), (1, 5)),
    ((2, 1, 4), (3, 1)),
    ((), (3,)),
    ((), ()),
    ((0, 3), (1, 3)),
]




def onnx_reference(op: str, arrays: list[np.ndarray], **attrs) -> np.ndarray:
    feeds = {f"x{i}": a for i, a in enumerate(arrays)}
    model = single_node_model(op, feeds, **attrs)
    return run_onnxruntime(model, feeds)[0]


def check(op_type: str, onnx_op: str, arrays: list[np.ndarray], attrs: dict | None = None) -> None:
    [actual] = run_kernel(op_type, attrs or {}, arrays)
    assert_matches(actual, onnx_reference(onnx_op, arrays))


ARITHMETIC = [("AddFusion", "Add"), ("SubFusion", "Sub"), ("MulFusion", "Mul"), ("DivFusion", "Div")]


@pytest.mark.parametrize("op_type, onnx_op", ARITHMETIC)
@pytest.mark.parametrize("shapes", SHAPE_PAIRS)
@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.int32])
def test_arithmetic(op_type, onnx_op, shapes, dtype):
    rng = np.random.default_rng(1)
    a = random(rng, shapes[0], dtype, -50, 50)
    b = np.asarray(random(rng, shapes[1], dtype, 1, 20) * np.where(rng.random(shapes[1]) < 0.5, -1, 1), dtype)
    check(op_type, onnx_op, [a, b])


@pytest.mark.parametrize("op_type, onnx_op", ARITHMETIC)
@pytest.mark.parametrize("activation, apply", [("RELU", lambda y: np.maximum(y, 0)),
                                                ("RELU6", lambda y: np.clip(y, 0, 6))])
def test_fused_activation(op_type, onnx_op, activation, apply):
    rng = np.random.default_rng(2)
    a, b = random(rng, (3, 4), np.float32, -8, 8), random(rng, (4,), np.float32, 0.5, 2)
    [actual] = run_kernel(op_type, {"activation_type": activation}, [a, b])
    assert_matches(actual, apply(onnx_reference(onnx_op, [a, b])))


@pytest.mark.parametrize("dtype", [np.int64, np.int32, np.int8])
@pytest.mark.parametrize("activation, apply", [("RELU", lambda y: np.maximum(y, 0)),
                                                ("RELU6", lambda y: np.clip(y, 0, 6))])
def test_fused_activation_on_integers(dtype, activation, apply):
    rng = np.random.default_rng(3)
    a, b = random(rng, (3, 4), dtype, -9, 9), random(rng, (4,), dtype, -9, 9)
    [actual] = run_kernel("AddFusion", {"activation_type": activation}, [a, b])
    assert_matches(actual, apply(a + b).astype(dtype))


def test_integer_division_truncates_toward_zero():
    a, b = np.array([7, -7, 7, -7, 0], np.int64), np.array([2, 2, -2, -2, 3], np.int64)
    [actual] = run_kernel("DivFusion", {}, [a, b])
    np.testing.assert_array_equal(actual, [3, -3, -3, 3, 0])


@pytest.mark.parametrize("base_dtype, exponent_dtype, low, high", [
    (np.float32, np.float32, -3, 3),
    (np.float32, np.int64, -4, 4),
    (np.int64, np.int64, 0, 6),
    (np.int64, np.float32, 0, 3),
])
@pytest.mark.parametrize("shapes", SHAPE_PAIRS[:5])
def test_pow(base_dtype, exponent_dtype, low, high, shapes):
    rng = np.random.default_rng(3)
    base = random(rng, shapes[0], base_dtype, 1, 9) if base_dtype == np.int64 else \
        random(rng, shapes[0], base_dtype, 0.1, 4)
    check("PowFusion", "Pow", [base, random(rng, shapes[1], exponent_dtype, low, high)])


VARIADIC = [("AddN", "Sum"), ("Maximum", "Max"), ("Minimum", "Min")]


@pytest.mark.parametrize("op_type, onnx_op", VARIADIC)
@pytest.mark.parametrize("shapes", [[(2, 3)], [(2, 3), (3,)], [(4, 1, 3), (2, 1), ()], [(0, 2), (2,), (1, 2)]])
@pytest.mark.parametrize("dtype", [np.float32, np.int64])
def test_variadic(op_type, onnx_op, shapes, dtype):
    rng = np.random.default_rng(4)
    arrays = [random(rng, s, dtype, -9, 9) for s in shapes]
    if onnx_op == "Sum" and dtype == np.int64:  # onnxruntime's Sum has no int64 kernel
        [actual] = run_kernel(op_type, {}, arrays)
        assert_matches(actual, np.asarray(sum(arrays)))
    else:
        check(op_type, onnx_op, arrays)


@pytest.mark.parametrize("op_type", ["Equal", "Less", "Greater"])
@pytest.mark.parametrize("shapes", SHAPE_PAIRS)
@pytest.mark.parametrize("dtype", [np.float32, np.int64])
def test_comparison(op_type, shapes, dtype):
    rng = np.random.default_rng(5)
    a, b = (np.asarray(random(rng, s, dtype, -3, 3).round()) for s in shapes)  # rounded: some are equal
    check(op_type, op_type, [a, b])


def test_equal_on_bools():
    rng = np.random.default_rng(6)
    check("Equal", "Equal", [random(rng, (3, 4), np.bool_), random(rng, (4,), np.bool_)])


@pytest.mark.parametrize("shapes", [[(2, 3), (2, 3), (2, 3)], [(3, 1), (1, 4), ()], [(), (2, 2), (2, 1)],
                                    [(0, 3), (3,), (1, 3)]])
@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.bool_])
def test_where(shapes, dtype):
    rng = np.random.default_rng(7)
    arrays = [random(rng, shape, kind) for shape, kind in zip(shapes, (np.bool_, dtype, dtype), strict=True)]
    if dtype == np.bool_:  # onnxruntime's Where has no bool kernel
        [actual] = run_kernel("Where", {}, arrays)
        assert_matches(actual, np.where(*arrays))
    else:
        check("Where", "Where", arrays)


@pytest.mark.parametrize("op_type, onnx_op, low, high, dtypes", [
    ("ExpFusion", "Exp", -10, 10, [np.float32]),
    ("Log", "Log", 1e-3, 100, [np.float32]),
    ("Sqrt", "Sqrt", 0, 100, [np.float32]),
    ("Neg", "Neg", -100, 100, [np.float32, np.int64, np.int32]),
    ("Abs", "Abs", -100, 100, [np.float32, np.int64, np.int32]),
    ("Erf", "Erf", -5, 5, [np.float32]),
])
@pytest.mark.parametrize("shape", [(2, 3, 5), (), (0, 4), (7,)])
def test_unary(op_type, onnx_op, low, high, dtypes, shape):
    rng = np.random.default_rng(8)
    for dtype in dtypes:
        check(op_type, onnx_op, [random(rng, shape, dtype, low, high)])


def test_unary_float64():
    x = np.random.default_rng(9).uniform(0.1, 3, (3, 4))
    for op_type, expected in [("ExpFusion", np.exp(x)), ("Log", np.log(x)), ("Sqrt", np.sqrt(x))]:
        [actual] = run_kernel(op_type, {}, [x])
        np.testing.assert_allclose(actual, expected, rtol=1e-12)


def test_erf_wide_range_against_onnxruntime():
    x = np.concatenate([np.linspace(-10, 10, 2001), np.geomspace(1e-30, 1, 301), -np.geomspace(1e-30, 1, 301),
                        [0.0, np.inf, -np.inf]]).astype(np.float32)
    check("Erf", "Erf", [x])


def _relative_error(actual: np.ndarray, x: np.ndarray) -> float:
    expected = np.array([math.erf(v) for v in x.tolist()])
    nonzero = expected != 0
    assert (actual[~nonzero] == 0).all()
    return float(np.max(np.abs(actual[nonzero] - expected[nonzero]) / np.abs(expected[nonzero])))


@pytest.mark.parametrize("dtype, tolerance", [(np.float32, 1e-6), (np.float64, 1e-14)])
def test_erf_against_math_erf(dtype, tolerance):
    tiny = np.finfo(dtype).tiny  # subnormal results cannot hold a relative precision
    magnitudes = np.concatenate([np.geomspace(tiny, 1e-3, 20000), np.linspace(1e-3, 30, 60000), [np.inf]])
    x = np.concatenate([magnitudes, -magnitudes, [0.0]]).astype(dtype)
    [actual] = run_kernel("Erf", {}, [x])
    assert actual.dtype == dtype
    assert _relative_error(actual, x) <= tolerance


@pytest.mark.parametrize("compiled", [True, False])
def test_the_erf_op_keeps_nan_infinities_and_signs_on_either_path(monkeypatch, compiled):
    """The Erf op on float32 runs the compiled erf where compiled kernels run (it does here, unless
    turned off), else the numpy one: NaN stays NaN, the infinities give -1 and 1, zeros and tiny
    values keep their sign, and both paths agree within 1e-6 of math.erf."""
    from lite.kernels import fast

    if compiled and not fast.enabled():
        pytest.skip("compiled kernels do not run here")
    if compiled:
        from lite.kernels.fast import activation

        calls = []
        erf = activation.COMPILED["ERF"]
        monkeypatch.setitem(activation.COMPILED, "ERF", lambda *args: calls.append(1) or erf(*args))
    else:
        monkeypatch.setattr(fast, "enabled", lambda: False)
    x = np.array([np.nan, -0.0, 0.0, np.inf, -np.inf, 1e-30, -1e-30, 0.3, -2.5, 5.0], np.float32)
    [actual] = run_kernel("Erf", {}, [x])
    assert np.isnan(actual[0]) and np.array_equal(np.signbit(actual[1:3]), [True, False])
    np.testing.assert_array_equal(actual[3:5], [1.0, -1.0])
    expected = np.array([math.erf(v) for v in x[5:].tolist()])
    np.testing.assert_allclose(actual[5:], expected, rtol=1e-6, atol=0)
    assert not compiled or calls


def test_erf_helpers_keep_nan_and_signs():
    x = np.array([np.nan, -0.0, -1e-20, 1e-20, -2.0, 2.0], np.float64)
    out64, out32 = np.empty_like(x), np.empty(x.shape, np.float32)
    erf_float64(x, out64)
    erf_float32(x.astype(np.float32), out32, np.empty((4, *x.shape), np.float32))
    for out in (out64, out32):
        assert np.isnan(out[0]) and np.array_equal(np.sign(out[1:]), np.sign(x[1:]))


def test_float16():
    x = np.random.default_rng(10).uniform(-3, 3, (4, 5)).astype(np.float16)
    [actual] = run_kernel("Erf", {}, [x])
    expected = np.array([math.erf(v) for v in x.astype(np.float64).ravel()]).reshape(x.shape)
    assert actual.dtype == np.float16
    np.testing.assert_allclose(actual, expected, rtol=1e-3, atol=1e-3)
    [actual] = run_kernel("AddFusion", {"activation_type": "RELU"}, [x, x])
    np.testing.assert_array_equal(actual, np.maximum(x + x, 0))


@pytest.mark.parametrize("op_type, attrs, arrays", [
    ("AddFusion", {}, [np.zeros((2, 3), np.float32), np.zeros((4,), np.float32)]),
    ("AddFusion", {"activation_type": "SIGMOID"}, [np.zeros(2, np.float32), np.zeros(2, np.float32)]),
    ("AddFusion", {}, [np.zeros(2, np.float32), np.zeros(2, np.float64)]),
    ("AddFusion", {}, [np.zeros(2, np.float32)]),
    ("AddFusion", {}, [np.zeros(2, np.float32), None]),
    ("MulFusion", {}, [np.zeros(2, np.float32)] * 3),
    ("Maximum", {}, [np.zeros(2, np.float32), np.zeros(3, np.float32)]),
    ("Where", {}, [np.zeros(2, np.bool_), np.zeros(2, np.float32), np.zeros(2, np.int64)]),
    ("Where", {}, [np.zeros(2, np.bool_), np.zeros(2, np.float32)]),
    ("Neg", {}, [np.zeros(2, np.float32), np.zeros(2, np.float32)]),
])
def test_rejects_bad_models(op_type, attrs, arrays):
    with pytest.raises(ModelFormatError):
        run_kernel(op_type, attrs, arrays)


# ---- every dtype ONNX allows, unary maths, logic and bits: against onnxruntime, else the ONNX reference ----











@pytest.mark.parametrize("op_type", ["AddFusion", "SubFusion", "MulFusion", "DivFusion"])
@pytest.mark.parametrize("dtype", NUMBER_DTYPES)
def test_arithmetic_on_every_dtype(op_type, dtype):
    rng = np.random.default_rng(20)
    a, b = operands(rng, dtype, [(3, 4), (4,)], -10, 10)
    b[b == 0] = 3  # no division by zero
    check_typed(op_type, dict(ARITHMETIC)[op_type], [a, b], 14)


@pytest.mark.parametrize("op_type, onnx_op", [("Equal", "Equal"), ("Less", "Less"), ("Greater", "Greater"),
                                              ("LessEqual", "LessOrEqual"), ("GreaterEqual", "GreaterOrEqual")])
@pytest.mark.parametrize("dtype", NUMBER_DTYPES)
@pytest.mark.parametrize("shapes", SHAPE_PAIRS[:5])
def test_comparisons_on_every_dtype(op_type, onnx_op, dtype, shapes):
    rng = np.random.default_rng(21)
    a, b = operands(rng, dtype, shapes, -3, 3)  # a narrow range: many ties
    check_typed(op_type, onnx_op, [a, b], 16)


@pytest.mark.parametrize("op_type, onnx_op", [("LogicalAnd", "And"), ("LogicalOr", "Or"), ("LogicalXor", "Xor"),
                                              ("Equal", "Equal")])
@pytest.mark.parametrize("shapes", SHAPE_PAIRS)
def test_logic(op_type, onnx_op, shapes):
    rng = np.random.default_rng(22)
    check_typed(op_type, onnx_op, [random(rng, s, np.bool_) for s in shapes], 17)


def test_logical_not():
    check_typed("LogicalNot", "Not", [random(np.random.default_rng(23), (3, 5), np.bool_)], 17)


@pytest.mark.parametrize("op_type, onnx_op, dtype", [("AddN", "Sum", d) for d in FLOAT_DTYPES]  # Sum: floats only
                         + [(op, onnx_op, d) for op, onnx_op in (("Maximum", "Max"), ("Minimum", "Min"))
                            for d in NUMBER_DTYPES])
def test_variadic_on_every_dtype(op_type, onnx_op, dtype):
    rng = np.random.default_rng(24)
    check_typed(op_type, onnx_op, operands(rng, dtype, [(2, 3), (3,), (2, 1)]), 13)


@pytest.mark.parametrize("base_dtype, exponent_dtype", [
    (np.float16, np.float16), (np.float64, np.int8), (np.float32, np.uint64), (np.int32, np.float32),
    (np.int32, np.int32), (np.int64, np.uint16), (np.float32, np.int16)])
def test_pow_type_pairs(base_dtype, exponent_dtype):
    rng = np.random.default_rng(25)
    base = random(rng, (3, 4), base_dtype, 1, 5)
    check_typed("PowFusion", "Pow", [base, random(rng, (4,), exponent_dtype, 0, 4)], 15)


# primitive, ONNX op, opset, input range
UNARY_MATH = [
    ("Floor", "Floor", 13, -10, 10), ("Ceil", "Ceil", 13, -10, 10), ("Round", "Round", 11, -10, 10),
    ("Sin", "Sin", 7, -7, 7), ("Cos", "Cos", 7, -7, 7), ("Tan", "Tan", 7, -1.4, 1.4),
    ("Asin", "Asin", 7, -1, 1), ("Acos", "Acos", 7, -1, 1), ("Atan", "Atan", 7, -20, 20),
    ("Sinh", "Sinh", 9, -5, 5), ("Cosh", "Cosh", 9, -5, 5), ("Asinh", "Asinh", 9, -20, 20),
    ("Acosh", "Acosh", 9, 1, 20), ("Atanh", "Atanh", 9, -0.99, 0.99), ("Reciprocal", "Reciprocal", 13, 0.1, 10),
]


@pytest.mark.parametrize("op_type, onnx_op, opset, low, high", UNARY_MATH)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("shape", [(2, 3, 5), (), (0, 4)])
def test_unary_math(op_type, onnx_op, opset, low, high, dtype, shape):
    rng = np.random.default_rng(26)
    x = random(rng, shape, dtype, low, high)
    if op_type == "Reciprocal":
        x = np.asarray(x * np.where(rng.random(shape) < 0.5, -1, 1), dtype)
    check_typed(op_type, onnx_op, [x], opset)


def test_round_takes_halves_to_even():
    x = np.array([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 2.4, -2.6, 0.0, -0.0, np.inf, np.nan], np.float32)
    check_typed("Round", "Round", [x], 11)


@pytest.mark.parametrize("dtype", NUMBER_DTYPES)
def test_sign(dtype):
    x = operands(np.random.default_rng(27), dtype, [(4, 5)], -3, 3)[0]
    check_typed("Sign", "Sign", [x], 13)


SPECIALS = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1.5, -2.5, 3e4]


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_is_nan(dtype):
    check_typed("IsNaN", "IsNaN", [np.array(SPECIALS, dtype)], 13)


@pytest.mark.parametrize("positive, negative", [(1, 1), (1, 0), (0, 1), (0, 0)])
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_is_inf(dtype, positive, negative):
    attrs = {"detect_positive": bool(positive), "detect_negative": bool(negative)}
    check_typed("IsInf", "IsInf", [np.array(SPECIALS, dtype).reshape(2, 4)], 20, attrs,
                detect_positive=positive, detect_negative=negative)


@pytest.mark.parametrize("fmod", [0, 1])
@pytest.mark.parametrize("dtype", NUMBER_DTYPES)
def test_mod(dtype, fmod):
    rng = np.random.default_rng(28)
    a, b = operands(rng, dtype, [(3, 4), (4,)], -30, 30)
    b[b == 0] = 7
    check_typed("Mod", "Mod", [a, b], 13 if fmod or a.dtype.kind != "f" else 28, {"fmod": bool(fmod)}, fmod=fmod)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_mod_float_edge_cases(dtype):
    """Opset 28's rules for signed zeros, infinities and NaN."""
    a = np.array([0.0, -0.0, 5.0, -5.0, np.inf, 3.0, -3.0, 3.0, np.nan, 4.5], dtype)
    b = np.array([3.0, -3.0, np.inf, np.inf, 2.0, 0.0, -np.inf, -np.inf, 2.0, -2.0], dtype)
    for fmod in (0, 1):
        with np.errstate(invalid="ignore"):
            [actual] = run_kernel("Mod", {"fmod": bool(fmod)}, [a, b])
            expected = ReferenceEvaluator(typed_model("Mod", [a, b], 28, fmod=fmod)).run(None, {"x0": a, "x1": b})[0]
        np.testing.assert_array_equal(actual, expected)
        np.testing.assert_array_equal(np.signbit(actual), np.signbit(expected))


@pytest.mark.parametrize("left", [True, False])
@pytest.mark.parametrize("dtype", INT_DTYPES)
def test_bit_shift(dtype, left):
    """Opset 28: signed types, shifts below 0 and of the bit width or more (unsigned ones also on onnxruntime)."""
    rng = np.random.default_rng(29)
    info = np.iinfo(dtype)
    x = random(rng, (4, 6), dtype, max(info.min, -1000), min(info.max, 1000))
    shift = np.asarray(rng.integers(-2 if info.min else 0, info.bits + 3, (6,)), dtype)
    check_typed("BitShift", "BitShift", [x, shift], 28 if info.min else 11, {"left": left},
                direction="LEFT" if left else "RIGHT")


def any_bits(rng: np.random.Generator, shape: tuple[int, ...], dtype) -> np.ndarray:
    """Values over the whole range of an integer ``dtype``."""
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, shape, dtype=dtype, endpoint=True)


@pytest.mark.parametrize("op_type", ["BitwiseAnd", "BitwiseOr", "BitwiseXor"])
@pytest.mark.parametrize("dtype", INT_DTYPES)
def test_bitwise(op_type, dtype):
    rng = np.random.default_rng(30)
    check_typed(op_type, op_type, [any_bits(rng, (3, 4), dtype), any_bits(rng, (4,), dtype)], 18)


@pytest.mark.parametrize("dtype", INT_DTYPES)
def test_bitwise_not(dtype):
    check_typed("BitwiseNot", "BitwiseNot", [any_bits(np.random.default_rng(31), (3, 4), dtype)], 18)


@pytest.mark.parametrize("op_type, arrays", [
    ("LogicalAnd", [np.zeros(2, np.bool_), np.zeros(2, np.int64)]),
    ("BitShift", [np.zeros(2, np.uint8), np.zeros(2, np.uint16)]),
    ("Mod", [np.zeros(2, np.float32), np.zeros(3, np.float32)]),
    ("IsNaN", [np.zeros(2, np.float32), np.zeros(2, np.float32)]),
])
def test_rejects_bad_logic_and_bits(op_type, arrays):
    with pytest.raises(ModelFormatError):
        run_kernel(op_type, {}, arrays)
