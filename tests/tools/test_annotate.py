"""The partition-annotated ONNX export: the graph as Delite runs it, each node saying where it runs."""

import numpy as np
import onnx
import pytest

import lite
from lite.schema.reader import read_model
from lite.tools import zoo
from lite.tools.annotate import annotated_onnx
from lite.tools.converter import convert
from tests.support.custom_op import DOMAIN as VENDOR
from tests.support.custom_op import vendor_model
from tests.support.delegates import ConvAndConcat
from tests.support.oracle import relative_l2, run_onnxruntime


def annotate(model, tmp_path, delegates):
    path = tmp_path / "m.lite"
    convert(model, path)
    built = lite.Model()
    built.build_from_file(path, context=lite.Context(delegates=delegates))
    rows = built.partition_report()
    return annotated_onnx(read_model(path.read_bytes()), rows), rows


def test_every_node_carries_its_placement_and_the_model_computes_the_same(tmp_path):
    original = zoo.resnet18(image_size=32)
    placed, rows = annotate(original, tmp_path, [ConvAndConcat()])
    onnx.checker.check_model(placed, full_check=True)
    props = [{p.key: p.value for p in n.metadata_props} for n in placed.graph.node]
    assert {p["delite.node"] for p in props} == {r.node for r in rows}
    by_node = {r.node: r for r in rows}
    for node, prop in zip(placed.graph.node, props, strict=True):
        row = by_node[prop["delite.node"]]
        assert (prop["delite.runs_on"], prop["delite.graph_kernel"], prop["delite.reason"]) == (
            row.runs_on, row.graph_kernel, row.reason)
        assert row.runs_on in node.doc_string
    x = np.random.default_rng(3).standard_normal((1, 3, 32, 32)).astype(np.float32)
    (want,) = run_onnxruntime(original, {"input": x})
    (got,) = run_onnxruntime(placed, {"input": x})
    assert relative_l2(got, want) < 1e-5
    graph = read_model(convert(original))
    passed = {graph.tensors[t].name for n in graph.nodes for t in n.outputs} - {"output"}
    assert passed <= {v.name for v in placed.graph.value_info}  # Netron labels every edge between nodes


@pytest.mark.usefixtures("native_runs")
def test_a_node_without_an_emitter_keeps_its_type_and_domain(tmp_path):
    model, _ = vendor_model(np.random.default_rng(0))
    path = tmp_path / "vendor.lite"
    path.write_bytes(convert(model, custom_domains=[VENDOR]))
    built = lite.Model()
    built.build_from_file(path)
    placed = annotated_onnx(read_model(path.read_bytes()), built.partition_report())
    (custom,) = [n for n in placed.graph.node if n.domain == VENDOR]
    assert (custom.op_type, custom.name, custom.doc_string) == ("ScaledTanh", "scaled_tanh", "native")
    assert VENDOR in {o.domain for o in placed.opset_import}
    onnx.checker.check_model(placed)
