"""Whole models through convert(): the zoo CNNs, old-style opset 9, unsupported and malformed models."""

from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from lite.errors import InputError, ModelFormatError, UnsupportedOpError
from lite.schema.graph import GraphDef
from lite.schema.reader import read_model
from lite.tools import zoo
from lite.tools.converter import convert, convert_to_graph
from tests.support.converter import graph_model, random, three_unsupported_model


def converted(model: onnx.ModelProto, **options) -> tuple[GraphDef, object]:
    """Converts, writes the bytes and reads them back with the validating reader."""
    _, report = convert_to_graph(model, **options)
    return read_model(convert(model, **options)), report


def op_counts(graph: GraphDef) -> Counter:
    return Counter(node.op_type for node in graph.nodes)


def with_activation(graph: GraphDef, op_type: str, activation: str) -> int:
    return sum(n.op_type == op_type and n.attrs["activation_type"] == activation for n in graph.nodes)


def names(graph: GraphDef, indices: list[int]) -> list[str]:
    return [graph.tensors[i].name for i in indices]


def check_structure(graph: GraphDef) -> None:
    """Inputs are not constants, every node output is a non-const tensor, no BN/Identity is left."""
    assert all(not graph.tensors[i].is_const for i in graph.inputs)
    assert all(not graph.tensors[t].is_const for n in graph.nodes for t in n.outputs)
    assert not {"BatchNorm", "Identity"} & set(op_counts(graph))


@pytest.fixture(scope="module")
def resnet18() -> onnx.ModelProto:
    return zoo.resnet18(dynamic_batch=True)


def test_resnet18(resnet18):
    graph, report = converted(resnet18)
    check_structure(graph)
    assert op_counts(graph) == {"Conv2DFusion": 20, "AddFusion": 8, "MaxPoolFusion": 1, "AvgPoolFusion": 1,
                                "Flatten": 1, "MatMulFusion": 1}
    assert with_activation(graph, "Conv2DFusion", "RELU") == 9 and with_activation(graph, "AddFusion", "RELU") == 8
    assert len(report.bn_folded) == 20 and len(report.fused) == 17
    assert (report.onnx_nodes, report.lite_nodes) == (len(resnet18.graph.node), 32)
    assert names(graph, graph.inputs) == ["input"] and names(graph, graph.outputs) == ["output"]
    assert graph.tensors[graph.inputs[0]].shape == (-1, 3, 224, 224)
    assert graph.tensors[graph.outputs[0]].shape == (-1, 1000)


def test_resnet18_without_fusion_keeps_batchnorm_and_relu(resnet18):
    graph, report = converted(resnet18, fusion=False)
    assert op_counts(graph)["BatchNorm"] == 20 and op_counts(graph)["Activation"] == 17
    assert report.bn_folded == [] and report.fused == []


def test_input_shapes_make_shapes_static(resnet18):
    graph, _ = converted(resnet18, input_shapes={"input": [2, 3, 64, 64]})
    assert graph.tensors[graph.inputs[0]].shape == (2, 3, 64, 64)
    assert all(-1 not in t.shape for t in graph.tensors)
    assert graph.tensors[graph.outputs[0]].shape == (2, 1000)


def test_input_shapes_with_unknown_name(resnet18):
    with pytest.raises(InputError, match="'images'.*graph inputs are \\['input'\\]"):
        convert(resnet18, input_shapes={"images": [1, 3, 224, 224]})


def test_mobilenet_v2():
    graph, report = converted(zoo.mobilenet_v2())
    check_structure(graph)
    assert set(op_counts(graph)) == {"Conv2DFusion", "AddFusion", "AvgPoolFusion", "Flatten", "MatMulFusion"}
    assert with_activation(graph, "Conv2DFusion", "RELU6") == 35
    depthwise = [n for n in graph.nodes if n.op_type == "Conv2DFusion" and n.attrs["group"] > 1]
    assert len(depthwise) == 17
    assert all(n.attrs["group"] == n.attrs["in_channel"] == n.attrs["out_channel"] for n in depthwise)
    assert len(report.bn_folded) == 52 and len(report.folded) > 0


def test_squeezenet():
    graph, report = converted(zoo.squeezenet())
    check_structure(graph)
    assert op_counts(graph)["Concat"] == 8
    assert [n.attrs["round_mode"] for n in graph.nodes if n.op_type == "MaxPoolFusion"] == ["CEIL"] * 3
    assert with_activation(graph, "Conv2DFusion", "RELU") == 26 and len(report.fused) == 26


def test_inception_block():
    graph, _ = converted(zoo.inception_block(batch_size=2))
    check_structure(graph)
    (concat,) = [n for n in graph.nodes if n.op_type == "Concat"]
    assert len(concat.inputs) == 4 and concat.attrs["axis"] == 1
    assert with_activation(graph, "Conv2DFusion", "RELU") == 6
    assert {n.attrs["kernel_size"] for n in graph.nodes if n.op_type == "Conv2DFusion"} == {(1, 1), (3, 3), (5, 5)}
    assert graph.tensors[graph.outputs[0]].shape == (2, 256, 28, 28)


@pytest.mark.slow
def test_resnet50():
    graph, report = converted(zoo.resnet50())
    check_structure(graph)
    assert len(report.bn_folded) == 53 and op_counts(graph)["Conv2DFusion"] == 53


def test_old_style_opset9():
    model = zoo.old_style_opset9()
    graph, report = converted(model)
    check_structure(graph)
    assert names(graph, graph.inputs) == ["data"] and names(graph, graph.outputs) == ["prob"]
    assert sorted(report.folded) == sorted(n.name for n in model.graph.node
                                           if n.op_type in ("Constant", "ConstantOfShape"))
    assert report.removed == ["dropout"] and report.opset == 9
    assert op_counts(graph) == {"Conv2DFusion": 3, "LRN": 1, "MulFusion": 1, "AddFusion": 2,
                                "MaxPoolFusion": 1, "Reshape": 1, "MatMulFusion": 1, "Softmax": 1}
    by_name = {n.name: n for n in graph.nodes}
    assert by_name["conv1"].attrs["activation_type"] == "RELU"
    # the three-input Sum: a chain of two Adds, the Relu after it fused into the last (canonical.py)
    assert by_name["sum"].op_type == "AddFusion" and by_name["sum"].attrs["activation_type"] == "RELU"
    assert by_name["softmax"].attrs["axis"] == (1,)
    assert graph.tensors[by_name["branch_3x3"].inputs[2]].data.tolist() == [np.float32(0.05)] * 8


def test_add_chain():
    graph, _ = converted(zoo.add_chain(n=500))
    assert op_counts(graph) == {"AddFusion": 500}
    assert sum(t.is_const for t in graph.tensors) == 500 and len(graph.tensors) == 1001


def test_dropout_and_identity_are_gone():
    nodes = [helper.make_node("Identity", ["x"], ["a"], name="identity"),
             helper.make_node("Relu", ["a"], ["b"], name="relu"),
             helper.make_node("Dropout", ["b", "ratio"], ["c"], name="dropout"),
             helper.make_node("Identity", ["c"], ["y"], name="identity_out")]
    model = graph_model(nodes, {"x": [1, 4]}, ["y"], {"ratio": np.array(0.5, np.float32)}, opset=13)
    graph, report = converted(model)
    assert [n.op_type for n in graph.nodes] == ["Activation"] and names(graph, graph.outputs) == ["y"]
    assert names(graph, graph.nodes[0].inputs) == ["x"]
    assert sorted(report.removed) == ["dropout", "identity", "identity_out"]


def test_initializers_listed_as_inputs_are_constants():
    nodes = [helper.make_node("Add", ["x", "c"], ["y"], name="add")]
    model = graph_model(nodes, {"x": [2], "c": [2]}, ["y"], {"c": random(2)})
    graph, _ = converted(model)
    assert names(graph, graph.inputs) == ["x"] and graph.tensors[graph.nodes[0].inputs[1]].is_const


@pytest.mark.parametrize("coordinates", [False, True])
def test_sparse_initializer_becomes_a_dense_constant(coordinates):
    indices = np.array([[0, 1], [1, 2]]) if coordinates else np.array([1, 5])
    sparse = helper.make_sparse_tensor(helper.make_tensor("c", TensorProto.FLOAT, [2], [3.0, 4.0]),
                                       helper.make_tensor("i", TensorProto.INT64, indices.shape, indices.ravel()),
                                       [2, 3])
    model = graph_model([helper.make_node("Add", ["x", "c"], ["y"], name="add")], {"x": [2, 3]}, ["y"])
    model.graph.sparse_initializer.append(sparse)
    graph, _ = converted(model)
    np.testing.assert_array_equal(graph.tensors[graph.nodes[0].inputs[1]].data, [[0, 3, 0], [0, 0, 4]])


def test_every_tensor_has_its_onnx_dtype():
    nodes = [helper.make_node("Shape", ["x"], ["s"], name="shape"),
             helper.make_node("Cast", ["s"], ["f"], name="cast", to=TensorProto.FLOAT),
             helper.make_node("Less", ["f", "x"], ["m"], name="less"),
             helper.make_node("Where", ["m", "x", "f"], ["y"], name="where")]
    graph, _ = converted(graph_model(nodes, {"x": ["n"]}, ["y", "m"]))
    dtypes = {t.name: t.dtype for t in graph.tensors}
    assert dtypes == {"x": np.float32, "s": np.int64, "f": np.float32, "m": np.bool_, "y": np.float32}


def test_model_proto_is_not_modified(resnet18):
    before = resnet18.SerializeToString()
    convert(resnet18, input_shapes={"input": [1, 3, 32, 32]})
    assert resnet18.SerializeToString() == before


def test_convert_accepts_path_and_bytes_and_writes_only_when_asked(tmp_path):
    model = zoo.old_style_opset9()
    source = tmp_path / "m.onnx"
    source.write_bytes(model.SerializeToString())
    data = convert(str(source))
    assert list(tmp_path.iterdir()) == [source]
    assert convert(source, tmp_path / "m.lite") == data == convert(model.SerializeToString())
    assert (tmp_path / "m.lite").read_bytes() == data


def test_three_unsupported_ops_raise_one_error_and_write_nothing(tmp_path):
    output = tmp_path / "m.lite"
    with pytest.raises(UnsupportedOpError) as info:
        convert(three_unsupported_model(), output)
    assert not output.exists()
    assert [(op, name, opset) for op, name, opset, _ in info.value.unsupported] == [
        ("Det", "det", 17), ("FancyOp", "custom", 17), ("Dropout", "dropout", 17)]
    message = str(info.value)
    assert "3 unsupported op(s)" in message
    assert "no converter mapping for Det" in message
    assert "domain 'com.example'" in message and "training_mode" in message


def test_op_newer_than_the_model_opset_says_how_to_upgrade():
    model = graph_model([helper.make_node("HardSwish", ["x"], ["y"], name="hs")], {"x": [2]}, ["y"], opset=13)
    with pytest.raises(UnsupportedOpError, match="HardSwish converts from opset 14.*convert_version"):
        convert(model)


# ---- malformed input -----------------------------------------------------------------


def _valid_bytes() -> bytes:
    return zoo.old_style_opset9().SerializeToString()


@pytest.mark.parametrize("data", [b"\x00\xffnot a model\xff" * 3, _valid_bytes()[:700], b""])
def test_garbage_or_truncated_bytes(data):
    with pytest.raises(ModelFormatError):
        convert(data)


def test_missing_file(tmp_path):
    with pytest.raises(ModelFormatError, match="cannot read ONNX model"):
        convert(tmp_path / "nope.onnx")


def _edited(edit) -> onnx.ModelProto:
    model = graph_model([helper.make_node("Relu", ["x"], ["a"], name="relu"),
                         helper.make_node("Neg", ["a"], ["y"], name="neg")], {"x": [2]}, ["y"])
    edit(model.graph)
    return model


@pytest.mark.parametrize(("edit", "message"), [
    (lambda g: g.node[1].input.__setitem__(0, "ghost"), "reads 'ghost', which names no"),
    (lambda g: g.node[0].input.__setitem__(0, "y"), "cycle"),
    (lambda g: g.node[1].output.__setitem__(0, "a"), "writes tensor 'a'"),
    (lambda g: g.output[0].__setattr__("name", "z"), "graph output 'z' is not produced"),
    (lambda g: g.ClearField("output"), "no outputs"),
    (lambda g: g.node.append(helper.make_node("Concat", ["a"], ["c"], name="concat")), "required attribute 'axis'"),
])
def test_malformed_graphs(edit, message):
    with pytest.raises(ModelFormatError, match=message):
        convert(_edited(edit))


def test_missing_required_input_and_bad_attribute_length():
    model = graph_model([helper.make_node("Conv", ["x"], ["y"], name="conv")], {"x": [1, 1, 4, 4]}, ["y"])
    with pytest.raises(ModelFormatError, match="required input #1"):
        convert(model)
    model = graph_model([helper.make_node("MaxPool", ["x"], ["y"], name="pool", kernel_shape=[2, 2], pads=[1])],
                        {"x": [1, 1, 4, 4]}, ["y"])
    with pytest.raises(ModelFormatError, match="'pads' has 1 values, expected 4"):
        convert(model)


def test_no_default_opset_import():
    model = _edited(lambda g: None)
    del model.opset_import[:]
    with pytest.raises(ModelFormatError, match="no default-domain"):
        convert(model)


def test_path_object_is_accepted(tmp_path):
    path = Path(tmp_path) / "chain.onnx"
    onnx.save(zoo.add_chain(n=3), path)
    assert read_model(convert(path)).nodes[0].op_type == "AddFusion"


# ---- custom domains --------------------------------------------------------------------


def test_a_declared_custom_domain_is_no_longer_unsupported():
    with pytest.raises(UnsupportedOpError) as info:
        convert(three_unsupported_model(), custom_domains=["com.example"])
    assert [op for op, *_ in info.value.unsupported] == ["Det", "Dropout"]


def test_custom_node_output_types_come_from_value_info():
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node("Vendor", ["r"], ["v"], name="vendor", domain="com.example", k=2),
             helper.make_node("Transpose", ["v"], ["t"], name="transpose", perm=[1, 0]),
             helper.make_node("Identity", ["v"], ["copy"], name="identity")]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
        [helper.make_tensor_value_info(name, TensorProto.UNDEFINED, None) for name in ("t", "copy")],
        value_info=[helper.make_tensor_value_info("v", TensorProto.FLOAT, [2, 4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.example", 1)])
    lite_graph, report = converted(model, custom_domains=["com.example"])
    assert op_counts(lite_graph) == {"Activation": 1, "Custom": 1, "Transpose": 1} and report.removed == ["identity"]
    vendor = next(n for n in lite_graph.nodes if n.op_type == "Custom")
    assert vendor.attrs["attrs"] == {"k": 2} and names(lite_graph, vendor.outputs) == ["copy"]  # renamed, still typed
    assert {t.name: (t.dtype, t.shape) for t in lite_graph.tensors if t.name in ("copy", "t")} == {
        "copy": (np.float32, (2, 4)), "t": (np.float32, (4, 2))}


def test_an_element_type_onnx_does_not_define_is_unsupported_not_a_crash():
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", 999, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    with pytest.raises(UnsupportedOpError, match="element type 999 \\(not an ONNX type\\)"):
        convert(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))


def test_a_recursive_model_local_function_is_a_format_error():
    function = helper.make_function("local", "F", ["a"], ["b"], [helper.make_node("F", ["a"], ["b"], domain="local")],
                                    [helper.make_opsetid("", 17)])
    graph = helper.make_graph([helper.make_node("F", ["x"], ["y"], domain="local")], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("local", 1)],
                              functions=[function])
    with pytest.raises(ModelFormatError, match="recursive"):
        convert(model)
