"""The TVM delegate against onnxruntime: per op, whole models, partitions, the compile cache, resize.

Every case builds a .lite model with ``TVMDelegate("llvm")`` and compares with onnxruntime
on fresh random inputs within relative L2 1e-4 (float32). Per-op cases are the ``CASES`` table
here and in every tests/delegates/test_tvm_<family>.py (same format): each must run entirely in
TVM graph kernels, and ``test_every_lowering_ran_in_a_case_checked_against_an_oracle`` reads the
tables to check that every Relax lowering is among them. They run without the disk cache
(``cache_dir=None``: no ``.so`` export); the cache cases use temporary directories. Untuned TVM
code is slow and whole-model compiles take seconds: those cases are marked slow, except a small
whole model (ResNet-18 at 64x64 px) kept in the default run.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import lite
from lite.aligned import aligned_array
from lite.threads import capped_threads
from lite.tools import zoo
from lite.tools.converter import convert, convert_to_graph
from tests.support.delegate_graphs import feeds_for, mixed_model, node, onnx_graph, weight
from tests.support.oracle import relative_l2, run_onnxruntime

tvm = pytest.importorskip("tvm")

from lite.delegates.tvm import TVMDelegate, module_sources  # noqa: E402
from lite.delegates.tvm.ops import EMITTERS, emitter  # noqa: E402
from tests.support.tvm_delegate import (  # noqa: E402
    RTOL,
    TVM,
    assert_matches,
    build,
    check_lowering,
    rows,
    tvm_delegate,
)

RNG = np.random.default_rng(7)
REPO = Path(__file__).resolve().parents[2]


def ints(*values: int) -> np.ndarray:
    return np.array(values, np.int64)


# ---- the support table ----------------------------------------------------------------------

CNN_SET = {"Conv2DFusion", "Conv2dTransposeFusion", "MatMulFusion", "AddFusion", "SubFusion", "MulFusion",
           "DivFusion", "AddN", "Maximum", "Minimum", "Activation", "MaxPoolFusion", "AvgPoolFusion", "Softmax",
           "LogSoftmax", "Concat", "Reshape", "Flatten", "Transpose", "Squeeze", "Unsqueeze", "PadFusion", "LRN",
           "Resize", "ReduceFusion", "BatchNorm", "ExpFusion", "Log", "Sqrt", "Neg", "Abs", "Erf"}


def test_support_table_covers_the_cnn_set():
    assert set(EMITTERS) >= CNN_SET


def test_registering_an_op_twice_raises():
    with pytest.raises(ValueError, match="AddFusion already has a Relax emitter"):
        emitter("AddFusion")(lambda node: node.x(0))


# ---- every lowering, against onnxruntime: the case tables ---------------------------------------

def conv_model(x_shape, w_shape, attrs, activation: str | None = None, bias: bool = True,
               op: str = "Conv") -> onnx.ModelProto:
    out_channels = w_shape[1] * attrs.get("group", 1) if op == "ConvTranspose" else w_shape[0]
    inits = {"w": weight(*w_shape)}
    if bias:
        inits["b"] = RNG.standard_normal(out_channels).astype(np.float32)
    nodes = [node(op, ["x", *inits], "c" if activation else "y", **attrs)]
    if activation == "Relu":
        nodes.append(node("Relu", ["c"]))
    elif activation == "Clip":  # Clip(0, 6): the converter fuses it as RELU6
        inits.update(lo=np.array(0, np.float32), hi=np.array(6, np.float32))
        nodes.append(node("Clip", ["c", "lo", "hi"]))
    return onnx_graph(nodes, {"x": list(x_shape)}, ["y"], inits)


CONVS = {  # name: (x shape, weight shape, Conv attributes)
    "3x3": ((2, 8, 12, 12), (16, 8, 3, 3), {"pads": [1, 1, 1, 1]}),
    "3x3_stride2_asymmetric_pads": ((1, 6, 13, 11), (8, 6, 3, 3), {"strides": [2, 2], "pads": [0, 1, 1, 0]}),
    "5x5_strides_2_1": ((1, 6, 15, 9), (4, 6, 5, 5), {"strides": [2, 1], "pads": [2, 2, 2, 2]}),
    "pointwise": ((2, 8, 7, 5), (12, 8, 1, 1), {}),
    "grouped": ((1, 8, 10, 10), (12, 4, 3, 3), {"group": 2, "pads": [1, 1, 1, 1]}),
    "depthwise": ((1, 16, 10, 10), (16, 1, 3, 3), {"group": 16, "pads": [1, 1, 1, 1]}),
    "depthwise_stride2": ((2, 8, 11, 11), (8, 1, 3, 3), {"group": 8, "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    "depthwise_multiplier_2": ((1, 6, 8, 8), (12, 1, 3, 3), {"group": 6}),
    "dilation_2": ((1, 4, 12, 12), (6, 4, 3, 3), {"dilations": [2, 2], "pads": [2, 2, 2, 2]}),
    "same_upper": ((1, 6, 10, 9), (8, 6, 3, 3), {"strides": [2, 2], "auto_pad": "SAME_UPPER"}),
    "same_lower": ((1, 6, 10, 9), (8, 6, 4, 4), {"auto_pad": "SAME_LOWER"}),
    "valid": ((1, 6, 10, 9), (8, 6, 3, 3), {"auto_pad": "VALID"}),
}

CONV_TRANSPOSES = {
    "3x3": ((1, 4, 5, 5), (4, 6, 3, 3), {}),
    "stride2_pads_output_padding": ((2, 4, 5, 6), (4, 3, 3, 3), {"strides": [2, 2], "pads": [1, 1, 1, 1],
                                                                "output_padding": [1, 0]}),
    "grouped": ((1, 4, 5, 5), (4, 2, 3, 3), {"group": 2, "strides": [2, 2]}),
    "same_upper": ((1, 3, 4, 5), (3, 2, 3, 3), {"strides": [2, 2], "auto_pad": "SAME_UPPER"}),
    "dilation": ((1, 2, 4, 5), (2, 3, 3, 3), {"dilations": [2, 1], "strides": [2, 2], "pads": [1, 0, 1, 2]}),
}

MATMULS = {  # name: (nodes, input shapes, initializers)
    "2d": ([node("MatMul", ["a", "w"])], {"a": [3, 8]}, {"w": weight(8, 5)}),
    "batched_broadcast": ([node("MatMul", ["a", "b"])], {"a": [2, 3, 4, 8], "b": [3, 8, 5]}, {}),
    "vector_a": ([node("MatMul", ["w", "a"])], {"a": [2, 8, 5]}, {"w": weight(8)}),
    "vector_b": ([node("MatMul", ["a", "w"])], {"a": [2, 3, 8]}, {"w": weight(8)}),
    "gemm_transB_bias": ([node("Gemm", ["a", "w", "bias"], transB=1)], {"a": [4, 8]},
                         {"w": weight(6, 8), "bias": weight(6)}),
    "gemm_transA_alpha": ([node("Gemm", ["a", "w"], transA=1, alpha=0.5)], {"a": [8, 4]}, {"w": weight(8, 6)}),
    "gemm_relu": ([node("Gemm", ["a", "w", "bias"], "g"), node("Relu", ["g"])], {"a": [4, 8]},
                  {"w": weight(8, 6), "bias": weight(6)}),
}

BROADCASTS = {"same": [2, 8, 5, 6], "channel": [1, 8, 1, 1], "last": [6], "scalar": []}  # b's shape; a is [2, 8, 5, 6]


def binary_model(op: str, b_shape: list[int]) -> onnx.ModelProto:
    inits = {"b": (RNG.standard_normal(b_shape) + 4).astype(np.float32)}  # away from 0 for Div
    return onnx_graph([node(op, ["a", "b"])], {"a": [2, 8, 5, 6]}, ["y"], inits)


VARIADIC = {"Sum": "AddN", "Max": "Maximum", "Min": "Minimum"}  # ONNX op: .lite op

UNARY = {  # name: nodes (Log and Sqrt read |x| + 0.5)
    "exp": [node("Exp", ["x"])],
    "neg": [node("Neg", ["x"])],
    "abs": [node("Abs", ["x"])],
    "erf": [node("Erf", ["x"])],
    "log": [node("Abs", ["x"], "a"), node("Add", ["a", "half"], "p"), node("Log", ["p"])],
    "sqrt": [node("Abs", ["x"], "a"), node("Add", ["a", "half"], "p"), node("Sqrt", ["p"])],
    "pow": [node("Abs", ["x"], "a"), node("Add", ["a", "half"], "p"), node("Pow", ["p", "e"])],
    "identity_of_an_input": [node("Identity", ["x"])],  # the converter keeps an Identity that gives an output
}


def unary_model(nodes: list[onnx.NodeProto]) -> onnx.ModelProto:
    inits = {"half": np.array(0.5, np.float32), "e": np.array(1.7, np.float32)}
    used = {i for n in nodes for i in n.input}
    return onnx_graph(nodes, {"x": [2, 3, 4, 5]}, ["y"], {k: v for k, v in inits.items() if k in used})


ACTIVATIONS = {  # name: (nodes, initializers)
    "relu": ([node("Relu", ["x"])], {}),
    "relu6": ([node("Clip", ["x", "lo", "hi"])], {"lo": 0.0, "hi": 6.0}),
    "clip": ([node("Clip", ["x", "lo", "hi"])], {"lo": -0.5, "hi": 0.75}),
    "clip_min_only": ([node("Clip", ["x", "lo"])], {"lo": -1.5}),
    "leaky_relu": ([node("LeakyRelu", ["x"], alpha=0.1)], {}),
    "leaky_relu_alpha_above_1": ([node("LeakyRelu", ["x"], alpha=1.5)], {}),
    "sigmoid": ([node("Sigmoid", ["x"])], {}),
    "tanh": ([node("Tanh", ["x"])], {}),
    "hard_sigmoid": ([node("HardSigmoid", ["x"], alpha=0.3, beta=0.4)], {}),
    "hard_swish": ([node("HardSwish", ["x"])], {}),
}

POOLS = {
    "max_3x3_s2_p1": ("MaxPool", {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    "max_asymmetric_pads": ("MaxPool", {"kernel_shape": [3, 2], "pads": [0, 1, 1, 0]}),
    "max_same_upper": ("MaxPool", {"kernel_shape": [3, 3], "strides": [2, 2], "auto_pad": "SAME_UPPER"}),
    "max_same_lower": ("MaxPool", {"kernel_shape": [2, 2], "strides": [2, 2], "auto_pad": "SAME_LOWER"}),
    "max_ceil": ("MaxPool", {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1}),
    "max_ceil_pads_drop_last_window": ("MaxPool", {"kernel_shape": [3, 3], "strides": [3, 3],
                                                   "pads": [1, 1, 1, 1], "ceil_mode": 1}),
    "max_dilation": ("MaxPool", {"kernel_shape": [2, 2], "dilations": [2, 2], "pads": [1, 1, 1, 1]}),
    "avg_exclude_pad": ("AveragePool", {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}),
    "avg_include_pad": ("AveragePool", {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "count_include_pad": 1}),
    "avg_s2_asymmetric_exclude_pad": ("AveragePool", {"kernel_shape": [3, 3], "strides": [2, 2],
                                                      "pads": [1, 0, 1, 1]}),
    "avg_ceil_include_pad": ("AveragePool", {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1],
                                             "ceil_mode": 1, "count_include_pad": 1}),
    "avg_ceil_exclude_pad": ("AveragePool", {"kernel_shape": [2, 2], "strides": [2, 2], "ceil_mode": 1}),
    "global_avg": ("GlobalAveragePool", {}),
    "global_max": ("GlobalMaxPool", {}),
}


def lrn_model(size: int) -> onnx.ModelProto:
    return onnx_graph([node("LRN", ["x"], size=size, alpha=1e-2, beta=0.75, bias=1.5)], {"x": [2, 7, 5, 4]}, ["y"])


def batch_norm_model(c: int = 6) -> onnx.ModelProto:
    """A BatchNormalization that no convolution absorbs."""
    inits = {"scale": weight(c), "bias": weight(c), "mean": weight(c),
             "var": (RNG.random(c) + 0.5).astype(np.float32)}
    return onnx_graph([node("BatchNormalization", ["x", "scale", "bias", "mean", "var"], epsilon=1e-3)],
                      {"x": [2, c, 5, 4]}, ["y"], inits)


LAYER_NORMS = {  # name: (input shape, axis, scale shape, bias)
    "last_axis": ((2, 7, 32), -1, (32,), True), "axis_1_no_bias": ((2, 5, 8), 1, (5, 8), False),
    "axis_2_broadcast_scale": ((2, 3, 4, 5), 2, (1,), True)}


def layer_norm_model(shape, axis, scale_shape, bias) -> onnx.ModelProto:
    inits = {"s": weight(*scale_shape)} | ({"b": weight(*shape[axis:])} if bias else {})
    return onnx_graph([node("LayerNormalization", ["x", *inits], axis=axis, epsilon=1e-3)], {"x": list(shape)},
                      ["y"], inits)


def attention_model(mask: bool, zeroing: bool = False) -> onnx.ModelProto:
    """With ``zeroing``, a mask row of -inf and the dynamo exporter's Where(IsNaN(p), 0, p) after the softmax."""
    nodes = [node("Transpose", ["x"], "kt", perm=[0, 2, 1]), node("MatMul", ["x", "kt"], "s"),
             node("Mul", ["s", "scale"], "d")]
    nodes += [node("Add", ["d", "mask"], "a"), node("Softmax", ["a"], "p", axis=-1)] if mask else \
        [node("Softmax", ["d"], "p", axis=-1)]
    inits = {"scale": np.array(0.3, np.float32)} | ({"mask": weight(6, 6)} if mask else {})
    if zeroing:
        inits["mask"][4] = -np.inf
        inits["zero"] = np.array(0.0, np.float32)
        nodes += [node("IsNaN", ["p"], "nan"), node("Where", ["nan", "zero", "p"], "w")]
    return onnx_graph([*nodes, node("MatMul", ["w" if zeroing else "p", "x"])], {"x": [2, 6, 8]}, ["y"], inits)


CHANNEL_NORMS = {  # ONNX op: (attributes, opset, .lite op)
    "InstanceNormalization": ({}, 17, "InstanceNorm"), "GroupNormalization": ({"num_groups": 3}, 21, "GroupNorm")}


def channel_norm_model(op: str, attrs: dict, opset: int) -> onnx.ModelProto:
    return onnx_graph([node(op, ["x", "s", "b"], epsilon=1e-3, **attrs)], {"x": [2, 6, 4, 3]}, ["y"],
                      {"s": weight(6), "b": weight(6)}, opset=opset)


REDUCTIONS = [("ReduceMean", [1], 1), ("ReduceMax", [2, 3], 0), ("ReduceMin", [-1], 1), ("ReduceSum", [0, 2], 0),
              ("ReduceProd", [1], 1), ("ReduceMean", [], 1), ("ReduceL1", [1], 1), ("ReduceL2", [2, 3], 0),
              ("ReduceSumSquare", [-1], 1), ("ReduceLogSumExp", [1], 0)]


def reduction_model(op: str, axes: list[int], keepdims: int) -> onnx.ModelProto:
    inits = {"axes": ints(*axes)} if axes else {}
    return onnx_graph([node(op, ["x", *inits], keepdims=keepdims)], {"x": [2, 3, 4, 5]}, ["y"], inits, opset=18)


SOFTMAXES = [("Softmax", -1, 17), ("Softmax", 1, 17), ("LogSoftmax", -1, 17), ("Softmax", 1, 11),
             ("LogSoftmax", 2, 11)]  # (op, axis, opset)

SHAPE_OPS = {  # name: (nodes, input shapes, initializers, lite op types)
    "concat_channels": ([node("Relu", ["x"], "r"), node("Concat", ["r", "x"], axis=1)], {"x": [2, 3, 5, 4]}, {},
                        ["Activation", "Concat"]),
    "concat_axis0_and_last": ([node("Concat", ["x", "x"], "c", axis=0), node("Concat", ["c", "c"], axis=-1)],
                              {"x": [2, 3, 4]}, {}, ["Concat", "Concat"]),
    "reshape_zero_and_minus_one": ([node("Reshape", ["x", "s"])], {"x": [2, 3, 4, 5]}, {"s": ints(0, -1, 5)},
                                   ["Reshape"]),
    "reshape_literal": ([node("Reshape", ["x", "s"])], {"x": [2, 3, 4, 5]}, {"s": ints(6, 20)}, ["Reshape"]),
    "flatten_1": ([node("Flatten", ["x"], axis=1)], {"x": [2, 3, 4, 5]}, {}, ["Flatten"]),
    "flatten_0": ([node("Flatten", ["x"], axis=0)], {"x": [2, 3, 4, 5]}, {}, ["Flatten"]),
    "flatten_3": ([node("Flatten", ["x"], axis=3)], {"x": [2, 3, 4, 5]}, {}, ["Flatten"]),
    "transpose": ([node("Transpose", ["x"], perm=[0, 2, 3, 1])], {"x": [2, 3, 4, 5]}, {}, ["Transpose"]),
    "transpose_reverse": ([node("Transpose", ["x"])], {"x": [2, 3, 4]}, {}, ["Transpose"]),
    "squeeze_axes": ([node("Squeeze", ["x", "a"])], {"x": [2, 1, 4, 1]}, {"a": ints(1, -1)}, ["Squeeze"]),
    "squeeze_all": ([node("Squeeze", ["x"])], {"x": [2, 1, 4, 1]}, {}, ["Squeeze"]),
    "unsqueeze": ([node("Unsqueeze", ["x", "a"])], {"x": [2, 3, 4]}, {"a": ints(0, -1)}, ["Unsqueeze"]),
    "pad_constant": ([node("Pad", ["x", "p", "v"])], {"x": [2, 3, 4, 5]},
                     {"p": ints(0, 0, 1, 2, 0, 1, 3, 0), "v": np.array(1.5, np.float32)}, ["PadFusion"]),
    "pad_negative_crops": ([node("Pad", ["x", "p"])], {"x": [2, 3, 6, 5]}, {"p": ints(0, 0, -1, 2, 0, 0, 1, -2)},
                           ["PadFusion"]),
    "pad_reflect": ([node("Pad", ["x", "p"], mode="reflect")], {"x": [2, 3, 6, 5]}, {"p": ints(0, 0, 2, 1, 0, 0, 1, 3)},
                    ["PadFusion"]),
    "pad_edge": ([node("Pad", ["x", "p"], mode="edge")], {"x": [2, 3, 6, 5]}, {"p": ints(0, 1, 2, 1, 0, 0, 1, 3)},
                 ["PadFusion"]),
    "slice": ([node("Slice", ["x", "s", "e", "a", "t"])], {"x": [2, 6, 7, 5]},
              {"s": ints(1, -5, 0), "e": ints(5, 100, -1), "a": ints(1, 2, 3), "t": ints(2, 1, 1)}, ["StridedSlice"]),
    "slice_reverse": ([node("Slice", ["x", "s", "e", "a", "t"])], {"x": [2, 6, 7]},
                      {"s": ints(-1), "e": ints(-100), "a": ints(2), "t": ints(-2)}, ["StridedSlice"]),
    "gather": ([node("Gather", ["x", "i"], axis=1)], {"x": [2, 6, 3]}, {"i": ints(0, -1, 2, 2)}, ["Gather"]),
    "expand": ([node("Expand", ["x", "s"])], {"x": [2, 1, 3]}, {"s": ints(4, 1, 5, 1)}, ["BroadcastTo"]),
    "expand_identity_dims": ([node("Expand", ["x", "s"])], {"x": [2, 3, 1]}, {"s": ints(1, 1, 4)}, ["BroadcastTo"]),
}


RESIZES = {  # name: (Resize attributes, scales or None, sizes or None, input shape)
    "nearest_2x_asymmetric_floor": ({"mode": "nearest", "coordinate_transformation_mode": "asymmetric",
                                     "nearest_mode": "floor"}, [1, 1, 2, 2], None, [1, 3, 5, 4]),
    "nearest_2x_half_pixel": ({"mode": "nearest"}, [1, 1, 2, 2], None, [2, 3, 5, 4]),
    "nearest_3x_round_prefer_ceil": ({"mode": "nearest", "nearest_mode": "round_prefer_ceil"}, [1, 1, 3, 3], None,
                                     [1, 2, 4, 3]),
    "nearest_half_sizes": ({"mode": "nearest"}, None, [1, 3, 4, 3], [1, 3, 8, 6]),
    "linear_2x_half_pixel": ({"mode": "linear"}, [1, 1, 2, 2], None, [2, 3, 5, 4]),
    "linear_sizes_align_corners": ({"mode": "linear", "coordinate_transformation_mode": "align_corners"}, None,
                                   [1, 3, 9, 7], [1, 3, 5, 4]),
    "linear_sizes_pytorch_half_pixel": ({"mode": "linear", "coordinate_transformation_mode": "pytorch_half_pixel"},
                                        None, [1, 3, 7, 1], [1, 3, 5, 4]),
    "linear_downsample": ({"mode": "linear"}, [1, 1, 0.5, 0.5], None, [1, 3, 8, 6]),
}


def resize_model(attrs, scales, sizes, shape) -> onnx.ModelProto:
    inits = {"roi": np.zeros(0, np.float32), "scales": np.array(scales or [], np.float32)}
    if sizes is not None:
        inits["sizes"] = ints(*sizes)
    return onnx_graph([node("Resize", ["x", *inits], **attrs)], {"x": shape}, ["y"], inits, opset=13)


CASES: dict[str, tuple[onnx.ModelProto, list[str] | None]] = {  # name: (model, its .lite op types or None)
    **{f"conv_{k}": (conv_model(*v), ["Conv2DFusion"]) for k, v in CONVS.items()},
    **{f"conv_{k}_{activation.lower()}": (conv_model(*CONVS[k], activation), ["Conv2DFusion"])  # the activation fused
       for k in ("3x3", "depthwise", "grouped") for activation in ("Relu", "Clip")},
    "conv_without_bias": (conv_model((1, 4, 6, 6), (8, 4, 3, 3), {"pads": [1, 1, 1, 1]}, bias=False), None),
    **{f"conv_transpose_{k}": (conv_model(*v, op="ConvTranspose"), ["Conv2dTransposeFusion"])
       for k, v in CONV_TRANSPOSES.items()},
    **{f"matmul_{k}": (onnx_graph(nodes, inputs, ["y"], inits), ["MatMulFusion"])
       for k, (nodes, inputs, inits) in MATMULS.items()},
    # element-wise
    **{f"{op.lower()}_{k}": (binary_model(op, shape), [f"{op}Fusion"])
       for op in ("Add", "Sub", "Mul", "Div") for k, shape in BROADCASTS.items()},
    "add_broadcasts_both_ways_with_a_fused_relu": (
        onnx_graph([node("Add", ["a", "b"], "s"), node("Relu", ["s"])], {"a": [2, 1, 5], "b": [3, 1]}, ["y"]),
        ["AddFusion"]),
    **{f"variadic_{op.lower()}": (onnx_graph([node(op, ["a", "b", "c"])], {"a": [2, 3, 4], "b": [3, 4], "c": [2, 1, 4]},
                                             ["y"]), [lite_op]) for op, lite_op in VARIADIC.items()},
    **{f"unary_{k}": (unary_model(nodes), None) for k, nodes in UNARY.items()},
    **{f"activation_{k}": (onnx_graph(nodes, {"x": [2, 6, 7, 5]}, ["y"],
                                      {name: np.array(v, np.float32) for name, v in inits.items()}), ["Activation"])
       for k, (nodes, inits) in ACTIVATIONS.items()},
    # pools, normalisation, reductions
    **{f"pool_{k}": (onnx_graph([node(op, ["x"], **attrs)], {"x": [2, 5, 11, 9]}, ["y"]),
                     ["MaxPoolFusion" if "Max" in op else "AvgPoolFusion"]) for k, (op, attrs) in POOLS.items()},
    **{f"lrn_size_{size}": (lrn_model(size), ["LRN"]) for size in (1, 3, 5)},
    "batch_norm_that_no_conv_absorbs": (batch_norm_model(), ["BatchNorm"]),
    **{f"layer_norm_{k}": (layer_norm_model(*v), ["LayerNormFusion"]) for k, v in LAYER_NORMS.items()},
    "attention_masked": (attention_model(mask=True), ["Transpose", "Attention"]),
    "attention": (attention_model(mask=False), ["Transpose", "Attention"]),
    "attention_zeroing_nan_weights": (attention_model(mask=True, zeroing=True), ["Transpose", "Attention"]),
    **{f"{op.lower()}": (channel_norm_model(op, attrs, opset), [lite_op])
       for op, (attrs, opset, lite_op) in CHANNEL_NORMS.items()},
    **{f"{op.lower()}_{'_'.join(map(str, axes)) or 'all'}_keepdims{keepdims}": (
        reduction_model(op, axes, keepdims), ["ReduceFusion"]) for op, axes, keepdims in REDUCTIONS},
    **{f"{op.lower()}_axis{axis}_opset{opset}": (
        onnx_graph([node(op, ["x"], axis=axis)], {"x": [2, 3, 4, 5]}, ["y"], opset=opset), [op])
       for op, axis, opset in SOFTMAXES},
    # shape and data movement
    **{k: (onnx_graph(nodes, inputs, ["y"], inits), types) for k, (nodes, inputs, inits, types) in SHAPE_OPS.items()},
    "split": (onnx_graph([helper.make_node("Split", ["x", "s"], ["a", "b", "c"], name="split", axis=1)],
                         {"x": [2, 7, 3]}, ["a", "b", "c"], {"s": ints(2, 4, 1)}), ["Split"]),
    **{f"resize_{k}": (resize_model(*v), ["Resize"]) for k, v in RESIZES.items()},
}


DEFAULT_RUN_EVERY = 3
"""The default run lowers every third case (each op family has several); -m slow lowers them all."""


@pytest.mark.parametrize("case", [c if i % DEFAULT_RUN_EVERY == 0 else pytest.param(c, marks=pytest.mark.slow)
                                  for i, c in enumerate(CASES)])
def test_lowering(case):
    check_lowering(*CASES[case])


def oracle_cases() -> dict[str, tuple[onnx.ModelProto, list[str] | None]]:
    """CASES here and in every tests/delegates/test_tvm_<family>.py (same format), by "module:case"."""
    cases = {f"test_tvm:{k}": v for k, v in CASES.items()}
    for path in sorted(Path(__file__).parent.glob("test_tvm_*.py")):
        module = importlib.import_module(f"tests.delegates.{path.stem}")
        cases.update({f"{path.stem}:{k}": v for k, v in module.CASES.items()})
    return cases


def test_every_lowering_ran_in_a_case_checked_against_an_oracle():
    """Each Relax emitter is exercised by a CASES table, whose every case ``test_lowering`` runs entirely in TVM
    and compares with onnxruntime (static: read from the tables, so it holds whatever else is selected)."""
    covered = set()
    for model, _ in oracle_cases().values():
        graph, _ = convert_to_graph(model)
        covered.update(n.op_type for n in graph.nodes)
    assert set(EMITTERS) - covered == set()


def test_lrn_even_size_matches_the_native_kernel():
    """onnxruntime refuses even sizes; the native kernel (the reference) pads (size-1)//2 before, size//2 after."""
    onnx_model = lrn_model(4)
    on_tvm, native = build(onnx_model, tvm_delegate()), build(onnx_model)
    assert {r.runs_on for r in on_tvm.partition_report()} == {TVM}
    x = feeds_for(onnx_model)["x"]
    got, want = (m.predict([x])[0].get_data_to_numpy() for m in (on_tvm, native))
    assert relative_l2(got, want) < RTOL


def test_layer_norm_statistics_outputs_stay_native():
    graph = onnx_graph([helper.make_node("LayerNormalization", ["x", "s"], ["y", "m", "i"])], {"x": [2, 8]},
                       ["y", "m", "i"], {"s": weight(8)})
    [row] = build(graph, tvm_delegate()).partition_report()
    assert row.runs_on == "native" and row.reason.startswith(f"{TVM}: LayerNormFusion with mean")


# ---- what stays native, and why --------------------------------------------------------------

REJECTED = {  # name: (model, the node, a piece of the reason)
    "resize_nearest_fractional": (resize_model({"mode": "nearest"}, [1, 1, 1.5, 1.5], None, [1, 2, 4, 4]),
                                  "resize_y", "no exact Relax equivalent"),
    "resize_scale_not_exact": (resize_model({"mode": "linear"}, [1, 1, 1.7, 1.7], None, [1, 2, 5, 5]),
                               "resize_y", "not the input size times the scale"),
    "cast": (onnx_graph([node("Cast", ["x"], "i", to=TensorProto.INT32), node("Cast", ["i"], to=TensorProto.FLOAT)],
                        {"x": [2, 3]}, ["y"]), "cast_i", "dtype conversions stay native"),
    "greater": (onnx_graph([node("Greater", ["x", "z"], "g"), node("Where", ["g", "x", "z"])], {"x": [2, 3]}, ["y"],
                           {"z": np.zeros((), np.float32)}), "greater_g", "bool"),
}


@pytest.mark.parametrize("case", list(REJECTED))
def test_unsupported_ops_stay_native_with_a_reason(case):
    onnx_model, name, reason = REJECTED[case]
    model = build(onnx_model, tvm_delegate())
    row = rows(model)[name]
    assert row.runs_on == "native"
    assert row.reason.startswith(f"{TVM}: ") and reason in row.reason, row.reason
    assert_matches(model, onnx_model, feeds_for(onnx_model), rtol=1e-5)


def test_a_model_mixing_supported_and_unsupported_ops_runs_in_several_partitions():
    onnx_model = mixed_model()
    delegate = tvm_delegate()
    model = build(onnx_model, delegate)
    report = model.partition_report()
    native = {r.op_type for r in report if r.runs_on == "native"}
    assert native == {"Greater", "Where"}
    assert len({r.graph_kernel for r in report if r.runs_on == TVM}) == 2 == len(model.graph_kernels())
    for _ in range(2):
        assert_matches(model, onnx_model, feeds_for(onnx_model))


# ---- declining -----------------------------------------------------------------------------

def test_cuda_without_a_gpu_declines_and_the_model_runs_natively(caplog):
    if tvm.cuda(0).exist:
        pytest.skip("this machine has a CUDA GPU")
    onnx_model = mixed_model()
    with caplog.at_level("INFO", logger="lite"):
        model = build(onnx_model, TVMDelegate("cuda", cache_dir=None))
    assert {r.runs_on for r in model.partition_report()} == {"native"}
    assert "TVMDelegate declined" in caplog.text and "cuda" in caplog.text
    assert_matches(model, onnx_model, feeds_for(onnx_model), rtol=1e-5)


def test_declines_when_the_tvm_runtime_cannot_be_imported(monkeypatch):
    monkeypatch.setitem(sys.modules, "tvm_ffi", None)  # import tvm_ffi now raises ImportError
    with pytest.raises(lite.MissingPackageError, match=r'TVMDelegate needs tvm.*pip install "delite\[tvm\]"'):
        TVMDelegate().init()
    model = build(mixed_model(), TVMDelegate())
    assert {r.runs_on for r in model.partition_report()} == {"native"}


def test_without_the_compiler_it_compiles_nothing_and_says_why(monkeypatch):
    monkeypatch.setitem(sys.modules, "tvm", None)  # a runtime-only install: import tvm raises ImportError
    onnx_model = mixed_model()
    model = build(onnx_model, TVMDelegate(cache_dir=None))
    rows = model.partition_report()
    assert {r.runs_on for r in rows} == {"native"}
    assert all("TVM's compiler cannot be imported here" in r.reason for r in rows if r.runs_on == "native")
    assert_matches(model, onnx_model, feeds_for(onnx_model), rtol=1e-5)


def test_loads_by_name_with_command_line_options():
    from lite.delegates import load_delegate, parse_options

    delegate = load_delegate("tvm", parse_options(["target=llvm", "cache_dir=off", "min_nodes_per_partition=2"]))
    delegate.init()
    assert isinstance(delegate, TVMDelegate) and delegate.cache is None and delegate.min_nodes_per_partition == 2


@pytest.mark.parametrize("value", ["false", "no", "off", "0", 1, 0, None, "True"])
def test_trust_saved_code_is_enabled_by_true_alone(value):
    with pytest.raises(lite.InputError, match="TVMDelegate trust_saved_code must be True or False"):
        TVMDelegate(trust_saved_code=value)
    delegate = TVMDelegate()
    with pytest.raises(lite.InputError, match="trust_saved_code must be True or False"):
        delegate.trust_saved_code = value
    assert delegate.trust_saved_code is False and TVMDelegate(trust_saved_code=True).trust_saved_code is True


def test_symbolic_batch_is_a_bool_or_none():
    with pytest.raises(lite.InputError, match="symbolic_batch must be True or False, got str 'false'"):
        TVMDelegate(symbolic_batch="false")
    assert TVMDelegate(symbolic_batch=False).symbolic_batch is False and TVMDelegate().symbolic_batch is True


def test_bad_targets_are_input_errors():
    with pytest.raises(lite.InputError, match="target must be"):
        TVMDelegate(target=42)
    with pytest.raises(lite.InputError, match="cannot make a target"):
        TVMDelegate("no-such-target").init()


@pytest.mark.parametrize("target", ["llvm -mcpu=x86-64 -num-cores=2", '{"kind": "llvm", "mcpu": "x86-64"}',
                                    {"kind": "llvm", "mcpu": "x86-64"}], ids=["cli", "json", "dict"])
def test_target_strings_and_dicts(target):
    delegate = TVMDelegate(target, cache_dir=None)
    delegate.init()
    assert delegate.target is None  # NOTE: the runtime alone until something is compiled
    delegate.compiler()
    assert delegate.target.kind.name == "llvm" and delegate.target.attrs["mcpu"] == "x86-64"
    assert delegate.target.attrs["num-cores"] >= 1  # MetaSchedule needs it
    check_model = onnx_graph([node("Relu", ["x"])], {"x": [2, 3]}, ["y"])
    assert_matches(build(check_model, delegate), check_model, feeds_for(check_model))


# ---- whole PyTorch-exported models -----------------------------------------------------------

def check_whole_model(onnx_model: onnx.ModelProto, cache_dir: Path) -> tuple[lite.Model, TVMDelegate]:
    delegate = TVMDelegate("llvm", cache_dir=cache_dir)
    model = build(onnx_model, delegate)
    report = model.partition_report()
    assert {r.runs_on for r in report} == {TVM}, [r for r in report if r.runs_on != TVM]
    assert len(model.graph_kernels()) == 1
    for _ in range(2):
        assert_matches(model, onnx_model, feeds_for(onnx_model))
    return model, delegate


@pytest.mark.slow  # NOTE: the encoder and the small models cover a whole model on TVM by default
def test_resnet18_at_64px_runs_in_one_tvm_graph_kernel(tmp_path):
    check_whole_model(zoo.resnet18(image_size=64), tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("builder", [zoo.resnet18, zoo.mobilenet_v2, zoo.squeezenet, zoo.inception_block],
                         ids=["resnet18", "mobilenet_v2", "squeezenet", "inception_block"])
def test_whole_model_runs_in_tvm_and_matches_onnxruntime(builder, tmp_path):
    check_whole_model(builder(), tmp_path)


# ---- resize: a symbolic batch serves every batch size ----------------------------------------

def block_model(batch: int | str = "N", size: int = 16) -> onnx.ModelProto:
    """conv -> relu -> max pool -> conv (+ shortcut) -> global pool -> flatten -> gemm: a tiny CNN."""
    inits = {"w0": weight(8, 3, 3, 3), "b0": weight(8), "w1": weight(8, 8, 3, 3), "fc": weight(5, 8), "fb": weight(5)}
    nodes = [
        node("Conv", ["x", "w0", "b0"], "c0", pads=[1, 1, 1, 1]), node("Relu", ["c0"], "r0"),
        node("MaxPool", ["r0"], "p0", kernel_shape=[2, 2], strides=[2, 2]),
        node("Conv", ["p0", "w1"], "c1", pads=[1, 1, 1, 1]), node("Add", ["c1", "p0"], "a"),
        node("GlobalAveragePool", ["a"], "g"), node("Flatten", ["g"], "f"),
        node("Gemm", ["f", "fc", "fb"], "y", transB=1),
    ]
    return onnx_graph(nodes, {"x": [batch, 3, size, size]}, ["y"], inits)


def compilations(model: lite.Model) -> int:
    return sum(k.compilations for k in model.graph_kernels())


def test_resize_batch_1_to_4_recompiles_nothing():
    onnx_model = block_model()
    delegate = tvm_delegate()
    model = build(onnx_model, delegate, input_shapes={"x": [1, 3, 16, 16]})
    assert model.get_inputs()[0].shape == (1, 3, 16, 16) and compilations(model) == 1
    (kernel,) = model.graph_kernels()
    assert kernel.compiled.lowered.symbolic
    assert_matches(model, onnx_model, feeds_for(onnx_model, {"x": (1, 3, 16, 16)}))
    model.resize(model.get_inputs(), [[4, 3, 16, 16]])
    assert_matches(model, onnx_model, feeds_for(onnx_model, {"x": (4, 3, 16, 16)}))
    assert compilations(model) == 1 and len(kernel.events) == 1


def test_other_shape_changes_recompile_and_earlier_modules_stay_in_memory():
    onnx_model = onnx_graph(block_model().graph.node, {"x": ["N", 3, "H", "W"]}, ["y"],
                            {i.name: numpy_helper.to_array(i) for i in block_model().graph.initializer})
    delegate = tvm_delegate()
    model = build(onnx_model, delegate, input_shapes={"x": [2, 3, 16, 16]})
    (kernel,) = model.graph_kernels()
    for shape in ([2, 3, 12, 20], [5, 3, 16, 16], [3, 3, 12, 20]):
        model.resize(model.get_inputs(), [shape])
        assert_matches(model, onnx_model, feeds_for(onnx_model, {"x": tuple(shape)}))
    assert [source for source, _ in kernel.events] == ["compiled", "compiled", "memory", "memory"]


def test_dynamic_batch_compiles_at_the_first_predict_then_serves_every_batch():
    onnx_model = block_model()
    delegate = tvm_delegate()
    model = build(onnx_model, delegate)
    assert model.get_inputs()[0].shape == (-1, 3, 16, 16) and compilations(model) == 0
    for batch in (2, 5, 1):
        assert_matches(model, onnx_model, feeds_for(onnx_model, {"x": (batch, 3, 16, 16)}))
    assert compilations(model) == 1


def test_a_batch_computed_from_shapes_follows_the_symbolic_batch():
    """x.view(x.size(0), -1) as exported: Shape -> Gather -> Unsqueeze -> Concat -> Reshape."""
    nodes = [node("Relu", ["x"], "r"), node("Shape", ["r"], "s"), node("Gather", ["s", "zero"], "b", axis=0),
             node("Unsqueeze", ["b", "axes"], "u"), node("Concat", ["u", "minus_one"], "t", axis=0),
             node("Reshape", ["r", "t"], "f"), node("Gemm", ["f", "fc"], "y", transB=1)]
    inits = {"zero": ints(0), "axes": ints(0), "minus_one": ints(-1), "fc": weight(4, 3 * 5 * 5)}
    inits["zero"] = np.array(0, np.int64)
    onnx_model = onnx_graph(nodes, {"x": ["N", 3, 5, 5]}, ["y"], inits)
    delegate = tvm_delegate()
    model = build(onnx_model, delegate)
    for batch in (1, 3, 2):
        assert_matches(model, onnx_model, feeds_for(onnx_model, {"x": (batch, 3, 5, 5)}))
    assert compilations(model) == 1


def test_ops_whose_meaning_depends_on_the_batch_compile_static_shapes():
    """Squeeze without axes drops a batch of 1: that module cannot serve batch 3."""
    onnx_model = onnx_graph([node("Squeeze", ["x"], "s"), node("Relu", ["s"])], {"x": ["N", 1, 4]}, ["y"])
    delegate = tvm_delegate()
    model = build(onnx_model, delegate, input_shapes={"x": [1, 1, 4]})
    assert not model.graph_kernels()[0].compiled.lowered.symbolic
    assert_matches(model, onnx_model, feeds_for(onnx_model, {"x": (1, 1, 4)}))
    model.resize(model.get_inputs(), [[3, 1, 4]])
    assert_matches(model, onnx_model, feeds_for(onnx_model, {"x": (3, 1, 4)}))
    assert compilations(model) == 2


# ---- the compile cache ---------------------------------------------------------------------

def cache_files(directory: Path) -> list[Path]:
    return sorted(directory.glob("*.so"))


def test_a_second_build_loads_every_partition_from_the_cache(tmp_path):
    onnx_model = mixed_model()
    first = build(onnx_model, TVMDelegate("llvm", cache_dir=tmp_path))
    assert module_sources(first) == {"compiled": 2} and len(cache_files(tmp_path)) == 2
    model = build(onnx_model, TVMDelegate("llvm", cache_dir=tmp_path))
    assert module_sources(model) == {"cache": 2}
    assert_matches(model, onnx_model, feeds_for(onnx_model))


def corrupt_truncate(library: Path) -> None:
    library.write_bytes(library.read_bytes()[: library.stat().st_size // 2])


def corrupt_sidecar(library: Path) -> None:
    library.with_suffix(".json").write_text("{not json")


def corrupt_consistently(library: Path) -> None:
    """Garbage that matches its sidecar's size and checksum: only loading it fails."""
    import hashlib

    garbage = RNG.bytes(4096)
    library.write_bytes(garbage)
    meta = json.loads(library.with_suffix(".json").read_text())
    meta.update(size=len(garbage), sha256=hashlib.sha256(garbage).hexdigest())
    library.with_suffix(".json").write_text(json.dumps(meta))


def corrupt_stale(library: Path) -> None:
    meta = json.loads(library.with_suffix(".json").read_text())
    library.with_suffix(".json").write_text(json.dumps({**meta, "tvm": "0.0.1"}))


def corrupt_fifo_sidecar(library: Path) -> None:
    """A FIFO in the sidecar's place: reading it waited for a writer forever."""
    sidecar = library.with_suffix(".json")
    sidecar.unlink()
    os.mkfifo(sidecar)


@pytest.mark.parametrize("corrupt", [  # NOTE: each case compiles once more: three under -m slow
    pytest.param(corrupt_truncate, id="truncated"), pytest.param(corrupt_sidecar, id="bad_sidecar"),
    pytest.param(corrupt_consistently, id="unloadable", marks=pytest.mark.slow),
    pytest.param(corrupt_stale, id="stale", marks=pytest.mark.slow),
    pytest.param(corrupt_fifo_sidecar, id="fifo_sidecar", marks=pytest.mark.slow)])
def test_a_bad_cache_entry_is_recompiled_and_rewritten(tmp_path, corrupt, caplog):
    onnx_model = block_model(batch=2)
    build(onnx_model, TVMDelegate("llvm", cache_dir=tmp_path))
    (library,) = cache_files(tmp_path)
    corrupt(library)
    delegate = TVMDelegate("llvm", cache_dir=tmp_path)
    with caplog.at_level("WARNING", logger="lite"):
        model = build(onnx_model, delegate)
    assert module_sources(model) == {"compiled": 1} and "recompiling" in caplog.text
    assert_matches(model, onnx_model, feeds_for(onnx_model))
    again = build(onnx_model, TVMDelegate("llvm", cache_dir=tmp_path))
    assert module_sources(again) == {"cache": 1}


def test_different_weights_get_different_cache_entries(tmp_path):
    build(block_model(batch=2), TVMDelegate("llvm", cache_dir=tmp_path))
    build(block_model(batch=2), TVMDelegate("llvm", cache_dir=tmp_path))  # new random weights
    assert len(cache_files(tmp_path)) == 2


def test_the_cache_is_off_with_none_or_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    from lite.delegates.tvm.cache import default_directory

    assert default_directory() == tmp_path / "xdg" / "delite" / "tvm"
    monkeypatch.setenv("DELITE_TVM_CACHE", str(tmp_path / "env"))
    assert default_directory() == tmp_path / "env"
    build(block_model(batch=2), TVMDelegate("llvm"))
    assert len(cache_files(tmp_path / "env")) == 1
    monkeypatch.setenv("DELITE_TVM_CACHE", "off")
    delegate = TVMDelegate("llvm", cache_dir=tmp_path / "explicit")
    build(block_model(batch=2), delegate)
    assert delegate.cache is None and not (tmp_path / "explicit").exists()


BUILD_SCRIPT = textwrap.dedent("""
    import json, sys, time
    import tvm  # NOTE: imported before timing: importing TVM (and torch, which it imports) is not the build
    import numpy as np, lite
    from lite.delegates.tvm import TVMDelegate, module_sources
    data, cache_dir, inputs = open(sys.argv[1], "rb").read(), sys.argv[2], np.load(sys.argv[3])
    delegate = TVMDelegate("llvm", cache_dir=cache_dir)
    start = time.perf_counter()
    model = lite.Model()
    model.build(data, lite.ModelType.LITE, lite.Context(thread_num=2, delegates=[delegate]))
    seconds = time.perf_counter() - start
    y = model.predict([inputs])[0].get_data_to_numpy()
    print(json.dumps({"seconds": seconds, "stats": dict(module_sources(model)), "timings": model.build_timings,
                      "y": y.tolist()}))
""")


def build_in_new_process(model_path: Path, cache_dir: Path, inputs_path: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "DELITE_TVM_CACHE"}
    done = subprocess.run([sys.executable, "-c", BUILD_SCRIPT, str(model_path), str(cache_dir), str(inputs_path)],
                          capture_output=True, text=True, env=env, cwd=REPO, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_a_build_in_a_new_process_loads_from_the_cache_in_under_20_percent_of_the_cold_build(tmp_path):
    onnx_model = zoo.resnet18(image_size=64)
    model_path, inputs_path = tmp_path / "resnet18.lite", tmp_path / "x.npy"
    convert(onnx_model, model_path)
    x = feeds_for(onnx_model)["input"]
    np.save(inputs_path, x)
    cold = build_in_new_process(model_path, tmp_path / "cache", inputs_path)
    warm = build_in_new_process(model_path, tmp_path / "cache", inputs_path)
    print(f"\nResNet-18 64 px: cold build {cold['seconds']:.2f} s, from the cache {warm['seconds']:.2f} s")
    assert cold["stats"] == {"compiled": 1} and warm["stats"] == {"cache": 1}
    assert warm["seconds"] < 0.2 * cold["seconds"]
    expected = run_onnxruntime(onnx_model, {"input": x})[0]
    for run in (cold, warm):
        assert relative_l2(np.array(run["y"], np.float32), expected) < RTOL


@pytest.mark.slow
def test_two_processes_filling_the_cache_at_once_both_succeed(tmp_path):
    model_path, inputs_path = tmp_path / "mixed.lite", tmp_path / "x.npy"
    onnx_model = mixed_model()
    convert(onnx_model, model_path)
    np.save(inputs_path, feeds_for(onnx_model)["x"])
    env = {k: v for k, v in os.environ.items() if k != "DELITE_TVM_CACHE"}
    args = [sys.executable, "-c", BUILD_SCRIPT, str(model_path), str(tmp_path / "cache"), str(inputs_path)]
    runs = [subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=REPO)
            for _ in range(2)]
    results = [run.communicate(timeout=600) for run in runs]
    assert [run.returncode for run in runs] == [0, 0], [err[-2000:] for _, err in results]
    outputs = [json.loads(out.strip().splitlines()[-1])["y"] for out, _ in results]
    assert outputs[0] == outputs[1]
    assert len(cache_files(tmp_path / "cache")) == 2 and not list((tmp_path / "cache").glob(".*.tmp.*"))
    assert build_in_new_process(model_path, tmp_path / "cache", inputs_path)["stats"] == {"cache": 2}


# ---- execution details ---------------------------------------------------------------------

def test_misaligned_inputs_are_copied_to_an_aligned_buffer():
    onnx_model = onnx_graph([node("Relu", ["x"], "r"), node("Exp", ["r"])], {"x": [3, 17]}, ["y"])
    delegate = tvm_delegate()
    model = build(onnx_model, delegate)
    (kernel,) = model.graph_kernels()
    (tensor,) = kernel.arguments
    from lite.aligned import aligned_array

    misaligned = aligned_array((3 * 17 + 1,), np.float32)[1:].reshape(3, 17)  # 4 bytes past a 64-byte boundary
    assert misaligned.ctypes.data % 64 == 4
    misaligned[...] = RNG.standard_normal((3, 17))
    tensor.data = misaligned
    argument = kernel._argument(tensor)
    assert np.from_dlpack(argument).ctypes.data % 64 == 0
    np.testing.assert_array_equal(np.from_dlpack(argument), misaligned)
    assert_matches(model, onnx_model, feeds_for(onnx_model))


def test_aligned_inputs_cross_without_a_copy():
    onnx_model = onnx_graph([node("Relu", ["x"])], {"x": [2, 16]}, ["y"])
    delegate = tvm_delegate()
    model = build(onnx_model, delegate)
    x = aligned_array((2, 16), np.float32)
    x[...] = feeds_for(onnx_model)["x"]
    model.predict([x])
    (kernel,) = model.graph_kernels()
    tensor = kernel.arguments[0]
    assert tensor.data.ctypes.data == x.ctypes.data  # lent, not copied: only graph kernels read it
    assert not kernel._staging  # predict ran it on read-only inputs (the runtime locks them): no copy either
    tensor.data.flags.writeable = False
    assert np.from_dlpack(kernel._argument(tensor)).ctypes.data == tensor.data.ctypes.data


def test_build_sets_tvm_threads_from_the_context(monkeypatch):
    monkeypatch.delenv("TVM_NUM_THREADS", raising=False)
    build(onnx_graph([node("Relu", ["x"])], {"x": [2, 3]}, ["y"]), tvm_delegate(), thread_num=3)
    assert os.environ["TVM_NUM_THREADS"] == str(capped_threads(3))


def test_dump_writes_the_relax_script_of_each_partition(tmp_path):
    model = build(mixed_model(), tvm_delegate())
    paths = [path for kernel in model.graph_kernels() for path in kernel.dump(tmp_path)]
    assert [p.name for p in paths] == ["tvm_0.relax.py", "tvm_1.relax.py"]
    scripts = "".join(p.read_text() for p in paths)
    assert "def main" in scripts and "R.nn.conv2d" in scripts and "R.nn.softmax" in scripts


@pytest.mark.slow
def test_per_call_overhead_is_small():
    """A 1x16 Relu: what a graph kernel adds to the VM call (DLPack in, copy out); a wall-clock bound,
    so not in the default run (a loaded machine may break it)."""
    import time

    onnx_model = onnx_graph([node("Relu", ["x"])], {"x": [1, 16]}, ["y"])
    delegate = tvm_delegate()
    model = build(onnx_model, delegate)
    model.predict([feeds_for(onnx_model)["x"]])
    (kernel,) = model.graph_kernels()
    runs = 2000
    start = time.perf_counter()
    for _ in range(runs):
        kernel.execute()
    per_call = (time.perf_counter() - start) / runs
    print(f"\nTVM graph kernel execute(): {per_call * 1e6:.1f} us per call")
    assert per_call < 500e-6


# ---- tuning ----------------------------------------------------------------------------------

def test_a_missing_tuning_database_is_an_input_error(tmp_path):
    with pytest.raises(lite.InputError, match="no MetaSchedule database"):
        TVMDelegate("llvm", tuning_db=tmp_path).init()


def test_a_tvm_ffi_known_to_segfault_on_databases_is_refused(monkeypatch, tmp_path):
    import importlib.metadata

    monkeypatch.setattr(importlib.metadata, "version", lambda name: "0.1.15.post2")
    for name in ("database_workload.json", "database_tuning_record.json"):
        (tmp_path / name).write_text("")
    with pytest.raises(lite.InputError, match="segfaults"):
        TVMDelegate("llvm", tuning_db=tmp_path).init()


def test_tuning_takes_the_tasks_that_carry_the_measured_time():
    from lite.delegates.tvm.tuning import Task, carrying, extract_tasks, measure_untuned, partition_modules, share_table

    onnx_model = conv_model((1, 16, 24, 24), (16, 16, 3, 3), {"pads": [1, 1, 1, 1]}, "Relu")
    delegate, modules = partition_modules(convert(onnx_model), "llvm")
    tasks = extract_tasks(modules, delegate.target)
    measure_untuned(tasks, delegate.target)
    assert tasks and all(t.seconds > 0 for t in tasks)
    [conv] = [t for t in tasks if "conv2d" in t.name]
    assert conv.cost == max(t.cost for t in tasks)  # the conv carries the time, not the pads or the relu
    assert carrying(tasks, 0.5) == [conv]
    synthetic = [Task("a", None, None, weight=1, seconds=0.6), Task("b", None, None, weight=3, seconds=0.1),
                 Task("c", None, None, weight=1, seconds=0.05), Task("d", None, None, weight=1, seconds=0.05)]
    assert [t.name for t in carrying(synthetic, 0.9)] == ["a", "b"]  # 0.6 + 0.3 of 1.0
    assert [t.name for t in carrying(synthetic, 0.92)] == ["a", "b", "c"]
    assert [t.name for t in carrying(synthetic, 1.0)] == ["a", "b", "c", "d"]
    table = share_table(synthetic, carrying(synthetic, 0.6))
    assert "60.0%  yes" in table and "30.0%  no" in table


@pytest.mark.slow
def test_lite_tune_writes_a_resumable_database_that_the_delegate_applies(tmp_path, capsys):
    pytest.importorskip("cloudpickle")
    pytest.importorskip("psutil")
    from lite.delegates.tvm.tuning import tune
    from lite.tools.tune import main

    onnx_model = conv_model((1, 8, 12, 12), (8, 8, 3, 3), {"pads": [1, 1, 1, 1]}, "Relu")
    model_path, db = tmp_path / "conv.lite", tmp_path / "db"
    convert(onnx_model, model_path)
    assert main([str(model_path), "--trials", "2", "--db", str(db), "--cost-model", "random", "--thread-num", "2",
                 "--quiet"]) == 0
    assert "tuning_db=" in capsys.readouterr().out
    again = tune(model_path.read_bytes(), db, 2, thread_num=2, cost_model="random", progress=False, log=lambda _: None)
    assert again.already_measured >= 2 and again.tuned_trials == 0  # resumed: nothing left to do
    delegate = TVMDelegate("llvm", cache_dir=tmp_path / "cache", tuning_db=db)
    model = build(onnx_model, delegate)
    (kernel,) = model.graph_kernels()
    assert not kernel.compiled.lowered.symbolic  # tuned kernels are per static shape
    assert_matches(model, onnx_model, feeds_for(onnx_model))
    untuned = build(onnx_model, TVMDelegate("llvm", cache_dir=tmp_path / "cache", symbolic_batch=False))
    assert module_sources(untuned) == {"compiled": 1}  # the database is part of the cache key


def test_a_failed_compilation_on_resize_falls_back_to_the_native_kernels(monkeypatch, caplog):
    from lite.delegates.tvm import kernel as tvm_kernel

    onnx_model = onnx_graph(block_model().graph.node, {"x": ["N", 3, "H", "W"]}, ["y"],
                            {i.name: numpy_helper.to_array(i) for i in block_model().graph.initializer})
    model = build(onnx_model, tvm_delegate(), input_shapes={"x": [2, 3, 16, 16]})

    def broken(*args, **kwargs):
        raise RuntimeError("no compiler today")

    monkeypatch.setattr(tvm_kernel, "compile_module", broken)
    with caplog.at_level("WARNING", logger="lite"):
        model.resize(model.get_inputs(), [[2, 3, 12, 20]])
    assert "running its 7 kernels natively" in caplog.text and model.graph_kernels() == []
    assert {r.runs_on for r in model.partition_report()} == {"native"}
    assert all("failed in resize()" in r.reason for r in model.partition_report())
    assert_matches(model, onnx_model, feeds_for(onnx_model, {"x": (2, 3, 12, 20)}))
    model.resize(model.get_inputs(), [[4, 3, 16, 16]])
    assert_matches(model, onnx_model, feeds_for(onnx_model, {"x": (4, 3, 16, 16)}))


def test_a_failed_compilation_on_resize_without_fallback_is_a_delegate_error(monkeypatch):
    from lite.delegates.tvm import kernel as tvm_kernel

    onnx_model = onnx_graph(block_model().graph.node, {"x": ["N", 3, "H", "W"]}, ["y"],
                            {i.name: numpy_helper.to_array(i) for i in block_model().graph.initializer})
    model = lite.Model()
    model.build(convert(onnx_model, input_shapes={"x": [2, 3, 16, 16]}), lite.ModelType.LITE,
                lite.Context(thread_num=1, fallback=False, delegates=[tvm_delegate()]))
    monkeypatch.setattr(tvm_kernel, "compile_module", lambda *args, **kwargs: 1 / 0)
    with pytest.raises(lite.DelegateError, match="TVMDelegate: graph kernel 'tvm_0' failed in resize"):
        model.resize(model.get_inputs(), [[2, 3, 12, 20]])
    assert model.get_inputs()[0].shape == (2, 3, 16, 16)  # the previous shapes stay in force
    assert_matches(model, onnx_model, feeds_for(onnx_model, {"x": (2, 3, 16, 16)}))
