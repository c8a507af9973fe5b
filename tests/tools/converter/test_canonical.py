"""Every spelling of the same computation reaches the same kernels: the zoo's models written as
other exporters write them (tests/support/respell.py) convert to the same kernel plan and give
the same outputs."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from lite.tools import converter, zoo
from tests.support.e2e import build_lite, predict
from tests.support.quantized import ZOO_SIZES, random_feeds
from tests.support.respell import SPELLINGS


def plan(model) -> list[tuple]:
    """What runs, in order: each kernel's class, op type, fused activation and whether a pool is
    global (fused kernels and blocked chains included)."""
    def attrs(kernel) -> dict:
        return getattr(kernel, "attrs", None) or {}

    return [(type(k).__name__, k.type, attrs(k).get("activation_type"), attrs(k).get("is_global"))
            for k in model._engine.kernels]


NAMES = ["resnet18", *(pytest.param(name, marks=pytest.mark.slow) for name in (
    "squeezenet", "mobilenet_v2", "resnet50", "mobilenet_v3_large", "efficientnet_b0", "inception_block"))]


@pytest.mark.parametrize("spelling", sorted(SPELLINGS))
@pytest.mark.parametrize("name", NAMES)
def test_a_respelled_zoo_model_runs_the_same_kernels_and_outputs(name, spelling):
    original = zoo.MODELS[name](**ZOO_SIZES[name])
    respelled = SPELLINGS[spelling](original)
    if [n.op_type for n in respelled.graph.node] == [n.op_type for n in original.graph.node] and \
            len(respelled.graph.input) == len(original.graph.input):
        pytest.skip(f"{name} has nothing the {spelling} spelling writes another way")
    models = [build_lite(converter.convert(m)) for m in (original, respelled)]
    feeds = random_feeds(original, np.random.default_rng(3))
    predicted = [predict(m, feeds)[0] for m in models]
    assert plan(models[1]) == plan(models[0])
    np.testing.assert_allclose(predicted[1], predicted[0], rtol=1e-5, atol=1e-5)


def test_the_old_style_models_residual_sum_is_an_add_with_its_relu_fused():
    graph, report = converter.convert_to_graph(zoo.old_style_opset9())
    adds = [n for n in graph.nodes if n.op_type == "AddFusion"]
    assert "AddN" not in {n.op_type for n in graph.nodes} and report.canonical == ["sum"]
    assert [n.attrs["activation_type"] for n in adds] == ["NO_ACTIVATION", "RELU"]


def _means(x_shape, cases, opset=18) -> onnx.ModelProto:
    """A model of one ReduceMean of x per case (axes, keepdims), each its own output."""
    nodes, outputs, inits = [], [], []
    for i, (axes, keep) in enumerate(cases):
        inits.append(numpy_helper.from_array(np.array(axes, np.int64), f"axes{i}"))
        nodes.append(helper.make_node("ReduceMean", ["x", f"axes{i}"], [f"y{i}"], name=f"mean{i}", keepdims=keep))
        outputs.append(helper.make_tensor_value_info(f"y{i}", TensorProto.FLOAT, None))
    graph = helper.make_graph(nodes, "means", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
                              outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


@pytest.mark.parametrize("x_shape", [(2, 5, 7, 6), (1, 3, 4, 5, 6)])
def test_a_kept_mean_over_every_spatial_axis_is_the_global_pool_and_other_means_stay_reductions(x_shape):
    rank = len(x_shape)
    plane = list(range(2, rank))
    cases = [(plane, 1), ([a - rank for a in plane][::-1], 1), (plane, 0), (plane[1:], 1), ([1, *plane], 1)]
    model = _means(x_shape, cases)
    graph, report = converter.convert_to_graph(model)
    assert [n.op_type for n in graph.nodes] == ["AvgPoolFusion"] * 2 + ["ReduceFusion"] * 3
    assert all(n.attrs["is_global"] for n in graph.nodes[:2]) and report.canonical == ["mean0", "mean1"]
    x = np.random.default_rng(5).standard_normal(x_shape).astype(np.float32)
    expected = ReferenceEvaluator(model).run(None, {"x": x})
    actual = predict(build_lite(converter.convert(model)), {"x": x})
    for got, want in zip(actual, expected, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_a_mean_over_the_last_axis_of_a_sequence_stays_a_reduction():
    """Rank 3: the last axis is the one spatial axis, and the hidden axis of a transformer's
    activations (LayerNorm's mean, fused or not): no pool."""
    graph, report = converter.convert_to_graph(_means((2, 4, 8), [([2], 1)]))
    assert [n.op_type for n in graph.nodes] == ["ReduceFusion"] and report.canonical == []
