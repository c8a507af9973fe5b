"""E2E cases: the first op families (convolution, matrix products, pooling, normalisation, element-wise
arithmetic, unary maths and activations, reductions, shape and data movement, Resize), dynamic dims,
float64 and edge values, and multi-node cases (shape arithmetic, removal, fusion)."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper

from tests.e2e.cases import (
    INT64_MAX,
    Arr,
    B,
    F,
    I,
    P,
    R,
    case,
    f32,
    graph_case,
    i64,
    make_model,
    n,
    node_model,
    w,
)

X4 = F(2, 4, 7, 9)

# Convolution
case("Conv", {"x": F(2, 4, 9, 9)}, 11, "3x3-bias", {"w": w(6, 4, 3, 3), "b": w(6)}, pads=[1, 1, 1, 1])
case("Conv", {"x": F(1, 4, 10, 11)}, 11, "group2-stride-dil-asym", {"w": w(6, 2, 3, 3), "b": w(6)},
     pads=[1, 0, 2, 1], strides=[2, 1], dilations=[1, 2], group=2)
case("Conv", {"x": F(2, 4, 8, 8)}, 11, "depthwise", {"w": w(4, 1, 3, 3), "b": w(4)}, pads=[1, 1, 1, 1], group=4)
case("Conv", {"x": F(1, 4, 9, 8)}, 11, "depthwise-x2-stride2", {"w": w(8, 1, 3, 3)}, pads=[1, 1, 1, 1],
     strides=[2, 2], group=4)
case("Conv", {"x": F(2, 8, 6, 6)}, 11, "1x1-stride2", {"w": w(5, 8, 1, 1)}, strides=[2, 2])
case("Conv", {"x": F(1, 3, 9, 9)}, 11, "same-upper", {"w": w(4, 3, 3, 3)}, auto_pad="SAME_UPPER", strides=[2, 2])
case("Conv", {"x": F(1, 3, 8, 8)}, 11, "same-lower", {"w": w(4, 3, 2, 2)}, auto_pad="SAME_LOWER")
case("Conv", {"x": F(1, 3, 8, 9)}, 11, "same-lower-stride2", {"w": w(4, 3, 4, 4)}, auto_pad="SAME_LOWER",
     strides=[2, 2])
case("Conv", {"x": F(1, 3, 9, 10)}, 11, "valid", {"w": w(4, 3, 3, 3), "b": w(4)}, auto_pad="VALID", strides=[2, 2])
case("Conv", {"x": F(1, 3, 8, 8)}, 11, "kernel-3x1", {"w": w(4, 3, 3, 1)}, strides=[1, 2], kernel_shape=[3, 1])
case("Conv", {"x": F(1, 2, 7, 7)}, 1, "opset1", {"w": w(3, 2, 3, 3), "b": w(3)}, pads=[0, 1, 0, 1])
case("Conv", {"x": F("N", 3, 8, 8)}, 11, "dyn-batch", {"w": w(4, 3, 3, 3), "b": w(4)}, pads=[1, 1, 1, 1],
     batches=(1, 3))
case("Conv", {"x": F(1, 3, 6, 6), "w": F(4, 3, 3, 3)}, 11, "weight-input")
case("ConvTranspose", {"x": F(1, 4, 5, 5)}, 11, "basic", {"w": w(4, 3, 3, 3), "b": w(3)})
case("ConvTranspose", {"x": F(2, 4, 5, 5)}, 11, "stride2-outpad", {"w": w(4, 3, 3, 3)}, strides=[2, 2],
     pads=[1, 1, 1, 1], output_padding=[1, 1])
case("ConvTranspose", {"x": F(1, 4, 5, 6)}, 11, "group2-asym", {"w": w(4, 3, 3, 3), "b": w(6)}, group=2,
     strides=[2, 2], output_padding=[1, 0], pads=[1, 0, 1, 1])
case("ConvTranspose", {"x": F(1, 2, 4, 4)}, 11, "dilation2", {"w": w(2, 3, 3, 3)}, dilations=[2, 2])
case("ConvTranspose", {"x": F(1, 4, 5, 5)}, 11, "same-upper", {"w": w(4, 3, 3, 3)}, strides=[2, 2],
     auto_pad="SAME_UPPER")
case("ConvTranspose", {"x": F(1, 4, 5, 5)}, 11, "output-shape", {"w": w(4, 3, 3, 3)}, strides=[2, 2],
     output_shape=[10, 9])
case("ConvTranspose", {"x": F(1, 3, 4, 5)}, 1, "kernel-2x3", {"w": w(3, 2, 2, 3)}, strides=[2, 1])

# Matrix products
case("Gemm", {"a": F(3, 4)}, 7, "alpha-beta-transB", {"b": w(5, 4), "c": w(5)}, alpha=2.0, beta=0.5, transB=1)
case("Gemm", {"a": F(4, 3)}, 9, "transA-c-full", {"b": w(4, 5), "c": w(3, 5)}, transA=1, beta=2.0)
case("Gemm", {"a": F(4, 3)}, 11, "transA-transB-no-c", {"b": w(5, 4)}, transA=1, transB=1, alpha=0.3)
case("Gemm", {"a": F(3, 4)}, 13, "c-scalar", {"b": w(4, 5), "c": f32(0.7)})
case("Gemm", {"a": F(3, 4)}, 13, "c-row", {"b": w(4, 5), "c": w(1, 5)}, beta=-1.5)
case("Gemm", {"a": F(3, 4)}, 13, "beta0", {"b": w(4, 5), "c": w(5)}, beta=0.0)
case("Gemm", {"a": F(3, 4), "b": F(5, 4), "c": F(3, 1)}, 13, "all-inputs", alpha=1.5, beta=0.25, transB=1)
case("Gemm", {"a": F("N", 6)}, 13, "dyn-batch", {"b": w(6, 2), "c": w(2)}, batches=(1, 4))
case("MatMul", {"a": F(3, 4), "b": F(4, 5)}, 13, "2d")
case("MatMul", {"a": F(2, 3, 4)}, 13, "3d-const", {"b": w(4, 5)})
case("MatMul", {"a": F(2, 1, 3, 4), "b": F(3, 4, 2)}, 9, "4d-broadcast")
case("MatMul", {"a": F(4), "b": F(2, 4, 3)}, 13, "1d-left")
case("MatMul", {"a": F(2, 3, 4), "b": F(4)}, 1, "1d-right")

# Pooling
case("MaxPool", {"x": X4}, 8, "k3s2", kernel_shape=[3, 3], strides=[2, 2])
case("MaxPool", {"x": X4}, 1, "k2", kernel_shape=[2, 2], strides=[2, 2])
case("MaxPool", {"x": X4}, 10, "ceil", kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)
case("MaxPool", {"x": X4}, 11, "asym-pads", kernel_shape=[3, 2], strides=[2, 1], pads=[1, 0, 0, 1])
case("MaxPool", {"x": X4}, 12, "dilation-ceil", kernel_shape=[3, 2], strides=[2, 2], pads=[1, 1, 0, 0],
     dilations=[1, 2], ceil_mode=1)
for mode in ("SAME_UPPER", "SAME_LOWER", "VALID"):
    case("MaxPool", {"x": X4}, 11, mode.lower(), kernel_shape=[3, 3], strides=[2, 2], auto_pad=mode)
    case("AveragePool", {"x": X4}, 11, mode.lower(), kernel_shape=[2, 3], strides=[2, 2], auto_pad=mode)
case("AveragePool", {"x": X4}, 7, "pads-exclude", kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
case("AveragePool", {"x": X4}, 7, "pads-include", kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1],
     count_include_pad=1)
case("AveragePool", {"x": X4}, 10, "ceil", kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)
case("AveragePool", {"x": X4}, 10, "ceil-pads-include", kernel_shape=[3, 3], strides=[2, 2], pads=[1, 0, 1, 1],
     ceil_mode=1, count_include_pad=1)
case("AveragePool", {"x": X4}, 19, "asym-pads", kernel_shape=[2, 2], pads=[0, 1, 1, 0])
case("AveragePool", {"x": X4}, 1, "k2", kernel_shape=[2, 2], strides=[2, 2], oracle_opset=7)
for opset in (1, 13):
    for shape in ((2, 3, 5, 6), (2, 3, 7), (1, 2, 3, 4, 5)):
        tag = f"{len(shape)}d"
        case("GlobalAveragePool", {"x": F(*shape)}, opset, tag)
        case("GlobalMaxPool", {"x": F(*shape)}, opset, tag)

# Normalisation
BN = {k: v for k, v in zip(("scale", "bias"), (w(4), w(4)), strict=True)}
BN.update(mean=w(4), var=np.abs(w(4)) + 0.2)
case("BatchNormalization", {"x": X4}, 7, "spatial", BN, epsilon=1e-3, spatial=1)
case("BatchNormalization", {"x": X4}, 9, "", BN)
case("BatchNormalization", {"x": F(3, 4)}, 14, "2d", BN, epsilon=1e-2)
case("BatchNormalization", {"x": F(2, 4, 6)}, 15, "3d", BN)


def lrn_oracle(size: int, shape: tuple[int, ...], alpha: float, beta: float, bias: float) -> onnx.ModelProto:
    """LRN written with Conv over the channel axis: onnxruntime's LRN refuses even sizes, the ONNX spec does not
    (the window is c - floor((size-1)/2) .. c + ceil((size-1)/2))."""
    n_, c_, h_, w_ = shape
    lo, hi = (size - 1) // 2, size - 1 - (size - 1) // 2
    nodes = [n("Mul", ["x", "x"], ["sq"]), n("Reshape", ["sq", "s1"], ["sq1"]),
             n("Conv", ["sq1", "ones"], ["win"], pads=[lo, 0, hi, 0]), n("Reshape", ["win", "s0"], ["sums"]),
             n("Mul", ["sums", "k"], ["scaled"]), n("Add", ["scaled", "bias"], ["base"]),
             n("Pow", ["base", "beta"], ["den"]), n("Div", ["x", "den"], ["y0"])]
    consts = {"s1": i64(n_, 1, c_, h_ * w_), "s0": i64(*shape), "ones": np.ones((1, 1, size, 1), np.float32),
              "k": f32(alpha / size), "bias": f32(bias), "beta": f32(beta)}
    return make_model(nodes, {"x": F(*shape)}, ["y0"], consts, 13)


for size in (1, 2, 3, 4, 5, 8):
    case("LRN", {"x": F(2, 6, 5, 5)}, 13, f"size{size}", size=size, alpha=0.05, beta=0.75, bias=1.5,
         oracle=lrn_oracle(size, (2, 6, 5, 5), 0.05, 0.75, 1.5))
case("LRN", {"x": F(1, 5, 4, 4)}, 1, "defaults", size=3)

# Element-wise arithmetic
for op in ("Add", "Sub", "Mul", "Div"):
    case(op, {"a": F(2, 3, 4), "b": P(4)}, 7, "bcast-last")
    case(op, {"a": F(2, 1, 4), "b": P(3, 1)}, 13, "bcast-both")
    case(op, {"a": F(2, 3)}, 14, "scalar-const", {"b": f32(1.75)})
    case(op, {"a": I(3, 4, low=-20, high=20), "b": I(4, low=1, high=6)}, 14, "int64")
    case(op, {"a": I(3, 4, low=-20, high=20, dtype=np.int32), "b": I(3, 4, low=-6, high=-1, dtype=np.int32)}, 13,
         "int32")
    case(op, {"a": F(2, 3, 4, 5)}, 6, "legacy-axis2-const", {"b": np.abs(w(4, 1)) + 0.5}, broadcast=1, axis=2,
         oracle_opset=7, oracle_attrs={})  # B (4, 1) at axis 2 of (2, 3, 4, 5) is numpy-aligned already
    # onnxruntime has no opset-6 Add/Sub/Mul/Div: the oracles align B by hand at opset 7
    legacy = {"a": F(2, 3, 4, 5), "b": P(3, 4)}
    case(op, legacy, 6, "legacy-axis1-input", broadcast=1, axis=1,
         oracle=make_model([n("Reshape", ["b", "s"], ["b3"]), n(op, ["a", "b3"], ["y0"])], legacy, ["y0"],
                           {"s": i64(3, 4, 1)}, 7))
    b = np.abs(w(3)) + 0.5
    case(op, {"a": F(3, 4, 5)}, 6, "legacy-axis0-const", {"b": b}, broadcast=1, axis=0,
         oracle=node_model(op, {"a": F(3, 4, 5)}, 7, {"b": b.reshape(3, 1, 1)}))
case("Pow", {"a": P(2, 3), "b": F(2, 3)}, 7, "float-exp")
case("Pow", {"a": F(3, 4)}, 12, "int-exp", {"e": i64(3)})
case("Pow", {"a": F(3, 4)}, 13, "neg-base-int-valued", {"e": f32(2.0, 3.0, -1.0, 0.0)})
case("Pow", {"a": P(2, 3, 4), "b": F(4)}, 15, "bcast")
for op in ("Equal", "Less", "Greater"):
    case(op, {"a": R(2, 3, 4), "b": R(4)}, 11 if op == "Equal" else 7, "float-bcast")
    case(op, {"a": I(2, 3, 4, low=-2, high=3), "b": I(4, low=-2, high=3)}, 7 if op == "Equal" else 9, "int64-bcast")
    b = i64(0, 1, -1) if op == "Equal" else f32(0, 1, -1)
    a = {"a": I(2, 3, 4, low=-2, high=3) if op == "Equal" else R(2, 3, 4)}
    case(op, a, 1, "legacy-axis1", {"b": b}, broadcast=1, axis=1,
         oracle=node_model(op, a, 7, {"b": b.reshape(3, 1)}))  # onnxruntime has no opset-1 kernel
    case(op, {"a": R(3, 4), "b": R(3, 4)}, 13, "float")
    case(op, {"a": I(3, 4, low=-2, high=3), "b": I(3, 1, low=-2, high=3)}, 13, "int64")
    case(op, {"a": I(5, low=-2, high=3, dtype=np.int32)}, 11, "int32-const", {"b": np.array([1], np.int32)})
case("Equal", {"a": B(3, 4), "b": B(4)}, 11, "bool")
for op in ("Sum", "Max", "Min"):
    case(op, {"a": F(2, 3), "b": F(2, 3), "c": F(2, 3)}, 6, "same-shape")
    case(op, {"a": F(2, 3), "b": F(3), "c": F(2, 1)}, 8, "bcast3")
    case(op, {"a": F(2, 3)}, 13, "single")
    case(op, {"a": F(4, 1, 3), "b": F(2, 1)}, 13, "bcast2")
case("Max", {"a": I(3, 4), "b": I(4)}, 13, "int64")
case("Min", {"a": I(3, 4, dtype=np.int32), "b": I(3, 4, dtype=np.int32)}, 13, "int32")
case("Where", {"c": B(2, 3), "x": F(2, 3), "y": F(2, 3)}, 9, "")
case("Where", {"c": B(3, 1), "x": F(4), "y": F(1)}, 16, "bcast")
case("Where", {"c": B(2, 3), "x": I(2, 3), "y": I(3)}, 16, "int64")

# Unary maths and activations
for op, opsets, arr in (("Abs", (6, 13), F(3, 4)), ("Neg", (6, 13), F(2, 3, 4)), ("Exp", (6, 13), F(2, 5, scale=3)),
                        ("Log", (6, 13), P(3, 4, low=0.01, high=50)), ("Sqrt", (6, 13), P(3, 4, high=100)),
                        ("Erf", (9, 13), F(4, 50, scale=2.5)), ("Relu", (6, 13, 14), F(3, 4)),
                        ("Sigmoid", (6, 13), F(3, 7, scale=8)), ("Tanh", (6, 13), F(3, 7, scale=4)),
                        ("HardSwish", (14,), F(3, 7, scale=5))):
    for opset in opsets:
        case(op, {"x": arr}, opset)
case("Erf", {"x": P(2, 500, low=-7, high=7)}, 13, "wide")
case("Abs", {"x": I(3, 4)}, 13, "int64")
case("Neg", {"x": I(3, 4, dtype=np.int32)}, 13, "int32")
case("LeakyRelu", {"x": F(3, 4)}, 6, "default")
case("LeakyRelu", {"x": F(3, 4)}, 16, "alpha", alpha=0.3)
case("HardSigmoid", {"x": F(3, 7, scale=4)}, 6, "default")
case("HardSigmoid", {"x": F(3, 7, scale=4)}, 6, "alpha-beta", alpha=0.3, beta=0.4)
CLIP_X = F(3, 8, scale=5)
case("Clip", {"x": CLIP_X}, 6, "relu6", min=0.0, max=6.0)
case("Clip", {"x": CLIP_X}, 6, "range", min=-1.0, max=1.5)
case("Clip", {"x": CLIP_X}, 6, "max-only", max=2.0)
case("Clip", {"x": CLIP_X}, 11, "min-max", {"lo": f32(-2.0), "hi": f32(3.0)})
case("Clip", {"x": CLIP_X}, 11, "max-input-only", {"hi": f32(2.5)}, names=["x", "", "hi"])
case("Clip", {"x": CLIP_X}, 12, "relu", {"lo": f32(0.0)})
case("Clip", {"x": CLIP_X}, 13, "relu6", {"lo": f32(0.0), "hi": f32(6.0)})
case("Clip", {"x": CLIP_X}, 13, "no-bounds")
for op in ("Softmax", "LogSoftmax"):
    case(op, {"x": F(2, 3, 4, scale=3)}, 11, "3d-axis1", axis=1)
    case(op, {"x": F(2, 3, 4, scale=3)}, 13, "3d-axis1", axis=1)
    case(op, {"x": F(2, 3, 4)}, 11, "3d-default")
    case(op, {"x": F(2, 3, 4)}, 13, "3d-default")
    case(op, {"x": F(2, 3, 4, 5)}, 11, "4d-axis-neg2", axis=-2)
    case(op, {"x": F(2, 3, 4, 5)}, 13, "4d-axis2", axis=2)
    case(op, {"x": F(3, 10, scale=10)}, 1, "2d")

# Reductions
for op in ("ReduceMean", "ReduceMax", "ReduceMin", "ReduceSum", "ReduceProd", "ReduceL1", "ReduceL2", "ReduceLogSum",
           "ReduceLogSumExp", "ReduceSumSquare"):
    x = P(2, 3, 4, 5, low=0.5, high=1.5) if op in ("ReduceProd", "ReduceLogSum") else F(2, 3, 4, 5)
    case(op, {"x": x}, 11, "axes23-drop", axes=[2, 3], keepdims=0)
    case(op, {"x": x}, 11, "axis-neg1", axes=[-1])
    case(op, {"x": x}, 11, "all")
    case(op, {"x": x}, 11, "all-drop", keepdims=0)
    if op != "ReduceSum":
        case(op, {"x": x}, 13, "axes01", axes=[0, 1])
    axes_opset = 13 if op == "ReduceSum" else 18
    case(op, {"x": x}, axes_opset, "input-axes", {"axes": i64(1, -1)}, keepdims=0)
    case(op, {"x": x}, axes_opset, "no-axes")
    case(op, {"x": x}, axes_opset, "noop", noop_with_empty_axes=1)
    case(op, {"x": x, "axes": I(1, low=-4, high=4)}, axes_opset, "runtime-axes", keepdims=0)

# Shape and data movement
case("Concat", {"a": F(2, 3), "b": F(2, 4)}, 4, "axis1", axis=1)
case("Concat", {"a": F(2, 3, 1), "b": F(2, 3, 2), "c": F(2, 3, 3)}, 11, "axis-neg1", axis=-1)
case("Concat", {"a": I(2, 3), "b": I(1, 3)}, 13, "int64-axis0", axis=0)
case("Concat", {"a": F(2, 3)}, 13, "with-const", {"b": w(2, 2)}, axis=1)
case("Concat", {"a": F(2, 3), "b": F(2, 4)}, 1, "default-axis", oracle_opset=4, oracle_attrs={"axis": 1})
case("Reshape", {"x": F(2, 3, 4)}, 5, "zero-minus1", {"s": i64(0, -1)})
case("Reshape", {"x": F(2, 3, 4)}, 13, "minus1-first", {"s": i64(-1, 4, 1)})
case("Reshape", {"x": F(2, 3, 4)}, 14, "allowzero0", {"s": i64(0, 0, 2, 2)}, allowzero=0)
case("Reshape", {"x": F(2, 3, 4)}, 14, "allowzero1", {"s": i64(4, 3, 2)}, allowzero=1)
case("Reshape", {"x": F(2, 3, 4)}, 1, "attr", shape=[6, -1])
case("Reshape", {"x": F("N", 3, 4)}, 13, "dyn-batch", {"s": i64(0, -1)}, batches=(1, 3))
for opset, axis in ((1, 1), (9, 0), (11, -1), (13, 2)):
    case("Flatten", {"x": F(2, 3, 4, 5)}, opset, f"axis{axis}", axis=axis)
case("Transpose", {"x": X4}, 1, "nhwc", perm=[0, 2, 3, 1])
case("Transpose", {"x": X4}, 13, "default")
case("Transpose", {"x": F(2, 3, 1, 4, 5)}, 13, "5d", perm=[4, 0, 3, 1, 2])
case("Transpose", {"x": I(3, 4)}, 13, "int64", perm=[1, 0])
case("Squeeze", {"x": F(1, 3, 1, 2)}, 1, "axes", axes=[0])
case("Squeeze", {"x": F(1, 3, 1, 2)}, 11, "neg-axes", axes=[-2, 0])
case("Squeeze", {"x": F(1, 3, 1, 2)}, 11, "all")
case("Squeeze", {"x": F(1, 3, 1, 2)}, 13, "axes-input", {"axes": i64(0, 2)})
case("Squeeze", {"x": F(1, 3, 1, 2)}, 13, "all")
case("Unsqueeze", {"x": F(3, 2)}, 1, "axes", axes=[0])
case("Unsqueeze", {"x": F(3, 2)}, 11, "neg-axes", axes=[0, -1])
case("Unsqueeze", {"x": F(3, 2)}, 13, "axes-input", {"axes": i64(0, 2)})
case("Unsqueeze", {"x": I(3)}, 13, "int64-neg", {"axes": i64(-1)})
case("Pad", {"x": F(2, 3)}, 2, "constant-value", pads=[0, 1, 1, 2], value=1.5)
case("Pad", {"x": F(2, 3, 4)}, 2, "reflect", pads=[0, 1, 2, 0, 1, 1], mode="reflect")
case("Pad", {"x": F(2, 3, 4)}, 2, "edge", pads=[1, 0, 2, 0, 2, 1], mode="edge")
case("Pad", {"x": F(3, 4)}, 11, "inputs-value", {"pads": i64(1, 0, 0, 2), "v": f32(2.5)})
case("Pad", {"x": F(3, 4)}, 11, "reflect", {"pads": i64(1, 2, 2, 1)}, mode="reflect")
case("Pad", {"x": F(3, 4)}, 11, "negative", {"pads": i64(1, -1, -1, 2)})
case("Pad", {"x": X4}, 13, "edge-4d", {"pads": i64(0, 0, 1, 2, 0, 0, 2, 1)}, mode="edge")
case("Pad", {"x": I(3, 4)}, 13, "int64", {"pads": i64(1, 1, 0, 0), "v": i64(7)})
case("Pad", {"x": F(2, 3, 4)}, 18, "axes", {"pads": i64(1, 2, 3, 4), "axes": i64(-1, 1)},
     names=["x", "pads", "", "axes"])
case("Slice", {"x": F(4, 5)}, 1, "attrs", starts=[1], ends=[3], axes=[1])
case("Slice", {"x": F(4, 5, 6)}, 1, "no-axes-clamp", starts=[1, 0, -4], ends=[100, -1, INT64_MAX])
case("Slice", {"x": F(4, 5)}, 10, "steps", {"st": i64(0, 1), "en": i64(4, 5), "ax": i64(0, 1), "sp": i64(2, 3)})
case("Slice", {"x": F(4, 5)}, 11, "neg-starts", {"st": i64(-3), "en": i64(-1), "ax": i64(-1)})
case("Slice", {"x": F(4, 5)}, 13, "neg-step", {"st": i64(-1), "en": i64(-INT64_MAX), "ax": i64(1), "sp": i64(-2)})
case("Slice", {"x": F(4, 5, 6)}, 13, "optional-absent", {"st": i64(0, 1), "en": i64(4, 3)},
     names=["x", "st", "en"])
case("Slice", {"x": I(6, 2)}, 13, "int64", {"st": i64(5), "en": i64(0), "ax": i64(0), "sp": i64(-2)})
case("Split", {"x": F(2, 6)}, 2, "attr", n_out=2, axis=1, split=[2, 4])
case("Split", {"x": F(2, 6)}, 11, "equal", n_out=3, axis=-1)
case("Split", {"x": F(5, 2)}, 11, "attr-axis0", n_out=2, split=[1, 4])
case("Split", {"x": F(2, 6)}, 13, "input", {"s": i64(5, 1)}, n_out=2, axis=1)
case("Split", {"x": F(6, 2)}, 13, "equal", n_out=2)
case("Split", {"x": F(2, 7)}, 18, "uneven", n_out=3, axis=1, num_outputs=3)
case("Split", {"x": F(2, 8)}, 18, "even", n_out=4, axis=1, num_outputs=4)
case("Gather", {"x": F(4, 5)}, 1, "axis0-neg", {"i": i64(0, -1, 2, -4)})
case("Gather", {"x": F(4, 5, 3)}, 11, "axis1-2d", {"i": i64(0, -5, 4, 1).reshape(2, 2)}, axis=1)
case("Gather", {"x": F(4, 5)}, 13, "axis-neg1-scalar", {"i": np.array(-2, np.int64)}, axis=-1)
case("Gather", {"x": F(4, 5)}, 13, "int32-indices", {"i": np.array([3, -1], np.int32)})
case("Gather", {"x": I(4, 5), "i": I(3, low=-4, high=4)}, 13, "int64-input-indices")
case("Expand", {"x": F(3, 1)}, 8, "const", {"s": i64(2, 3, 4)})
case("Expand", {"x": F(2, 1, 3)}, 13, "ones-fewer-dims", {"s": i64(5, 1)})
case("Expand", {"x": I(1, 3)}, 13, "int64", {"s": i64(2, 1, 1)})
case("Shape", {"x": F("N", 3, 4)}, 1, "dyn", batches=(1, 3))
case("Shape", {"x": F("N", 3, 4, 5)}, 15, "start-end", start=1, end=-1, batches=(2, 5))
case("Shape", {"x": F("N", 3, 4, 5)}, 15, "neg-start", start=-3, batches=(2,))
case("Shape", {"x": F(2, 3, 4)}, 13, "static-folded")
for opset in (6, 13, 19):
    for to, arr in ((TensorProto.INT64, F(3, 4, scale=10)), (TensorProto.INT32, F(3, 4, scale=10)),
                    (TensorProto.FLOAT16, F(3, 4, scale=100)), (TensorProto.BOOL, R(3, 4)),
                    (TensorProto.FLOAT, I(3, 4, low=-1000, high=1000)), (TensorProto.FLOAT, B(3, 4)),
                    (TensorProto.FLOAT, Arr((3, 4), dtype=np.float16, scale=10)),
                    (TensorProto.INT64, I(3, 4, dtype=np.int32)), (TensorProto.BOOL, I(3, 4, low=-1, high=2))):
        src = np.dtype(arr.dtype).name
        case("Cast", {"x": arr}, opset, f"{src}-to-{TensorProto.DataType.Name(to).lower()}", to=to)
case("Cast", {"x": F(3, 4, scale=100)}, 1, "name-float16", to="FLOAT16",
     oracle_opset=6, oracle_attrs={"to": TensorProto.FLOAT16})
case("CastLike", {"x": F(3, 4, scale=10)}, 15, "to-int64", {"t": i64(1)})
case("CastLike", {"x": I(3, 4), "t": F(2)}, 19, "to-float")
case("CastLike", {"x": R(3, 4)}, 19, "to-bool", {"t": np.array([True])})
for opset in (1, 13, 14, 16, 19):
    case("Identity", {"x": F(2, 3)}, opset)
case("Identity", {"x": I(2, 3)}, 13, "int64")
case("Dropout", {"x": F(2, 3)}, 7, "ratio-attr", ratio=0.3)
case("Dropout", {"x": F(2, 3)}, 10, "")
case("Dropout", {"x": F(2, 3)}, 12, "ratio-input", {"r": np.array(0.5, np.float32)})
case("Dropout", {"x": F(2, 3)}, 13, "training-false", {"r": np.array(0.5, np.float32), "t": np.array(False)})

# Resize and Upsample
X_RS = F(1, 3, 5, 6)
case("Upsample", {"x": X_RS}, 7, "nearest", scales=[1.0, 1.0, 2.0, 3.0])
case("Upsample", {"x": X_RS}, 7, "linear", scales=[1.0, 1.0, 2.0, 1.5], mode="linear")
case("Upsample", {"x": X_RS}, 9, "nearest", {"s": f32(1, 1, 2, 2)})
case("Upsample", {"x": X_RS}, 9, "linear", {"s": f32(1, 1, 1.5, 2.5)}, mode="linear")
case("Resize", {"x": X_RS}, 10, "nearest-up", {"s": f32(1, 1, 1.7, 2.5)})
case("Resize", {"x": X_RS}, 10, "nearest-down", {"s": f32(1, 1, 0.6, 0.5)})
case("Resize", {"x": X_RS}, 10, "linear-up", {"s": f32(1, 1, 2, 1.5)}, mode="linear")
case("Resize", {"x": X_RS}, 10, "linear-down", {"s": f32(1, 1, 0.5, 0.7)}, mode="linear")
case("Resize", {"x": X_RS}, 11, "sizes-align-linear",
     {"roi": np.zeros(0, np.float32), "sc": np.zeros(0, np.float32), "sz": i64(1, 3, 9, 4)},
     coordinate_transformation_mode="align_corners", mode="linear")
case("Resize", {"x": X_RS}, 11, "scales-nearest", {"roi": np.zeros(0, np.float32), "sc": f32(1, 1, 2, 2)})
for ctm in ("half_pixel", "asymmetric", "pytorch_half_pixel", "align_corners"):
    for mode in ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil"):
        case("Resize", {"x": X_RS}, 13, f"{ctm}-{mode}", {"sc": f32(1, 1, 1.5, 0.7)}, names=["x", "", "sc"],
             coordinate_transformation_mode=ctm, nearest_mode=mode)
    case("Resize", {"x": X_RS}, 13, f"{ctm}-linear", {"sc": f32(1, 1, 1.6, 0.6)}, names=["x", "", "sc"],
         coordinate_transformation_mode=ctm, mode="linear")
case("Resize", {"x": X_RS}, 13, "sizes-nearest", {"sz": i64(1, 3, 7, 13)}, names=["x", "", "", "sz"])
case("Resize", {"x": X_RS}, 18, "axes-scales", {"sc": f32(3, 2)}, names=["x", "", "sc"], axes=[3, 2])
case("Resize", {"x": X_RS}, 18, "axes-sizes-linear", {"sz": i64(4, 9)}, names=["x", "", "", "sz"], axes=[2, 3],
     mode="linear")

# Dynamic dims (one built model, predicted at several sizes), float64 and edge values
DYN_SAME = {"kernel_shape": [3, 3], "strides": [2, 2]}
case("Conv", {"x": F(1, 3, "H", "H")}, 11, "dyn-hw-same", {"w": w(4, 3, 3, 3)}, auto_pad="SAME_UPPER", strides=[2, 2],
     batches=(5, 8))
case("ConvTranspose", {"x": F("N", 4, 5, 5)}, 11, "dyn", {"w": w(4, 3, 3, 3)}, strides=[2, 2], batches=(1, 3))
case("MaxPool", {"x": F("N", 3, 7, 7)}, 12, "dyn", auto_pad="SAME_UPPER", batches=(1, 3), **DYN_SAME)
case("AveragePool", {"x": F(1, 3, "H", 7)}, 11, "dyn-h", auto_pad="SAME_LOWER", batches=(5, 8), **DYN_SAME)
case("GlobalAveragePool", {"x": F("N", 3, "N", 4)}, 13, "dyn", batches=(1, 3))
case("BatchNormalization", {"x": F("N", 4, 3, 3)}, 15, "dyn", BN, batches=(1, 3))
case("LRN", {"x": F("N", 5, 3, 3)}, 13, "dyn", size=3, batches=(1, 3))
case("MatMul", {"a": F("N", 3, 4), "b": F(4, 2)}, 13, "dyn", batches=(1, 3))
case("Flatten", {"x": F("N", 3, 4)}, 13, "dyn", batches=(1, 3))
case("Transpose", {"x": F("N", 3, 4)}, 13, "dyn", perm=[2, 0, 1], batches=(1, 3))
case("Split", {"x": F("N", 6)}, 13, "dyn-axis1", n_out=2, axis=1, batches=(1, 3))
case("Split", {"x": F("N", 6)}, 13, "dyn-axis0", n_out=2, axis=0, batches=(2, 4))
case("Slice", {"x": F("N", 5)}, 13, "dyn", {"st": i64(1), "en": i64(INT64_MAX), "ax": i64(0)}, batches=(2, 5))
case("Gather", {"x": F("N", 5), "i": I(3, low=0, high=1)}, 13, "dyn", batches=(1, 3))
case("Expand", {"x": F("N", 1)}, 13, "dyn", {"s": i64(1, 4)}, batches=(1, 3))
case("Pad", {"x": F("N", 3)}, 13, "dyn-reflect", {"pads": i64(0, 2, 0, 1)}, mode="reflect", batches=(1, 3))
case("Concat", {"a": F("N", 3), "b": F("N", 2)}, 13, "dyn", axis=1, batches=(1, 3))
case("Where", {"c": B("N", 3), "x": F("N", 1), "y": F(3)}, 16, "dyn", batches=(1, 3))
case("Equal", {"a": R("N", 3), "b": R(3)}, 13, "dyn", batches=(1, 3))
case("Squeeze", {"x": F("N", 1, 3)}, 13, "dyn", {"axes": i64(1)}, batches=(1, 3))
case("Unsqueeze", {"x": F("N", 3)}, 13, "dyn", {"axes": i64(-1)}, batches=(1, 3))
case("Cast", {"x": F("N", 3, scale=10)}, 13, "dyn", to=TensorProto.INT64, batches=(1, 3))
case("ReduceMean", {"x": F("N", 3, 4)}, 18, "dyn", {"axes": i64(0)}, batches=(1, 3))
case("Resize", {"x": F("N", 3, 5, 6)}, 13, "dyn", {"sc": f32(1, 1, 2, 2)}, names=["x", "", "sc"], batches=(1, 2))
case("Upsample", {"x": F("N", 3, 2, 2)}, 9, "dyn", {"s": f32(1, 1, 2, 2)}, batches=(1, 3))
case("Reshape", {"x": F("N", 3, 4)}, 14, "dyn-allowzero", {"s": i64(-1, 12)}, allowzero=1, batches=(1, 3))
case("Shape", {"x": F("N", 3, 4, 5)}, 15, "clamped", start=-10, end=10)
case("Shape", {"x": F("N", 3, 4, 5)}, 15, "empty", start=3, end=1)
case("Add", {"a": Arr((2, 3), dtype=np.float64), "b": Arr((3,), dtype=np.float64)}, 14, "float64")
case("Cast", {"x": Arr((2, 3), dtype=np.float64)}, 13, "float64-to-float", to=TensorProto.FLOAT)
case("Cast", {"x": P(2, 3, low=0, high=250)}, 13, "float-to-uint8", to=TensorProto.UINT8)
case("Cast", {"x": P(2, 3, low=-120, high=120)}, 13, "float-to-int8", to=TensorProto.INT8)
case("Softmax", {"x": F(3, 10, scale=100)}, 13, "large-logits")
case("LogSoftmax", {"x": F(3, 10, scale=100)}, 13, "large-logits")
case("Softmax", {"x": F(3, 4, 5)}, 13, "axis0", axis=0)
case("ReduceProd", {"x": I(2, 3, low=1, high=4)}, 13, "int64", axes=[1])
case("ReduceSum", {"x": I(2, 3)}, 13, "int64", {"axes": i64(0)})
case("ReduceMax", {"x": I(2, 3)}, 13, "int64", axes=[1])
case("Pow", {"a": I(3, 4, low=-3, high=4), "b": I(4, low=0, high=3)}, 15, "int64")
case("Gemm", {"a": F(3, 4)}, 13, "c-column", {"b": w(4, 5), "c": w(3, 1)}, beta=2.0)
case("Slice", {"x": F(4, 5)}, 13, "empty", {"st": i64(3), "en": i64(1), "ax": i64(0)})
case("Slice", {"x": F(4, 5)}, 13, "start-past-end", {"st": i64(10), "en": i64(20), "ax": i64(1)})
case("Concat", {"a": I(2), "b": I(0)}, 13, "empty-part", axis=0)

# Multi-node cases: dynamic shape arithmetic, removal, fusion
DYN = {"x": F("N", 3, 4, 4)}
graph_case("flatten-by-batch", ("Shape", "Gather", "Unsqueeze", "Concat", "Reshape"), [
    n("Shape", ["x"], ["s"]),
    n("Gather", ["s", "zero"], ["b"], axis=0),
    n("Unsqueeze", ["b", "axes0"], ["b1"]),
    n("Concat", ["b1", "minus1"], ["target"], axis=0),
    n("Reshape", ["x", "target"], ["y"]),
], DYN, ["y"], {"zero": np.array(0, np.int64), "axes0": i64(0), "minus1": i64(-1)}, batches=(2, 5),
   keeps=("Shape", "Gather", "Unsqueeze", "Concat", "Reshape"))
graph_case("shape-math", ("Shape", "Slice", "Mul", "Div", "Concat", "Reshape"), [
    n("Shape", ["x"], ["s"]),
    n("Slice", ["s", "st", "en"], ["nc"]),           # (N, 3)
    n("Mul", ["nc", "two"], ["nc2"]),                # (2N, 6)
    n("Div", ["nc2", "two"], ["nc1"]),               # (N, 3)
    n("Concat", ["nc1", "minus1"], ["target"], axis=0),
    n("Reshape", ["x", "target"], ["y"]),           # (N, 3, 16)
], DYN, ["y"], {"st": i64(0), "en": i64(2), "two": i64(2), "minus1": i64(-1)}, opset=11, batches=(1, 3),
   keeps=("Shape", "StridedSlice", "MulFusion", "DivFusion", "Concat", "Reshape"))
graph_case("dyn-fill", ("Shape", "ConstantOfShape", "Add"), [
    n("Shape", ["x"], ["s"]),
    n("ConstantOfShape", ["s"], ["fill"], value=numpy_helper.from_array(f32(1.5), "v")),
    n("Add", ["x", "fill"], ["y"]),
], DYN, ["y"], batches=(2, 3), keeps=("Shape", "ConstantOfShape"))
graph_case("dyn-fill-int64", ("Shape", "ConstantOfShape"), [
    n("Shape", ["x"], ["s"]),
    n("ConstantOfShape", ["s"], ["y"], value=numpy_helper.from_array(i64(7), "v")),
], {"x": F("N", 3)}, ["y"], opset=20, batches=(2, 4), keeps=("ConstantOfShape",))
graph_case("dyn-fill-default", ("Shape", "ConstantOfShape"), [
    n("Shape", ["x"], ["s"]), n("ConstantOfShape", ["s"], ["y"]),
], {"x": F("N", 2, 3)}, ["y"], opset=9, batches=(1, 2), keeps=("ConstantOfShape",))
graph_case("dyn-expand", ("Shape", "Expand"), [
    n("Shape", ["x"], ["s"]), n("Expand", ["b", "s"], ["y"]),
], {"x": F("N", 3, 4), "b": F(3, 1)}, ["y"], batches=(2, 3), keeps=("Shape", "BroadcastTo"))
graph_case("dyn-where", ("Less", "Where", "Greater", "Cast"), [
    n("Less", ["x", "t"], ["c"]), n("Where", ["c", "x", "t"], ["m"]),
    n("Greater", ["m", "zero"], ["g"]), n("Cast", ["g"], ["y"], to=TensorProto.INT64),
], {"x": F("N", 5)}, ["m", "y"], {"t": f32(0.3), "zero": f32(0.0)}, batches=(3, 1))
graph_case("identity-dropout-removed", ("Relu", "Identity", "Dropout", "Add"), [
    n("Relu", ["x"], ["r"]), n("Identity", ["r"], ["i"]), n("Dropout", ["i"], ["d"], ratio=0.5),
    n("Add", ["d", "x"], ["y"]),
], {"x": F(2, 3)}, ["y"], opset=11, removed=2)
graph_case("bn-unfused", ("Conv", "BatchNormalization", "Relu"), [
    n("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]), n("BatchNormalization", ["c", *BN], ["b"]),
    n("Relu", ["b"], ["y"]),
], {"x": F(2, 3, 6, 6)}, ["y"], {"w": w(4, 3, 3, 3), **BN}, fusion=False, bn_folded=0, fused=0)

