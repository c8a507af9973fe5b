"""Quantized models for the tests: zoo models quantized by onnxruntime.quantization in its three
forms, and how closely two runs of one agree."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnxruntime.quantization import (
    CalibrationDataReader,
    QuantFormat,
    QuantType,
    quantize_dynamic,
    quantize_static,
)
from onnxruntime.quantization.shape_inference import quant_pre_process

FORMS = ("qdq", "qoperator", "dynamic")
# zoo models at sizes the default tests can afford
ZOO_SIZES = {"resnet18": {"image_size": 64}, "mobilenet_v2": {"image_size": 64}, "squeezenet": {"image_size": 64},
             "inception_block": {}, "bert_encoder": {"seq_len": 16, "layers": 2}, "resnet50": {"image_size": 64},
             "mobilenet_v3_large": {"image_size": 64}, "efficientnet_b0": {"image_size": 64}}
_ZOO_CACHE: dict[tuple[str, str], tuple[onnx.ModelProto, onnx.ModelProto]] = {}


def quantized_zoo(name: str, form: str) -> tuple[onnx.ModelProto, onnx.ModelProto]:
    """(the float zoo model, its ``form`` quantized on 8 random calibration inputs), cached per process."""
    from lite.tools import zoo

    if (name, form) not in _ZOO_CACHE:
        model = zoo.MODELS[name](**ZOO_SIZES[name])
        rng = np.random.default_rng(0)
        _ZOO_CACHE[name, form] = model, quantize(model, form, [random_feeds(model, rng) for _ in range(8)])
    return _ZOO_CACHE[name, form]


def random_feeds(model: onnx.ModelProto, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Standard-normal float inputs (token ids in [0, 100) for integer inputs) of the model's static shapes."""
    feeds = {}
    for value in model.graph.input:
        tensor = value.type.tensor_type
        shape = [d.dim_value or 1 for d in tensor.shape.dim]
        if tensor.elem_type == onnx.TensorProto.FLOAT:
            feeds[value.name] = rng.standard_normal(shape).astype(np.float32)
        else:
            feeds[value.name] = rng.integers(0, 100, shape).astype(np.int64)
    return feeds


class _Reader(CalibrationDataReader):
    def __init__(self, samples: list[dict[str, np.ndarray]]):
        self.samples = iter(samples)

    def get_next(self) -> dict[str, np.ndarray] | None:
        return next(self.samples, None)


def quantize(model: onnx.ModelProto, form: str, calibration: list[dict[str, np.ndarray]]) -> onnx.ModelProto:
    """``model`` quantized by onnxruntime as a user would (``quant_pre_process`` first): "qdq" is
    static QDQ with int8 activations and per-channel int8 weights, "qoperator" static QOperator
    with uint8 activations, "dynamic" ``quantize_dynamic``."""
    with tempfile.TemporaryDirectory() as folder:
        raw, prepared, out = (str(Path(folder, name)) for name in ("raw.onnx", "prepared.onnx", "q.onnx"))
        onnx.save(model, raw)
        quant_pre_process(raw, prepared)
        if form == "dynamic":
            quantize_dynamic(prepared, out)
        else:
            qdq = form == "qdq"
            quantize_static(prepared, out, _Reader(calibration),
                            quant_format=QuantFormat.QDQ if qdq else QuantFormat.QOperator, per_channel=qdq,
                            activation_type=QuantType.QInt8 if qdq else QuantType.QUInt8,
                            weight_type=QuantType.QInt8)
        return onnx.load(out)


def weight_only(model: onnx.ModelProto, form: str, symmetric: bool, block_size: int = 32) -> onnx.ModelProto:
    """``model``'s MatMul weights quantized to 4 bits in blocks along K by onnxruntime's
    ``MatMulNBitsQuantizer``: "matmulnbits" its default form (com.microsoft MatMulNBits), "qdq" a
    blocked uint4/int4 DequantizeLinear before each MatMul. Transposes of weights are folded first
    (the quantizer takes only MatMuls that read an initializer)."""
    from onnxruntime.quantization.matmul_nbits_quantizer import DefaultWeightOnlyQuantConfig, MatMulNBitsQuantizer

    config = DefaultWeightOnlyQuantConfig(block_size=block_size, is_symmetric=symmetric,
                                          quant_format=QuantFormat.QDQ if form == "qdq" else QuantFormat.QOperator)
    quantizer = MatMulNBitsQuantizer(_fold_weight_transposes(model), algo_config=config)
    quantizer.process()
    return quantizer.model.model


def respelled(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` with the same meaning, its float ops rounded another way: each Sigmoid as
    Reciprocal(Add(Exp(Neg(x)), 1)), each GlobalAveragePool as ReduceMean over the plane.
    onnxruntime on both shows how far ulp-level differences alone move a model's outputs."""
    from onnx import helper

    model = onnx.ModelProto.FromString(model.SerializeToString())
    opset = next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))
    model.graph.initializer.extend([helper.make_tensor("respelled_one", onnx.TensorProto.FLOAT, [], [1.0]),
                                    helper.make_tensor("respelled_axes", onnx.TensorProto.INT64, [2], [2, 3])])
    nodes = []
    for node in model.graph.node:
        x, y = node.input[0] if node.input else "", node.output[0]
        if node.op_type == "Sigmoid":
            nodes += [helper.make_node("Neg", [x], [f"{y}_neg"]), helper.make_node("Exp", [f"{y}_neg"], [f"{y}_exp"]),
                      helper.make_node("Add", [f"{y}_exp", "respelled_one"], [f"{y}_sum"]),
                      helper.make_node("Reciprocal", [f"{y}_sum"], [y])]
        elif node.op_type == "GlobalAveragePool":
            nodes.append(helper.make_node("ReduceMean", [x, "respelled_axes"], [y], keepdims=1) if opset >= 18
                         else helper.make_node("ReduceMean", [x], [y], axes=[2, 3], keepdims=1))
        else:
            nodes.append(node)
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    return model


def _fold_weight_transposes(model: onnx.ModelProto) -> onnx.ModelProto:
    model = onnx.ModelProto.FromString(model.SerializeToString())
    weights = {t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer}
    kept = []
    for node in model.graph.node:
        if node.op_type == "Transpose" and node.input[0] in weights:
            perm = next(list(a.ints) for a in node.attribute if a.name == "perm")
            model.graph.initializer.append(onnx.numpy_helper.from_array(weights[node.input[0]].transpose(perm),
                                                                        node.output[0]))
        else:
            kept.append(node)
    del model.graph.node[:]
    model.graph.node.extend(kept)
    return model


def run_onnxruntime(model: onnx.ModelProto, feeds: dict[str, np.ndarray], optimized: bool = True,
                    config: dict[str, str] | None = None) -> list[np.ndarray]:
    """onnxruntime on the CPU, with its graph optimizations (its int8 kernels) or without;
    ``config``: session configuration entries."""
    return onnxruntime_session(model, optimized, config).run(None, feeds)


def onnxruntime_session(model: onnx.ModelProto, optimized: bool = True,
                        config: dict[str, str] | None = None) -> ort.InferenceSession:
    """``run_onnxruntime``'s session, for a loop over many inputs to make once."""
    options = ort.SessionOptions()
    for key, value in (config or {}).items():
        options.add_session_config_entry(key, value)
    if not optimized:
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


@dataclass
class Agreement:
    """How closely outputs agree over several inputs: the worst cosine, the largest absolute
    difference and how many inputs had the same top-1 class."""

    cosine: float = 1.0
    max_diff: float = 0.0
    same_top1: int = 0
    inputs: int = 0

    def add(self, actual: np.ndarray, expected: np.ndarray) -> None:
        a, e = np.asarray(actual, np.float64).ravel(), np.asarray(expected, np.float64).ravel()
        norms = np.linalg.norm(a) * np.linalg.norm(e)
        self.cosine = min(self.cosine, float(a @ e / norms) if norms else float(np.array_equal(a, e)))
        self.max_diff = max(self.max_diff, float(np.abs(a - e).max()))
        rows = actual.shape[0] if actual.ndim > 1 else 1
        top = np.argmax(actual.reshape(rows, -1), 1), np.argmax(expected.reshape(rows, -1), 1)
        self.same_top1 += int(np.array_equal(*top))
        self.inputs += 1


def microsoft_op_model(op_type: str, node_inputs: list[str], graph_inputs: list[onnx.ValueInfoProto],
                       output: onnx.ValueInfoProto, constants: list[onnx.TensorProto] | None = None,
                       model_opset: int = 17, **attrs) -> onnx.ModelProto:
    """A model of one ``com.microsoft`` node ``op_type`` reading ``node_inputs`` (graph inputs and
    constants by name) and writing ``output``, with the node's ``attrs``; ``model_opset``: the
    default domain's."""
    from onnx import helper

    node = helper.make_node(op_type, node_inputs, [output.name], domain="com.microsoft", **attrs)
    graph = helper.make_graph([node], op_type, graph_inputs, [output], constants or [])
    opsets = [helper.make_opsetid("", model_opset), helper.make_opsetid("com.microsoft", 1)]
    return helper.make_model(graph, opset_imports=opsets)


def output_step(model: onnx.ModelProto) -> float | None:
    """The scale of the DequantizeLinear that writes the model's first output (one quantization
    step of it), or None where a float op writes it."""
    output = model.graph.output[0].name
    consts = {t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer}
    for node in model.graph.node:
        if output in node.output and node.op_type == "DequantizeLinear" and node.input[1] in consts:
            return float(consts[node.input[1]].max())
    return None


def _scale_and_zero_point(values: np.ndarray, dtype: np.dtype) -> tuple[np.ndarray, np.ndarray]:
    """Asymmetric per-tensor parameters covering ``values`` (and 0) in ``dtype``."""
    low, high = min(float(values.min()), 0.0), max(float(values.max()), 0.0)
    info = np.iinfo(dtype)
    scale = np.float32(max(high - low, 1e-6) / (info.max - info.min))
    zero_point = np.clip(np.rint(info.min - low / scale), info.min, info.max).astype(dtype)
    return np.array(scale, np.float32), np.array(zero_point, dtype)


def qdq_op_model(op_type: str, inputs: dict[str, np.ndarray], weights: dict[str, np.ndarray],
                 dtype: type = np.int8, bias: np.ndarray | None = None, opset: int = 19,
                 output_like_input: bool = False, **attrs) -> onnx.ModelProto:
    """One ``op_type`` node in a QDQ group: each float graph input quantized (per tensor, in
    ``dtype``) and dequantized, each weight int8 per output channel (axis 0, symmetric), ``bias``
    int32 with scale x_scale * w_scale, the output quantized and dequantized again, with
    parameters from the float op's own result on ``inputs`` (the first input's with
    ``output_like_input``, as onnxruntime's quantizer gives MaxPool, Reshape and Transpose)."""
    from onnx import helper, numpy_helper
    from onnx.reference import ReferenceEvaluator

    nodes, initializers, op_inputs = [], [], []

    def const(name: str, value: np.ndarray) -> str:
        initializers.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    x_scales = []
    for name, value in inputs.items():
        scale, zero_point = _scale_and_zero_point(value, dtype)
        x_scales.append(scale)
        nodes += [helper.make_node("QuantizeLinear", [name, const(f"{name}_s", scale), const(f"{name}_z", zero_point)],
                                   [f"{name}_q"]),
                  helper.make_node("DequantizeLinear", [f"{name}_q", f"{name}_s", f"{name}_z"], [f"{name}_dq"])]
        op_inputs.append(f"{name}_dq")
    for name, value in weights.items():
        scale = (np.abs(value.reshape(value.shape[0], -1)).max(1) / 127).astype(np.float32) + np.float32(1e-6)
        q = np.clip(np.rint(value / scale.reshape(-1, *[1] * (value.ndim - 1))), -127, 127).astype(np.int8)
        nodes.append(helper.make_node("DequantizeLinear", [const(f"{name}_q", q), const(f"{name}_s", scale),
                                                           const(f"{name}_z", np.zeros(scale.size, np.int8))],
                                      [f"{name}_dq"], axis=0))
        op_inputs.append(f"{name}_dq")
        w_scale = scale
    if bias is not None:
        bias_scale = (x_scales[0] * w_scale).astype(np.float32)
        nodes.append(helper.make_node("DequantizeLinear", [const("b_q", np.rint(bias / bias_scale).astype(np.int32)),
                                                           const("b_s", bias_scale)], ["b_dq"], axis=0))
        op_inputs.append("b_dq")
    nodes.append(helper.make_node(op_type, op_inputs, ["y_float"], **attrs))

    def graph(outputs: list, tail: list) -> onnx.ModelProto:
        values = [helper.make_tensor_value_info(k, onnx.TensorProto.FLOAT, v.shape) for k, v in inputs.items()]
        g = helper.make_graph(nodes + tail, op_type, values, outputs, list(initializers))
        return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])

    float_model = graph([helper.make_tensor_value_info("y_float", onnx.TensorProto.FLOAT, None)], [])
    y = ReferenceEvaluator(float_model).run(None, inputs)[0]
    scale, zero_point = _scale_and_zero_point(next(iter(inputs.values())) if output_like_input else y, dtype)
    tail = [helper.make_node("QuantizeLinear", ["y_float", const("y_s", scale), const("y_z", zero_point)], ["y_q"]),
            helper.make_node("DequantizeLinear", ["y_q", "y_s", "y_z"], ["y"])]
    return graph([helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)], tail)
