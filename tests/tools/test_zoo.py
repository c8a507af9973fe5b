"""The deterministic model zoo."""

import numpy as np
import onnx
import pytest

import lite
from lite.tools import zoo
from lite.tools.converter import convert
from tests.oracle import relative_l2, run_onnxruntime


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
    assert set(zoo.MODELS) == {"resnet18", "resnet50", "mobilenet_v2", "mobilenet_v3_large", "efficientnet_b0",
                               "squeezenet", "inception_block", "bert_encoder", "old_style_opset9", "add_chain"}
    assert len(zoo.add_chain(n=7).graph.node) == 7


@pytest.mark.parametrize("name", ["resnet18", "mobilenet_v2", "mobilenet_v3_large", "efficientnet_b0", "squeezenet",
                                  "inception_block", "bert_encoder"])
def test_outputs_depend_on_the_input(name):
    """A model whose output ignores its input would let a wrong kernel pass an accuracy test."""
    model = getattr(zoo, name)()
    (x,) = model.graph.input
    dims = [d.dim_value for d in x.type.tensor_type.shape.dim]
    rng = np.random.default_rng(1)
    first, second = (run_onnxruntime(model, {x.name: rng.standard_normal(dims).astype(np.float32)})[0]
                     for _ in range(2))
    assert np.linalg.norm(first - second) / np.linalg.norm(first) > 0.01


@pytest.mark.parametrize("name, ops", [
    ("mobilenet_v3_large", {"HardSwish", "HardSigmoid", "Relu", "GlobalAveragePool", "Mul", "BatchNormalization"}),
    ("efficientnet_b0", {"Sigmoid", "Mul", "GlobalAveragePool", "BatchNormalization"}),
    ("bert_encoder", {"MatMul", "Softmax", "LayerNormalization", "Erf"}),
])
def test_models_convert_and_match_onnxruntime(name, ops):
    model = getattr(zoo, name)()
    onnx.checker.check_model(model)
    assert ops <= {n.op_type for n in model.graph.node}
    native = lite.Model()
    native.build(convert(model), lite.ModelType.LITE, lite.Context(thread_num=2))
    (x,) = native.get_inputs()
    data = np.random.default_rng(2).standard_normal(x.shape).astype(np.float32)
    [y] = native.predict([data])
    assert relative_l2(y.get_data_to_numpy(), run_onnxruntime(model, {x.name: data})[0]) < 1e-4


@pytest.mark.parametrize("net, params", [("MobileNetV3Large", 5_483_032), ("EfficientNetB0", 5_288_548)])
def test_cnn_layouts_have_torchvisions_parameter_counts(net, params):
    torch = pytest.importorskip("torch")
    from lite.tools import zoo_nets

    assert sum(p.numel() for p in getattr(zoo_nets, net)().parameters()) == params
    depthwise = {m.kernel_size for m in getattr(zoo_nets, net)().modules()
                 if isinstance(m, torch.nn.Conv2d) and m.groups > 1}
    assert depthwise == {(3, 3), (5, 5)}


def test_bert_encoder_batch_and_sequence_are_dynamic():
    model = zoo.bert_encoder(dynamic_batch=True, layers=1, width=64, heads=4, feed_forward=256)
    (x,) = model.graph.input
    assert x.name == "x" and [d.dim_param or d.dim_value for d in x.type.tensor_type.shape.dim] == ["batch", "seq", 64]
    native = lite.Model()
    native.build(convert(model), lite.ModelType.LITE, lite.Context(thread_num=2))
    rng = np.random.default_rng(3)
    for shape in ([1, 128, 64], [3, 40, 64]):
        if list(native.get_inputs()[0].shape) != shape:
            native.resize(native.get_inputs(), [shape])
        data = rng.standard_normal(shape).astype(np.float32)
        [y] = native.predict([data])
        assert relative_l2(y.get_data_to_numpy(), run_onnxruntime(model, {"x": data})[0]) < 1e-4, shape
