"""Whole models from ``lite.tools.zoo``, end to end: convert, predict natively, match onnxruntime.

Every model is checked on fresh seeded random inputs within relative L2 1e-4 of onnxruntime.
Resize: a dynamic-batch export predicted at batch 1, then resized to batch 4; a static batch-1
export resized to 4 (the TorchScript exporter writes ``Flatten``, so it runs); and the
old-style model, whose Reshape bakes batch 1 into a constant, refuses batch 4 with
``lite.InputError`` and stays usable. ResNet-50 cases are ``slow``.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest

import lite
from lite.tools import zoo
from lite.tools.converter import convert, convert_to_graph
from tests.support.e2e import REL_L2, build_lite, predict
from tests.support.oracle import relative_l2, run_onnxruntime


def input_shape(model: onnx.ModelProto, batch: int | None = None) -> tuple[int, ...]:
    """The first graph input's shape, with ``batch`` for dim 0 (a named dim needs one)."""
    dims = [d.dim_value if d.HasField("dim_value") else None for d in model.graph.input[0].type.tensor_type.shape.dim]
    if batch is not None:
        dims[0] = batch
    assert None not in dims, f"{model.graph.name}: give a batch size for {dims}"
    return tuple(dims)


def check(model: lite.Model, onnx_model: onnx.ModelProto, shape: tuple[int, ...], seed: int) -> None:
    """One predict on a fresh random input of ``shape`` against onnxruntime, every output by relative L2."""
    name = onnx_model.graph.input[0].name
    x = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    actual = predict(model, {name: x})
    expected = run_onnxruntime(onnx_model, {name: x})
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected, strict=True):
        assert a.shape == e.shape and a.dtype == e.dtype, (a.shape, a.dtype, e.shape, e.dtype)
        error = relative_l2(a, e)
        assert error <= REL_L2, f"{onnx_model.graph.name} {shape}: relative L2 {error:.3g} > {REL_L2}"


MODELS = {
    "resnet18": lambda: zoo.resnet18(),
    "mobilenet_v2": lambda: zoo.mobilenet_v2(),
    "squeezenet": lambda: zoo.squeezenet(),
    "inception_block": lambda: zoo.inception_block(),
    "old_style_opset9": lambda: zoo.old_style_opset9(),
    "add_chain": lambda: zoo.add_chain(500),
    "resnet50": lambda: zoo.resnet50(),
}
SLOW = {"resnet50"}


@pytest.mark.parametrize("name", [pytest.param(k, marks=pytest.mark.slow) if k in SLOW else k for k in MODELS])
def test_zoo_model_matches_onnxruntime(name):
    onnx_model = MODELS[name]()
    model = build_lite(convert(onnx_model))
    for seed in (1, 2):
        check(model, onnx_model, input_shape(onnx_model), seed)


def test_old_style_model_inputs_are_not_its_initializers():
    onnx_model = zoo.old_style_opset9()
    _, report = convert_to_graph(onnx_model)
    model = build_lite(convert(onnx_model))
    assert [t.name for t in model.get_inputs()] == ["data"]
    assert [t.name for t in model.get_outputs()] == ["prob"]
    assert report.folded and report.removed  # ConstantOfShape/Constant weights folded, Dropout dropped
    check(model, onnx_model, (1, 3, 32, 32), seed=3)


@pytest.mark.parametrize("name", ["resnet18", "mobilenet_v2", pytest.param("resnet50", marks=pytest.mark.slow)])
def test_unfused_conversion_matches_onnxruntime(name):
    """fusion=False keeps BatchNormalization and the activations as nodes of their own."""
    onnx_model = MODELS[name]()
    _, report = convert_to_graph(onnx_model, fusion=False)
    assert not report.bn_folded and not report.fused
    check(build_lite(convert(onnx_model, fusion=False)), onnx_model, input_shape(onnx_model), seed=4)


@pytest.mark.parametrize("name, build, hw", [
    ("inception_block", lambda: zoo.inception_block(dynamic_batch=True), (192, 28, 28)),
    ("resnet18", lambda: zoo.resnet18(dynamic_batch=True), (3, 224, 224)),
    ("mobilenet_v2", lambda: zoo.mobilenet_v2(dynamic_batch=True), (3, 224, 224)),
    pytest.param("resnet50", lambda: zoo.resnet50(dynamic_batch=True), (3, 224, 224), marks=pytest.mark.slow),
])
def test_dynamic_batch_model_resized_from_1_to_4(name, build, hw):
    onnx_model = build()
    model = build_lite(convert(onnx_model))
    assert model.get_inputs()[0].shape == (-1, *hw)
    check(model, onnx_model, (1, *hw), seed=5)
    model.resize(model.get_inputs(), [[4, *hw]])
    assert model.get_inputs()[0].shape == (4, *hw)
    check(model, onnx_model, (4, *hw), seed=6)
    check(model, onnx_model, (4, *hw), seed=7)


def test_static_batch_1_export_resized_to_4():
    """The TorchScript export flattens with ``Flatten``, so the static model runs at batch 4 after resize."""
    onnx_model = zoo.resnet18()
    assert input_shape(onnx_model) == (1, 3, 224, 224)
    model = build_lite(convert(onnx_model))
    check(model, onnx_model, (1, 3, 224, 224), seed=8)
    model.resize(model.get_inputs(), [[4, 3, 224, 224]])
    assert model.get_inputs()[0].shape == (4, 3, 224, 224)
    dynamic = onnx.ModelProto()  # onnxruntime checks the declared batch 1: compare with the batch-4 export
    dynamic.CopyFrom(onnx_model)
    dynamic.graph.input[0].type.tensor_type.shape.dim[0].dim_value = 4
    dynamic.graph.output[0].type.tensor_type.shape.dim[0].dim_value = 4
    check(model, dynamic, (4, 3, 224, 224), seed=9)


def test_batch_baked_into_reshape_refuses_batch_4_and_stays_usable():
    """old_style_opset9 reshapes to the constant [1, -1]: at batch 4 its Gemm cannot run."""
    onnx_model = zoo.old_style_opset9()
    model = build_lite(convert(onnx_model))
    check(model, onnx_model, (1, 3, 32, 32), seed=10)
    with pytest.raises(lite.InputError, match="cannot run"):
        model.resize(model.get_inputs(), [[4, 3, 32, 32]])
    assert model.get_inputs()[0].shape == (1, 3, 32, 32)
    check(model, onnx_model, (1, 3, 32, 32), seed=11)
