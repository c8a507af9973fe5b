"""ORTDelegate emitters of unary maths, logic, bits, Mod, PRelu, Clip, Shrink and the newer activations, against
onnxruntime on the original ONNX (as in test_onnxruntime.py), and every dtype each emitter claims.

``CASES`` joins test_onnxruntime.py's emitter coverage check. ``test_every_claimed_dtype_runs_on_ort`` builds,
for each emitter of this family and each dtype it is registered for, a model of that op on that dtype, which
must run entirely on ORTDelegate and match onnxruntime on the original model.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper

from lite.delegates.onnxruntime import ORTDelegate
from lite.delegates.onnxruntime.emitters.registry import REGISTRY
from tests.support.ort_delegate import (
    ORT,
    RNG,
    build,
    check_on_ort,
    integers,
    node,
    normal,
    onnx_model,
    outputs_of,
    positive,
    run_both,
)


def booleans(*shape: int) -> np.ndarray:
    return RNG.random(shape) < 0.5


def specials(*shape: int) -> np.ndarray:
    """Normal values with NaN and infinities among them."""
    x = normal(*shape).reshape(-1)
    x[::5], x[1::7], x[2::9] = np.nan, np.inf, -np.inf
    return x.reshape(shape)


def unsigned(*shape: int, high: int = 200, dtype=np.uint8) -> np.ndarray:
    return RNG.integers(0, high, shape).astype(dtype)


F32 = np.float32
CASES = {  # name: (nodes, feeds, initializers[, opset])
    # unary maths
    "floor_ceil_round": ([node("Floor", ["x"], "f"), node("Ceil", ["x"], "c"), node("Round", ["x"], "r"),
                          node("Sum", ["f", "c", "r"])], {"x": normal(3, 7)}, {}),
    "trigonometry": ([node("Sin", ["x"], "s"), node("Cos", ["x"], "c"), node("Tan", ["t"], "n"),
                      node("Atan", ["x"], "a"), node("Asin", ["t"], "as"), node("Acos", ["t"], "ac"),
                      node("Sum", ["s", "c", "n", "a", "as", "ac"])],
                     {"x": normal(3, 5), "t": RNG.uniform(-0.99, 0.99, (3, 5)).astype(F32)}, {}),
    "hyperbolic": ([node("Sinh", ["x"], "s"), node("Cosh", ["x"], "c"), node("Asinh", ["x"], "as"),
                    node("Acosh", ["p"], "ac"), node("Atanh", ["t"], "at"), node("Sum", ["s", "c", "as", "ac", "at"])],
                   {"x": normal(3, 5, scale=1.5), "p": positive(3, 5) + 1,
                    "t": RNG.uniform(-0.99, 0.99, (3, 5)).astype(F32)}, {}),
    "reciprocal_sign": ([node("Reciprocal", ["x"], "r"), node("Sign", ["x"], "s"), node("Mul", ["r", "s"])],
                        {"x": normal(4, 5)}, {}),
    "sign_int32": ([node("Sign", ["x"])], {"x": integers(4, 5, dtype=np.int32)}, {}),
    "isnan_isinf": ([node("IsNaN", ["x"], "n"), node("IsInf", ["x"], "i", detect_negative=0),
                     node("Or", ["n", "i"])], {"x": specials(4, 9)}, {}),
    # logic and comparisons
    "not_and_xor": ([node("Not", ["a"], "n"), node("And", ["n", "b"], "c"), node("Xor", ["c", "a"])],
                    {"a": booleans(3, 4), "b": booleans(4)}, {}),
    "or_broadcast": ([node("Or", ["a", "b"])], {"a": booleans(2, 3, 4), "b": booleans(3, 1)}, {}),
    "less_or_equal_greater_or_equal": ([node("LessOrEqual", ["a", "b"], "le"), node("GreaterOrEqual", ["a", "b"], "ge"),
                                        node("And", ["le", "ge"])],
                                       {"a": np.round(normal(3, 4)), "b": np.round(normal(4))}, {}),
    "greater_or_equal_int64": ([node("GreaterOrEqual", ["a", "b"])], {"a": integers(3, 4), "b": integers(3, 1)}, {}),
    # Mod and bits
    "mod_int64": ([node("Mod", ["a", "b"])], {"a": integers(3, 4, low=-30, high=30), "b": integers(4, low=1)}, {}),
    "mod_fmod_float": ([node("Mod", ["a", "b"], fmod=1)], {"a": normal(3, 4, scale=10), "b": positive(4)}, {}),
    "bit_shift_left_uint8": ([node("BitShift", ["x", "s"], direction="LEFT")],
                             {"x": unsigned(3, 4), "s": unsigned(4, high=8)}, {}),
    "bit_shift_right_uint8": ([node("BitShift", ["x", "s"], direction="RIGHT")],
                              {"x": unsigned(3, 4), "s": unsigned(3, 1, high=8)}, {}),
    # element-wise ops on narrow integers and float16
    "add_mul_uint8": ([node("Add", ["a", "b"], "s"), node("Mul", ["s", "a"])],
                      {"a": unsigned(3, 4), "b": unsigned(4)}, {}),
    "sub_div_int8": ([node("Sub", ["a", "b"], "s"), node("Div", ["s", "b"])],
                     {"a": integers(3, 4, dtype=np.int8), "b": integers(4, low=1, dtype=np.int8)}, {}),
    "mean_float16": ([node("Mean", ["a", "b"])], {"a": normal(3, 4).astype(np.float16),
                                                  "b": normal(4).astype(np.float16)}, {}),
    "max_min_uint8": ([node("Max", ["a", "b"], "m"), node("Min", ["m", "c"])],
                      {"a": unsigned(3, 4), "b": unsigned(4), "c": unsigned(3, 1)}, {}),
    "equal_less_greater_float16": ([node("Equal", ["a", "b"], "e"), node("Less", ["a", "b"], "l"),
                                    node("Greater", ["a", "b"], "g"), node("Or", ["e", "l"], "o"),
                                    node("Xor", ["o", "g"])],
                                   {"a": np.round(normal(3, 4)).astype(np.float16),
                                    "b": np.round(normal(4)).astype(np.float16)}, {}),
    "add_relu_int32": ([node("Add", ["a", "b"], "s"), node("Relu", ["s"])],
                       {"a": integers(3, 4, dtype=np.int32), "b": integers(4, dtype=np.int32)}, {}),
    # PRelu, Clip, Shrink
    "prelu_channel_slope": ([node("PRelu", ["x", "s"])], {"x": normal(2, 3, 4, 5)},
                            {"s": RNG.uniform(0, 0.5, (3, 1, 1)).astype(F32)}),
    "prelu_slope_input": ([node("PRelu", ["x", "s"])], {"x": normal(2, 3, 4), "s": normal(4)}, {}),
    "clip_bounds_are_inputs": ([node("Clip", ["x", "lo", "hi"])], {"x": normal(3, 8), "lo": np.array(-1.5, F32),
                                                                     "hi": np.array(2.0, F32)}, {}),
    "clip_max_input_only": ([node("Clip", ["x", "", "hi"])], {"x": normal(3, 8), "hi": np.array(0.5, F32)}, {}),
    "clip_int64": ([node("Clip", ["x", "lo", "hi"])], {"x": integers(3, 8)},
                   {"lo": np.array(-3, np.int64), "hi": np.array(5, np.int64)}),
    "shrink": ([node("Shrink", ["x"], bias=0.5, lambd=1.5)], {"x": normal(3, 8)}, {}),
    "shrink_int32": ([node("Shrink", ["x"], bias=1.0, lambd=2.0)], {"x": integers(3, 8, dtype=np.int32)}, {}),
    # the newer activations (opset 17 has no Gelu, Mish or Swish: they are emitted as their formulas)
    "elu": ([node("Elu", ["x"], alpha=0.7)], {"x": normal(3, 8)}, {}),
    "selu": ([node("Selu", ["x"])], {"x": normal(3, 8)}, {}),
    "softplus_softsign": ([node("Softplus", ["x"], "p"), node("Softsign", ["x"], "s"), node("Add", ["p", "s"])],
                          {"x": normal(3, 8)}, {}),
    "celu": ([node("Celu", ["x"], alpha=0.6)], {"x": normal(3, 8)}, {}),
    "thresholded_relu": ([node("ThresholdedRelu", ["x"], alpha=0.5)], {"x": normal(3, 8)}, {}),
    "gelu": ([node("Gelu", ["x"])], {"x": normal(3, 16)}, {}, 20),
    "gelu_tanh": ([node("Gelu", ["x"], approximate="tanh")], {"x": normal(3, 16)}, {}, 20),
    "mish": ([node("Mish", ["x"])], {"x": normal(3, 16)}, {}, 18),
    "swish": ([node("Swish", ["x"], alpha=0.8)], {"x": normal(3, 16)}, {}, 24),
}


@pytest.mark.parametrize("case", list(CASES))
def test_emitter_round_trip(case):
    nodes, feeds, inits, *opset = CASES[case]
    check_on_ort(onnx_model(nodes, feeds, outputs_of(nodes), inits, *opset), feeds)


@pytest.mark.parametrize("activation", ["RELU", "RELU6"])
@pytest.mark.parametrize("dtype", [np.int64, np.uint8, np.uint64])
def test_fused_activation_on_integers_onnxruntime_has_no_relu_for(dtype, activation):
    """Emitted as a Clip (onnxruntime's Relu lacks these types, so no ONNX model could be the oracle: the native
    kernel is)."""
    a, b = (integers(*shape, low=0 if np.dtype(dtype).kind == "u" else -9, dtype=dtype) for shape in ((3, 4), (4,)))
    run_both("AddFusion", {"activation_type": activation}, [a, b])


def test_bitwise_ops_and_float_floor_mod_stay_native_with_a_reason():
    """Bitwise ops arrive in opset 18 and Mod with fmod=0 on floats in opset 28; the delegate emits opset 17."""
    feeds = {"a": integers(3, 4, dtype=np.int32), "b": integers(4, dtype=np.int32)}
    model = build(onnx_model([node("BitwiseAnd", ["a", "b"])], feeds, opset=18), ORTDelegate())
    [row] = model.partition_report()
    assert row.runs_on == "native" and row.reason == f"{ORT}: BitwiseAnd: no ONNX emitter for this primitive"
    floats = {"a": normal(3, 4), "b": positive(4)}
    model = build(onnx_model([node("Mod", ["a", "b"])], floats, opset=28), ORTDelegate())
    [row] = model.partition_report()
    assert row.runs_on == "native" and "fmod=0 on floats is defined from opset 28" in row.reason


# ---- every dtype each emitter claims --------------------------------------------------------------

# primitive -> (ONNX op, inputs, attributes, opset, draw); draw(dtype, shape) gives one input
def _draw(dtype, shape, low=-9, high=10) -> np.ndarray:
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return booleans(*shape)
    if dtype.kind == "f":
        return np.asarray(np.round(RNG.uniform(low, high, shape) * 4) / 4, dtype)  # quarters: ties, exact in float16
    return RNG.integers(max(low, 0) if dtype.kind == "u" else low, high, shape).astype(dtype)


def _positive(dtype, shape) -> np.ndarray:
    return _draw(dtype, shape, 1, 10)


def _nonzero(dtype, shape) -> np.ndarray:
    """``_draw``'s values with zeros made ones (a reciprocal of 0 is inf, and the error norm nan)."""
    x = _draw(dtype, shape)
    return np.where(x == 0, np.ones((), x.dtype), x)


def _domain(low, high):
    return lambda dtype, shape: RNG.uniform(low, high, shape).astype(dtype)


UNARY = {"Floor": "Floor", "Ceil": "Ceil", "Round": "Round", "Sin": "Sin", "Cos": "Cos", "Tan": "Tan",
         "Atan": "Atan", "Sinh": "Sinh", "Cosh": "Cosh", "Asinh": "Asinh", "Reciprocal": "Reciprocal", "Sign": "Sign",
         "IsNaN": "IsNaN", "IsInf": "IsInf", "LogicalNot": "Not"}
BINARY = {"AddFusion": "Add", "SubFusion": "Sub", "MulFusion": "Mul", "Equal": "Equal", "Less": "Less",
          "Greater": "Greater", "LessEqual": "LessOrEqual", "GreaterEqual": "GreaterOrEqual", "LogicalAnd": "And",
          "LogicalOr": "Or", "LogicalXor": "Xor", "Maximum": "Max", "Minimum": "Min", "AddN": "Sum",
          "PReLUFusion": "PRelu"}
DTYPE_CASES = {
    **{p: (op, 1, {}, 17, _nonzero if op == "Reciprocal" else _draw) for p, op in UNARY.items()},
    **{p: (op, 2, {}, 17, _draw) for p, op in BINARY.items()},
    "Asin": ("Asin", 1, {}, 17, _domain(-0.99, 0.99)), "Acos": ("Acos", 1, {}, 17, _domain(-0.99, 0.99)),
    "Atanh": ("Atanh", 1, {}, 17, _domain(-0.99, 0.99)), "Acosh": ("Acosh", 1, {}, 17, _domain(1, 9)),
    "DivFusion": ("Div", 2, {}, 17, _positive), "Mod": ("Mod", 2, {"fmod": 1}, 17, _positive),
    "BitShift": ("BitShift", 2, {"direction": "LEFT"}, 17, lambda dtype, shape: _draw(dtype, shape, 0, 7)),
    "Clip": ("Clip", 3, {}, 17, None), "Shrink": ("Shrink", 1, {"bias": 1.0, "lambd": 1.5}, 17, _draw),
}
def typed_model(op: str, feeds: dict[str, np.ndarray], opset: int, **attrs) -> onnx.ModelProto:
    """One ``op`` node on graph inputs of any dtype."""
    graph = helper.make_graph(
        [helper.make_node(op, list(feeds), ["y"], name=op.lower(), **attrs)], "ort_dtypes",
        [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape) for k, v in feeds.items()],
        [onnx.ValueInfoProto(name="y")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=9)


def dtype_params():
    for primitive in sorted(DTYPE_CASES):
        entry = REGISTRY.find(primitive)
        for dtype in sorted(entry.dtypes, key=lambda d: d.name):
            yield pytest.param(primitive, dtype, id=f"{primitive}-{dtype.name}")


@pytest.mark.parametrize("primitive, dtype", list(dtype_params()))
def test_every_claimed_dtype_runs_on_ort(primitive, dtype):
    op, arity, attrs, opset, draw = DTYPE_CASES[primitive]
    if primitive == "Clip":  # bounds of one value each, given at run time
        feeds = {"x": _draw(dtype, (3, 5)), "lo": _draw(dtype, (), 0, 3), "hi": _draw(dtype, (), 3, 7)}
    else:
        shapes = [(3, 5), (5,), (3, 1)][:arity]
        feeds = {f"x{i}": np.asarray(draw(dtype, shape)) for i, shape in enumerate(shapes)}
    if primitive == "IsInf":
        feeds["x0"] = specials(3, 5).astype(dtype)
    check_on_ort(typed_model(op, feeds, opset, **attrs), feeds)


def test_dtype_cases_cover_the_family():
    """Every emitter of this family's primitives is in DTYPE_CASES (the rest are FLOAT32-only Activation and the
    pre-existing unary maths, covered by test_onnxruntime.py)."""
    family = {"Floor", "Ceil", "Round", "Sin", "Cos", "Tan", "Asin", "Acos", "Atan", "Sinh", "Cosh", "Asinh",
              "Acosh", "Atanh", "Reciprocal", "Sign", "IsNaN", "IsInf", "LogicalNot", "LogicalAnd", "LogicalOr",
              "LogicalXor", "LessEqual", "GreaterEqual", "Mod", "BitShift", "PReLUFusion", "Clip", "Shrink"}
    assert family <= set(DTYPE_CASES) and family <= set(REGISTRY.supported_types())

