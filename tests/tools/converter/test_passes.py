"""ONNX-level passes (checked against onnxruntime on the rewritten ONNX graph) and .lite-level passes."""

import tracemalloc

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import lite
from lite.ops.norm import batchnorm_affine
from lite.schema.graph import GraphDef, NodeDef, TensorDef
from lite.tools.converter import ConversionReport, convert, convert_to_graph
from lite.tools.converter.onnx_graph import OnnxGraph, from_model, infer_shapes
from lite.tools.converter.passes import (
    constant_outputs,
    drop_identities,
    fold_batchnorm,
    fold_constants,
    fuse_activations,
    prune_tensors,
)
from tests.support.converter import fill_and_sum, graph_model, random, to_model
from tests.support.oracle import relative_l2, run_onnxruntime


def prepared(model) -> tuple[OnnxGraph, ConversionReport]:
    g = from_model(model)
    infer_shapes(g)
    return g, ConversionReport(opset=g.opset, onnx_nodes=len(g.nodes))


def same_outputs(original, g: OnnxGraph, feeds: dict[str, np.ndarray], tolerance: float = 1e-6) -> None:
    expected = run_onnxruntime(original, feeds)
    actual = run_onnxruntime(to_model(g), feeds)
    for a, e in zip(actual, expected, strict=True):
        assert relative_l2(a, e) < tolerance


def bn_params(channels: int, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"gamma": rng.uniform(0.5, 1.5, channels).astype(np.float32),
            "beta": rng.normal(0, 0.1, channels).astype(np.float32),
            "mean": rng.normal(0, 0.1, channels).astype(np.float32),
            "var": rng.uniform(0.5, 2.0, channels).astype(np.float32)}


def bn_node(x: str, y: str, name: str = "bn") -> object:
    return helper.make_node("BatchNormalization", [x, "gamma", "beta", "mean", "var"], [y], name=name, epsilon=1e-3)


# ---- constant folding ----------------------------------------------------------------


def test_fold_constant_subgraph():
    nodes = [
        helper.make_node("Constant", [], ["k"], name="k", value=numpy_helper.from_array(np.float32([1, 2, 3]))),
        helper.make_node("Add", ["k", "c"], ["kc"], name="add_const"),
        helper.make_node("Mul", ["x", "kc"], ["y"], name="mul"),
    ]
    model = graph_model(nodes, {"x": [2, 3]}, ["y"], {"c": np.float32([10, 20, 30])})
    g, report = prepared(model)
    assert fold_constants(g, report) == 2
    assert [n.name for n in g.nodes] == ["mul"] and report.folded == ["k", "add_const"]
    np.testing.assert_array_equal(g.consts["kc"], np.float32([11, 22, 33]))
    same_outputs(model, g, {"x": random(2, 3)})


def test_fold_shape_of_static_tensor_and_what_follows():
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="relu"),
        helper.make_node("Shape", ["r"], ["s"], name="shape"),
        helper.make_node("ConstantOfShape", ["s"], ["ones"], name="fill",
                         value=numpy_helper.from_array(np.float32([1.5]))),
        helper.make_node("Add", ["r", "ones"], ["y"], name="add"),
    ]
    model = graph_model(nodes, {"x": [2, 3]}, ["y"])
    g, report = prepared(model)
    fold_constants(g, report)
    assert report.folded == ["shape", "fill"] and g.consts["ones"].shape == (2, 3)
    same_outputs(model, g, {"x": random(2, 3)})


def test_shape_of_dynamic_tensor_is_not_folded():
    nodes = [helper.make_node("Shape", ["x"], ["y"], name="shape")]
    g, report = prepared(graph_model(nodes, {"x": ["n", 3]}, ["y"]))
    assert fold_constants(g, report) == 0


def test_fold_cast_like_of_a_constant_needs_only_the_target_type():
    nodes = [helper.make_node("CastLike", ["c", "x"], ["k"], name="cast_like"),
             helper.make_node("Clip", ["x", "k"], ["y"], name="clip")]
    model = graph_model(nodes, {"x": ["n"]}, ["y"], {"c": np.array(0.0, np.float64)}, input_type=TensorProto.FLOAT)
    g, report = prepared(model)
    fold_constants(g, report)
    assert report.folded == ["cast_like"] and g.consts["k"].dtype == np.float32


def test_fold_node_with_an_unnamed_optional_output():
    nodes = [helper.make_node("Split", ["c"], ["", "b"], name="split", axis=0),
             helper.make_node("Add", ["x", "b"], ["y"], name="add")]
    model = graph_model(nodes, {"x": [2]}, ["y"], {"c": np.float32([1, 2, 3, 4])}, opset=11)
    g, report = prepared(model)
    fold_constants(g, report)
    assert report.folded == ["split"] and g.consts["b"].tolist() == [3, 4] and "" not in g.consts


def test_nondeterministic_ops_are_not_folded():
    nodes = [helper.make_node("RandomNormalLike", ["c"], ["r"], name="rand"),
             helper.make_node("Add", ["x", "r"], ["y"], name="add")]
    g, report = prepared(graph_model(nodes, {"x": [2]}, ["y"], {"c": np.zeros(2, np.float32)}))
    assert fold_constants(g, report) == 0


def test_folded_graph_output_becomes_identity_of_a_constant():
    nodes = [helper.make_node("Constant", [], ["y"], name="k", value=numpy_helper.from_array(np.float32([4])))]
    graph, report = convert_to_graph(graph_model(nodes, {}, ["y"]))
    (node,) = graph.nodes
    assert node.op_type == "Identity" and graph.tensors[graph.outputs[0]].name == "y"
    assert graph.tensors[node.inputs[0]].data.tolist() == [4.0] and report.folded == ["k"]


def test_constant_outputs_renames_the_constant():
    g, _ = prepared(graph_model([helper.make_node("Relu", ["x"], ["y"])], {"x": [1]}, ["y"]))
    g.nodes, g.consts["y"] = [], np.float32([1])
    constant_outputs(g)
    assert "y" not in g.consts and g.nodes[0].output == ["y"] and g.nodes[0].input[0] in g.consts


# ---- Dropout / Identity ------------------------------------------------------------


def test_drop_identity_and_dropout_in_the_middle():
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="relu"),
             helper.make_node("Identity", ["a"], ["b"], name="identity"),
             helper.make_node("Dropout", ["b"], ["c"], name="dropout", ratio=0.3),
             helper.make_node("Neg", ["c"], ["y"], name="neg")]
    model = graph_model(nodes, {"x": [2, 3]}, ["y"], opset=11)
    g, report = prepared(model)
    drop_identities(g, report)
    assert [n.name for n in g.nodes] == ["relu", "neg"] and report.removed == ["identity", "dropout"]
    assert list(g.nodes[1].input) == ["a"]
    same_outputs(model, g, {"x": random(2, 3)})


@pytest.mark.parametrize("op", ["Concat", "Sum", "Max", "Min", "Mean"])
def test_one_input_variadic_ops_are_dropped_as_copies(op):
    """Exporters write a one-input Concat (a cache's past); n-ary ops of one input copy it too."""
    attrs = {"axis": -2} if op == "Concat" else {}
    nodes = [helper.make_node(op, ["x"], ["a"], name="one", **attrs), helper.make_node("Neg", ["a"], ["y"], name="neg"),
             helper.make_node(op, ["a", "x"], ["z"], name="two", **attrs)]
    model = graph_model(nodes, {"x": [2, 3]}, ["y", "z"])
    g, report = prepared(model)
    drop_identities(g, report)
    assert report.removed == ["one"] and [n.name for n in g.nodes] == ["neg", "two"]
    same_outputs(model, g, {"x": random(2, 3)})


def test_a_cast_to_its_input_type_is_dropped_and_a_converting_one_stays():
    """Exporters write float32 -> float32 Casts around a decoder's norms; a Cast that converts stays,
    and so does one writing a graph output."""
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="relu"),
             helper.make_node("Cast", ["a"], ["b"], name="same", to=TensorProto.FLOAT),
             helper.make_node("Cast", ["b"], ["c"], name="to_half", to=TensorProto.FLOAT16),
             helper.make_node("Cast", ["c"], ["d"], name="back", to=TensorProto.FLOAT),
             helper.make_node("Neg", ["d"], ["y"], name="neg"),
             helper.make_node("Cast", ["y"], ["z"], name="out", to=TensorProto.FLOAT)]
    model = graph_model(nodes, {"x": [2, 3]}, ["y", "z"])
    graph, report = convert_to_graph(model)
    assert "same" in report.removed and [n.op_type for n in graph.nodes] == ["Activation", "Cast", "Cast",
                                                                              "Neg", "Cast"]
    x = random(2, 3)
    expected = run_onnxruntime(model, {"x": x})
    built = lite.Model()
    built.build(convert(model))
    for actual, value in zip(built.predict({"x": x}), expected, strict=True):
        np.testing.assert_allclose(actual.data, value, rtol=1e-6)


def test_drop_identity_before_graph_output_renames_its_producer():
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="relu"),
             helper.make_node("Neg", ["a"], ["n"], name="neg"),
             helper.make_node("Identity", ["a"], ["y"], name="identity")]
    model = graph_model(nodes, {"x": [2]}, ["y", "n"])
    g, report = prepared(model)
    drop_identities(g, report)
    assert [list(n.output) for n in g.nodes] == [["y"], ["n"]] and list(g.nodes[1].input) == ["y"]
    same_outputs(model, g, {"x": random(2)})


@pytest.mark.parametrize("outputs", [["y"], ["a", "y"]])
def test_identity_that_cannot_be_rewired_is_kept(outputs):
    nodes = [helper.make_node("Identity", ["x" if outputs == ["y"] else "a", ], ["y"], name="identity")]
    if outputs != ["y"]:
        nodes.insert(0, helper.make_node("Relu", ["x"], ["a"], name="relu"))
    g, report = prepared(graph_model(nodes, {"x": [2]}, outputs))
    drop_identities(g, report)
    assert report.removed == [] and g.nodes[-1].name == "identity"


def test_dropout_with_used_mask_or_training_mode_is_kept():
    nodes = [helper.make_node("Dropout", ["x"], ["y", "mask"], name="dropout")]
    g, report = prepared(graph_model(nodes, {"x": [2]}, ["y", "mask"], opset=13))
    drop_identities(g, report)
    assert report.removed == []
    nodes = [helper.make_node("Dropout", ["x", "", "train"], ["y"], name="dropout")]
    g, report = prepared(graph_model(nodes, {"x": [2]}, ["y"], {"train": np.array(True)}, opset=13))
    drop_identities(g, report)
    assert report.removed == []


# ---- BatchNormalization folding ----------------------------------------------------


def test_fold_batchnorm_into_conv():
    inits = {"w": random(4, 3, 3, 3), **bn_params(4)}
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]), bn_node("c", "y")]
    model = graph_model(nodes, {"x": [1, 3, 8, 8]}, ["y"], inits)
    g, report = prepared(model)
    fold_batchnorm(g, report)
    assert [n.name for n in g.nodes] == ["conv"] and report.bn_folded == ["bn"]
    assert list(g.nodes[0].output) == ["y"] and len(g.nodes[0].input) == 3
    same_outputs(model, g, {"x": random(1, 3, 8, 8)})
    scale, _ = batchnorm_affine(*(inits[k] for k in ("gamma", "beta", "mean", "var")), 1e-3)
    folded = g.consts[g.nodes[0].input[1]]  # NOTE: the float64 product, rounded to float32 once
    assert folded.dtype == np.float32
    np.testing.assert_array_equal(folded, (inits["w"] * scale.reshape(-1, 1, 1, 1)).astype(np.float32))
    assert "w" not in g.consts  # NOTE: read by nothing now: the conversion holds one copy of the weight


@pytest.mark.parametrize(("trans_b", "with_c", "beta"), [(0, True, 1.0), (1, True, 0.5), (1, False, 1.0)])
def test_fold_batchnorm_into_gemm(trans_b, with_c, beta):
    weight = random(5, 4) if trans_b else random(4, 5)
    inits = {"b": weight, **bn_params(5), **({"c": random(5, seed=3)} if with_c else {})}
    gemm = helper.make_node("Gemm", ["x", "b"] + (["c"] if with_c else []), ["g"], name="gemm", transB=trans_b,
                            alpha=1.5, beta=beta)
    model = graph_model([gemm, bn_node("g", "y")], {"x": [3, 4]}, ["y"], inits)
    g, report = prepared(model)
    fold_batchnorm(g, report)
    assert report.bn_folded == ["bn"]
    same_outputs(model, g, {"x": random(3, 4)})


def test_batchnorm_not_folded_when_conv_output_has_another_reader():
    inits = {"w": random(4, 3, 1, 1), **bn_params(4)}
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv"), bn_node("c", "y"),
             helper.make_node("Relu", ["c"], ["r"], name="relu")]
    g, report = prepared(graph_model(nodes, {"x": [1, 3, 4, 4]}, ["y", "r"], inits))
    fold_batchnorm(g, report)
    assert report.bn_folded == []


@pytest.mark.parametrize(("ops", "shapes", "folded"), [
    (["Mul"], [(4, 1, 1)], True),  # a layer scale (timm's ConvNeXt)
    (["Add"], [(1, 4, 1, 1)], True),
    (["Mul", "Add"], [(4, 1, 1), (1, 1, 1)], True),  # both, one after the other, the second one value
    (["Mul"], [(8,)], False),  # one value a column, not a channel
    (["Mul"], [(2, 4, 1, 1)], False),  # broadcasts the batch
    (["Add"], [(4, 1, 8)], False),  # one value a channel and column
])
def test_a_per_channel_mul_or_add_after_a_conv_folds_into_it(ops, shapes, folded):
    inits = {"w": random(4, 3, 3, 3), "b": random(4, seed=2)}
    nodes, last = [helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1])], "c"
    for i, (op, shape) in enumerate(zip(ops, shapes, strict=True)):
        inits[f"k{i}"] = random(*shape, seed=5 + i)
        out = "y" if i == len(ops) - 1 else f"m{i}"
        operands = [f"k{i}", last] if i % 2 else [last, f"k{i}"]  # either operand order
        nodes.append(helper.make_node(op, operands, [out], name=f"{op.lower()}{i}"))
        last = out
    model = graph_model(nodes, {"x": [2, 3, 8, 8]}, ["y"], inits)
    g, report = prepared(model)
    fold_batchnorm(g, report)
    assert ([n.name for n in g.nodes] == ["conv"]) is folded
    assert len(report.bn_folded) == (len(ops) if folded else 0)
    same_outputs(model, g, {"x": random(2, 3, 8, 8)}, tolerance=1e-5)


def test_a_mul_after_a_conv_read_elsewhere_does_not_fold():
    inits = {"w": random(4, 3, 1, 1), "k": random(4, 1, 1)}
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv"), helper.make_node("Mul", ["c", "k"], ["y"]),
             helper.make_node("Relu", ["c"], ["r"], name="relu")]
    g, report = prepared(graph_model(nodes, {"x": [1, 3, 4, 4]}, ["y", "r"], inits))
    fold_batchnorm(g, report)
    assert report.bn_folded == []


def test_batchnorm_fold_leaves_a_shared_weight_alone():
    inits = {"w": random(4, 3, 1, 1), **bn_params(4)}
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv"), bn_node("c", "y"),
             helper.make_node("Conv", ["x", "w"], ["z"], name="other")]
    model = graph_model(nodes, {"x": [1, 3, 4, 4]}, ["y", "z"], inits)
    g, report = prepared(model)
    fold_batchnorm(g, report)
    assert report.bn_folded == ["bn"] and g.nodes[1].input[1] == "w" and "w" in g.consts
    same_outputs(model, g, {"x": random(1, 3, 4, 4)})


def test_batchnorm_fold_needs_constant_weights():
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv"), bn_node("c", "y")]
    model = graph_model(nodes, {"x": [1, 3, 4, 4], "w": [4, 3, 1, 1]}, ["y"], bn_params(4))
    g, report = prepared(model)
    fold_batchnorm(g, report)
    assert report.bn_folded == []


# ---- .lite level -------------------------------------------------------------------


def _conv_relu_model(relu_op: str = "Relu", extra_reader: bool = False, conv_output_is_output: bool = False):
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv"),
             helper.make_node(relu_op, ["c"], ["y"], name="act")]
    outputs = ["y"]
    if extra_reader:
        nodes.append(helper.make_node("Neg", ["c"], ["n"], name="neg"))
        outputs.append("n")
    if conv_output_is_output:
        outputs.append("c")
    return graph_model(nodes, {"x": [1, 3, 4, 4]}, outputs, {"w": random(2, 3, 1, 1)})


def test_fuse_relu_into_conv():
    graph, report = convert_to_graph(_conv_relu_model())
    (conv,) = graph.nodes
    assert conv.attrs["activation_type"] == "RELU" and report.fused == ["act"] and conv.name == "conv"
    assert graph.tensors[conv.outputs[0]].name == "y" and report.pruned_tensors == 1


@pytest.mark.parametrize("kwargs", [{"relu_op": "LeakyRelu"}, {"extra_reader": True},
                                    {"conv_output_is_output": True}])
def test_activation_not_fused(kwargs):
    graph, report = convert_to_graph(_conv_relu_model(**kwargs))
    assert report.fused == [] and graph.nodes[0].attrs["activation_type"] == "NO_ACTIVATION"


def test_fusion_off_keeps_activation_and_batchnorm():
    inits = {"w": random(4, 3, 3, 3), **bn_params(4)}
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv"), bn_node("c", "b"),
             helper.make_node("Relu", ["b"], ["y"], name="relu")]
    graph, report = convert_to_graph(graph_model(nodes, {"x": [1, 3, 8, 8]}, ["y"], inits), fusion=False)
    assert [n.op_type for n in graph.nodes] == ["Conv2DFusion", "BatchNorm", "Activation"]
    assert report.fused == report.bn_folded == []


def test_fuse_clip_into_add_as_relu6():
    nodes = [helper.make_node("Add", ["x", "x"], ["a"], name="add"),
             helper.make_node("Clip", ["a", "lo", "hi"], ["y"], name="clip")]
    inits = {"lo": np.array(0, np.float32), "hi": np.array(6, np.float32)}
    graph, _ = convert_to_graph(graph_model(nodes, {"x": [2]}, ["y"], inits))
    (add,) = graph.nodes
    assert add.op_type == "AddFusion" and add.attrs["activation_type"] == "RELU6"


def test_fuse_activations_and_prune_on_graphdef():
    f32 = np.dtype(np.float32)
    tensors = [TensorDef(n, f32, (2,)) for n in ["x", "a", "y", "unused"]]
    graph = GraphDef(tensors, [
        NodeDef("mul", "MulFusion", {"activation_type": "NO_ACTIVATION"}, [0, 0], [1]),
        NodeDef("relu", "Activation", {"activation_type": "RELU"}, [1], [2]),
    ], inputs=[0], outputs=[2])
    report = ConversionReport(opset=17, onnx_nodes=2)
    fuse_activations(graph, report)
    assert [n.name for n in graph.nodes] == ["mul"] and graph.nodes[0].outputs == [2]
    assert prune_tensors(graph) == 2
    assert [t.name for t in graph.tensors] == ["x", "y"] and graph.nodes[0].outputs == [1] and graph.outputs == [1]


def test_prune_keeps_unused_graph_inputs_and_absent_inputs():
    f32 = np.dtype(np.float32)
    graph = GraphDef([TensorDef(n, f32, (1,)) for n in ["junk", "x", "unused_input", "y"]],
                     [NodeDef("n", "Resize", {}, [1, -1, -1], [3])], inputs=[1, 2], outputs=[3])
    assert prune_tensors(graph) == 1
    assert graph.nodes[0].inputs == [0, -1, -1] and graph.inputs == [0, 1] and graph.outputs == [2]


def test_resnet_style_passes_keep_onnx_numerics():
    inits = {"w1": random(8, 3, 3, 3), "w2": random(8, 8, 3, 3, seed=1), **bn_params(8)}
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        bn_node("c1", "b1", "bn1"),
        helper.make_node("Relu", ["b1"], ["r1"], name="relu1"),
        helper.make_node("Identity", ["r1"], ["i1"], name="identity"),
        helper.make_node("Conv", ["i1", "w2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["c2", "r1"], ["s"], name="add"),
        helper.make_node("Relu", ["s"], ["y"], name="relu2"),
    ]
    model = graph_model(nodes, {"x": [1, 3, 8, 8]}, ["y"], inits)
    g, report = prepared(model)
    drop_identities(g, report)
    fold_batchnorm(g, report)
    assert len(g.nodes) == 5
    same_outputs(model, g, {"x": random(1, 3, 8, 8)})
    assert g.info["y"].elem_type == TensorProto.FLOAT


# ---- bounded folding ---------------------------------------------------------------------------


def fill_model(dims: list[int]):
    """A model whose output is ConstantOfShape(dims): a few bytes asking for a large tensor."""
    nodes = [helper.make_node("ConstantOfShape", ["s"], ["y"])]
    return graph_model(nodes, {}, ["y"], {"s": np.array(dims, np.int64)})


def test_a_large_constant_is_not_folded_into_the_file():
    graph, report = convert_to_graph(fill_model([4096, 8192]))  # 128 MiB of float32
    assert [n.op_type for n in graph.nodes] == ["ConstantOfShape"] and not report.folded
    assert all(t.data is None or t.data.nbytes < 1024 for t in graph.tensors)


def test_a_gigabyte_constant_between_constants_converts_without_being_computed():
    tracemalloc.start()
    try:
        graph, report = convert_to_graph(fill_and_sum(1 << 28))  # 1 GiB of float32 ones, summed to one number
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert [n.op_type for n in graph.nodes] == ["ConstantOfShape", "ReduceFusion"] and not report.folded
    assert peak < 64 << 20  # neither folding nor the runtime's shape check computed it


@pytest.mark.parametrize("nodes", [
    [helper.make_node("ConstantOfShape", ["s"], ["y"])],
    [helper.make_node("Range", ["zero", "huge", "one"], ["y"])],
])
def test_a_huge_computed_constant_is_refused_within_the_memory_limit(nodes):
    inits = {"s": np.array([1 << 20, 1 << 20], np.int64), "zero": np.array(0.0, np.float32),
             "huge": np.array(1e12, np.float32), "one": np.array(1.0, np.float32)}
    used = {name for node in nodes for name in node.input}
    model = graph_model(nodes, {}, ["y"], {k: v for k, v in inits.items() if k in used})
    with pytest.raises(lite.MemoryLimitError, match="memory limit"):
        convert_to_graph(model)


def test_the_memory_limit_bounds_conversion_in_build():
    onnx_bytes = fill_model([1024, 1024]).SerializeToString()  # 4 MiB
    small = lite.Context(memory_limit=1 << 20)
    with pytest.raises(lite.MemoryLimitError):
        lite.Model().build(onnx_bytes, lite.ModelType.ONNX, small)
    model = lite.Model()
    model.build(onnx_bytes, lite.ModelType.ONNX, lite.Context())
    assert model.predict([])[0].shape == (1024, 1024)


def test_a_huge_sparse_initializer_is_refused_before_it_is_made_dense():
    sparse = helper.make_sparse_tensor(numpy_helper.from_array(np.ones(1, np.float32), "w"),
                                       numpy_helper.from_array(np.array([5], np.int64), "w_i"), [1 << 20, 1 << 20])
    model = graph_model([helper.make_node("Identity", ["w"], ["y"])], {}, ["y"], {})
    model.graph.sparse_initializer.append(sparse)
    with pytest.raises(lite.MemoryLimitError, match="sparse initializer 'w'"):
        convert_to_graph(model)
