"""The ONNX Runtime delegate on quantized models: each quantized op is written back as its QDQ
group, which onnxruntime runs with its int8 kernels, so the delegate takes every node and its
outputs are onnxruntime's own on the same quantized file. ``CASES`` (the QuantizeLinear and
DequantizeLinear emitters) joins test_onnxruntime.py's emitter coverage check."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

import lite
from lite.delegates.onnxruntime import ORTDelegate
from lite.tools import converter
from tests.support.ort_delegate import RNG, check_on_ort, node, onnx_model, outputs_of
from tests.support.quantized import Agreement, quantized_zoo, random_feeds, run_onnxruntime

CASES = {  # name: (nodes, feeds, initializers[, opset])
    "quantize_dequantize_per_tensor": (
        [node("QuantizeLinear", ["x", "s", "z"], "q"), node("DequantizeLinear", ["q", "s", "z"])],
        {"x": RNG.standard_normal((2, 3, 4)).astype(np.float32)}, {"s": np.float32(0.05), "z": np.int8(-3)}),
    "quantize_dequantize_per_axis": (
        [node("QuantizeLinear", ["x", "s", "z"], "q", axis=1), node("DequantizeLinear", ["q", "s", "z"], axis=1)],
        {"x": RNG.standard_normal((2, 3, 4)).astype(np.float32)},
        {"s": np.array([0.02, 0.05, 0.1], np.float32), "z": np.array([0, 10, 200], np.uint8)}),
}


@pytest.mark.parametrize("case", list(CASES))
def test_emitter_round_trip(case):
    nodes, feeds, inits = CASES[case]
    check_on_ort(onnx_model(nodes, feeds, outputs_of(nodes), inits), feeds)


def _delegated(quantized: onnx.ModelProto) -> lite.Model:
    context = lite.Context()
    context.delegate = ORTDelegate()
    model = lite.Model()
    model.build(converter.convert(quantized), lite.ModelType.LITE, context)
    return model


@pytest.mark.parametrize("name, form", [("resnet18", "qdq"), ("resnet18", "qoperator"),
                                        pytest.param("bert_encoder", "qdq", marks=pytest.mark.slow),
                                        pytest.param("mobilenet_v2", "qoperator", marks=pytest.mark.slow)])
def test_every_node_of_a_quantized_model_is_delegated_and_gives_onnxruntimes_outputs(name, form):
    float_model, quantized = quantized_zoo(name, form)
    model = _delegated(quantized)
    rows = model.partition_report()
    assert [r for r in rows if r.runs_on != "ORTDelegate"] == []
    assert sum(bool(r.quantized) for r in rows) >= 10
    rng = np.random.default_rng(5)
    agreement = Agreement()
    for _ in range(3):
        feeds = random_feeds(float_model, rng)
        agreement.add(model.predict(list(feeds.values()))[0].get_data_to_numpy(), run_onnxruntime(quantized, feeds)[0])
    assert agreement.max_diff == 0.0, agreement


def test_a_quantized_op_is_written_as_its_qdq_group():
    _, quantized = quantized_zoo("resnet18", "qdq")
    model = _delegated(quantized)
    emitted = model.graph_kernels()[0].onnx_model
    ops = [node.op_type for node in emitted.graph.node]
    assert ops.count("Conv") == 20 and ops.count("QuantizeLinear") >= 20 and ops.count("DequantizeLinear") >= 40
    conv = next(node for node in emitted.graph.node if node.op_type == "Conv")
    producers = {out: node.op_type for node in emitted.graph.node for out in node.output}
    assert {producers[name] for name in conv.input if name in producers} == {"DequantizeLinear"}
