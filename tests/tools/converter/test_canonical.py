"""Every spelling of the same computation reaches the same kernels: the zoo's models written as
other exporters write them (tests/support/respell.py) convert to the same kernel plan and give
the same outputs."""

from __future__ import annotations

import numpy as np
import pytest

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
