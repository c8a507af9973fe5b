"""Hostile or broken ONNX input to the converter: always a clear LiteError, never a raw exception."""

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from lite.errors import InputError, ModelFormatError
from lite.tools.converter import convert


def model(nodes, inputs, initializers=(), opset=17):
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(k, TensorProto.FLOAT, v) for k, v in inputs],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def external_weight(location: str):
    weight = numpy_helper.from_array(np.ones((4, 4), np.float32), "w")
    weight.ClearField("raw_data")
    weight.data_location = TensorProto.EXTERNAL
    for key, value in (("location", location), ("offset", "0"), ("length", "64")):
        entry = weight.external_data.add()
        entry.key, entry.value = key, value
    return model([helper.make_node("MatMul", ["x", "w"], ["y"])], [("x", [1, 4])], [weight])


@pytest.mark.parametrize("location", ["../../../etc/passwd", "/etc/passwd"])
def test_external_data_outside_the_model_folder_is_refused(tmp_path, location):
    folder = tmp_path / "models"
    folder.mkdir()
    path = folder / "m.onnx"
    path.write_bytes(external_weight(location).SerializeToString())
    with pytest.raises(ModelFormatError, match="should be (a )?(file inside|a relative path)"):
        convert(str(path))
    with pytest.raises(ModelFormatError):
        convert(external_weight(location))


@pytest.mark.parametrize("onnx_model, message", [
    (model([helper.make_node("Concat", ["x", "x"], ["y"], name="cat")], [("x", [2, 3])]),
     "node 'cat' \\(Concat, opset 17\\): required attribute 'axis' is missing"),
    (model([helper.make_node("Add", ["x", "c"], ["y"], name="add")], [("x", [2, 3])],
           [numpy_helper.from_array(np.ones((4, 5), np.float32), "c")]), "shapes do not agree.*Add"),
    (model([helper.make_node("Conv", ["x", "w"], ["y"], name="conv")], [("x", [1, 3, 8, 8])],
           [numpy_helper.from_array(np.ones((4, 5, 3, 3), np.float32), "w")]), "'conv'.*3 channels.*expects 5"),
    (model([helper.make_node("Relu", ["nowhere"], ["y"], name="relu")], [("x", [2])]), "nowhere"),
])
def test_malformed_models_name_the_node(onnx_model, message):
    with pytest.raises(ModelFormatError, match=message):
        convert(onnx_model)


def test_garbage_and_missing_files(tmp_path):
    with pytest.raises(ModelFormatError, match="not a valid ONNX model"):
        convert(b"\x08\x07garbage" * 10)
    with pytest.raises(ModelFormatError, match="cannot read ONNX model"):
        convert(str(tmp_path / "missing.onnx"))


def test_initializer_whose_dims_disagree_with_its_data():
    weight = numpy_helper.from_array(np.ones(4, np.float32), "c")
    weight.dims[0] = 1_000_000
    with pytest.raises(ModelFormatError, match="initializer 'c' cannot be read"):
        convert(model([helper.make_node("Add", ["x", "c"], ["y"])], [("x", [4])], [weight]))


def test_bad_input_shape_override_names_the_inputs():
    with pytest.raises(InputError, match="graph inputs are \\['x'\\]"):
        convert(model([helper.make_node("Relu", ["x"], ["y"])], [("x", [2])]), input_shapes={"nope": [1]})
