"""The example NPU's int8 mode against Delite's native int8 kernels: per op, whole quantized models,
declining and reasons.

Outputs are compared in quantization steps of the model's output (the float output divided by
the scale of the DequantizeLinear that writes it). With requantization="float32" (the default)
the NPU rounds as the native kernels do; with "fixed_point" a few results per op round the
other way, so each op is within one step, and whole models (where such a step propagates) are
only checked to agree closely.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

import lite
from lite.delegates import load_delegate
from lite.delegates.example_npu import (
    INT8_BLOB_TARGET,
    INT8_ONLY,
    ExampleNPUDelegate,
    FixedPoint,
    Int8GraphKernel,
)
from lite.model import compile_into
from lite.tools.converter import convert
from tests.support.quantized import output_step, qdq_op_model, quantized_zoo

RNG = np.random.default_rng(8)
NPU = "ExampleNPUDelegate"
BOUNDARY = {"QuantizeLinear", "DequantizeLinear"}


# ---- helpers -------------------------------------------------------------------------------

def build(data: bytes, *delegates: lite.Delegate) -> lite.Model:
    model = lite.Model()
    model.build(data, lite.ModelType.LITE, lite.Context(thread_num=1, delegates=list(delegates)))
    return model


def int8_npu(min_nodes_per_partition: int = 2, requantization: str = "float32") -> ExampleNPUDelegate:
    return ExampleNPUDelegate(min_nodes_per_partition, precision="int8", requantization=requantization)


def predict(model: lite.Model, x: list[np.ndarray]) -> list[np.ndarray]:
    return [y.get_data_to_numpy() for y in model.predict(x)]


def steps_apart(onnx_model: onnx.ModelProto, npu: lite.Model, native: lite.Model, runs: int = 2) -> np.ndarray:
    """How many output quantization steps the NPU's outputs are from native int8 Delite's, per
    element, on ``runs`` fresh inputs."""
    step, steps = output_step(onnx_model), []
    for _ in range(runs):
        x = [RNG.standard_normal(t.shape).astype(np.float32) for t in native.get_inputs()]
        for got, want in zip(predict(npu, x), predict(native, x), strict=True):
            steps.append(np.rint(np.abs(got.astype(np.float64) - want) / step).ravel())
    return np.concatenate(steps)


def check_one_op(onnx_model: onnx.ModelProto, op_type: str) -> lite.Model:
    """Builds with the int8 NPU taking single ops, in both requantization modes: ``op_type`` runs
    on it as an int8 op, the QuantizeLinear and DequantizeLinear around it natively, within one
    step of native Delite."""
    data = convert(onnx_model)
    native = build(data)
    for requantization in ("fixed_point", "float32"):
        npu = build(data, int8_npu(1, requantization))
        taken = [r for r in npu.partition_report() if r.runs_on == NPU]
        assert [(r.op_type, r.quantized) for r in taken] == [(op_type, "int8")], npu.partition_report()
        assert {r.op_type for r in npu.partition_report() if r.runs_on == "native"} <= BOUNDARY
        assert isinstance(npu.graph_kernels()[0], Int8GraphKernel)
        assert steps_apart(onnx_model, npu, native).max() <= 1, requantization
    return npu


def reasons(model: lite.Model) -> dict[str, str]:
    return {r.node: r.reason for r in model.partition_report() if r.runs_on == "native"}


def with_activation(model: onnx.ModelProto, activation: str) -> onnx.ModelProto:
    """A ``qdq_op_model`` with Relu or Clip(0, 6) between its op and the output's QuantizeLinear."""
    model = onnx.ModelProto.FromString(model.SerializeToString())
    graph = model.graph
    op = next(n for n in graph.node if "y_float" in n.output)
    op.output[0] = "pre_activation"
    index = list(graph.node).index(op) + 1
    if activation == "Relu":
        graph.node.insert(index, helper.make_node("Relu", ["pre_activation"], ["y_float"]))
    else:
        bounds = [numpy_helper.from_array(np.array(v, np.float32), n) for n, v in (("lo", 0), ("hi", 6))]
        graph.initializer.extend(bounds)
        graph.node.insert(index, helper.make_node("Clip", ["pre_activation", "lo", "hi"], ["y_float"]))
    return model


def with_initializer(model: onnx.ModelProto, name: str, value: np.ndarray) -> onnx.ModelProto:
    """``model`` with initializer ``name`` replaced."""
    model = onnx.ModelProto.FromString(model.SerializeToString())
    kept = [t for t in model.graph.initializer if t.name != name]
    del model.graph.initializer[:]
    model.graph.initializer.extend([*kept, numpy_helper.from_array(value, name)])
    return model


def as_reshape(flatten: onnx.ModelProto, shape: list[int]) -> onnx.ModelProto:
    """A ``qdq_op_model`` of Flatten with the Flatten made a Reshape to ``shape`` (the same values
    in the same order, so the output's parameters still fit)."""
    model = with_initializer(flatten, "shape", np.array(shape, np.int64))
    op = next(n for n in model.graph.node if n.op_type == "Flatten")
    op.op_type = "Reshape"
    op.input.append("shape")
    del op.attribute[:]
    return model


def image(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def conv_weight(*shape: int) -> np.ndarray:
    return (RNG.standard_normal(shape) / np.sqrt(np.prod(shape[1:]))).astype(np.float32)


# ---- whole quantized models ------------------------------------------------------------------

@pytest.mark.parametrize("name", ["resnet18", pytest.param("mobilenet_v2", marks=pytest.mark.slow)])
def test_the_int8_mode_takes_the_quantized_blocks_within_one_step_of_native(name):
    _, quantized = quantized_zoo(name, "qdq")
    data = convert(quantized)
    npu, native = build(data, int8_npu()), build(data)
    report = npu.partition_report()
    convs_and_adds = [r for r in report if r.op_type in ("Conv2DFusion", "AddFusion")]
    assert convs_and_adds and all((r.runs_on, r.quantized) == (NPU, "int8") for r in convs_and_adds)
    pools = [r for r in report if r.op_type in ("MaxPoolFusion", "AvgPoolFusion", "Flatten")]
    assert pools and all(r.runs_on == NPU for r in pools)
    left = {r.op_type: r.reason for r in report if r.runs_on == "native"}
    assert set(left) == BOUNDARY | {"MatMulFusion"}, left
    assert INT8_ONLY in left["QuantizeLinear"] and INT8_ONLY in left["DequantizeLinear"]
    assert left["MatMulFusion"] == f"{NPU}: MatMulFusion: this NPU has no matrix unit"
    assert len(npu.graph_kernels()) == 1
    assert steps_apart(quantized, npu, native).max() <= 1


@pytest.mark.parametrize("name", ["resnet18", pytest.param("mobilenet_v2", marks=pytest.mark.slow)])
def test_fixed_point_requantization_takes_the_same_ops_and_agrees_closely(name):
    _, quantized = quantized_zoo(name, "qdq")
    data = convert(quantized)
    npu, native = build(data, int8_npu(requantization="fixed_point")), build(data)
    rounded_as_delite = build(data, int8_npu())
    assert [r.runs_on for r in npu.partition_report()] == [r.runs_on for r in rounded_as_delite.partition_report()]
    # NOTE: a result rounded the other way early in the network moves later ones by a step or more
    # (MobileNetV2 here: up to ~20 steps on some inputs), so whole outputs are compared by direction
    rng = np.random.default_rng(0)
    for _ in range(3):
        x = [rng.standard_normal(t.shape).astype(np.float32) for t in native.get_inputs()]
        got, want = predict(npu, x)[0].ravel(), predict(native, x)[0].ravel()
        assert got @ want / (np.linalg.norm(got) * np.linalg.norm(want)) > 0.95


@pytest.mark.slow
def test_the_uint8_qoperator_form_is_declined_with_the_reason():
    _, quantized = quantized_zoo("mobilenet_v2", "qoperator")
    model = build(convert(quantized), int8_npu())
    report = model.partition_report()
    assert {r.runs_on for r in report} == {"native"} and not model.graph_kernels()
    for row in report:
        if row.quantized:
            assert row.quantized == "uint8" and "is uint8; this NPU takes int8 activations" in row.reason
            assert "QuantType.QInt8" in row.reason


@pytest.mark.slow
def test_a_float_model_in_int8_mode_declines_everything_with_the_reason():
    float_model, _ = quantized_zoo("mobilenet_v2", "qdq")
    model = build(convert(float_model), int8_npu())
    report = model.partition_report()
    assert {r.runs_on for r in report} == {"native"}
    assert all(f"{NPU}: {r.op_type}: {INT8_ONLY}: " in r.reason and "QuantType.QInt8" in r.reason for r in report)


def test_saved_int8_partitions_load_and_compute_what_the_delegate_builds():
    _, quantized = quantized_zoo("mobilenet_v2", "qdq")
    plain = convert(quantized)
    saved, partitions, skipped = compile_into(plain, lite.Context(delegates=[int8_npu()]))
    assert len(partitions) == 1 and partitions[0].target == INT8_BLOB_TARGET and not skipped
    loaded, built = build(saved, int8_npu()), build(plain, int8_npu())
    assert loaded.graph_kernels()[0].saved is not None
    x = [RNG.standard_normal(t.shape).astype(np.float32) for t in built.get_inputs()]
    np.testing.assert_array_equal(predict(loaded, x)[0], predict(built, x)[0])
    float16 = build(saved, ExampleNPUDelegate())  # another target: the nodes build as if there were no blob
    assert all(r.runs_on == "native" for r in float16.partition_report())


# ---- one op at a time --------------------------------------------------------------------------

CONVS = {  # name: (x shape, weight shape, Conv attributes)
    "3x3": ((1, 8, 10, 10), (16, 8, 3, 3), {"pads": [1, 1, 1, 1]}),
    "3x3_stride2_asymmetric_pads": ((1, 6, 13, 11), (8, 6, 3, 3), {"strides": [2, 2], "pads": [0, 1, 1, 0]}),
    "pointwise": ((2, 8, 7, 5), (12, 8, 1, 1), {}),
    "grouped": ((1, 8, 9, 9), (12, 4, 3, 3), {"group": 2, "pads": [1, 1, 1, 1]}),
    "depthwise_stride2": ((1, 8, 11, 11), (8, 1, 3, 3), {"group": 8, "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    "depthwise_multiplier_2": ((1, 6, 8, 8), (12, 1, 3, 3), {"group": 6}),
}


@pytest.mark.parametrize("activation", [None, "Relu", "Clip"])
@pytest.mark.parametrize("case", list(CONVS))
def test_conv2d_fusion(case, activation):
    x_shape, w_shape, attrs = CONVS[case]
    onnx_model = qdq_op_model("Conv", {"x": 3 * image(*x_shape)}, {"w": conv_weight(*w_shape)},
                              bias=image(w_shape[0]), **attrs)
    if activation:
        onnx_model = with_activation(onnx_model, activation)
    model = check_one_op(onnx_model, "Conv2DFusion")
    conv = model.graph_kernels()[0].ops[0]
    fused = {None: "NO_ACTIVATION", "Relu": "RELU", "Clip": "RELU6"}[activation]
    assert conv.attrs["activation_type"] == fused  # the activation is the conv's output bounds


def test_conv_without_bias():
    check_one_op(qdq_op_model("Conv", {"x": image(1, 4, 6, 6)}, {"w": conv_weight(8, 4, 3, 3)}, pads=[1, 1, 1, 1]),
                 "Conv2DFusion")


@pytest.mark.parametrize("b_shape", [(2, 8, 5, 6), (1, 8, 1, 1)], ids=["same", "channel"])
def test_add_fusion(b_shape):
    check_one_op(qdq_op_model("Add", {"a": image(2, 8, 5, 6), "b": 2 * image(*b_shape)}, {}), "AddFusion")


POOLS = {
    "max_3x3_s2_p1": ("MaxPool", {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    "max_2x2_s2": ("MaxPool", {"kernel_shape": [2, 2], "strides": [2, 2]}),
    "avg_3x3_p1_exclude_pad": ("AveragePool", {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}),
    "avg_3x3_p1_include_pad": ("AveragePool", {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "count_include_pad": 1}),
    "avg_2x2_s2": ("AveragePool", {"kernel_shape": [2, 2], "strides": [2, 2]}),
    "global_avg": ("GlobalAveragePool", {}),
    "global_max": ("GlobalMaxPool", {}),
}


@pytest.mark.parametrize("case", list(POOLS))
def test_pools(case):
    op_type, attrs = POOLS[case]
    expected = "MaxPoolFusion" if "Max" in op_type else "AvgPoolFusion"
    check_one_op(qdq_op_model(op_type, {"x": image(2, 5, 11, 9)}, {}, **attrs), expected)


def test_concat_of_equal_parameters_is_a_copy():
    a = image(1, 4, 5, 5)
    b = RNG.permutation(a.ravel())[:50].reshape(1, 2, 5, 5)
    b.flat[:2] = a.min(), a.max()  # the same range: the same scale and zero point
    check_one_op(qdq_op_model("Concat", {"a": a, "b": b}, {}, axis=1), "Concat")


def test_concat_of_different_parameters_is_declined_with_the_reason():
    model = build(convert(qdq_op_model("Concat", {"a": image(1, 4, 5, 5), "b": 3 * image(1, 2, 5, 5)}, {}, axis=1)),
                  int8_npu(1))
    [reason] = [r.reason for r in model.partition_report() if r.op_type == "Concat"]
    assert "have different scales or zero points; this NPU moves int8 values without requantizing" in reason


def test_flatten_and_reshape_read_the_model_element_order():
    check_one_op(qdq_op_model("Flatten", {"x": image(2, 3, 4, 5)}, {}), "Flatten")
    check_one_op(as_reshape(qdq_op_model("Flatten", {"x": image(2, 3, 4, 5)}, {}), [2, 4, 15, 1]), "Reshape")


# ---- declining, options ------------------------------------------------------------------------

def test_asymmetric_weights_are_declined_with_the_reason():
    onnx_model = qdq_op_model("Conv", {"x": image(1, 4, 6, 6)}, {"w": conv_weight(8, 4, 3, 3)})
    onnx_model = with_initializer(onnx_model, "w_z", np.arange(8, dtype=np.int8))
    model = build(convert(onnx_model), int8_npu(1))
    [reason] = [r.reason for r in model.partition_report() if r.op_type == "Conv2DFusion"]
    assert reason == (f"{NPU}: Conv2DFusion: weight 'w_q' has zero points other than 0; this NPU takes symmetric "
                      "int8 weights")


def test_uint8_one_op_is_declined_with_the_reason():
    model = build(convert(qdq_op_model("Add", {"a": image(1, 3, 4, 4), "b": image(1, 3, 4, 4)}, {}, dtype=np.uint8)),
                  int8_npu(1))
    [row] = [r for r in model.partition_report() if r.op_type == "AddFusion"]
    assert row.quantized == "uint8" and "QuantType.QInt8" in row.reason and row.runs_on == "native"


def test_the_precision_and_requantization_options():
    loaded = load_delegate("example_npu", {"precision": "int8", "requantization": "fixed_point"})
    assert loaded.int8 and loaded.requantization == "fixed_point"
    assert ExampleNPUDelegate().precision == "float16" and not ExampleNPUDelegate().int8
    assert ExampleNPUDelegate(precision="int8").fingerprint() != ExampleNPUDelegate().fingerprint()
    assert ExampleNPUDelegate(precision="int8").blob_target() == INT8_BLOB_TARGET
    with pytest.raises(lite.InputError, match="precision 'int4'"):
        ExampleNPUDelegate(precision="int4")
    with pytest.raises(lite.InputError, match="requantization 'double'"):
        ExampleNPUDelegate(precision="int8", requantization="double")
    with pytest.raises(lite.InputError, match=r"no kernel for \['Activation'\] in int8 mode"):
        ExampleNPUDelegate(precision="int8", ops={"Activation"})


@pytest.mark.parametrize("real", [0.75, 1e-3, 3.2e-5, 0.5, 0.99999999999, 7.0])
def test_fixed_point_multipliers_round_like_a_float_multiply(real):
    acc = np.arange(-100_000, 100_000, 37, dtype=np.int32)
    fixed = FixedPoint.of(real)
    assert FixedPoint.problem(real) is None and 1 << 30 <= int(fixed.mantissa) < 1 << 31
    assert np.abs(fixed.apply(acc) - acc * real).max() <= 0.5 + 1e-6
    assert FixedPoint.problem(2.0 ** 40) is not None and FixedPoint.problem(0.0) is not None
