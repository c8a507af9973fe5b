"""Hostile or broken ONNX input to the converter: always a clear LiteError, never a raw exception."""

import math

import numpy as np
import onnx
import pytest
from onnx import AttributeProto, TensorProto, helper, numpy_helper

from lite.errors import InputError, MemoryLimitError, ModelFormatError
from lite.tools.converter import convert, convert_to_graph
from lite.tools.converter.onnx_graph import DATA_PROP_LIMIT, _data_propagation_is_bounded


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


def _retyped(node: onnx.NodeProto, name: str, attribute_type: int) -> onnx.NodeProto:
    """``node`` with the type of its attribute ``name`` changed (its value fields stay as they were)."""
    next(a for a in node.attribute if a.name == name).type = attribute_type
    return node


@pytest.mark.parametrize("node", [
    _retyped(helper.make_node("ConstantOfShape", ["s"], ["y"], value=numpy_helper.from_array(np.float32([1.5]))),
             "value", AttributeProto.INTS),
    _retyped(helper.make_node("Cast", ["s"], ["y"], to=TensorProto.FLOAT), "to", AttributeProto.UNDEFINED),
    helper.make_node("Cast", ["s"], ["y"], to=math.nan),
    helper.make_node("Cast", ["s"], ["y"], to=b"\xff\xfe"),
], ids=["ConstantOfShape value of ints", "Cast to of no type", "Cast to nan", "Cast to non-UTF-8 bytes"])
def test_an_attribute_of_the_wrong_type_is_a_format_error(node):
    # ONNX inference cannot type y, so the converter types it from the attribute (it raised
    # AttributeError, ValueError, UnicodeDecodeError)
    nodes = [helper.make_node("Shape", ["x"], ["s"]), node, helper.make_node("Add", ["y", "x"], ["z"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3])],
                              [helper.make_tensor_value_info("z", TensorProto.FLOAT, None)])
    with pytest.raises(ModelFormatError, match="malformed ONNX node"):
        convert(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))


def range_cast(n: int) -> onnx.ModelProto:
    """Cast(Range(0, n, 1)) to float, from constant bounds."""
    bounds = [numpy_helper.from_array(np.int64(v), k) for k, v in (("start", 0), ("limit", n), ("delta", 1))]
    nodes = [helper.make_node("Range", ["start", "limit", "delta"], ["r"], name="range"),
             helper.make_node("Cast", ["r"], ["y"], name="cast", to=TensorProto.FLOAT)]
    return model(nodes, [], bounds)


def test_data_propagation_is_skipped_for_long_one_dimensional_tensors():
    # ONNX data propagation spells a 1-D tensor of N elements as N protobuf dims: 2**31 took all memory
    for n, bounded in ((16, True), (DATA_PROP_LIMIT + 1, False), (2**31, False)):
        onnx_model = range_cast(n)
        assert _data_propagation_is_bounded(onnx_model, onnx_model.SerializeToString()) is bounded
    with pytest.raises(MemoryLimitError, match="'range'.*memory limit"):
        convert(range_cast(2**31))
    graph, _ = convert_to_graph(range_cast(DATA_PROP_LIMIT + 1))
    assert graph.tensors[graph.outputs[0]].shape == (DATA_PROP_LIMIT + 1,)


def test_a_declared_input_of_2_to_the_40_elements_is_refused_quickly():
    graph = helper.make_graph([helper.make_node("Add", ["x", "x"], ["y"], name="add")], "g",
                              [helper.make_tensor_value_info("x", TensorProto.INT64, [2**40])],
                              [helper.make_tensor_value_info("y", TensorProto.INT64, None)])
    onnx_model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    assert not _data_propagation_is_bounded(onnx_model, onnx_model.SerializeToString())
    with pytest.raises(MemoryLimitError, match="memory limit"):
        convert(onnx_model)


@pytest.mark.parametrize("op", ["Softmax", "Flatten"])
def test_a_float_axis_past_int64_is_a_format_error(op):
    # int(1e30) fits a Python int, not the .lite file: the writer raised TypeError
    onnx_model = model([helper.make_node(op, ["x"], ["y"], name="node", axis=1e30)], [("x", ["N", 3])])
    with pytest.raises(ModelFormatError, match="'node'.*axis=.*does not fit in int64"):
        convert(onnx_model)
