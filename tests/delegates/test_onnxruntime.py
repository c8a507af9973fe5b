"""ORTDelegate against onnxruntime on the original ONNX: every emitter, whole models, resize, declining,
mixing with another delegate, and dumping the emitted partitions.

Each emitter case is a small ONNX model (one op, or a few) converted to .lite and built with
ORTDelegate (min_nodes_per_partition=1): every node must run on ORTDelegate and every output
match onnxruntime run directly on the original ONNX within relative L2 1e-5 (integer and bool
outputs exactly). Primitives no ONNX model converts to (Shape and ConstantOfShape are always
folded from shapes; MatMulFusion transposes only come from 2-D Gemm) are checked kernel by
kernel against the native kernel, the reference of every delegate.
"""

from __future__ import annotations

import importlib
import sys
import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import lite
from lite.delegates import load_delegate
from lite.delegates.example_npu import ExampleNPUDelegate
from lite.delegates.onnxruntime import ORTDelegate, ORTGraphKernel
from lite.delegates.onnxruntime.emitters.registry import REGISTRY, EmitterRegistry
from lite.threads import capped_threads
from lite.tools import zoo
from lite.tools.converter import convert, convert_to_graph
from lite.tools.inspector import main as inspect_main
from tests.support.oracle import run_onnxruntime
from tests.support.ort_delegate import (
    ORT,
    RNG,
    assert_matches,
    build,
    check_on_ort,
    integers,
    node,
    normal,
    onnx_model,
    outputs_of,
    positive,
    run_both,
    small_cnn,
    weight,
)
from tests.support.quantized import quantized_zoo

# ---- helpers -------------------------------------------------------------------------------

def emitted_ops(model: lite.Model) -> list[str]:
    return [n.op_type for k in model.graph_kernels() for n in k.onnx_model.graph.node]


# ---- every emitter, from ONNX models ---------------------------------------------------------

def conv_case(x_shape, w_shape, attrs, bias=True, activation=None, op="Conv"):
    inits = {"w": weight(*w_shape)}
    if bias:
        inits["b"] = normal(w_shape[1] * attrs.get("group", 1) if op == "ConvTranspose" else w_shape[0], scale=1)
    nodes = [node(op, ["x", *inits], "c" if activation else "y", **attrs)]
    if activation == "Relu":
        nodes.append(node("Relu", ["c"]))
    elif activation == "Clip":
        inits.update(lo=np.array(0, np.float32), hi=np.array(6, np.float32))
        nodes.append(node("Clip", ["c", "lo", "hi"]))
    return nodes, {"x": normal(*x_shape)}, inits


CASES = {  # name: (nodes, feeds, initializers[, opset])
    # conv
    "conv_3x3": conv_case((2, 4, 9, 9), (8, 4, 3, 3), {"pads": [1, 1, 1, 1]}),
    "conv_stride2_asymmetric_pads_relu": conv_case((1, 3, 11, 10), (6, 3, 3, 3),
                                                   {"strides": [2, 2], "pads": [0, 1, 1, 0]}, activation="Relu"),
    "conv_dilated_relu6": conv_case((1, 4, 12, 12), (4, 4, 3, 3), {"dilations": [2, 2]}, activation="Clip"),
    "conv_grouped_no_bias": conv_case((1, 8, 7, 7), (6, 4, 3, 3), {"group": 2, "pads": [1, 1, 1, 1]}, bias=False),
    "conv_depthwise": conv_case((2, 6, 8, 8), (6, 1, 3, 3), {"group": 6, "pads": [1, 1, 1, 1], "strides": [2, 2]}),
    "conv_same_upper": conv_case((1, 3, 10, 9), (4, 3, 3, 3), {"strides": [2, 2], "auto_pad": "SAME_UPPER"}),
    "conv_same_lower": conv_case((1, 3, 10, 9), (4, 3, 4, 4), {"auto_pad": "SAME_LOWER"}),
    "conv_valid": conv_case((1, 3, 10, 9), (4, 3, 3, 2), {"auto_pad": "VALID"}),
    "conv_transpose_stride2": conv_case((1, 4, 5, 6), (4, 3, 3, 3), {"strides": [2, 2]}, op="ConvTranspose"),
    "conv_transpose_pads_output_padding_relu": conv_case(
        (2, 4, 5, 5), (4, 3, 3, 3), {"strides": [2, 2], "pads": [1, 1, 1, 1], "output_padding": [1, 1]},
        activation="Relu", op="ConvTranspose"),
    "conv_transpose_grouped_dilated": conv_case((1, 4, 6, 5), (4, 2, 3, 3), {"group": 2, "dilations": [2, 1]},
                                                op="ConvTranspose"),
    "conv_transpose_output_shape": conv_case((1, 3, 4, 4), (3, 2, 3, 3), {"strides": [2, 2], "output_shape": [8, 8]},
                                             op="ConvTranspose"),
    "conv_transpose_same_upper_relu6": conv_case((1, 3, 4, 5), (3, 2, 3, 3),
                                                 {"strides": [2, 2], "auto_pad": "SAME_UPPER"},
                                                 activation="Clip", op="ConvTranspose"),
    # matmul
    "matmul_2d": ([node("MatMul", ["x", "w"])], {"x": normal(5, 8)}, {"w": weight(8, 3)}),
    "matmul_batched_3d_by_2d": ([node("MatMul", ["x", "w"])], {"x": normal(2, 5, 8)}, {"w": weight(8, 3)}),
    "matmul_4d_by_4d": ([node("MatMul", ["x", "z"])], {"x": normal(2, 3, 4, 5), "z": normal(1, 3, 5, 2)}, {}),
    "matmul_vector": ([node("MatMul", ["x", "w"])], {"x": normal(8)}, {"w": weight(2, 8, 3)}),
    "gemm_trans_b_bias_relu": ([node("Gemm", ["x", "w", "b"], "g", transB=1), node("Relu", ["g"])],
                               {"x": normal(4, 8)}, {"w": weight(6, 8), "b": normal(6)}),
    "gemm_trans_a_alpha_beta": ([node("Gemm", ["x", "w", "b"], transA=1, alpha=0.5, beta=2.0)],
                                {"x": normal(8, 4)}, {"w": weight(8, 6), "b": normal(1, 6)}),
    "gemm_computed_operands": ([node("Gemm", ["x", "z"], transA=1, transB=1)], {"x": normal(3, 4), "z": normal(5, 3)},
                               {}),
    # element-wise
    "add_broadcast_relu": ([node("Add", ["x", "z"], "s"), node("Relu", ["s"])],
                           {"x": normal(2, 3, 4, 5), "z": normal(3, 1, 5)}, {}),
    "sub_const": ([node("Sub", ["x", "c"])], {"x": normal(2, 6)}, {"c": normal(6)}),
    "mul_relu6": ([node("Mul", ["x", "z"], "m"), node("Clip", ["m", "lo", "hi"])],
                  {"x": normal(3, 4), "z": normal(3, 4)}, {"lo": np.float32(0), "hi": np.float32(6)}),
    "div": ([node("Div", ["x", "z"])], {"x": normal(4, 5), "z": positive(4, 5)}, {}),
    "div_int64_truncates": ([node("Div", ["x", "z"])], {"x": integers(4, 5), "z": integers(4, 5, low=1)}, {}),
    "add_int32": ([node("Add", ["x", "z"])], {"x": integers(6, dtype=np.int32), "z": integers(6, dtype=np.int32)},
                  {}),
    "sum_of_three": ([node("Sum", ["x", "z", "x"])], {"x": normal(2, 3), "z": normal(1, 3)}, {}),
    "max_min": ([node("Max", ["x", "z", "c"], "m"), node("Min", ["m", "x"])],
                {"x": normal(2, 3), "z": normal(2, 3)}, {"c": normal(3)}),
    "pow": ([node("Pow", ["x", "e"])], {"x": positive(3, 4)}, {"e": np.array([0.5, 2, -1, 3], np.float32)}),
    "compare_where": ([node("Less", ["x", "z"], "lt"), node("Greater", ["x", "z"], "gt"),
                       node("Where", ["lt", "x", "z"], "y")], {"x": normal(3, 4), "z": normal(3, 4)}, {}),
    "equal_int64": ([node("Equal", ["x", "z"])], {"x": integers(20, low=0, high=3), "z": integers(20, low=0, high=3)},
                    {}),
    "exp_log_sqrt": ([node("Exp", ["x"], "e"), node("Log", ["p"], "l"), node("Sqrt", ["p"], "s"),
                      node("Add", ["e", "l"], "a"), node("Add", ["a", "s"])],
                     {"x": normal(3, 4, scale=1), "p": positive(3, 4)}, {}),
    "neg_abs_erf": ([node("Neg", ["x"], "n"), node("Abs", ["n"], "a"), node("Erf", ["a"])], {"x": normal(2, 7)}, {}),
    # activation
    "relu": ([node("Relu", ["x"])], {"x": normal(2, 3, 4)}, {}),
    "clip_relu6": ([node("Clip", ["x", "lo", "hi"])], {"x": normal(2, 9)}, {"lo": np.float32(0), "hi": np.float32(6)}),
    "clip": ([node("Clip", ["x", "lo", "hi"])], {"x": normal(2, 9)}, {"lo": np.float32(-0.5), "hi": np.float32(0.75)}),
    "clip_min_only": ([node("Clip", ["x", "lo"])], {"x": normal(2, 9)}, {"lo": np.float32(-1.5)}),
    "leaky_relu": ([node("LeakyRelu", ["x"], alpha=0.1)], {"x": normal(3, 5)}, {}),
    "leaky_relu_alpha_above_1": ([node("LeakyRelu", ["x"], alpha=1.5)], {"x": normal(3, 5)}, {}),
    "sigmoid": ([node("Sigmoid", ["x"])], {"x": normal(3, 5)}, {}),
    "tanh": ([node("Tanh", ["x"])], {"x": normal(3, 5)}, {}),
    "hard_sigmoid": ([node("HardSigmoid", ["x"], alpha=0.3, beta=0.4)], {"x": normal(3, 5)}, {}),
    "hard_swish": ([node("HardSwish", ["x"])], {"x": normal(3, 5)}, {}),
    # pool
    "max_pool_3x3_s2_p1": ([node("MaxPool", ["x"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])],
                           {"x": normal(2, 3, 11, 9)}, {}),
    "max_pool_ceil": ([node("MaxPool", ["x"], kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)],
                      {"x": normal(1, 3, 12, 10)}, {}),
    "max_pool_dilated": ([node("MaxPool", ["x"], kernel_shape=[2, 2], dilations=[2, 2])], {"x": normal(1, 2, 9, 9)},
                         {}),
    "max_pool_same_upper": ([node("MaxPool", ["x"], kernel_shape=[3, 3], strides=[2, 2], auto_pad="SAME_UPPER")],
                            {"x": normal(1, 2, 9, 8)}, {}),
    "avg_pool_include_pad": ([node("AveragePool", ["x"], kernel_shape=[3, 3], pads=[1, 1, 1, 1],
                                   count_include_pad=1)], {"x": normal(1, 3, 7, 6)}, {}),
    "avg_pool_exclude_pad_ceil": ([node("AveragePool", ["x"], kernel_shape=[3, 2], strides=[2, 2], pads=[1, 0, 1, 1],
                                        ceil_mode=1)], {"x": normal(2, 3, 8, 7)}, {}),
    "global_average_pool": ([node("GlobalAveragePool", ["x"])], {"x": normal(2, 5, 6, 7)}, {}),
    "global_max_pool": ([node("GlobalMaxPool", ["x"])], {"x": normal(2, 5, 6, 7)}, {}),
    # norm
    "batch_norm": ([node("BatchNormalization", ["x", "g", "b", "m", "v"], epsilon=1e-3)], {"x": normal(2, 4, 3, 3)},
                   {"g": normal(4), "b": normal(4), "m": normal(4), "v": positive(4)}),
    "lrn": ([node("LRN", ["x"], size=3, alpha=1e-3, beta=0.6, bias=1.5)], {"x": normal(2, 6, 4, 4)}, {}),
    "attention": ([node("Transpose", ["x"], "kt", perm=[0, 2, 1]), node("MatMul", ["x", "kt"], "s"),
                   node("Div", ["s", "scale"], "d"), node("Add", ["d", "mask"], "a"),
                   node("Softmax", ["a"], "p", axis=-1), node("MatMul", ["p", "x"])],
                  {"x": normal(2, 6, 8, scale=1.0)}, {"scale": np.array(2.0, np.float32), "mask": weight(6, 6)}),
    "attention_zeroing_nan_weights": (  # the dynamo exporter's spelling; the mask's row 3 is -inf
        [node("Transpose", ["x"], "kt", perm=[0, 2, 1]), node("MatMul", ["x", "kt"], "s"),
         node("Add", ["s", "mask"], "a"), node("Softmax", ["a"], "p", axis=-1), node("IsNaN", ["p"], "nan"),
         node("Where", ["nan", "zero", "p"], "w"), node("MatMul", ["w", "x"])],
        {"x": normal(2, 6, 8, scale=1.0)},
        {"mask": np.where(np.arange(6)[:, None] == 3, -np.inf, weight(6, 6)).astype(np.float32),
         "zero": np.array(0.0, np.float32)}),
    "instance_norm": ([node("InstanceNormalization", ["x", "s", "b"], epsilon=1e-3)], {"x": normal(2, 3, 4, 5)},
                      {"s": weight(3), "b": weight(3)}),
    "group_norm": ([node("GroupNormalization", ["x", "s", "b"], num_groups=2)], {"x": normal(2, 6, 5)},
                   {"s": weight(6), "b": weight(6)}, 21),
    "layer_norm": ([node("LayerNormalization", ["x", "s", "b"], axis=1, epsilon=1e-3)], {"x": normal(2, 5, 8)},
                   {"s": weight(5, 8), "b": weight(5, 8)}),
    "layer_norm_stats": ([helper.make_node("LayerNormalization", ["x", "s"], ["y", "m", "i"])],
                         {"x": normal(3, 16)}, {"s": weight(16)}),
    # reduce
    "reduce_l2_logsumexp": ([node("ReduceL2", ["x"], "l2", axes=[1]), node("ReduceLogSumExp", ["x"], "lse", axes=[2]),
                             node("ReduceL1", ["x"], "l1", keepdims=0), node("ReduceSumSquare", ["x"], "sq", axes=[0])],
                            {"x": normal(2, 3, 4)}, {}),
    "reduce_log_sum": ([node("ReduceLogSum", ["x"], axes=[1])], {"x": positive(2, 3, 4)}, {}),
    "reduce_mean_keepdims": ([node("ReduceMean", ["x"], axes=[2, 3])], {"x": normal(2, 3, 4, 5)}, {}),
    "reduce_max_no_keepdims": ([node("ReduceMax", ["x"], axes=[1], keepdims=0)], {"x": normal(2, 3, 4)}, {}),
    "reduce_min_prod_every_axis": ([node("ReduceMin", ["x"], "m"), node("ReduceProd", ["x"], "p"),
                                    node("Add", ["m", "p"])], {"x": positive(2, 3)}, {}),
    "reduce_sum_axes_input": ([node("ReduceSum", ["x", "a"], keepdims=0)], {"x": normal(2, 3, 4)},
                              {"a": np.array([0, -1], np.int64)}),
    "reduce_sum_noop_with_empty_axes": ([node("ReduceSum", ["x"], "r", noop_with_empty_axes=1), node("Neg", ["r"])],
                                        {"x": normal(2, 3)}, {}),
    "softmax_last_axis": ([node("Softmax", ["x"])], {"x": normal(2, 3, 5)}, {}),
    "log_softmax_axis_1": ([node("LogSoftmax", ["x"], axis=1)], {"x": normal(2, 3, 5)}, {}),
    "softmax_opset11_several_axes": ([node("Softmax", ["x"], axis=1)], {"x": normal(2, 3, 4, 5)}, {}, 11),
    "log_softmax_opset11_several_axes": ([node("LogSoftmax", ["x"], axis=-2)], {"x": normal(2, 3, 4, 5)}, {}, 11),
    # shape
    "concat": ([node("Concat", ["x", "z", "x"], axis=1)], {"x": normal(2, 3, 4), "z": normal(2, 1, 4)}, {}),
    "reshape_copy_and_infer": ([node("Reshape", ["x", "s"])], {"x": normal(2, 3, 4)},
                               {"s": np.array([0, -1], np.int64)}),
    "flatten_axis_2": ([node("Flatten", ["x"], axis=2)], {"x": normal(2, 3, 4, 5)}, {}),
    "transpose_perm": ([node("Transpose", ["x"], perm=[0, 2, 3, 1])], {"x": normal(2, 3, 4, 5)}, {}),
    "transpose_reverse": ([node("Transpose", ["x"])], {"x": normal(2, 3, 4)}, {}),
    "squeeze_unsqueeze": ([node("Squeeze", ["x", "a"], "s"), node("Unsqueeze", ["s", "b"])], {"x": normal(2, 1, 3, 1)},
                          {"a": np.array([1], np.int64), "b": np.array([0, 3], np.int64)}),
    "squeeze_every_unit_dim": ([node("Squeeze", ["x"])], {"x": normal(1, 3, 1, 4)}, {}),
    "pad_constant_value": ([node("Pad", ["x", "p", "v"])], {"x": normal(2, 3, 4)},
                           {"p": np.array([0, 1, 2, 0, 2, -1], np.int64), "v": np.float32(1.5)}),
    "pad_reflect": ([node("Pad", ["x", "p"], mode="reflect")], {"x": normal(1, 2, 5, 6)},
                    {"p": np.array([0, 0, 2, 1, 0, 0, 1, 3], np.int64)}),
    "pad_edge": ([node("Pad", ["x", "p"], mode="edge")], {"x": normal(1, 2, 3, 4)},
                 {"p": np.array([0, 0, 1, 2, 0, 0, 3, 1], np.int64)}),
    "slice_steps_and_negative_bounds": ([node("Slice", ["x", "s", "e", "a", "t"])], {"x": normal(2, 3, 8, 9)},
                                        {"s": np.array([1, -1], np.int64), "e": np.array([7, -100], np.int64),
                                         "a": np.array([2, 3], np.int64), "t": np.array([2, -2], np.int64)}),
    "split_sizes": ([helper.make_node("Split", ["x", "s"], ["y", "z"], name="split", axis=1)], {"x": normal(2, 5, 3)},
                    {"s": np.array([2, 3], np.int64)}),
    "split_equal": ([helper.make_node("Split", ["x"], ["y", "z", "w"], name="split", axis=-1)],
                    {"x": normal(2, 3, 6)}, {}),
    "split_uneven_opset18": ([helper.make_node("Split", ["x"], ["y", "z", "w"], name="split", axis=1, num_outputs=3)],
                             {"x": normal(2, 8)}, {}, 18),
    "gather": ([node("Gather", ["x", "i"], axis=1)], {"x": normal(2, 5, 3)}, {"i": np.array([[4, 0], [-1, 2]])}),
    "gather_computed_indices": ([node("Gather", ["x", "i"])], {"x": normal(6, 3), "i": integers(4, low=-6, high=6)},
                                {}),
    "expand": ([node("Expand", ["x", "s"])], {"x": normal(3, 1)}, {"s": np.array([2, 3, 4], np.int64)}),
    "cast_to_int32": ([node("Cast", ["x"], to=TensorProto.INT32)], {"x": normal(3, 4)}, {}),
    "cast_int64_to_float": ([node("Cast", ["x"], "c", to=TensorProto.FLOAT), node("Relu", ["c"])],
                            {"x": integers(3, 4)}, {}),
    "identity_of_an_input": ([node("Identity", ["x"])], {"x": normal(3, 4)}, {}),
    # resize
    "resize_nearest_scales": ([node("Resize", ["x", "", "s"], mode="nearest", nearest_mode="floor",
                                    coordinate_transformation_mode="asymmetric")], {"x": normal(1, 2, 4, 5)},
                              {"s": np.array([1, 1, 2, 1.5], np.float32)}),
    "resize_nearest_round_prefer_ceil_align_corners": (
        [node("Resize", ["x", "", "s"], mode="nearest", coordinate_transformation_mode="align_corners",
              nearest_mode="round_prefer_ceil")], {"x": normal(1, 2, 4, 5)},
        {"s": np.array([1, 1, 1.75, 0.6], np.float32)}),
    "resize_linear_sizes_half_pixel": ([node("Resize", ["x", "", "", "z"], mode="linear")], {"x": normal(2, 3, 4, 6)},
                                       {"z": np.array([2, 3, 7, 4], np.int64)}),
    "resize_linear_pytorch_half_pixel": ([node("Resize", ["x", "", "s"], mode="linear",
                                               coordinate_transformation_mode="pytorch_half_pixel")],
                                         {"x": normal(1, 2, 5, 5)}, {"s": np.array([1, 1, 2, 2], np.float32)}),
    "upsample_opset9": ([node("Upsample", ["x", "s"])], {"x": normal(1, 2, 3, 4)},
                        {"s": np.array([1, 1, 2, 3], np.float32)}, 9),
}


@pytest.mark.parametrize("case", list(CASES))
def test_emitter_round_trip(case):
    nodes, feeds, inits, *opset = CASES[case]
    check_on_ort(onnx_model(nodes, feeds, outputs_of(nodes), inits, *opset), feeds)


def test_fused_activations_are_real_onnx_nodes():
    nodes, feeds, inits = CASES["conv_dilated_relu6"]
    model = check_on_ort(onnx_model(nodes, feeds, inits=inits), feeds)
    assert [r.op_type for r in model.partition_report()] == ["Conv2DFusion"]  # fused in the .lite model
    assert emitted_ops(model) == ["Conv", "Clip"]
    nodes, feeds, inits = CASES["gemm_trans_b_bias_relu"]
    model = check_on_ort(onnx_model(nodes, feeds, inits=inits), feeds)
    assert emitted_ops(model) == ["Gemm", "Relu"]


def test_several_axes_softmax_is_decomposed():
    nodes, feeds, inits, opset = CASES["softmax_opset11_several_axes"]
    model = check_on_ort(onnx_model(nodes, feeds, inits=inits, opset=opset), feeds)
    assert emitted_ops(model) == ["ReduceMax", "Sub", "Exp", "ReduceSum", "Div"]


# ---- primitives no ONNX model converts to: against the native kernel ---------------------------

@pytest.mark.parametrize("transpose_a", [False, True])
@pytest.mark.parametrize("transpose_b", [False, True])
def test_matmul_fusion_transposes_bias_and_activation_beyond_2d(transpose_a, transpose_b):
    a = normal(2, 5, 4) if transpose_a else normal(2, 4, 5)
    b = normal(1, 3, 5) if transpose_b else normal(1, 5, 3)
    attrs = {"transpose_a": transpose_a, "transpose_b": transpose_b, "activation_type": "RELU6"}
    run_both("MatMulFusion", attrs, [a, b, normal(3)], consts={1})


@pytest.mark.parametrize("start, end", [(0, 2**63 - 1), (1, 3), (-2, 2**63 - 1)])
def test_shape(start, end):
    run_both("Shape", {"start": start, "end": end}, [normal(2, 3, 4, 5)])


@pytest.mark.parametrize("data_type, value", [("FLOAT32", 1.5), ("INT64", 7.0), ("BOOL", 1.0)])
def test_constant_of_shape(data_type, value):
    run_both("ConstantOfShape", {"data_type": data_type, "value": value}, [np.array([2, 3], np.int64)])


def test_softmax_over_axes_that_are_not_contiguous():
    run_both("Softmax", {"axis": [0, 2]}, [normal(3, 4, 5)])
    run_both("LogSoftmax", {"axis": [-1, 1]}, [normal(3, 4, 5)])


def test_split_into_equal_parts_with_a_smaller_last_one():
    run_both("Split", {"axis": 1, "size_splits": []}, [normal(2, 7)], n_outputs=3)


# ---- what stays native, and why ------------------------------------------------------------

def test_dtypes_onnxruntime_lacks_stay_native_with_a_reason():
    x = RNG.standard_normal((3, 4))
    model = build(onnx_model([node("Erf", ["x"])], {"x": x}), ORTDelegate())
    (row,) = model.partition_report()
    assert row.runs_on == "native"
    assert row.reason == f"{ORT}: Erf on float64: emitted for float32 inputs only"


@pytest.mark.parametrize("to, name", [(TensorProto.FLOAT8E4M3FN, "float8_e4m3fn"), (TensorProto.INT4, "int4"),
                                      (TensorProto.BFLOAT16, "bfloat16")])
def test_casts_to_ml_dtypes_stay_native_with_a_reason(to, name):
    """onnxruntime's Python binding makes no OrtValue from an ml_dtypes array, so the graph kernel could not run."""
    x = normal(3, 4)
    model = build(onnx_model([node("Cast", ["x"], to=to)], {"x": x}), ORTDelegate())
    (row,) = model.partition_report()
    assert row.runs_on == "native"
    assert row.reason == f"{ORT}: Cast: onnxruntime's Python binding makes no OrtValue from a {name} array"
    assert model.predict([x])[0].get_data_to_numpy().dtype.name == name


def test_ops_option_leaves_the_rest_native():
    nodes, feeds, inits = CASES["gemm_trans_b_bias_relu"]
    original = onnx_model(nodes + [node("Softmax", ["y"], "p")], feeds, ["p"], inits)
    model = build(original, ORTDelegate(ops={"Softmax"}))
    rows = {r.op_type: r for r in model.partition_report()}
    assert rows["Softmax"].runs_on == ORT
    assert rows["MatMulFusion"].reason == f"{ORT}: MatMulFusion: left out by ORTDelegate(ops=...)"
    assert_matches(model, original, feeds)
    with pytest.raises(lite.InputError, match="no emitter for \\['FullConnection'\\]"):
        ORTDelegate(ops={"FullConnection"})


def test_registering_a_primitive_twice_raises():
    registry = EmitterRegistry()
    registry.emitter("Relu")(lambda ctx: None)
    with pytest.raises(ValueError, match="Relu already has an emitter"):
        registry.emitter("Relu")(lambda ctx: None)


def family_cases() -> dict[str, tuple]:
    """CASES here and in every tests/delegates/test_onnxruntime_<family>.py (same format)."""
    cases = dict(CASES)
    for path in sorted(Path(__file__).parent.glob("test_onnxruntime_*.py")):
        cases.update(importlib.import_module(f"tests.delegates.{path.stem}").CASES)
    return cases


def test_every_emitter_has_a_round_trip_case():
    """Each emitter is exercised by a CASES table (a delegate need not cover every primitive of the schema)."""
    covered = set()
    for nodes, feeds, inits, *opset in family_cases().values():
        graph, _ = convert_to_graph(onnx_model(nodes, feeds, outputs_of(nodes), inits, *opset))
        covered.update(n.op_type for n in graph.nodes)
    tested_apart = {"Shape": test_shape, "ConstantOfShape": test_constant_of_shape}  # CASES would fold them
    assert set(REGISTRY.supported_types()) - covered == set(tested_apart)


# ---- declining ----------------------------------------------------------------------------

@pytest.mark.parametrize("delegate", [ORTDelegate(providers=["NoSuchExecutionProvider"]),
                                      ORTDelegate(providers="NoSuchExecutionProvider, AlsoMissingProvider")])
def test_unknown_providers_decline_and_the_model_runs_natively(delegate, caplog):
    original = small_cnn(batch=2)
    with caplog.at_level("INFO", logger="lite"):
        model = build(original, delegate)
    assert {r.runs_on for r in model.partition_report()} == {"native"}
    assert "none of the providers ['NoSuchExecutionProvider'" in caplog.text
    assert_matches(model, original, {"x": normal(2, 3, 12, 12)})


def test_declines_when_onnxruntime_cannot_be_imported(monkeypatch):
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # import onnxruntime raises ImportError
    with pytest.raises(lite.MissingPackageError, match=r'ORTDelegate needs onnxruntime.*pip install "delite\[ort\]"'):
        ORTDelegate().init()


def test_available_providers_are_kept_in_order():
    delegate = ORTDelegate(providers=["NoSuchExecutionProvider", "CPUExecutionProvider"])
    model = build(small_cnn(batch=1), delegate)
    assert model.graph_kernels()[0].session.get_providers() == ["CPUExecutionProvider"]


# ---- the graph kernel: threads, IO binding, resize, weights ------------------------------------

def test_one_session_with_the_context_threads_and_outputs_written_in_place():
    original = small_cnn(batch=2)
    model = lite.Model()
    model.build(convert(original), lite.ModelType.LITE, lite.Context(thread_num=3, delegates=[ORTDelegate()]))
    (kernel,) = model.graph_kernels()
    assert isinstance(kernel, ORTGraphKernel) and kernel.name == "onnxruntime_0"
    assert kernel.session.get_session_options().intra_op_num_threads == capped_threads(3)
    feeds = {"x": normal(2, 3, 12, 12)}
    assert_matches(model, original, feeds)
    (bound,) = kernel._binding.get_outputs()
    assert bound.data_ptr() == model.get_outputs()[0].data.ctypes.data  # onnxruntime wrote the runtime's array
    conv = next(k for k in kernel.kernels if k.type == "Conv2DFusion")
    assert conv.inputs[1].data is None  # the model released its weights: the ONNX initializers hold them


def test_session_options_are_used():
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    model = build(small_cnn(batch=1), ORTDelegate(session_options=options))
    session = model.graph_kernels()[0].session
    assert session.get_session_options().graph_optimization_level == ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    assert session.get_session_options().intra_op_num_threads == 1  # left at 0: the Context's thread_num


def spinning_entry(session) -> str | None:
    try:
        return session.get_session_options().get_session_config_entry("session.force_spinning_stop")
    except RuntimeError:  # NOTE: never set
        return None


@pytest.mark.parametrize("ops, options, expected", [
    (None, None, None),            # every kernel delegated: the threads spin between runs, as onnxruntime's do
    ({"Softmax"}, None, "1"),      # native kernels too: they stop when a run returns
    ({"Softmax"}, "0", "0"),       # the user's options decide
    ({"Softmax"}, "", "1"),        # ...where they set it
])
def test_sessions_stop_spinning_between_runs_where_native_kernels_run_too(ops, options, expected):
    """onnxruntime's threads spin after a run on the cores the native kernels after a partition
    need: a model with native kernels between partitions stalled on them at two threads."""
    nodes, feeds, inits = CASES["gemm_trans_b_bias_relu"]
    original = onnx_model(nodes + [node("Softmax", ["y"], "p")], feeds, ["p"], inits)
    session_options = None
    if options is not None:
        session_options = ort.SessionOptions()
        if options:
            session_options.add_session_config_entry("session.force_spinning_stop", options)
    model = build(original, ORTDelegate(ops=ops, session_options=session_options))
    assert {r.runs_on for r in model.partition_report()} == ({ORT} if ops is None else {ORT, "native"})
    assert spinning_entry(model.graph_kernels()[0].session) == expected
    assert_matches(model, original, feeds)


@pytest.mark.parametrize("batch", [-1, 1], ids=["dynamic", "static"])
def test_resize_of_the_batch_reuses_the_session_and_other_dims_make_a_new_one(batch):
    original = small_cnn("N", "H", "W")
    model = build(original, ORTDelegate(), input_shapes={"x": [batch, 3, 12, 12]})
    (kernel,) = model.graph_kernels()
    session = kernel.session
    for shape in ([1, 3, 12, 12], [4, 3, 12, 12], [2, 3, 12, 12]):
        model.resize(model.get_inputs(), [shape])
        assert_matches(model, original, {"x": normal(*shape)})
        assert kernel.session is session
    if batch == -1:  # a new batch size given to predict resizes implicitly
        assert_matches(model, original, {"x": normal(5, 3, 12, 12)})
        assert kernel.session is session
    model.resize(model.get_inputs(), [[3, 3, 16, 10]])
    assert_matches(model, original, {"x": normal(3, 3, 16, 10)})
    assert kernel.session is not session
    assert kernel.onnx_model.graph.input[0].type.tensor_type.shape.dim[2].dim_value == 16


def test_a_graph_specialized_to_its_dims_is_emitted_again_for_new_ones():
    split = helper.make_node("Split", ["x"], ["y", "z"], name="split", axis=0, num_outputs=2)
    original = onnx_model([split, node("Relu", ["z"], "r")], {"x": normal(3, 4)}, ["y", "r"], opset=18,
                          dims={"x": ["N", 4]})
    model = build(original, ORTDelegate())
    (kernel,) = model.graph_kernels()
    sessions = set()
    for batch in (3, 4, 4, 5):
        assert_matches(model, original, {"x": normal(batch, 4)})
        sessions.add(kernel.session)
    assert len(sessions) == 3


def test_a_failing_session_falls_back_to_native_kernels(caplog):
    class Broken(ORTDelegate):
        def create_graph_kernel(self, kernels, inputs, outputs, model):
            kernel = super().create_graph_kernel(kernels, inputs, outputs, model)
            kernel.onnx_model.graph.node[0].op_type = "NoSuchOp"
            return kernel

    original = small_cnn(batch=1)
    model = build(original, Broken())
    assert {r.runs_on for r in model.partition_report()} == {"native"} and model.graph_kernels() == []
    assert "failed in prepare()" in caplog.text
    assert_matches(model, original, {"x": normal(1, 3, 12, 12)})



# ---- inputs: the caller's array lent to the graph kernel, not copied ---------------------------------

def test_an_input_only_the_graph_kernel_reads_is_lent_not_copied():
    original = small_cnn(batch=1)
    model = build(original, ORTDelegate())
    (tensor,) = model.get_inputs()
    for _ in range(2):  # a new array each time: the kernel binds it again
        x = normal(1, 3, 12, 12)
        before = x.copy()
        [y] = model.predict({"x": x})
        assert np.shares_memory(tensor.data, x) and not tensor.data.flags.writeable
        np.testing.assert_array_equal(x, before)
        np.testing.assert_allclose(y.data, run_onnxruntime(original, {"x": x})[0], rtol=1e-4, atol=1e-6)
    x[...] = normal(1, 3, 12, 12)  # the lent array, changed in place, is what predict(None) reads
    np.testing.assert_allclose(model.predict()[0].data, run_onnxruntime(original, {"x": x})[0], rtol=1e-4, atol=1e-6)
    strided = normal(1, 3, 12, 24)[..., ::2]  # not contiguous: copied
    [y] = model.predict([strided])
    assert not np.shares_memory(tensor.data, strided) and tensor.data.flags.writeable
    np.testing.assert_allclose(y.data, run_onnxruntime(original, {"x": np.ascontiguousarray(strided)})[0],
                               rtol=1e-4, atol=1e-6)


def test_strided_views_bound_as_input_and_output_are_read_and_written_at_every_run():
    """A generator binds views of one buffer: the past input is its first positions, the present output all of it."""
    original = small_cnn(batch=1)
    model = build(original, ORTDelegate())
    (tensor,), (out,) = model.get_inputs(), model.get_outputs()
    model.predict({"x": normal(1, 3, 12, 12)})
    source = np.zeros((1, 3, 12, 24), np.float32)
    target = np.zeros((2, *out.shape), np.float32)
    tensor.data, out.data = source[..., ::2], target[1]  # a strided input, and an output inside a larger buffer
    for _ in range(2):  # changed in place between runs: read again each time
        source[...] = normal(1, 3, 12, 24)
        model.predict(None, output_names=[])
        expected = run_onnxruntime(original, {"x": np.ascontiguousarray(source[..., ::2])})[0]
        np.testing.assert_allclose(target[1], expected, rtol=1e-4, atol=1e-6)
    strided_out = np.zeros((*out.shape[:-1], 2 * out.shape[-1]), np.float32)
    out.data = strided_out[..., ::2]
    model.predict(None, output_names=[])
    np.testing.assert_allclose(strided_out[..., ::2], expected, rtol=1e-4, atol=1e-6)
    assert not strided_out[..., 1::2].any()


def test_an_input_a_native_kernel_reads_is_copied():
    original = small_cnn(batch=1)
    model = build(original, ORTDelegate(ops=["Softmax"]))
    assert model.graph_kernels() and model.partition_report()[0].runs_on == "native"
    x = normal(1, 3, 12, 12)
    assert_matches(model, original, {"x": x})
    (tensor,) = model.get_inputs()
    assert not np.shares_memory(tensor.data, x) and tensor.data.flags.writeable


def test_a_lent_input_is_copied_when_its_graph_kernel_falls_back():
    class FailsInResize(ORTDelegate):
        def create_graph_kernel(self, kernels, inputs, outputs, model):
            kernel = super().create_graph_kernel(kernels, inputs, outputs, model)
            kernel.resize = lambda: (_ for _ in ()).throw(RuntimeError("resize refused"))
            return kernel

    original = onnx_model([node("Relu", ["x"], "r"), node("Add", ["r", "s"])], {"x": normal(2, 4), "s": normal(1, 4)})
    model = build(original, FailsInResize())
    x, s = normal(2, 4), normal(1, 4)
    model.predict({"x": x, "s": s})
    inputs = model.get_inputs()
    assert np.shares_memory(inputs[0].data, x)
    model.resize([inputs[1]], [[2, 4]])  # the graph kernel refuses: its native kernels read x now
    assert model.graph_kernels() == []
    assert not np.shares_memory(inputs[0].data, x) and inputs[0].data.flags.writeable
    s2 = normal(2, 4)
    [y] = model.predict([inputs[0], s2])
    np.testing.assert_allclose(y.data, np.maximum(x, 0) + s2, rtol=1e-6)


def test_weight_dequantizations_come_first_in_the_emitted_graph():
    """As onnxruntime's quantizer writes them: onnxruntime then runs each one beside its Conv."""
    original = quantized_zoo("mobilenet_v2", "qdq")[1]
    model = build(original, ORTDelegate())
    (kernel,) = model.graph_kernels()
    initializers = {t.name for t in kernel.onnx_model.graph.initializer}
    reads_constants = [all(n in initializers or not n for n in node.input) for node in kernel.onnx_model.graph.node]
    assert sum(reads_constants) > 50
    assert reads_constants == sorted(reads_constants, reverse=True)  # all of them before any other node

# ---- memory: Context.memory_limit counts what onnxruntime allocates ----------------------------------

WIDE_BATCH, WIDE_LIMIT = 65_536, 48 << 20  # NOTE: x is 16 MiB and each hidden tensor 32 MiB at that batch


def wide_model() -> onnx.ModelProto:
    """x [N, 64] -> MatMul -> h [N, 128] -> h * h -> MatMul -> y [N, 1]: two hidden tensors alive at once."""
    nodes = [node("MatMul", ["x", "w1"], "h"), node("Mul", ["h", "h"], "h2"), node("MatMul", ["h2", "w2"])]
    return onnx_model(nodes, {"x": normal(2, 64)}, inits={"w1": weight(64, 128), "w2": weight(128, 1)},
                      dims={"x": ["N", 64]})


def build_within(original: onnx.ModelProto, limit: int, *delegates: lite.Delegate, fallback: bool = True):
    model = lite.Model()
    context = lite.Context(thread_num=1, delegates=list(delegates), memory_limit=limit, fallback=fallback)
    model.build(convert(original), lite.ModelType.LITE, context)
    return model


@pytest.mark.parametrize("fallback", [True, False], ids=["fallback", "no-fallback"])
def test_a_batch_whose_activations_exceed_the_memory_limit_is_refused_as_natively(fallback):
    original = wide_model()
    native, delegated = (build_within(original, WIDE_LIMIT, *d, fallback=fallback) for d in ([], [ORTDelegate()]))
    x = normal(WIDE_BATCH, 64)
    with pytest.raises(lite.InputError, match="activations would need .* more than the memory limit of 50331648"):
        native.predict([x])
    # NOTE: the graph kernel refuses in resize(); its weights live in its ONNX graph alone, so no fallback
    with pytest.raises(lite.DelegateError, match="'onnxruntime_0' failed in resize.* MemoryLimitError: .* tensors "
                                                 "would need .* more than the memory limit of 50331648"):
        delegated.predict([x])
    for model in (native, delegated):  # NOTE: both keep working at batches within the limit
        assert_matches(model, original, {"x": normal(3, 64)})
    assert {r.runs_on for r in delegated.partition_report()} == {ORT}


def test_the_partition_count_takes_every_hidden_tensor_alive_at_once():
    original = wide_model()
    model = build_within(original, WIDE_LIMIT, ORTDelegate(), fallback=False)
    assert_matches(model, original, {"x": normal(WIDE_BATCH // 4, 64)})  # NOTE: 4 + 8 + 8 MiB
    (kernel,) = model.graph_kernels()
    kernel.memory_limit = 20 << 20
    rows = WIDE_BATCH // 4 + 1  # NOTE: x, y, h and h * h: (64 + 1 + 128 + 128) * 4 bytes a row
    with pytest.raises(lite.DelegateError, match=f"'onnxruntime_0': its tensors would need {rows * 321 * 4} bytes"):
        model.predict([normal(rows, 64)])


# ---- mixed with another delegate, graph_kernels() and --dump-partitions -------------------------

def test_mixed_with_the_example_npu_both_take_partitions_and_the_rest_runs_natively():
    original = small_cnn(batch=2)
    ort_delegate, npu = ORTDelegate(ops={"MatMulFusion", "Softmax", "MaxPoolFusion"}), ExampleNPUDelegate(1)
    model = build(original, ort_delegate, npu)
    where = {r.op_type: r.runs_on for r in model.partition_report()}
    assert where == {"Conv2DFusion": "ExampleNPUDelegate", "MaxPoolFusion": ORT, "AddFusion": "ExampleNPUDelegate",
                     "AvgPoolFusion": "ExampleNPUDelegate", "Flatten": "native", "MatMulFusion": ORT,
                     "Softmax": ORT}
    kernels = model.graph_kernels()
    assert [type(k).__name__ for k in kernels] == ["NPUGraphKernel", "ORTGraphKernel"] * 2
    assert [k.name for k in kernels[1::2]] == ["onnxruntime_0", "onnxruntime_1"]  # execution order
    assert [k.name for k in kernels[::2]] == ["example_npu_0", "example_npu_1"]
    for _ in range(2):
        assert_matches(model, original, {"x": normal(2, 3, 12, 12)}, tolerance=1e-2)


def test_graph_kernels_of_a_native_model_is_empty():
    assert build(small_cnn(batch=1)).graph_kernels() == []


def test_dump_partitions_writes_valid_onnx(tmp_path, capsys):
    source = tmp_path / "cnn.onnx"
    onnx.save_model(small_cnn(batch=1), source)
    assert inspect_main([str(source), "--delegate", "ort", "--dump-partitions", str(tmp_path / "dump")]) == 0
    (path,) = (tmp_path / "dump").iterdir()
    assert path.name == "onnxruntime_0.onnx" and str(path) in capsys.readouterr().out
    onnx.checker.check_model(str(path), full_check=True)
    assert [n.op_type for n in onnx.load(path).graph.node] == ["Conv", "Relu", "MaxPool", "Conv", "Add",
                                                              "GlobalAveragePool", "Flatten", "Gemm", "Softmax"]


def test_loads_by_name():
    delegate = load_delegate("ort", {"providers": "CPUExecutionProvider", "min_nodes_per_partition": 3})
    assert isinstance(delegate, ORTDelegate) and delegate.min_nodes_per_partition == 3


# ---- whole PyTorch-exported models --------------------------------------------------------

@pytest.mark.parametrize("builder", [zoo.resnet18, zoo.mobilenet_v2, zoo.squeezenet],
                         ids=["resnet18", "mobilenet_v2", "squeezenet"])
def test_whole_model_is_fully_delegated_and_matches_onnxruntime(builder):
    original = builder()
    model = build(original, ORTDelegate())
    assert {(r.runs_on, r.graph_kernel) for r in model.partition_report()} == {(ORT, "onnxruntime_0")}
    for _ in range(2):
        assert_matches(model, original, {original.graph.input[0].name: normal(1, 3, 224, 224, scale=1)})


@pytest.mark.slow
def test_dynamic_batch_resnet18_resizes_without_a_new_session():
    original = zoo.resnet18(dynamic_batch=True)
    model = build(original, ORTDelegate())
    session = model.graph_kernels()[0].session
    for batch in (1, 4):
        model.resize(model.get_inputs(), [[batch, 3, 224, 224]])
        assert_matches(model, original, {"input": normal(batch, 3, 224, 224, scale=1)})
    assert model.graph_kernels()[0].session is session


@pytest.mark.slow
def test_io_binding_costs_no_more_than_session_run():
    """Per-call time of the graph kernel (IO binding) against session.run plus a copy into the outputs."""
    original = onnx_model([node("Relu", ["x"])], {"x": normal(1, 64, 56, 56)})
    model = build(original, ORTDelegate())
    (kernel,) = model.graph_kernels()
    model.predict([normal(1, 64, 56, 56)])
    x, out = kernel.inputs[0].data, kernel.outputs[0].data
    name = kernel.onnx_model.graph.input[0].name

    def run_and_copy():
        np.copyto(out, kernel.session.run(None, {name: x})[0])

    binding, plain = per_call(kernel.execute), per_call(run_and_copy)
    print(f"per call: IO binding {binding * 1e6:.1f} us, session.run + copy {plain * 1e6:.1f} us")
    assert binding < plain * 1.1


def per_call(fn, calls: int = 400, repeats: int = 5) -> float:
    """Seconds per call: the best of ``repeats`` batches (the least disturbed by other processes)."""
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter() - start) / calls)
    return best
