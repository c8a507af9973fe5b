"""Every ONNX op the converter maps, end to end: ONNX -> convert -> lite.Model.predict vs onnxruntime.

Each case of the table (``tests/e2e/cases_<family>.py``) builds a small ONNX model (one node, or a
node plus what it needs); it is converted, built as a native model (thread_num=1) and predicted on
fresh seeded random inputs, compared with onnxruntime on the same ONNX model
(``tests.support.e2e.assert_matches`` tolerances). Cases are parametrized over shapes, attributes and
the opsets where the op's signature changed. Inputs whose shape names a dim (``"N"``) are dynamic:
those cases predict at every batch size in ``batches`` on one built model. Where onnxruntime has no
kernel for an old opset, the oracle is the same computation written at a newer opset (``oracle=``).
"""

from __future__ import annotations

import zlib

import numpy as np
import pytest

from lite.schema.writer import write_model
from lite.tools.converter import convert_to_graph
from lite.tools.converter.registry import supported_ops
from tests.e2e import cases_families  # noqa: F401 (registers every family's cases)
from tests.e2e.cases import CASES, Case, F, f32, make_model, n, w
from tests.e2e.cases_core import BN
from tests.support.e2e import assert_matches, build_lite, predict
from tests.support.oracle import run_exact_oracle, run_onnxruntime

# ---- the tests ---------------------------------------------------------------------------------


def test_every_mapped_op_has_an_e2e_case():
    covered = {op for c in CASES for op in c.ops}
    missing = sorted(set(supported_ops()) - covered)
    assert not missing, f"ops the converter maps with no e2e case in tests/e2e/cases_*.py: {missing}"


def _seed(case_id: str) -> int:
    return zlib.crc32(case_id.encode())


@pytest.mark.parametrize("c", CASES, ids=[c.id for c in CASES])
def test_op_matches_onnxruntime(c: Case):
    graph, report = convert_to_graph(c.model, fusion=c.fusion)
    for name, count in c.fold_checks.items():
        assert len(getattr(report, name)) == count, f"{name}: {getattr(report, name)}"
    missing = set(c.keeps) - {node.op_type for node in graph.nodes}
    assert not missing, f"folded at conversion, so not tested at run time: {missing}"
    model = build_lite(write_model(graph))
    rng = np.random.default_rng(_seed(c.id))
    for batch in c.batches:
        feeds = {k: v.draw(rng, batch) for k, v in c.inputs.items()}
        expected = run_exact_oracle(c.oracle or c.model, feeds)
        assert_matches(predict(model, feeds), expected, f"{c.id} batch {batch}")


# Fusion on vs off: the same numbers, and the fusion really happened.
# name -> (nodes, inputs, initializers, opset, expected ConversionReport list lengths with fusion)
FUSIBLE = {
    "conv-bn-relu": ([n("Conv", ["x", "w", "cb"], ["c"], pads=[1, 1, 1, 1], strides=[2, 2]),
                      n("BatchNormalization", ["c", *BN], ["b"]), n("Relu", ["b"], ["y"])],
                     {"x": F("N", 3, 9, 9)}, {"w": w(4, 3, 3, 3), "cb": w(4), **BN}, 13, {"bn_folded": 1, "fused": 1}),
    "gemm-relu": ([n("Gemm", ["x", "gw", "gb"], ["g"], transB=1, alpha=0.7), n("Relu", ["g"], ["y"])],
                  {"x": F("N", 6)}, {"gw": w(5, 6), "gb": w(5)}, 13, {"fused": 1}),
    "matmul-add-relu6": ([n("MatMul", ["x", "mw"], ["m"]), n("Add", ["m", "gb"], ["a"]),
                          n("Clip", ["a", "lo", "hi"], ["y"])],
                         {"x": F("N", 6, scale=3)}, {"mw": w(6, 5, scale=2), "gb": w(5), "lo": f32(0), "hi": f32(6)},
                         13, {"fused": 1}),
    "add-relu6": ([n("Add", ["x", "z"], ["a"]), n("Clip", ["a"], ["y"], min=0.0, max=6.0)],
                  {"x": F("N", 4, scale=4), "z": F("N", 4, scale=4)}, {}, 10, {"fused": 1}),
    "conv-relu6": ([n("Conv", ["x", "w"], ["c"], group=3), n("Clip", ["c", "lo", "hi"], ["y"])],
                   {"x": F("N", 3, 5, 5, scale=3)}, {"w": w(3, 1, 3, 3, scale=2), "lo": f32(0), "hi": f32(6)},
                   13, {"fused": 1}),
}


@pytest.mark.parametrize("name", sorted(FUSIBLE))
def test_fusion_on_and_off_give_the_same_numbers(name):
    nodes, inputs, inits, opset, expect = FUSIBLE[name]
    onnx_model = make_model(nodes, inputs, ["y"], inits, opset)
    fused_graph, report = convert_to_graph(onnx_model)
    plain_graph, plain = convert_to_graph(onnx_model, fusion=False)
    for what, count in expect.items():
        assert len(getattr(report, what)) == count, f"{what}: {getattr(report, what)}"
        assert not getattr(plain, what), f"fusion=False still did {what}: {getattr(plain, what)}"
    assert len(fused_graph.nodes) < len(plain_graph.nodes)
    fused, unfused = build_lite(write_model(fused_graph)), build_lite(write_model(plain_graph))
    rng = np.random.default_rng(_seed(name))
    for batch in (1, 3):
        feeds = {k: v.draw(rng, batch) for k, v in inputs.items()}
        expected = run_onnxruntime(onnx_model, feeds)
        with_fusion, without = predict(fused, feeds), predict(unfused, feeds)
        assert_matches(with_fusion, expected, f"{name} fused, batch {batch}")
        assert_matches(without, expected, f"{name} unfused, batch {batch}")
        np.testing.assert_allclose(with_fusion[0], without[0], rtol=1e-5, atol=1e-6)
