"""Transformer block fusions (tools/converter/fusions.py): each fused block matches onnxruntime on
the original ONNX, both with fusion on and off, and what must not fuse stays apart."""

from __future__ import annotations

import io

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from lite.schema.writer import write_model
from lite.tools.converter import convert_to_graph
from tests.support.e2e import assert_matches, build_lite, predict
from tests.support.oracle import run_onnxruntime

RNG = np.random.default_rng(21)


def n(op: str, inputs: list[str], output: str, **attrs) -> onnx.NodeProto:
    return helper.make_node(op, inputs, [output], name=output, **attrs)


def c(value) -> np.ndarray:
    return np.asarray(value, np.float32)


def model(nodes, shape, inits: dict, opset: int = 13, output: str = "y") -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [onnx.ValueInfoProto(name=output)],
                              [numpy_helper.from_array(v, k) for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


def converted(onnx_model: onnx.ModelProto, shape) -> list[str]:
    """Converts with fusion on and off; both must match onnxruntime. Returns the fused graph's op types."""
    feeds = {"x": (RNG.standard_normal([d if d != "N" else 3 for d in shape]) * 2).astype(np.float32)}
    expected = run_onnxruntime(onnx_model, feeds)
    op_types = []
    for fusion in (True, False):
        graph, _ = convert_to_graph(onnx_model, fusion=fusion)
        assert_matches(predict(build_lite(write_model(graph)), feeds), expected, f"fusion={fusion}")
        op_types.append([node.op_type for node in graph.nodes])
    return op_types[0]


def layer_norm_nodes(axes=(-1,), square: str = "Pow", scale: bool = True, bias: bool = True,
                     swap: bool = False) -> list[onnx.NodeProto]:
    nodes = [n("ReduceMean", ["x"], "m", axes=list(axes)), n("Sub", ["x", "m"], "d"),
             n("Pow", ["d", "two"], "p") if square == "Pow" else n("Mul", ["d", "d"], "p"),
             n("ReduceMean", ["p"], "v", axes=list(axes)), n("Add", ["v", "eps"], "a"), n("Sqrt", ["a"], "s"),
             n("Div", ["d", "s"], "nrm")]
    last = "nrm"
    if scale:
        nodes.append(n("Mul", ["g", last] if swap else [last, "g"], "sc"))
        last = "sc"
    if bias:
        nodes.append(n("Add", ["b", last] if swap else [last, "b"], "bi"))
        last = "bi"
    nodes.append(n("Identity", [last], "y"))
    return nodes


LN_INITS = {"two": c(2.0), "eps": c(1e-5)}


@pytest.mark.parametrize(("axes", "square", "scale", "bias", "swap"), [
    ((-1,), "Pow", True, True, False), ((2,), "Mul", True, True, True), ((-1,), "Pow", False, False, False),
    ((-1,), "Pow", True, False, False), ((-2, -1), "Pow", True, True, False)])
def test_layer_norm_chain_becomes_one_primitive(axes, square, scale, bias, swap):
    shape = ["N", 5, 16]
    normalised = [5, 16][-len(axes):]
    inits = {**LN_INITS, "g": RNG.standard_normal(normalised).astype(np.float32),
             "b": RNG.standard_normal(normalised).astype(np.float32)}
    ops = converted(model(layer_norm_nodes(axes, square, scale, bias, swap), shape, inits), shape)
    assert ops == ["LayerNormFusion"]


def test_a_mean_over_a_leading_axis_is_no_layer_norm():
    ops = converted(model(layer_norm_nodes(axes=(1,)), [2, 5, 16], {**LN_INITS, "g": c(np.ones(16)),
                                                                     "b": c(np.zeros(16))}), [2, 5, 16])
    assert "LayerNormFusion" not in ops


def test_a_centered_value_read_elsewhere_keeps_the_chain():
    nodes = layer_norm_nodes(scale=False, bias=False)[:-1] + [n("Add", ["nrm", "d"], "y")]
    ops = converted(model(nodes, [2, 16], LN_INITS), [2, 16])
    assert "LayerNormFusion" not in ops


GELUS = {  # name: (nodes, expected activation)
    "erf-bert": ([n("Mul", ["x", "half"], "h"), n("Div", ["x", "sqrt2"], "q"), n("Erf", ["q"], "e"),
                  n("Add", ["one", "e"], "a"), n("Mul", ["h", "a"], "y")], "GELU"),
    "erf-torch": ([n("Div", ["x", "sqrt2"], "q"), n("Erf", ["q"], "e"), n("Add", ["e", "one"], "a"),
                   n("Mul", ["x", "a"], "m"), n("Mul", ["m", "half"], "y")], "GELU"),
    "tanh-gpt2": ([n("Pow", ["x", "three"], "p"), n("Mul", ["cubic", "p"], "k"), n("Add", ["x", "k"], "s"),
                   n("Mul", ["s", "root"], "r"), n("Tanh", ["r"], "t"), n("Add", ["one", "t"], "a"),
                   n("Mul", ["half", "x"], "h"), n("Mul", ["h", "a"], "y")], "GELU_TANH"),
}
GELU_INITS = {"half": c(0.5), "one": c(1.0), "sqrt2": c(np.sqrt(2.0)), "three": c(3.0), "cubic": c(0.044715),
              "root": c(np.sqrt(2 / np.pi))}


@pytest.mark.parametrize("name", sorted(GELUS))
def test_gelu_regions_become_one_activation(name):
    nodes, kind = GELUS[name]
    graph, report = convert_to_graph(model(nodes, [3, 40], GELU_INITS))
    assert [(node.op_type, node.attrs.get("activation_type")) for node in graph.nodes] == [("Activation", kind)]
    assert report.fused_blocks == [f"{kind} y"]
    assert converted(model(nodes, [3, 40], GELU_INITS), [3, 40]) == ["Activation"]


def test_a_region_that_is_not_gelu_stays():
    nodes = [n("Div", ["x", "two"], "q"), n("Erf", ["q"], "e"), n("Add", ["e", "one"], "a"),
             n("Mul", ["x", "a"], "m"), n("Mul", ["m", "half"], "y")]
    ops = converted(model(nodes, [3, 40], {"two": c(2.0), "one": c(1.0), "half": c(0.5)}), [3, 40])
    assert "Erf" in ops


@pytest.mark.parametrize("activation", [None, "Relu"])
def test_matmul_plus_a_constant_vector_takes_it_as_bias(activation):
    nodes = [n("MatMul", ["x", "w"], "mm"), n("Add", ["mm", "b"], "y" if activation is None else "a")]
    if activation:
        nodes.append(n(activation, ["a"], "y"))
    inits = {"w": RNG.standard_normal((16, 8)).astype(np.float32), "b": RNG.standard_normal(8).astype(np.float32)}
    graph, _ = convert_to_graph(model(nodes, ["N", 4, 16], inits))
    [node] = graph.nodes
    assert node.op_type == "MatMulFusion" and len(node.inputs) == 3
    assert node.attrs["activation_type"] == ("RELU" if activation else "NO_ACTIVATION")
    assert converted(model(nodes, ["N", 4, 16], inits), ["N", 4, 16]) == ["MatMulFusion"]


@pytest.mark.parametrize("bias", [True, False])
def test_a_transposed_constant_weight_is_stored_untransposed(bias):
    inits = {"w": RNG.standard_normal((8, 16)).astype(np.float32), "b": RNG.standard_normal(8).astype(np.float32)}
    nodes = [helper.make_node("Gemm", ["x", "w", "b"] if bias else ["x", "w"], ["y"], name="y", transB=1)]
    graph, _ = convert_to_graph(model(nodes, [4, 16], inits))
    [node] = graph.nodes
    weight = graph.tensors[node.inputs[1]]
    assert node.attrs["transpose_b"] is False and weight.shape == (16, 8) and weight.data.flags.c_contiguous
    np.testing.assert_array_equal(weight.data, inits["w"].T)
    assert converted(model(nodes, [4, 16], inits), [4, 16]) == ["MatMulFusion"]


def test_a_weight_read_twice_keeps_its_layout():
    nodes = [helper.make_node("Gemm", ["x", "w"], ["g"], name="g", transB=1), n("MatMul", ["g", "w"], "y")]
    inits = {"w": RNG.standard_normal((16, 16)).astype(np.float32)}
    graph, _ = convert_to_graph(model(nodes, [4, 16], inits))
    assert graph.nodes[0].attrs["transpose_b"] is True
    assert converted(model(nodes, [4, 16], inits), [4, 16]) == ["MatMulFusion", "MatMulFusion"]


def test_a_matmul_read_twice_keeps_its_add():
    nodes = [n("MatMul", ["x", "w"], "mm"), n("Add", ["mm", "b"], "a"), n("Mul", ["a", "mm"], "y")]
    inits = {"w": RNG.standard_normal((16, 8)).astype(np.float32), "b": RNG.standard_normal(8).astype(np.float32)}
    assert converted(model(nodes, [4, 16], inits), [4, 16]) == ["MatMulFusion", "AddFusion", "MulFusion"]


@pytest.mark.parametrize(("perm", "side"), [([0, 1, 3, 2], "b"), ([0, 1, 3, 2], "a"), ([1, 0], "b2")])
def test_a_transpose_of_the_last_two_axes_becomes_the_operands_flag(perm, side):
    """Attention's scores q @ k^T with k^T a Transpose (a decoder's cache, read once per step)."""
    shape = [2, 3, 5, 4] if len(perm) == 4 else [5, 4]
    t = n("Transpose", ["x"], "t", perm=perm)
    product = {"b": n("MatMul", ["x", "t"], "y"), "a": n("MatMul", ["t", "x"], "y"), "b2": n("MatMul", ["x", "t"], "y")}
    graph, report = convert_to_graph(model([t, product[side]], shape, {}))
    [node] = graph.nodes
    assert node.op_type == "MatMulFusion" and node.attrs["transpose_" + side[0]] is True
    assert any(block.startswith("Transpose+MatMul") for block in report.fused_blocks)
    assert converted(model([t, product[side]], shape, {}), shape) == ["MatMulFusion"]


@pytest.mark.parametrize("case", ["other axes", "read twice"])
def test_other_transposes_before_a_matmul_stay(case):
    perm = [0, 2, 1, 3] if case == "other axes" else [0, 1, 3, 2]
    nodes = [n("Transpose", ["x"], "t", perm=perm), n("MatMul", ["x", "t"], "m")]
    nodes.append(n("Add", ["m", "t"], "y") if case == "read twice" else n("Identity", ["m"], "y"))
    shape = [2, 4, 4, 4]
    assert "Transpose" in converted(model(nodes, shape, {}), shape)


def attention_nodes(scale: str | None = "Div", mask: bool = True, axis: int = -1,
                    zeroing: bool = False) -> list[onnx.NodeProto]:
    """q = x, k = x^T, v = x: MatMul -> [Div or Mul by a scalar] -> [Add mask] -> Softmax -> [Where(IsNaN(p),
    zero, p), as PyTorch's dynamo exporter writes it] -> MatMul."""
    nodes = [n("Transpose", ["x"], "kt", perm=[0, 2, 1]), n("MatMul", ["x", "kt"], "s")]
    last = "s"
    if scale:
        nodes.append(n(scale, [last, "scale"] if scale == "Div" else ["scale", last], "sc"))
        last = "sc"
    if mask:
        nodes.append(n("Add", ["mask", last], "m"))
        last = "m"
    nodes.append(n("Softmax", [last], "p", axis=axis))
    if zeroing:
        nodes += [n("IsNaN", ["p"], "nan"), n("Where", ["nan", "zero", "p"], "w")]
    return nodes + [n("MatMul", ["w" if zeroing else "p", "x"], "y")]


@pytest.mark.parametrize(("scale", "mask"), [("Div", True), ("Mul", True), (None, False), ("Div", False)])
def test_attention_chain_becomes_one_primitive(scale, mask):
    inits = {"scale": c(4.0), "mask": c(np.triu(np.full((6, 6), -1e4), 1))}
    ops = converted(model(attention_nodes(scale, mask), ["N", 6, 8], inits), ["N", 6, 8])
    assert ops == ["Transpose", "Attention"]


def attention_ops(onnx_model: onnx.ModelProto, shape) -> list[tuple[str, dict, int]]:
    """(op type, attributes, inputs) of the fused graph's nodes, once ``converted`` checked both conversions."""
    converted(onnx_model, shape)
    graph, _ = convert_to_graph(onnx_model)
    return [(node.op_type, node.attrs, len(node.inputs)) for node in graph.nodes]


@pytest.mark.parametrize("scale", ["Mul", None])
def test_the_dynamo_exporters_zeroing_of_nan_weights_joins_the_attention(scale):
    """A row masked whole (-inf) is NaN after the softmax; the Where makes it 0, and so must the fused kernel."""
    mask = np.triu(np.full((6, 6), -1e4), 1)
    mask[2] = -np.inf
    inits = {"scale": c(0.25), "mask": c(mask), "zero": c(0.0)}
    nodes = attention_nodes(scale, zeroing=True)
    ops = attention_ops(model(nodes, ["N", 6, 8], inits), ["N", 6, 8])
    assert [(op, attrs.get("nan_to_zero")) for op, attrs, _ in ops] == [("Transpose", None), ("Attention", True)]


@pytest.mark.parametrize("case", ["zero is one", "weights read again", "no zeroing"])
def test_other_uses_of_the_weights_stay_apart_or_fuse_without_zeroing(case):
    inits = {"scale": c(0.25), "mask": c(np.zeros((6, 6))), "zero": c(1.0 if case == "zero is one" else 0.0)}
    nodes = attention_nodes("Mul", zeroing=case != "no zeroing")
    if case == "weights read again":
        nodes[-1] = n("MatMul", ["w", "x"], "o")
        nodes += [n("MatMul", ["p", "x"], "o2"), n("Add", ["o", "o2"], "y")]
    ops = [op for op, _, _ in attention_ops(model(nodes, [2, 6, 8], inits), [2, 6, 8])]
    assert ("Attention" in ops) is (case == "no zeroing")


@pytest.mark.parametrize(("mask", "inputs"), [(np.zeros((6, 6)), 3), (np.eye(6), 4), (np.zeros((2, 1, 6, 6)), None)])
def test_a_constant_mask_of_zeros_is_dropped_and_one_that_broadcasts_the_scores_fuses_nothing(mask, inputs):
    ops = attention_ops(model(attention_nodes("Div"), [2, 6, 8], {"scale": c(2.0), "mask": c(mask)}), [2, 6, 8])
    attention = [count for op, _, count in ops if op == "Attention"]
    assert attention == ([] if inputs is None else [inputs])


def test_a_softmax_over_another_axis_is_no_attention():
    ops = converted(model(attention_nodes(axis=1), [2, 6, 8], {"scale": c(4.0), "mask": c(np.zeros(6))}), [2, 6, 8])
    assert "Attention" not in ops


def encoder_block(torch):
    """A post-norm transformer encoder block (attention, LayerNorm, GELU feed-forward) in plain modules."""

    class Block(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.attn = torch.nn.MultiheadAttention(32, 4, batch_first=True)
            self.norm1, self.norm2 = torch.nn.LayerNorm(32), torch.nn.LayerNorm(32)
            self.ff = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 32))

        def forward(self, x):
            x = self.norm1(x + self.attn(x, x, x, need_weights=False)[0])
            return self.norm2(x + self.ff(x))

    return Block().eval()


def test_a_torch_encoder_block_exported_at_opset_14_fuses_its_blocks():
    torch = pytest.importorskip("torch")
    torch.backends.mha.set_fastpath_enabled(False)  # NOTE: the fused fast path has no ONNX export
    buffer = io.BytesIO()
    with torch.no_grad():
        torch.onnx.export(encoder_block(torch), (torch.randn(2, 7, 32),), buffer, input_names=["x"], output_names=["y"],
                          opset_version=14, dynamo=False, dynamic_axes={"x": {0: "N"}})
    onnx_model = onnx.load_from_string(buffer.getvalue())
    graph, report = convert_to_graph(onnx_model)
    kinds = sorted(entry.split()[0] for entry in report.fused_blocks)
    assert kinds == ["Attention", "GELU", "LayerNorm", "LayerNorm", "MatMul+bias", "MatMul+bias", "MatMul+bias"], kinds
    feeds = {"x": RNG.standard_normal((3, 7, 32)).astype(np.float32)}
    assert_matches(predict(build_lite(write_model(graph)), feeds), run_onnxruntime(onnx_model, feeds))


@pytest.mark.parametrize("order", [["x", "s"], ["s", "x"]])
def test_x_times_its_sigmoid_becomes_one_swish(order):
    onnx_model = model([n("Sigmoid", ["x"], "s"), n("Mul", order, "y")], [2, 3, 5], {})
    assert converted(onnx_model, [2, 3, 5]) == ["Activation"]
    graph, report = convert_to_graph(onnx_model)
    assert graph.nodes[0].attrs["activation_type"] == "SWISH" and graph.nodes[0].attrs["alpha"] == 1.0
    assert report.fused_blocks == ["SWISH y"]


@pytest.mark.parametrize("nodes", [
    [n("Sigmoid", ["x"], "s"), n("Mul", ["x", "s"], "m"), n("Add", ["m", "s"], "y")],  # the sigmoid read twice
    [n("Neg", ["x"], "z"), n("Sigmoid", ["z"], "s"), n("Mul", ["x", "s"], "y")],  # the sigmoid of another tensor
])
def test_other_sigmoid_products_stay(nodes):
    assert "Activation" in converted(model(nodes, [4, 6], {}), [4, 6])
    graph, _ = convert_to_graph(model(nodes, [4, 6], {}))
    assert "MulFusion" in [node.op_type for node in graph.nodes]
