"""The deterministic model zoo."""

import numpy as np
import onnx
import pytest

from lite.tools import zoo
from tests.oracle import run_onnxruntime


def test_torch_export_is_deterministic_and_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("DELITE_ZOO_CACHE", str(tmp_path / "a"))
    first = zoo.inception_block(image_size=8).SerializeToString()
    (cached,) = (tmp_path / "a").iterdir()
    assert cached.name.startswith("inception_block_batch_size=1_dynamic_batch=False_image_size=8")
    assert "torch" in cached.name and cached.read_bytes() == first
    monkeypatch.setenv("DELITE_ZOO_CACHE", str(tmp_path / "b"))
    assert zoo.inception_block(image_size=8).SerializeToString() == first
    assert zoo.inception_block(image_size=8).SerializeToString() == first


def test_cache_key_includes_arguments(tmp_path, monkeypatch):
    monkeypatch.setenv("DELITE_ZOO_CACHE", str(tmp_path))
    static = zoo.inception_block(image_size=8)
    dynamic = zoo.inception_block(image_size=8, dynamic_batch=True)
    assert len(list(tmp_path.iterdir())) == 2
    assert static.graph.input[0].type.tensor_type.shape.dim[0].dim_value == 1
    assert dynamic.graph.input[0].type.tensor_type.shape.dim[0].dim_param == "batch"


def test_torch_models_keep_batchnorm_for_the_converter_to_fold():
    ops = {n.op_type for n in zoo.inception_block().graph.node}
    assert {"Conv", "BatchNormalization", "Relu", "MaxPool", "Concat"} <= ops


@pytest.mark.parametrize("build", [zoo.old_style_opset9, zoo.add_chain])
def test_helper_models_are_deterministic_and_valid(build):
    model = build()
    assert model.SerializeToString() == build().SerializeToString()
    onnx.checker.check_model(model)
    feed = {model.graph.input[0].name: np.random.default_rng(0).normal(
        size=[d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]).astype(np.float32)}
    (output,) = run_onnxruntime(model, feed)
    assert np.isfinite(output).all()


def test_old_style_opset9_shape():
    model = zoo.old_style_opset9()
    assert model.ir_version == 3 and model.opset_import[0].version == 9
    initializers = {t.name for t in model.graph.initializer}
    assert initializers <= {i.name for i in model.graph.input}
    assert {"Constant", "ConstantOfShape", "Sum", "LRN", "Gemm"} <= {n.op_type for n in model.graph.node}


def test_models_table():
    assert set(zoo.MODELS) == {"resnet18", "resnet50", "mobilenet_v2", "squeezenet", "inception_block",
                               "old_style_opset9", "add_chain"}
    assert len(zoo.add_chain(n=7).graph.node) == 7


@pytest.mark.parametrize("name", ["resnet18", "mobilenet_v2", "squeezenet", "inception_block"])
def test_outputs_depend_on_the_input(name):
    """A model whose output ignores its input would let a wrong kernel pass an accuracy test."""
    model = getattr(zoo, name)()
    dims = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    rng = np.random.default_rng(1)
    first, second = (run_onnxruntime(model, {"input": rng.standard_normal(dims).astype(np.float32)})[0]
                     for _ in range(2))
    assert np.linalg.norm(first - second) / np.linalg.norm(first) > 0.01
