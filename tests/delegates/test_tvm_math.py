"""The TVM delegate's lowering of unary maths, Mod, PRelu, Clip with bounds given at run time, Shrink and the
newer activations, against onnxruntime (as in test_tvm.py); floor Mod, which onnxruntime lacks on floats at
opset 17, against the native kernel. Ops on bool or integer tensors stay native with a reason."""

from __future__ import annotations

import numpy as np
import pytest

from tests.support.delegate_graphs import build, feeds_for, node, onnx_graph
from tests.support.oracle import relative_l2

pytest.importorskip("tvm")

from tests.support.tvm_delegate import RTOL, TVM, check_lowering, rows, tvm_delegate  # noqa: E402

HALF = {"c": np.array(0.9, np.float32)}

UNARY = {  # name: (nodes, initializers): x is 3 * standard normal; t = 0.9 * tanh(x) lies in (-0.9, 0.9)
    "floor": ([node("Floor", ["x"])], {}),
    "ceil": ([node("Ceil", ["x"])], {}),
    "round": ([node("Round", ["x"])], {}),
    "sin": ([node("Sin", ["x"])], {}),
    "cos": ([node("Cos", ["x"])], {}),
    "tan": ([node("Tanh", ["x"], "h"), node("Tan", ["h"])], {}),
    "asin": ([node("Tanh", ["x"], "h"), node("Mul", ["h", "c"], "t"), node("Asin", ["t"])], HALF),
    "acos": ([node("Tanh", ["x"], "h"), node("Mul", ["h", "c"], "t"), node("Acos", ["t"])], HALF),
    "atan": ([node("Atan", ["x"])], {}),
    "sinh": ([node("Sinh", ["x"])], {}),
    "cosh": ([node("Cosh", ["x"])], {}),
    "asinh": ([node("Asinh", ["x"])], {}),
    "acosh": ([node("Abs", ["x"], "a"), node("Add", ["a", "one"], "p"), node("Acosh", ["p"])],
              {"one": np.array(1, np.float32)}),
    "atanh": ([node("Tanh", ["x"], "h"), node("Mul", ["h", "c"], "t"), node("Atanh", ["t"])], HALF),
    "reciprocal": ([node("Reciprocal", ["x"])], {}),
    "sign": ([node("Sign", ["x"])], {}),
    "fmod": ([node("Mod", ["x", "d"], fmod=1)], {"d": np.array([1.5, -0.75, 2.25, -3.0, 0.5], np.float32)}),
}


ACTIVATIONS = {  # name: (nodes, opset)
    "elu": ([node("Elu", ["x"], alpha=0.7)], 17),
    "selu": ([node("Selu", ["x"])], 17),
    "softplus": ([node("Softplus", ["x"])], 17),
    "softsign": ([node("Softsign", ["x"])], 17),
    "gelu": ([node("Gelu", ["x"])], 20),
    "gelu_tanh": ([node("Gelu", ["x"], approximate="tanh")], 20),
    "mish": ([node("Mish", ["x"])], 18),
    "celu": ([node("Celu", ["x"], alpha=0.5)], 17),
    "thresholded_relu": ([node("ThresholdedRelu", ["x"], alpha=0.8)], 17),
    "swish": ([node("Swish", ["x"], alpha=0.6)], 24),
}

OTHERS = {  # name: (nodes, input shapes, initializers, the .lite op type)
    "prelu_channel_slope": ([node("PRelu", ["x", "s"])], {"x": [2, 3, 4, 5]},
                            {"s": np.array([0.1, 0.5, -0.3], np.float32).reshape(3, 1, 1)}, "PReLUFusion"),
    "prelu_slope_input": ([node("PRelu", ["x", "s"])], {"x": [2, 3, 4], "s": [4]}, {}, "PReLUFusion"),
    "clip_bounds_are_inputs": ([node("Clip", ["x", "lo", "hi"])], {"x": [2, 3, 4], "lo": [], "hi": [1]}, {}, "Clip"),
    "clip_min_input_max_const": ([node("Clip", ["x", "lo", "hi"])], {"x": [2, 3, 4], "lo": []},
                                 {"hi": np.array(1.5, np.float32)}, "Clip"),
    "clip_max_input_only": ([node("Clip", ["x", "", "hi"])], {"x": [2, 3, 4], "hi": []}, {}, "Clip"),
    "shrink": ([node("Shrink", ["x"], bias=0.5, lambd=1.5)], {"x": [2, 3, 4]}, {}, "Shrink"),
}

CASES = {  # as in test_tvm.py: name: (model, its .lite op types or None)
    **{k: (onnx_graph(nodes, {"x": [2, 3, 4, 5]}, ["y"], inits), None) for k, (nodes, inits) in UNARY.items()},
    **{k: (onnx_graph(nodes, {"x": [2, 6, 7, 5]}, ["y"], opset=opset), ["Activation"])
       for k, (nodes, opset) in ACTIVATIONS.items()},
    **{k: (onnx_graph(nodes, inputs, ["y"], inits), [op_type])
       for k, (nodes, inputs, inits, op_type) in OTHERS.items()},
}


@pytest.mark.parametrize("case", [c if i % 2 == 0 else pytest.param(c, marks=pytest.mark.slow)
                                  for i, c in enumerate(CASES)])  # NOTE: every other case by default (a compile each)
def test_lowering(case):
    check_lowering(*CASES[case])


def test_floor_mod_matches_the_native_kernel():
    """onnxruntime refuses Mod with fmod=0 on floats before opset 28; the native kernel is the reference."""
    onnx_model = onnx_graph([node("Mod", ["x", "d"])], {"x": [2, 3, 4, 5]}, ["y"],
                            {"d": np.array([1.5, -0.75, 2.25, -3.0, 0.5], np.float32)}, opset=13)
    on_tvm, native = build(onnx_model, tvm_delegate()), build(onnx_model)
    assert {r.runs_on for r in on_tvm.partition_report()} == {TVM}
    x = feeds_for(onnx_model)["x"]
    got, want = (m.predict([x])[0].get_data_to_numpy() for m in (on_tvm, native))
    assert relative_l2(got, want) < RTOL


def test_floor_mod_keeps_numpy_s_edge_cases_bit_for_bit():
    """An infinite divisor keeps a finite dividend (Relax's floor_mod gives NaN); zeros take the divisor's sign."""
    onnx_model = onnx_graph([node("Mod", ["x", "d"])], {"x": [8], "d": [8]}, ["y"], opset=13)
    x = np.array([3.0, -3.0, 3.0, 0.0, -0.0, 4.0, -1.5, np.inf], np.float32)
    d = np.array([np.inf, np.inf, -np.inf, -2.0, 2.0, -2.0, 0.75, 2.0], np.float32)
    on_tvm, native = build(onnx_model, tvm_delegate()), build(onnx_model)
    assert {r.runs_on for r in on_tvm.partition_report()} == {TVM}
    got, want = (m.predict([x, d])[0].get_data_to_numpy() for m in (on_tvm, native))
    assert got.tobytes() == want.tobytes(), (got, want)


@pytest.mark.parametrize(("nodes", "inputs", "reason"), [
    ([node("IsNaN", ["x"])], {"x": [2, 3]}, "IsNaN: its output tensors are bool"),
    ([node("LessOrEqual", ["x", "x"])], {"x": [2, 3]}, "LessEqual: its output tensors are bool"),
])
def test_ops_on_bool_tensors_stay_native_with_a_reason(nodes, inputs, reason):
    model = build(onnx_graph(nodes, inputs, ["y"]), tvm_delegate())
    [row] = rows(model).values()
    assert row.runs_on == "native" and row.reason.startswith(f"{TVM}: {reason}"), row.reason
