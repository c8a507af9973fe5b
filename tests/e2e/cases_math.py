"""E2E cases: unary maths, logic, bitwise ops and activations added for transformers, and the element-wise
ops on every dtype ONNX allows.

``typed`` cases have inputs of dtypes ``tests.support.oracle.onnx_type`` does not name (int16, uint16/32/64): their
models are built here with onnx's own dtype table.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from tests.e2e.cases import CASES, Arr, B, Case, F, I, P, R, case, f32, graph_case, i64, make_model, n, node_model, w

NARROW = (np.int8, np.int16, np.uint8, np.uint16, np.uint32, np.uint64)  # beyond int32 / int64


def U(*shape, low: float = -1.0, high: float = 1.0, dtype=np.float32) -> Arr:
    """Uniform floats in [low, high)."""
    return Arr(shape, dtype=dtype, kind="uniform", low=low, high=high)


def typed_model(nodes: list[onnx.NodeProto], inputs: dict[str, Arr], outputs: list[str],
                inits: dict[str, np.ndarray] | None = None, opset: int = 17) -> onnx.ModelProto:
    """``tests.e2e.cases.make_model`` for inputs of any dtype."""
    graph_inputs = [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(np.dtype(v.dtype)), v.dims())
                    for k, v in inputs.items()]
    graph = helper.make_graph(nodes, "e2e", graph_inputs, [onnx.ValueInfoProto(name=o) for o in outputs],
                              [numpy_helper.from_array(v, k) for k, v in (inits or {}).items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8 if opset <= 18 else 9
    return model


def typed_case(op: str, inputs: dict[str, Arr], opset: int, tag: str, inits: dict[str, np.ndarray] | None = None,
               oracle: onnx.ModelProto | None = None, **attrs) -> None:
    """A one-node case whose inputs may have any dtype; onnxruntime runs ``oracle`` when given."""
    node = helper.make_node(op, [*inputs, *(inits or {})], ["y0"], name=f"{op.lower()}_node", **attrs)
    c = Case(f"{op}@{opset}-{tag}", (op,), typed_model([node], inputs, ["y0"], inits, opset), inputs, oracle)
    assert all(c.id != other.id for other in CASES), f"duplicate case id {c.id}"
    CASES.append(c)


def widened(op: str, inputs: dict[str, Arr], opset: int, via: int, back: int) -> onnx.ModelProto:
    """``op`` computed on inputs cast to ``via``, cast back to ``back`` (onnxruntime lacks ``op`` on their type)."""
    casts = [n("Cast", [k], [f"{k}_wide"], to=via) for k in inputs]
    nodes = [*casts, n(op, [f"{k}_wide" for k in inputs], ["wide"]), n("Cast", ["wide"], ["y0"], to=back)]
    return typed_model(nodes, inputs, ["y0"], opset=opset)


def name(dtype) -> str:
    return np.dtype(dtype).name


# ---- unary maths -----------------------------------------------------------------------------

for op, opsets, arr in (("Floor", (6, 13), F(3, 4, scale=5)), ("Ceil", (6, 13), F(3, 4, scale=5)),
                        ("Round", (11,), F(3, 8, scale=4)), ("Reciprocal", (6, 13), P(3, 4, low=0.2, high=5)),
                        ("Sin", (7,), F(3, 5, scale=4)), ("Cos", (7,), F(3, 5, scale=4)),
                        ("Tan", (7,), U(3, 5, low=-1.4, high=1.4)), ("Asin", (7,), U(3, 5)), ("Acos", (7,), U(3, 5)),
                        ("Atan", (7,), F(3, 5, scale=5)), ("Sinh", (9,), F(3, 5, scale=2)),
                        ("Cosh", (9,), F(3, 5, scale=2)), ("Asinh", (9,), F(3, 5, scale=5)),
                        ("Acosh", (9,), P(3, 5, low=1, high=9)), ("Atanh", (9,), U(3, 5, low=-0.99, high=0.99)),
                        ("Sign", (9, 13), R(3, 5))):
    for opset in opsets:
        case(op, {"x": arr}, opset)
graph_case("halves-to-even", ("Add", "Round"), [n("Add", ["x", "h"], ["t"]), n("Round", ["t"], ["y"])],
           {"x": R(4, 6)}, ["y"], {"h": f32(0.5)}, opset=11)
case("Reciprocal", {"x": F("N", 5)}, 13, "dyn", batches=(1, 3))
case("Floor", {"x": Arr((3, 4), dtype=np.float64, scale=5)}, 13, "float64")
case("Sign", {"x": I(3, 4)}, 13, "int64")
case("Sign", {"x": I(3, 4, dtype=np.int8)}, 13, "int8")
typed_case("Sign", {"x": I(3, 4, low=0, high=3, dtype=np.uint16)}, 13, "uint16")
graph_case("nan-of-sqrt", ("Sqrt", "IsNaN"), [n("Sqrt", ["x"], ["s"]), n("IsNaN", ["s"], ["y"])], {"x": F(3, 7)},
           ["y"], opset=9)
graph_case("nan-of-log", ("Log", "IsNaN"), [n("Log", ["x"], ["s"]), n("IsNaN", ["s"], ["y"])], {"x": F(3, 7)},
           ["y"], opset=13)
for tag, detect in (("both", {}), ("positive", {"detect_negative": 0}), ("negative", {"detect_positive": 0})):
    graph_case(f"inf-{tag}", ("Reciprocal", "IsInf"),
               [n("Reciprocal", ["x"], ["r"]), n("IsInf", ["r"], ["y"], **detect)], {"x": R(4, 6)}, ["y"], opset=10)

# ---- logic and comparisons ---------------------------------------------------------------------

case("Not", {"x": B(3, 4)}, 1)
for op in ("And", "Or", "Xor"):
    case(op, {"a": B(2, 3, 4), "b": B(4)}, 7, "bcast")
    case(op, {"a": B(3, 4), "b": B(3, 1)}, 7, "bcast-both")
    case(op, {"a": B(2, 3, 4)}, 1, "legacy-axis1", {"b": np.array([True, False, True])}, broadcast=1, axis=1,
         oracle=node_model(op, {"a": B(2, 3, 4)}, 7, {"b": np.array([True, False, True]).reshape(3, 1)}))
for op in ("LessOrEqual", "GreaterOrEqual"):
    case(op, {"a": R(2, 3, 4), "b": R(4)}, 12, "float-bcast")
    case(op, {"a": I(3, 4, low=-2, high=3), "b": I(3, 1, low=-2, high=3)}, 16, "int64")
    case(op, {"a": R("N", 3), "b": R(3)}, 16, "dyn", batches=(1, 3))
    for dtype in (np.float16, np.float64, np.int32, *NARROW):
        low = 0 if np.dtype(dtype).kind == "u" else -2
        typed_case(op, {"a": Arr((3, 4), dtype=dtype, kind="round") if np.dtype(dtype).kind == "f" else
                        I(3, 4, low=low, high=3, dtype=dtype), "b": I(4, low=low, high=3, dtype=dtype)
                        if np.dtype(dtype).kind != "f" else Arr((4,), dtype=dtype, kind="round")}, 16, name(dtype))

# ---- element-wise ops on every dtype ONNX allows ------------------------------------------------

for dtype in (np.float16, np.float64, *NARROW):
    kind = np.dtype(dtype).kind
    if kind == "f":
        a, b, positive = Arr((3, 4), dtype=dtype, kind="round"), Arr((4,), dtype=dtype, kind="round"), \
            Arr((4,), dtype=dtype, kind="uniform", low=0.5, high=4)
    else:
        low = 0 if kind == "u" else -20
        a, b, positive = I(3, 4, low=low, high=20, dtype=dtype), I(4, low=low, high=20, dtype=dtype), \
            I(4, low=1, high=9, dtype=dtype)
    tag = f"{name(dtype)}-bcast"
    for op in ("Add", "Sub", "Mul"):
        typed_case(op, {"a": a, "b": b}, 14, tag)
    typed_case("Div", {"a": a, "b": positive}, 14, tag)
    for op in ("Equal", "Less", "Greater"):
        typed_case(op, {"a": a, "b": b}, 13, tag)
    for op in ("Max", "Min"):  # onnxruntime has no int16 and uint16 kernels: the oracle widens them
        operands = {"a": a, "b": b, "c": a}
        oracle = widened(op, operands, 13, TensorProto.INT32, helper.np_dtype_to_tensor_dtype(np.dtype(dtype))) \
            if dtype in (np.int16, np.uint16) else None
        typed_case(op, operands, 13, tag, oracle=oracle)
for op, opset in (("Add", 7), ("Sub", 7), ("Mul", 7), ("Div", 7)):
    typed_case(op, {"a": I(3, 4, low=0, high=40, dtype=np.uint32), "b": I(4, low=1, high=9, dtype=np.uint32)}, opset,
               "uint32")
case("Equal", {"a": I(3, 4, low=-2, high=2, dtype=np.int32), "b": I(4, low=-2, high=2, dtype=np.int32)}, 7,
     "int32")
for opset in (6, 8, 13):
    case("Sum", {"a": Arr((2, 3), dtype=np.float64), "b": Arr((2, 3), dtype=np.float64)}, opset, "float64")
case("Sum", {"a": Arr((2, 3), dtype=np.float16, kind="round"), "b": Arr((3,), dtype=np.float16, kind="round")},
     13, "float16")
for exponent in (np.int8, np.uint32):  # onnxruntime lacks these exponent types: the oracle casts them to float
    operands = {"a": P(3, 4), "b": I(4, low=0, high=4, dtype=exponent)}
    typed_case("Pow", operands, 15, f"float-{name(exponent)}", oracle=typed_model(
        [n("Cast", ["b"], ["bf"], to=TensorProto.FLOAT), n("Pow", ["a", "bf"], ["y0"])], operands, ["y0"], opset=15))
case("Pow", {"a": Arr((3, 4), dtype=np.float64, kind="uniform", low=0.1, high=3), "b": F(4)}, 15, "float64-float")
case("Pow", {"a": I(3, 4, low=-3, high=4, dtype=np.int32), "b": I(4, low=0, high=3, dtype=np.int32)}, 13, "int32")

# Mean: AddN, then DivFusion by the count
for opset in (6, 8, 13):
    case("Mean", {"a": F(2, 3), "b": F(2, 3), "c": F(2, 3)}, opset, "three")
case("Mean", {"a": F(2, 3), "b": F(3), "c": F(2, 1)}, 13, "bcast3")
case("Mean", {"a": F(4, 1, 3), "b": F(2, 1)}, 13, "bcast2")
case("Mean", {"a": F(2, 3)}, 13, "single")
MEAN64 = {"a": Arr((2, 3), dtype=np.float64), "b": Arr((3,), dtype=np.float64)}
case("Mean", MEAN64, 13, "float64", oracle=make_model([n("Sum", ["a", "b"], ["s"]), n("Div", ["s", "two"], ["y0"])],
                                                      MEAN64, ["y0"], {"two": np.array(2.0)}, 13))
case("Mean", {"a": F("N", 3), "b": F(3)}, 13, "dyn", batches=(1, 4))

# ---- Mod, bits ----------------------------------------------------------------------------------

case("Mod", {"a": I(3, 4, low=-30, high=30), "b": I(4, low=1, high=7)}, 10, "int64")
case("Mod", {"a": I(3, 4, low=-30, high=30, dtype=np.int32), "b": I(4, low=-7, high=-1, dtype=np.int32)}, 13,
     "int32-negative-divisor")
case("Mod", {"a": I(3, 4, low=-30, high=30)}, 13, "int64-fmod", {"b": i64(3, -3, 5, -7)}, fmod=1)
case("Mod", {"a": F(3, 4, scale=10)}, 10, "float-fmod", {"b": f32(1.5, -2.0, 3.25, -0.75)}, fmod=1)
case("Mod", {"a": F(3, 4, scale=10), "b": P(4, low=0.5, high=3)}, 13, "float-fmod-input", fmod=1)
case("Mod", {"a": Arr((3, 4), dtype=np.float64, scale=10)}, 13, "float64-fmod", {"b": np.array([2.5, -1.5, 3.0, -0.5])},
     fmod=1)
case("Mod", {"a": F(3, 4, scale=10)}, 13, "float-floor-mod", {"b": f32(1.5, -2.0, 3.25, -0.75)},
     oracle=make_model([n("Div", ["a", "b"], ["q"]), n("Floor", ["q"], ["f"]), n("Mul", ["f", "b"], ["m"]),
                        n("Sub", ["a", "m"], ["y0"])], {"a": F(3, 4)}, ["y0"], {"b": f32(1.5, -2.0, 3.25, -0.75)}, 13))
for dtype in NARROW:
    low = 0 if np.dtype(dtype).kind == "u" else -50
    typed_case("Mod", {"a": I(3, 4, low=low, high=50, dtype=dtype), "b": I(4, low=1, high=9, dtype=dtype)}, 13,
               name(dtype))
for dtype in (np.uint8, np.uint16, np.uint32, np.uint64):
    bits = np.iinfo(dtype).bits
    for direction in ("LEFT", "RIGHT"):
        typed_case("BitShift", {"x": I(3, 4, low=0, high=200, dtype=dtype), "s": I(4, low=0, high=bits, dtype=dtype)},
                   11, f"{direction.lower()}-{name(dtype)}", direction=direction)
for op in ("BitwiseAnd", "BitwiseOr", "BitwiseXor"):
    case(op, {"a": I(3, 4, low=-1000, high=1000), "b": I(4, low=-1000, high=1000)}, 18, "int64")
    case(op, {"a": I(3, 4, low=-100, high=100, dtype=np.int8), "b": I(3, 1, low=-100, high=100, dtype=np.int8)}, 18,
         "int8")
    typed_case(op, {"a": I(3, 4, low=0, high=60000, dtype=np.uint16), "b": I(4, low=0, high=60000, dtype=np.uint16)},
               18, "uint16")
case("BitwiseNot", {"x": I(3, 4, low=-1000, high=1000, dtype=np.int32)}, 18, "int32")
typed_case("BitwiseNot", {"x": I(3, 4, low=0, high=200, dtype=np.uint64)}, 18, "uint64")

# ---- activations --------------------------------------------------------------------------------

X = F(3, 8, scale=3)
case("Elu", {"x": X}, 6, "default")
case("Elu", {"x": X}, 6, "alpha", alpha=0.4)
case("Elu", {"x": X}, 1, "opset1", alpha=0.4, oracle_opset=6)
case("Selu", {"x": X}, 6, "default")
case("Selu", {"x": X}, 6, "alpha-gamma", alpha=2.0, gamma=0.7)
case("Selu", {"x": X}, 1, "opset1-defaults", oracle_opset=6,
     oracle_attrs={"alpha": 1.673200011253357, "gamma": 1.0506999492645264})
case("Softplus", {"x": F(3, 8, scale=10)}, 1)
case("Softsign", {"x": X}, 1)
case("ThresholdedRelu", {"x": X}, 10, "default")
case("ThresholdedRelu", {"x": X}, 10, "alpha", alpha=-0.5)
case("Celu", {"x": X}, 12, "default")
case("Celu", {"x": X}, 12, "alpha", alpha=0.3)
case("Mish", {"x": F(3, 8, scale=5)}, 18)
case("Gelu", {"x": F(3, 8, scale=3)}, 20, "none")
case("Gelu", {"x": F(3, 8, scale=3)}, 20, "tanh", approximate="tanh")
case("Gelu", {"x": F("N", 16, scale=3)}, 20, "dyn", batches=(1, 3))
case("Swish", {"x": X}, 24, "default")
case("Swish", {"x": X}, 24, "alpha", alpha=0.6)
case("Shrink", {"x": X}, 9, "default")
case("Shrink", {"x": X}, 9, "bias-lambd", bias=1.5, lambd=1.0)
case("Shrink", {"x": I(3, 8, low=-6, high=6)}, 9, "int64", bias=1.5, lambd=1.5)
typed_case("Shrink", {"x": I(3, 8, low=0, high=9, dtype=np.uint16)}, 9, "uint16", bias=1.0, lambd=2.0)

# PRelu: slope unidirectionally broadcast; before opset 7 a 1-D slope is per channel
X4 = F(2, 3, 4, 5)
case("PRelu", {"x": X4}, 7, "channel", {"s": w(3, 1, 1)})
case("PRelu", {"x": X4}, 9, "scalar", {"s": f32(0.2)})
case("PRelu", {"x": X4}, 16, "last-axis", {"s": w(5)})
case("PRelu", {"x": X4, "s": F(4, 5)}, 16, "slope-input")
case("PRelu", {"x": I(3, 4, low=-9, high=9), "s": I(4, low=-3, high=3)}, 16, "int64")
SLOPE = w(3)
case("PRelu", {"x": X4}, 6, "legacy-per-channel", {"s": SLOPE},
     oracle=node_model("PRelu", {"x": X4}, 7, {"s": SLOPE.reshape(3, 1, 1)}))

# Clip with bounds computed at run time (graph inputs, or computed by another node), or on integers
CLIP_X = F(3, 8, scale=5)
case("Clip", {"x": CLIP_X, "lo": F(), "hi": P()}, 11, "bound-inputs")
case("Clip", {"x": CLIP_X, "lo": F()}, 12, "min-input")
case("Clip", {"x": CLIP_X, "hi": F()}, 13, "max-input", names=["x", "", "hi"])
case("Clip", {"x": CLIP_X, "hi": F()}, 13, "const-min-max-input", {"lo": f32(-1.0)}, names=["x", "lo", "hi"])
case("Clip", {"x": CLIP_X, "lo": P(), "hi": F()}, 13, "min-above-max")
case("Clip", {"x": F("N", 4, scale=5), "lo": F(1), "hi": P(1)}, 13, "dyn-vector-bounds", batches=(1, 3))
graph_case("computed-bounds", ("ReduceMin", "ReduceMax", "Mul", "Clip"), [
    n("ReduceMin", ["x"], ["lo"], keepdims=0), n("ReduceMax", ["x"], ["m"], keepdims=0),
    n("Mul", ["m", "half"], ["hi"]), n("Clip", ["x", "lo", "hi"], ["y"]),
], {"x": F("N", 6, scale=4)}, ["y"], {"half": f32(0.5)}, opset=13, batches=(2, 3), keeps=("Clip",))
case("Clip", {"x": I(3, 8, low=-20, high=20)}, 12, "int64", {"lo": i64(-5), "hi": i64(7)})
case("Clip", {"x": I(3, 8, low=-20, high=20, dtype=np.int32), "lo": I(low=-5, high=0, dtype=np.int32)}, 13,
     "int32-min-input")
case("Clip", {"x": I(3, 8, low=0, high=200, dtype=np.uint8)}, 13, "uint8-max", {"hi": np.array(99, np.uint8)},
     names=["x", "", "hi"])
case("Clip", {"x": Arr((3, 4), dtype=np.float64, scale=3)}, 13, "float64-bound", {"lo": np.array(0.1)})
