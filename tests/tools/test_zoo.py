"""The deterministic model zoo, built with numpy and onnx.helper alone."""

import functools
import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import lite
from lite.tools import zoo, zoo_nets
from lite.tools.converter import convert
from tests.support.oracle import relative_l2, run_onnxruntime

# small versions of each model, for the cases that only need its structure
SMALL = {
    "resnet18": {"image_size": 32}, "resnet50": {"image_size": 32}, "mobilenet_v2": {"image_size": 32},
    "mobilenet_v3_large": {"image_size": 32}, "efficientnet_b0": {"image_size": 32}, "squeezenet": {"image_size": 32},
    "inception_block": {"image_size": 8}, "bert_encoder": {"seq_len": 8, "layers": 1, "width": 32, "heads": 4,
                                                           "feed_forward": 64},
}
CNN_OPS = {"Conv", "BatchNormalization", "Add", "GlobalAveragePool", "Flatten", "Gemm"}
OP_TYPES = {
    "resnet18": CNN_OPS | {"Relu", "MaxPool"},
    "resnet50": CNN_OPS | {"Relu", "MaxPool"},
    "mobilenet_v2": CNN_OPS | {"Clip", "Constant"},
    "mobilenet_v3_large": CNN_OPS | {"HardSwish", "HardSigmoid", "Relu", "Mul"},
    "efficientnet_b0": CNN_OPS | {"Sigmoid", "Mul"},
    "squeezenet": {"Conv", "Relu", "MaxPool", "Concat", "GlobalAveragePool", "Flatten"},
    "inception_block": {"Conv", "BatchNormalization", "Relu", "MaxPool", "Concat"},
    "bert_encoder": {"MatMul", "Add", "Transpose", "Reshape", "Split", "Squeeze", "Div", "Softmax",
                     "LayerNormalization", "Erf", "Mul", "Constant"},
}
# torchvision's parameter counts (BatchNorm running statistics are buffers, not parameters)
TORCHVISION_PARAMETERS = {"resnet18": 11_689_512, "resnet50": 25_557_032, "mobilenet_v2": 3_504_872,
                          "mobilenet_v3_large": 5_483_032, "efficientnet_b0": 5_288_548, "squeezenet": 1_235_496}
DEPTHWISE_KERNELS = {"mobilenet_v2": {3}, "mobilenet_v3_large": {3, 5}, "efficientnet_b0": {3, 5}}


@pytest.fixture(scope="module")
def built():
    """``built(name)``: the zoo's model ``name`` with default arguments, built once for this module (do not modify)."""
    return functools.cache(lambda name: getattr(zoo, name)())


def dims_of(value: onnx.ValueInfoProto) -> list[int | str]:
    return [d.dim_param or d.dim_value for d in value.type.tensor_type.shape.dim]


def random_input(model: onnx.ModelProto, seed: int = 0, **free: int) -> dict[str, np.ndarray]:
    """Random data for the model's (first) input; ``free`` sizes its dynamic dims by name."""
    x = model.graph.input[0]
    shape = [free[d] if isinstance(d, str) else d for d in dims_of(x)]
    return {x.name: np.random.default_rng(seed).standard_normal(shape).astype(np.float32)}


DETERMINISM_DEFAULT = ("resnet18", "mobilenet_v3_large", "bert_encoder")
"""The builders the default run checks for determinism (one of each family); -m slow checks all."""


@pytest.mark.parametrize("name", [n if n in DETERMINISM_DEFAULT else pytest.param(n, marks=pytest.mark.slow)
                                  for n in SMALL if n != "resnet50"])  # NOTE: resnet18 runs the same code
def test_builds_are_deterministic(name):
    build = getattr(zoo, name)
    assert build(**SMALL[name]).SerializeToString() == build(**SMALL[name]).SerializeToString()


@pytest.mark.parametrize("name", OP_TYPES)
def test_models_are_valid_and_keep_the_exporters_op_patterns(name, built):
    model = built(name)
    onnx.checker.check_model(model, full_check=True)  # NOTE: strict shape inference checks the declared output
    assert {n.op_type for n in model.graph.node} == OP_TYPES[name]
    assert model.opset_import[0].version == 17 and model.ir_version == 8
    (x,), (y,) = model.graph.input, model.graph.output
    assert (x.name, y.name) == ("x" if name == "bert_encoder" else "input", "output")
    assert x.type.tensor_type.elem_type == y.type.tensor_type.elem_type == TensorProto.FLOAT
    assert all(t.data_type == TensorProto.FLOAT for t in model.graph.initializer)


@pytest.mark.parametrize("name", TORCHVISION_PARAMETERS)
def test_cnn_layouts_are_torchvisions(name, built):
    model = built(name)
    trained = [t for t in model.graph.initializer if not t.name.endswith(("running_mean", "running_var"))]
    assert sum(int(np.prod(t.dims)) for t in trained) == TORCHVISION_PARAMETERS[name]
    convs = [{a.name: helper.get_attribute_value(a) for a in n.attribute} for n in model.graph.node
             if n.op_type == "Conv"]
    assert {c["kernel_shape"][0] for c in convs if c["group"] > 1} == DEPTHWISE_KERNELS.get(name, set())


@pytest.mark.parametrize("name", ["resnet18", "resnet50", "mobilenet_v2", "mobilenet_v3_large", "efficientnet_b0",
                                  "squeezenet", "inception_block", "bert_encoder"])
def test_outputs_depend_on_the_input(name, built):
    """A model whose output ignores its input would let a wrong kernel pass an accuracy test."""
    model = built(name)
    first, second = (run_onnxruntime(model, random_input(model, seed))[0] for seed in (1, 2))
    assert np.linalg.norm(first - second) / np.linalg.norm(first) > 0.01


@pytest.mark.parametrize("name", ["resnet50", "mobilenet_v3_large", "efficientnet_b0"])
def test_batchnorm_calibration_keeps_activations_normalised(name, built):
    """Every block's output on random images has a standard deviation of order 1, as in a trained net."""
    model = onnx.ModelProto()
    model.CopyFrom(built(name))
    probes = [n.output[0] for n in model.graph.node if n.op_type == "Add"]
    model.graph.output.extend(helper.make_tensor_value_info(p, TensorProto.FLOAT, None) for p in probes)
    outputs = run_onnxruntime(model, random_input(model, 3))
    stds = {p: float(v.std()) for p, v in zip(["output", *probes], outputs, strict=True)}
    assert all(0.1 < s < 10 for s in stds.values()), stds


@pytest.mark.parametrize("name", [n for n in SMALL if n != "resnet50"])
def test_dynamic_batch_models_run_at_batch_1_and_3(name):
    model = getattr(zoo, name)(dynamic_batch=True, **SMALL[name])
    onnx.checker.check_model(model, full_check=True)
    (x,), (y,) = model.graph.input, model.graph.output
    assert dims_of(x)[0] == dims_of(y)[0] == "batch"
    three = random_input(model, 4, batch=3, seq=5)
    [expected] = run_onnxruntime(model, three)
    assert expected.shape[0] == 3
    for k in range(3):
        [row] = run_onnxruntime(model, {x.name: three[x.name][k:k + 1]})
        assert relative_l2(row[0], expected[k]) < 1e-5, k


def test_static_models_have_the_batch_size():
    model = zoo.resnet18(batch_size=2, image_size=32)
    assert dims_of(model.graph.input[0]) == [2, 3, 32, 32] and dims_of(model.graph.output[0]) == [2, 1000]


@pytest.mark.parametrize("opset", [11, *(pytest.param(o, marks=pytest.mark.slow) for o in (13, 14, 16)),
                                   18])  # NOTE: the ends by default, every one under -m slow
@pytest.mark.parametrize("name, newer_op", [("mobilenet_v3_large", ("HardSwish", 14)),
                                            ("bert_encoder", ("LayerNormalization", 17))])
def test_other_opsets_keep_the_function(name, newer_op, opset):
    """Below the opset that introduced ``newer_op``, the model spells it out with older ops."""
    model = getattr(zoo, name)(opset=opset, **SMALL[name])
    onnx.checker.check_model(model, full_check=True)
    assert model.opset_import[0].version == opset
    assert (newer_op[0] in {n.op_type for n in model.graph.node}) == (opset >= newer_op[1])
    feed = random_input(model, 5)
    [expected] = run_onnxruntime(getattr(zoo, name)(**SMALL[name]), feed)
    assert relative_l2(run_onnxruntime(model, feed)[0], expected) < 1e-5


def test_opsets_before_11_are_refused():
    with pytest.raises(ValueError, match="opsets 11 to"):
        zoo.resnet18(opset=10)


@pytest.mark.parametrize("build", [lambda net, x: zoo_nets.resnet(net, x, False, [1, 1, 1, 1], 10),
                                   lambda net, x: zoo_nets.mobilenet_v2(net, x, 10),
                                   lambda net, x: zoo_nets.mobilenet_v3_large(net, x, 10),
                                   lambda net, x: zoo_nets.efficientnet_b0(net, x, 10),
                                   lambda net, x: zoo_nets.squeezenet(net, x, 10),
                                   lambda net, x: zoo_nets.inception_block(net, x, 3)],
                         ids=["resnet", "mobilenet_v2", "mobilenet_v3_large", "efficientnet_b0", "squeezenet",
                              "inception_block"])
def test_the_numpy_calibration_pass_matches_onnxruntime(build):
    """The BatchNorm statistics come from the builder's own numpy forward pass: it must compute the graph
    (37 px: odd sizes everywhere, partial ceil-mode pooling windows)."""
    net = zoo_nets.Net(17, seed=0)
    x = net.image_input("input", ["batch", 3, 37, 37])
    y = build(net, x)
    model = net.model("calibrated", y, ["batch", *net.values[y].shape[1:]])
    [expected] = run_onnxruntime(model, {"input": net.values[x]})
    assert relative_l2(net.values[y], expected) < 1e-4  # float32 rounding through 20-50 layers, as for Delite


def test_the_builder_names_its_mistakes():
    net = zoo_nets.Net(17, seed=0)
    x = net.input("x", [1, 4, 8, 8])
    net.relu(x, "relu")
    with pytest.raises(ValueError, match="'relu' is taken twice"):
        net.relu(x, "relu")
    with pytest.raises(ValueError, match="needs a calibration value"):
        net.batch_norm(x, "bn")


def test_the_zoo_builds_without_torch():
    script = ("import sys; sys.modules['torch'] = None\n"  # NOTE: `import torch` now raises ImportError
              "from lite.tools import zoo\n"
              "assert zoo.resnet18(image_size=32).graph.node and zoo.bert_encoder(layers=1).graph.node\n")
    subprocess.run([sys.executable, "-c", script], check=True, timeout=120)


@pytest.mark.parametrize("build", [zoo.old_style_opset9, zoo.add_chain])
def test_helper_models_are_deterministic_and_valid(build):
    model = build()
    assert model.SerializeToString() == build().SerializeToString()
    onnx.checker.check_model(model)
    (output,) = run_onnxruntime(model, random_input(model))
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


@pytest.mark.parametrize("name", ["mobilenet_v3_large", "efficientnet_b0", "bert_encoder"])
def test_models_convert_and_match_onnxruntime(name, built):
    model = built(name)
    native = lite.Model()
    native.build(convert(model), lite.ModelType.LITE, lite.Context(thread_num=2))
    (x,) = native.get_inputs()
    data = np.random.default_rng(2).standard_normal(x.shape).astype(np.float32)
    [y] = native.predict([data])
    assert relative_l2(y.get_data_to_numpy(), run_onnxruntime(model, {x.name: data})[0]) < 1e-4


def test_bert_encoder_batch_and_sequence_are_dynamic():
    model = zoo.bert_encoder(dynamic_batch=True, layers=1, width=64, heads=4, feed_forward=256)
    (x,) = model.graph.input
    assert x.name == "x" and dims_of(x) == ["batch", "seq", 64] and dims_of(model.graph.output[0]) == dims_of(x)
    native = lite.Model()
    native.build(convert(model), lite.ModelType.LITE, lite.Context(thread_num=2))
    rng = np.random.default_rng(3)
    for shape in ([1, 128, 64], [3, 40, 64]):
        if list(native.get_inputs()[0].shape) != shape:
            native.resize(native.get_inputs(), [shape])
        data = rng.standard_normal(shape).astype(np.float32)
        [y] = native.predict([data])
        assert relative_l2(y.get_data_to_numpy(), run_onnxruntime(model, {"x": data})[0]) < 1e-4, shape


def test_bert_encoder_with_a_vocabulary_takes_token_ids():
    model = zoo.bert_encoder(dynamic_batch=True, layers=1, width=32, heads=4, feed_forward=64, vocab_size=500)
    (ids,) = model.graph.input
    assert ids.name == "input_ids" and ids.type.tensor_type.elem_type == TensorProto.INT64
    assert dims_of(ids) == ["batch", "seq"] and dims_of(model.graph.output[0]) == ["batch", "seq", 32]
    native = lite.Model()
    native.build(convert(model), lite.ModelType.LITE, lite.Context(thread_num=2))
    data = np.random.default_rng(4).integers(0, 500, (3, 12))
    [y] = native.predict([data])
    assert relative_l2(y.get_data_to_numpy(), run_onnxruntime(model, {"input_ids": data})[0]) < 1e-4
