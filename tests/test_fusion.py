"""Native fusion at build (lite.fusion): a convolution takes over the residual Add that alone reads
it, the bias, shortcut and activation added in one compiled pass; checked against onnxruntime."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import lite
from lite.delegates.onnxruntime import ORTDelegate
from lite.fusion import ConvResidual, ProducerActivation, ScaledInput, SqueezeExcite, fuse
from lite.kernels import fast
from lite.tools.converter import convert
from tests.support.oracle import relative_l2, run_exact_oracle, run_onnxruntime

pytestmark = pytest.mark.skipif(fast.numba_module() is None, reason="numba is not importable here")

RNG = np.random.default_rng(21)


def float_model(nodes: list[onnx.NodeProto], name: str, x_dims: list, outputs, inits: dict) -> onnx.ModelProto:
    """A float32 opset-17 model of ``nodes``: input x of ``x_dims``, the named outputs, the
    initializers ``inits`` (arrays, stored as float32)."""
    graph = helper.make_graph(
        nodes, name, [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_dims)],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs],
        [numpy_helper.from_array(v.astype(np.float32), k) for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def block(shortcut: str = "conv", extra_nodes=(), outputs=("y",), relu_first: bool = False) -> onnx.ModelProto:
    """x -> Conv(3x3) [-> Relu] -> c; shortcut: a 1x1 Conv of x ("conv", itself fusable), x itself
    ("input") or x's channel means, which broadcast ("broadcast"); Add(c, shortcut) -> Relu -> y."""
    inits = {"w": RNG.standard_normal((8, 8, 3, 3)) * 0.2, "b": RNG.standard_normal(8),
             "ws": RNG.standard_normal((8, 8, 1, 1)) * 0.3, "bs": RNG.standard_normal(8)}
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c0"], pads=[1, 1, 1, 1])]
    nodes.append(helper.make_node("Relu", ["c0"], ["c"]) if relu_first else helper.make_node("Identity", ["c0"], ["c"]))
    if shortcut == "conv":
        nodes.append(helper.make_node("Conv", ["x", "ws", "bs"], ["s"]))
    elif shortcut == "broadcast":
        nodes.append(helper.make_node("ReduceMean", ["x"], ["s"], axes=[2, 3]))
    nodes += [helper.make_node("Add", ["c", "x" if shortcut == "input" else "s"], ["a"]),
              helper.make_node("Relu", ["a"], ["y"]), *extra_nodes]
    return float_model(nodes, "residual", ["batch", 8, 10, 10], outputs, inits)


@pytest.fixture
def no_chains(monkeypatch):
    """Leaves the convolutions out of blocked chains (lite.blocking), which take an expansion and its
    depthwise reader whole: the hand-over is for the pairs that stay in NCHW."""
    from lite import blocking

    monkeypatch.setattr(blocking, "MIN_MEMBERS", 1 << 30)


def build(onnx_model: onnx.ModelProto, *delegates) -> lite.Model:
    model = lite.Model()
    model.build(convert(onnx_model), lite.ModelType.LITE, lite.Context(thread_num=1, delegates=list(delegates)))
    return model


def fused(model: lite.Model) -> list[ConvResidual]:
    return [k for k in model._engine.kernels if isinstance(k, ConvResidual)]


def assert_matches(model: lite.Model, onnx_model: onnx.ModelProto, batch: int) -> None:
    x = RNG.standard_normal((batch, 8, 10, 10)).astype(np.float32)
    if model.get_inputs()[0].shape[0] != batch:
        model.resize(model.get_inputs(), [[batch, 8, 10, 10]])
    got = model.predict([x])
    for g, want in zip(got, run_onnxruntime(onnx_model, {"x": x}), strict=True):
        assert relative_l2(g.get_data_to_numpy(), want) < 1e-5


@pytest.mark.parametrize("shortcut", ["conv", "input"])
def test_a_residual_add_runs_in_the_convolution_epilogue(shortcut):
    onnx_model = block(shortcut)
    model = build(onnx_model)
    for batch in (1, 3, 2):
        assert_matches(model, onnx_model, batch)
        [kernel] = fused(model)
        assert kernel.fused and kernel.conv.epilogue.residual is kernel.residual
    assert [r.op_type for r in model.partition_report()].count("AddFusion") == 1  # the report keeps both nodes


@pytest.mark.parametrize("case, onnx_model", [
    ("the conv output is also a model output", block("input", outputs=("y", "c0"))),
    ("the conv output has another reader", block("input", extra_nodes=[helper.make_node("Neg", ["c"], ["n"])],
                                                 outputs=("y", "n"))),
    ("the conv has its own activation", block("input", relu_first=True)),
])
def test_convolutions_whose_output_is_needed_elsewhere_are_not_fused(case, onnx_model):
    model = build(onnx_model)
    assert not fused(model), case
    assert_matches(model, onnx_model, 2)


def test_a_residual_that_broadcasts_runs_the_two_kernels_one_after_the_other():
    onnx_model = block("broadcast")
    model = build(onnx_model)
    assert_matches(model, onnx_model, 2)
    [kernel] = fused(model)
    assert not kernel.fused
    assert_matches(model, onnx_model, 2)


def test_without_the_compiler_nothing_is_fused(monkeypatch):
    monkeypatch.setenv("DELITE_FAST_KERNELS", "0")
    onnx_model = block()
    model = build(onnx_model)
    assert not fused(model)
    assert_matches(model, onnx_model, 2)


def test_delegated_kernels_are_left_to_the_delegate():
    onnx_model = block()
    model = build(onnx_model, ORTDelegate())
    assert not fused(model)
    assert_matches(model, onnx_model, 2)


def test_a_profile_charges_the_fused_time_to_the_convolution():
    model = build(block())
    profile: dict = {}
    model.predict([RNG.standard_normal((2, 8, 10, 10)).astype(np.float32)], profile=profile)
    [kernel] = fused(model)
    assert profile[kernel.conv] > 0 and profile[kernel.add] == 0.0 and kernel not in profile


# ---- a convolution and the activation after it --------------------------------------------------------

GELU_CONSTANTS = {"root2": np.array(np.sqrt(2.0)), "one": np.array(1.0), "half": np.array(0.5),
                  "cubic": np.array(0.044715), "root2_over_pi": np.array(np.sqrt(2 / np.pi))}
EPILOGUE_NAMES = {"silu": "SWISH", "hard_swish": "HARD_SWISH", "gelu": "GELU", "gelu_tanh": "GELU_TANH"}


def gelu_nodes(x: str, y: str) -> list[onnx.NodeProto]:
    """y = x * (1 + erf(x / sqrt(2))) / 2 as exporters write it (the converter fuses it into one GELU)."""
    return [helper.make_node("Div", [x, "root2"], [f"{y}_d"]), helper.make_node("Erf", [f"{y}_d"], [f"{y}_e"]),
            helper.make_node("Add", [f"{y}_e", "one"], [f"{y}_a"]), helper.make_node("Mul", [x, f"{y}_a"], [f"{y}_m"]),
            helper.make_node("Mul", [f"{y}_m", "half"], [y])]


def gelu_tanh_nodes(x: str, y: str) -> list[onnx.NodeProto]:
    """y = x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 x^3))) / 2 as GPT-2's export writes it (one GELU_TANH)."""
    steps = [("Mul", [x, x], "sq"), ("Mul", ["sq", x], "cube"), ("Mul", ["cube", "cubic"], "c3"),
             ("Add", [x, "c3"], "inner"), ("Mul", ["inner", "root2_over_pi"], "u"), ("Tanh", ["u"], "t"),
             ("Add", ["t", "one"], "t1"), ("Mul", [x, "t1"], "m"), ("Mul", ["m", "half"], y)]
    made = {out for _, _, out in steps if out != y}
    named = lambda name: f"{y}_{name}" if name in made else name  # noqa: E731
    return [helper.make_node(op, [named(i) for i in inputs], [named(out)]) for op, inputs, out in steps]


def conv_then(activation: str, channels: int = 8, size: int = 10, group: int = 1, stride: int = 1, kernel: int = 3,
              readers=(), outputs=("y",)) -> onnx.ModelProto:
    """x -> Conv -> SiLU (Mul of Sigmoid, as exporters write it), HardSwish or GELU (its Erf formula)
    -> y, plus ``readers``."""
    inits = {"w": RNG.standard_normal((channels, channels // group, kernel, kernel)) * 0.3,
             "b": RNG.standard_normal(channels)}
    pad = kernel // 2
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[pad] * 4, group=group, strides=[stride] * 2)]
    if activation == "silu":
        nodes += [helper.make_node("Sigmoid", ["c"], ["s"]), helper.make_node("Mul", ["c", "s"], ["y"])]
    elif activation in ("gelu", "gelu_tanh"):
        nodes += (gelu_nodes if activation == "gelu" else gelu_tanh_nodes)("c", "y")
        inits.update(GELU_CONSTANTS)
    else:
        nodes.append(helper.make_node("HardSwish", ["c"], ["y"]))
    return float_model([*nodes, *readers], "conv_activation", ["batch", channels, size, size], outputs, inits)


def fused_activations(model: lite.Model) -> list[ProducerActivation]:
    return [k for k in model._engine.kernels if isinstance(k, ProducerActivation)]


@pytest.mark.parametrize("activation", ["silu", "hard_swish", "gelu", "gelu_tanh"])
@pytest.mark.parametrize(("plan", "shape"), [
    ("direct 1x1", {"kernel": 1}),
    ("im2col", {"stride": 2}),
    ("compiled depthwise", {"group": 8}),
    ("Winograd", {"channels": 32, "size": 24}),
])
def test_an_activation_runs_in_the_convolution_epilogue(activation, plan, shape):
    onnx_model = conv_then(activation, **shape)
    model = build(onnx_model)
    [kernel] = fused_activations(model)
    assert [r.op_type for r in model.partition_report()].count("Activation") == 1  # the report keeps both nodes
    channels, size = shape.get("channels", 8), shape.get("size", 10)
    for batch in (1, 2):
        x = (RNG.standard_normal((batch, channels, size, size)) * 3).astype(np.float32)
        if model.get_inputs()[0].shape[0] != batch:
            model.resize(model.get_inputs(), [[batch, channels, size, size]])
        got = model.predict([x])[0].get_data_to_numpy()
        [want] = run_onnxruntime(onnx_model, {"x": x})
        assert relative_l2(got, want) < 1e-5, plan
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5 * np.abs(want).max())  # Winograd's rounding
    assert kernel.producer.epilogue.absorbed[0] == EPILOGUE_NAMES[activation]


@pytest.mark.parametrize("case, onnx_model", [
    ("the conv output is also a model output", conv_then("hard_swish", outputs=("y", "c"))),
    ("the conv output has another reader", conv_then("hard_swish", readers=[helper.make_node("Neg", ["c"], ["n"])],
                                                     outputs=("y", "n"))),
])
def test_convolutions_read_by_more_than_the_activation_are_not_fused(case, onnx_model):
    model = build(onnx_model)
    assert not fused_activations(model), case
    x = RNG.standard_normal((2, 8, 10, 10)).astype(np.float32)
    model.resize(model.get_inputs(), [[2, 8, 10, 10]])
    for got, want in zip(model.predict([x]), run_onnxruntime(onnx_model, {"x": x}), strict=True):
        assert relative_l2(got.get_data_to_numpy(), want) < 1e-5


def test_activation_fusion_charges_the_convolution_and_needs_the_compiler(monkeypatch):
    onnx_model = conv_then("silu")
    model = build(onnx_model)
    profile: dict = {}
    model.resize(model.get_inputs(), [[1, 8, 10, 10]])
    model.predict([RNG.standard_normal((1, 8, 10, 10)).astype(np.float32)], profile=profile)
    [kernel] = fused_activations(model)
    assert profile[kernel.producer] > 0 and profile[kernel.activation] == 0.0
    monkeypatch.setenv("DELITE_FAST_KERNELS", "0")
    assert not fused_activations(build(onnx_model))


def test_a_fused_depthwise_activation_shared_among_busy_threads(monkeypatch):
    from lite import threads

    monkeypatch.setattr(threads.LoadMonitor, "latest", lambda self: True)  # the runtime's own threads run
    onnx_model = conv_then("silu", channels=16, group=16)
    model = lite.Model()
    model.build(convert(onnx_model), lite.ModelType.LITE, lite.Context(thread_num=2))
    x = (RNG.standard_normal((1, 16, 10, 10)) * 3).astype(np.float32)
    got = model.predict([x])[0].get_data_to_numpy()
    assert model._engine.threads.dynamic and fused_activations(model)
    assert relative_l2(got, run_onnxruntime(onnx_model, {"x": x})[0]) < 1e-5


# ---- a linear layer and the GELU after it -----------------------------------------------------------------

def linear_then_gelu(rows: int | None, features: int = 20, hidden: int = 60) -> onnx.ModelProto:
    """x (rows, features), or (features,) where rows is None -> MatMul + bias -> GELU (its Erf formula) -> y:
    a feed-forward layer's first half."""
    inits = {"w": RNG.standard_normal((features, hidden)) * 0.3, "b": RNG.standard_normal(hidden), **GELU_CONSTANTS}
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Add", ["m", "b"], ["c"]),
             *gelu_nodes("c", "y")]
    return float_model(nodes, "linear_gelu", [features] if rows is None else [rows, features], ["y"], inits)


@pytest.mark.parametrize(("rows", "packed"), [(16, True), (1, True), (None, False)])  # None: a vector, numpy's
def test_a_gelu_runs_in_the_linear_layer_epilogue(rows, packed):
    onnx_model = linear_then_gelu(rows)
    model = build(onnx_model)
    [kernel] = fused_activations(model)
    assert kernel.producer.type == "MatMulFusion" and kernel.producer.epilogue.absorbed[0] == "GELU"
    assert (kernel.producer.algorithm == "packed_gemm") is packed  # the packed product's panels, or numpy's passes
    x = (RNG.standard_normal((20,) if rows is None else (rows, 20)) * 2).astype(np.float32)
    got = model.predict([x])[0].get_data_to_numpy()
    np.testing.assert_allclose(got, run_onnxruntime(onnx_model, {"x": x})[0], rtol=1e-4, atol=1e-5)


def gated(size: int = 10, order: str = "x, gate", residual: bool = False, readers=(), outputs=("y",),
          kernel: int = 1) -> onnx.ModelProto:
    """A squeeze-and-excitation block: x (batch, 16, size, size) -> gate = HardSigmoid(Conv(Relu(Conv(
    GlobalAveragePool(x))))), Mul(x, gate) -> m -> Conv(16 -> 8, ``kernel``) [-> Add(shortcut) -> Relu] -> y."""
    inits = {"w1": RNG.standard_normal((4, 16, 1, 1)) * 0.3, "w2": RNG.standard_normal((16, 4, 1, 1)) * 0.3,
             "wp": RNG.standard_normal((8, 16, kernel, kernel)) * 0.3, "bp": RNG.standard_normal(8),
             "ws": RNG.standard_normal((8, 16, 1, 1)) * 0.3}
    nodes = [helper.make_node("GlobalAveragePool", ["x"], ["p"]), helper.make_node("Conv", ["p", "w1"], ["q"]),
             helper.make_node("Relu", ["q"], ["r"]), helper.make_node("Conv", ["r", "w2"], ["s"]),
             helper.make_node("HardSigmoid", ["s"], ["gate"]),
             helper.make_node("Mul", [n.strip() for n in order.split(",")], ["m"]),
             helper.make_node("Conv", ["m", "wp", "bp"], ["c" if residual else "y"], pads=[kernel // 2] * 4),
             *readers]
    if residual:
        nodes += [helper.make_node("Conv", ["x", "ws"], ["short"]), helper.make_node("Add", ["c", "short"], ["a"]),
                  helper.make_node("Relu", ["a"], ["y"])]
    return float_model(nodes, "gated", ["batch", 16, size, size], outputs, inits)


def scaled_inputs(model: lite.Model) -> list[ScaledInput]:
    return [k for k in model._engine.kernels if isinstance(k, ScaledInput)]


def assert_gated_matches(model: lite.Model, onnx_model: onnx.ModelProto, batch: int, size: int = 10) -> None:
    if model.get_inputs()[0].shape[0] != batch:
        model.resize(model.get_inputs(), [[batch, 16, size, size]])
    for _ in range(2):  # a new gate each run: the weight is scaled again
        x = RNG.standard_normal((batch, 16, size, size)).astype(np.float32)
        for got, want in zip(model.predict([x]), run_onnxruntime(onnx_model, {"x": x}), strict=True):
            assert relative_l2(got.get_data_to_numpy(), want) < 1e-5


@pytest.mark.parametrize("order", ["x, gate", "gate, x"])
@pytest.mark.parametrize("residual", [False, True])
def test_a_gate_scales_the_weight_of_the_convolution_reading_its_product(order, residual, no_chains):
    onnx_model = gated(order=order, residual=residual)
    model = build(onnx_model)
    [kernel] = scaled_inputs(model)
    assert isinstance(kernel.consumer, ConvResidual) == residual
    assert [r.op_type for r in model.partition_report()].count("MulFusion") == 1  # the report keeps every node
    assert_gated_matches(model, onnx_model, batch=1)
    assert kernel.fused and kernel.conv.weight_matrix() is kernel.scaled and kernel.product.data is kernel.x.data
    assert_gated_matches(model, onnx_model, batch=2)  # a gate per image: the Mul runs, then the convolution
    assert not kernel.fused and kernel.conv.weight_matrix() is kernel.weight
    assert_gated_matches(model, onnx_model, batch=1)
    assert kernel.fused


def test_a_plane_smaller_than_the_output_channels_keeps_the_mul():
    onnx_model = gated(size=2)  # 8 output channels, 4 positions: scaling x is less work
    model = build(onnx_model)
    assert not scaled_inputs(model)
    assert_gated_matches(model, onnx_model, batch=1, size=2)


@pytest.mark.parametrize("case, onnx_model", [
    ("the product is also a model output", gated(outputs=("y", "m"))),
    ("the product has another reader", gated(readers=[helper.make_node("Neg", ["m"], ["n"])], outputs=("y", "n"))),
    ("a 3x3 convolution reads it", gated(kernel=3)),
])
def test_products_the_convolution_does_not_alone_read_as_1x1_are_not_fused(case, onnx_model):
    model = build(onnx_model)
    assert not scaled_inputs(model), case
    assert_gated_matches(model, onnx_model, batch=1)


def test_unfusing_gives_the_convolution_its_weight_back():
    model = build(gated())
    model.resize(model.get_inputs(), [[1, 16, 10, 10]])
    [kernel] = scaled_inputs(model)
    profile: dict = {}
    model.predict([RNG.standard_normal((1, 16, 10, 10)).astype(np.float32)], profile=profile)
    assert profile[kernel.conv] > 0 and profile[kernel.mul] == 0  # a fused kernel's time is the convolution's
    original = kernel.weight
    assert kernel.fused and original is not None and kernel.conv.weight_matrix() is not original
    kernel.unfuse()
    assert kernel.conv.weight_matrix() is original


def first_activation(kind: str, q: str, r: str) -> list[onnx.NodeProto]:
    """The nodes of the gate's first activation, q -> r."""
    if kind == "Silu":  # x * sigmoid(x), as PyTorch exports it: the converter makes it one SWISH
        return [helper.make_node("Sigmoid", [q], ["sig"]), helper.make_node("Mul", [q, "sig"], [r])]
    if kind == "Relu6":
        return [helper.make_node("Clip", [q, "zero", "six"], [r])]
    return [helper.make_node(kind, [q], [r])]


def squeeze(first: str = "Silu", second: str = "Sigmoid", channels: int = 24, size: int = 7, pool: str = "global",
            readers=(), outputs=("y",)) -> onnx.ModelProto:
    """x (batch, channels, size, size) -> GlobalAveragePool -> Conv(+b1) -> ``first`` -> Conv(+b2) ->
    ``second`` -> gate; y = Mul(x, gate) (a plane of 7 x 7 keeps the Mul)."""
    hidden = channels // 4
    inits = {"w1": RNG.standard_normal((hidden, channels, 1, 1)) * 0.3, "b1": RNG.standard_normal(hidden),
             "w2": RNG.standard_normal((channels, hidden, 1, 1)) * 0.5, "b2": RNG.standard_normal(channels),
             "zero": np.array(0.0), "six": np.array(6.0)}
    pooling = helper.make_node("GlobalAveragePool", ["x"], ["p"]) if pool == "global" else \
        helper.make_node("AveragePool", ["x"], ["p"], kernel_shape=[size, size])
    nodes = [pooling, helper.make_node("Conv", ["p", "w1", "b1"], ["q"]), *first_activation(first, "q", "r"),
             helper.make_node("Conv", ["r", "w2", "b2"], ["s"]), helper.make_node(second, ["s"], ["gate"]),
             helper.make_node("Mul", ["x", "gate"], ["y"]), *readers]
    return float_model(nodes, "squeeze", ["batch", channels, size, size], outputs, inits)


def gates(model: lite.Model) -> list[SqueezeExcite]:
    return [k for k in model._engine.kernels if isinstance(k, SqueezeExcite)]


def assert_squeeze_matches(model: lite.Model, onnx_model: onnx.ModelProto, batch: int, channels: int = 24) -> None:
    if model.get_inputs()[0].shape[0] != batch:
        model.resize(model.get_inputs(), [[batch, channels, 7, 7]])
    x = (RNG.standard_normal((batch, channels, 7, 7)) + 0.5).astype(np.float32)
    for got, want in zip(model.predict([x]), run_onnxruntime(onnx_model, {"x": x}), strict=True):
        assert relative_l2(got.get_data_to_numpy(), want) < 1e-5


@pytest.mark.parametrize("first, second, parts", [
    ("Silu", "Sigmoid", 5), ("Relu", "HardSigmoid", 4), ("HardSwish", "Sigmoid", 5), ("Relu6", "HardSigmoid", 4),
    ("Sigmoid", "Relu", 4)])
def test_a_squeeze_and_excitation_gate_runs_as_one_kernel(first, second, parts):
    onnx_model = squeeze(first, second)
    model = build(onnx_model)
    [kernel] = gates(model)
    assert len(kernel.parts) == parts  # a clip the convolution fuses is not a part of its own
    assert [r.op_type for r in model.partition_report()].count("Conv2DFusion") == 2  # the report keeps every node
    for batch in (1, 3, 1):  # a gate per image
        assert_squeeze_matches(model, onnx_model, batch)


@pytest.mark.parametrize("case, onnx_model", [
    ("the pooled vector is also a model output", squeeze(outputs=("y", "p"))),
    ("the first product has another reader", squeeze(readers=[helper.make_node("Neg", ["q"], ["n"])],
                                                     outputs=("y", "n"))),
    ("an activation the gate does not apply", squeeze(first="LeakyRelu")),
])
def test_chains_that_are_not_a_whole_gate_are_not_fused(case, onnx_model):
    model = build(onnx_model)
    assert not gates(model), case
    assert_squeeze_matches(model, onnx_model, batch=1)


def test_a_windowed_pool_over_the_whole_plane_is_the_global_one_and_its_gate_fuses():
    """The converter writes AveragePool over the whole plane as the global pool (tools/converter/canonical.py)."""
    onnx_model = squeeze(pool="window")
    model = build(onnx_model)
    assert gates(model)
    assert_squeeze_matches(model, onnx_model, batch=1)


def test_a_gate_charges_its_time_to_the_pool():
    model = build(squeeze())
    [kernel] = gates(model)
    profile: dict = {}
    model.predict([RNG.standard_normal((1, 24, 7, 7)).astype(np.float32)], profile=profile)
    pool, *rest = kernel.parts
    assert profile[pool] > 0 and all(profile[part] == 0 for part in rest)


def expansion(activation: str, stride: int = 1, readers=(), outputs=("y",)) -> onnx.ModelProto:
    """x (8 channels) -> 1x1 Conv to 24 -> the activation ("relu6" as Clip, "silu", "hard_swish",
    "none") -> e -> depthwise 3x3 Conv (``stride``) -> Relu -> y, plus ``readers``: an inverted
    residual block's expansion and depthwise convolution."""
    inits = {"we": RNG.standard_normal((24, 8, 1, 1)) * 0.4, "be": RNG.standard_normal(24),
             "wd": RNG.standard_normal((24, 1, 3, 3)) * 0.4, "bd": RNG.standard_normal(24),
             "lo": np.array(0.0), "hi": np.array(6.0)}
    nodes = [helper.make_node("Conv", ["x", "we", "be"], ["c"])]
    if activation == "relu6":
        nodes.append(helper.make_node("Clip", ["c", "lo", "hi"], ["e"]))
    elif activation == "silu":
        nodes += [helper.make_node("Sigmoid", ["c"], ["s"]), helper.make_node("Mul", ["c", "s"], ["e"])]
    elif activation == "hard_swish":
        nodes.append(helper.make_node("HardSwish", ["c"], ["e"]))
    else:
        nodes.append(helper.make_node("Identity", ["c"], ["e"]))
    nodes += [helper.make_node("Conv", ["e", "wd", "bd"], ["d"], group=24, pads=[1] * 4, strides=[stride] * 2),
              helper.make_node("Relu", ["d"], ["y"]), *readers]
    return float_model(nodes, "expansion", ["batch", 8, 10, 10], outputs, inits)


def handed(model: lite.Model) -> list:
    """(expansion, depthwise) of each epilogue handed over."""
    return [(k, k.epilogue_reader) for k in model._engine.shape_kernels if getattr(k, "epilogue_reader", None)]


@pytest.mark.parametrize("activation", ["relu6", "silu", "hard_swish", "none"])
@pytest.mark.parametrize("stride", [1, 2])
def test_an_expansion_leaves_its_epilogue_to_the_depthwise_convolution(activation, stride, no_chains):
    onnx_model = expansion(activation, stride)
    model = build(onnx_model)
    pairs = handed(model)
    if activation in ("silu", "hard_swish") and stride == 2:
        assert not pairs  # the activation over the phases' short runs measured slower
    else:
        [(first, second)] = pairs
        assert second.prologue_source is first and second.group == 24 and first.inputs[0].name == "x"
    for batch in (1, 3, 1):
        assert_matches(model, onnx_model, batch)


@pytest.mark.parametrize("case, onnx_model", [
    ("e is an output", expansion("relu6", outputs=("y", "e"))),
    ("e read twice", expansion("relu6", readers=[helper.make_node("ReduceMean", ["e"], ["m"])], outputs=("y", "m"))),
])
def test_an_expansion_whose_output_is_needed_elsewhere_keeps_its_epilogue(case, onnx_model, no_chains):
    model = build(onnx_model)
    assert not handed(model), case
    assert_matches(model, onnx_model, batch=2)


def test_a_build_after_measured_placement_hands_over_only_what_stays_native(no_chains):
    """Measured placement fuses the native kernels to time them, then the build fuses again
    around what the delegate took: no convolution keeps an epilogue handed to a delegated one."""
    onnx_model = expansion("relu6")
    model = lite.Model()
    context = lite.Context(thread_num=1, delegates=[ORTDelegate(ops=["Conv2DFusion"])], placement="measured",
                           placement_cache=None)
    model.build(convert(onnx_model), lite.ModelType.LITE, context)
    native = {row.name for row in model.partition_report() if row.runs_on == "native"}
    for first, second in handed(model):
        assert {first.name, second.name} <= native
    assert_matches(model, onnx_model, batch=1)


def test_reverting_the_plan_takes_back_a_handed_epilogue_and_fusing_again_does_not_hand_it(no_chains):
    model = build(expansion("relu6"))
    engine = model._engine
    [(first, second)] = handed(model)
    engine.fusion.revert()
    assert first.epilogue_reader is None and second.prologue_source is None and not handed(model)
    kernels = [k for k in engine.kernels if k is not second]
    plan = fuse(kernels, engine.shape_kernels, engine.outputs, set(kernels))
    assert plan.handed == [] and first.epilogue_reader is None


def test_a_depthwise_convolution_on_the_numpy_kernel_leaves_the_expansion_its_epilogue(monkeypatch, no_chains):
    """Compiled kernels turned off after the build: the depthwise convolution's numpy plan takes no
    prologue, so the expansion applies its own epilogue again."""
    onnx_model = expansion("relu6")
    model = build(onnx_model)
    assert handed(model)
    monkeypatch.setenv("DELITE_FAST_KERNELS", "0")
    model.resize(model.get_inputs(), [[2, 8, 10, 10]])
    assert_matches(model, onnx_model, batch=2)


def test_an_expansion_on_the_small_plane_kernel_applies_its_own_epilogue(no_chains):
    """A 1x1 expansion on a 7 x 7 plane runs the small-plane kernel, whose plan cannot leave its
    epilogue: the depthwise reader then applies no prologue (it once applied it a second time)."""
    channels = 96
    inits = {"we": RNG.standard_normal((channels, 8, 1, 1)) * 0.4, "be": RNG.standard_normal(channels),
             "wd": RNG.standard_normal((channels, 1, 3, 3)) * 0.4, "bd": RNG.standard_normal(channels),
             "lo": np.array(0.0), "hi": np.array(6.0)}
    nodes = [helper.make_node("Conv", ["x", "we", "be"], ["c"]), helper.make_node("Clip", ["c", "lo", "hi"], ["e"]),
             helper.make_node("Conv", ["e", "wd", "bd"], ["d"], group=channels, pads=[1] * 4),
             helper.make_node("Relu", ["d"], ["y"])]
    onnx_model = float_model(nodes, "small_expansion", [1, 8, 7, 7], ["y"], inits)
    model = build(onnx_model)
    [(first, second)] = handed(model)
    assert first.algorithm == "small_plane" and second.plan.takes_prologue and not first.hands_over()
    x = RNG.standard_normal((1, 8, 7, 7)).astype(np.float32)
    got = model.predict([x])[0].get_data_to_numpy()
    assert relative_l2(got, run_onnxruntime(onnx_model, {"x": x})[0]) < 1e-5


def table_chain_model(dtype, middle: str = "gelu", outputs=("y",)) -> onnx.ModelProto:
    """x -> QuantizeLinear (``dtype``) -> DequantizeLinear -> the float ops of ``middle`` ("gelu":
    Div by sqrt(2), Erf; "scale": Mul by a constant; "vector": Mul by a 3-vector, no table) ->
    QuantizeLinear -> DequantizeLinear -> y: the run a quantized model leaves where its quantizer
    quantized none of the ops."""
    zero = np.array(0 if dtype == np.int8 else 128, dtype)
    inits = {"s": np.array(0.03, np.float32), "so": np.array(0.008, np.float32),
             "root2": np.array(1.4142135, np.float32), "half": np.array([0.5], np.float32),
             "three": np.array([[0.5], [-1.0], [2.0]], np.float32)}
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"]),
             helper.make_node("DequantizeLinear", ["q", "s", "z"], ["d"])]
    if middle == "gelu":
        nodes += [helper.make_node("Div", ["d", "root2"], ["m"]), helper.make_node("Erf", ["m"], ["f"])]
    else:
        nodes.append(helper.make_node("Mul", ["d", "half" if middle == "scale" else "three"], ["f"]))
    nodes += [helper.make_node("QuantizeLinear", ["f", "so", "zo"], ["fq"]),
              helper.make_node("DequantizeLinear", ["fq", "so", "zo"], ["y"])]
    initializers = [numpy_helper.from_array(v, k) for k, v in inits.items()]
    initializers += [numpy_helper.from_array(zero, "z"), numpy_helper.from_array(zero, "zo")]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 3, 200])
    ys = [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs]
    graph = helper.make_graph(nodes, "table_chain", [x], ys, initializers)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])


def table_chains(model: lite.Model) -> list:
    from lite.fusion_kernels import TableChain

    return [k for k in model._engine.kernels if isinstance(k, TableChain)]


def every_byte(dtype) -> np.ndarray:
    """An input whose quantized values are every value of ``dtype`` (scale 0.03), the rest random."""
    low = np.iinfo(dtype).min - (0 if dtype == np.int8 else 128)
    x = RNG.uniform(-4.0, 4.0, (4, 3, 200)).astype(np.float32)
    x.reshape(-1)[:256] = (np.arange(256) + low) * np.float32(0.03)
    return x


@pytest.mark.parametrize("middle", ["gelu", "scale"])
@pytest.mark.parametrize("dtype", [np.int8, np.uint8])
def test_float_ops_between_a_dequantize_and_a_quantize_run_as_one_table(monkeypatch, dtype, middle):
    """The run is one TableChain, bit-identical to its kernels run one by one on every input value,
    and within one output step of onnxruntime."""
    from lite import fusion

    onnx_model = table_chain_model(dtype, middle)
    model = build(onnx_model)
    [chain] = table_chains(model)
    kinds = ["DequantizeLinear", *(["DivFusion", "Erf"] if middle == "gelu" else ["MulFusion"]), "QuantizeLinear"]
    assert [part.type for part in chain.parts] == kinds
    x = every_byte(dtype)
    got = model.predict([x])[0].get_data_to_numpy()
    monkeypatch.setattr(fusion, "_table_chain", lambda *args: None)
    unfused = build(onnx_model)
    assert not table_chains(unfused)
    np.testing.assert_array_equal(got, unfused.predict([x])[0].get_data_to_numpy())
    [want] = run_onnxruntime(onnx_model, {"x": x})
    assert np.abs(got - want).max() <= 0.008 * 1.0001


@pytest.mark.parametrize("case, onnx_model", [
    ("a constant of three values", table_chain_model(np.int8, "vector")),
    ("an inner tensor the model returns", table_chain_model(np.int8, "gelu", outputs=("y", "m"))),
])
def test_runs_that_are_not_element_wise_alone_are_not_tables(case, onnx_model):
    model = build(onnx_model)
    assert not table_chains(model), case
    x = every_byte(np.int8)
    for got, want in zip(model.predict([x]), run_onnxruntime(onnx_model, {"x": x}), strict=True):
        assert np.abs(got.get_data_to_numpy() - want).max() <= 0.008 * 1.0001


def dynamic_linear_model(per_column: bool = False, bias: str = "right", outputs: tuple = ("y",)) -> onnx.ModelProto:
    """A linear layer as ``quantize_dynamic`` writes it: DynamicQuantizeLinear, MatMulInteger of an
    int8 weight, Cast to float, Mul by x's scale times the weight's (one, or one a column), and the
    Add of the bias (``bias``: "right", "left" or "none")."""
    k, n = 70, 40
    w = RNG.integers(-127, 128, (k, n)).astype(np.int8)
    w_scale = (RNG.uniform(0.001, 0.01, n) if per_column else np.array(0.004)).astype(np.float32)
    inits = {"w": w, "wz": np.zeros(n if per_column else (), np.int8), "ws": w_scale,
             "b": RNG.standard_normal(n).astype(np.float32)}
    nodes = [helper.make_node("DynamicQuantizeLinear", ["x"], ["xq", "xs", "xz"]),
             helper.make_node("Mul", ["xs", "ws"], ["scale"]),
             helper.make_node("MatMulInteger", ["xq", "w", "xz", "wz"], ["sums"]),
             helper.make_node("Cast", ["sums"], ["real"], to=TensorProto.FLOAT),
             helper.make_node("Mul", ["real", "scale"], ["scaled" if bias != "none" else "y"])]
    if bias != "none":
        nodes.append(helper.make_node("Add", ["scaled", "b"] if bias == "right" else ["b", "scaled"], ["y"]))
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 20, k])
    ys = [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs]
    initializers = [numpy_helper.from_array(v, name) for name, v in inits.items()]
    graph = helper.make_graph(nodes, "dynamic_linear", [x], ys, initializers)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def scaled_products(model: lite.Model) -> list:
    from lite.fusion_kernels import ScaledIntegerProduct

    return [k for k in model._engine.kernels if isinstance(k, ScaledIntegerProduct)]


@pytest.mark.parametrize("quads", [True, False], ids=["here", "without_vnni"])
@pytest.mark.parametrize("bias", ["right", "left", "none"])
@pytest.mark.parametrize("per_column", [False, True], ids=["tensor", "column"])
def test_a_dynamically_quantized_linear_layer_runs_as_one_scaled_integer_product(monkeypatch, per_column, bias, quads):
    """MatMulInteger, Cast, Mul and the Add of the bias as one kernel: bit-identical to its kernels run
    one by one, and within float32 rounding of onnxruntime; on this machine's products (tiles or
    quads) and as on a machine without VNNI (the sums, then one scaling pass)."""
    from lite import fusion
    from lite.kernels.fast import int8_quads

    if not quads:
        monkeypatch.setattr(int8_quads, "available", lambda: False)
    onnx_model = dynamic_linear_model(per_column, bias)
    model = build(onnx_model)
    [product] = scaled_products(model)
    kinds = ["MatMulInteger", "Cast", "MulFusion", *(["AddFusion"] if bias != "none" else [])]
    assert [part.type for part in product.parts] == kinds
    monkeypatch.setattr(fusion, "_scaled_integer_product", lambda *args: None)
    unfused = build(onnx_model)
    assert not scaled_products(unfused)
    for _ in range(2):
        x = RNG.standard_normal((2, 20, 70)).astype(np.float32)
        got = model.predict([x])[0].get_data_to_numpy()
        np.testing.assert_array_equal(got, unfused.predict([x])[0].get_data_to_numpy())
        [want] = run_exact_oracle(onnx_model, {"x": x})
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def dynamic_conv_model(per_channel: bool, bias: str, depthwise: bool) -> onnx.ModelProto:
    """A convolution as ``quantize_dynamic`` writes it: DynamicQuantizeLinear, ConvInteger of an int8
    weight, Cast to float, Mul by x's scale times the weight's (one, or one a channel, (C, 1, 1)),
    and the Add of the bias ((C, 1, 1): "right" then a ReLU, "left" then a ReLU6's Clip, or
    "none")."""
    c_in, c_out = (6, 6) if depthwise else (5, 7)
    w = RNG.integers(-127, 128, (c_out, 1 if depthwise else c_in, 3, 3)).astype(np.int8)
    w_scale = (RNG.uniform(0.001, 0.01, (c_out, 1, 1)) if per_channel else np.array(0.004)).astype(np.float32)
    inits = {"w": w, "wz": np.zeros((), np.int8), "ws": w_scale,  # NOTE: onnxruntime's takes one zero point
             "b": RNG.standard_normal((c_out, 1, 1)).astype(np.float32)}
    nodes = [helper.make_node("DynamicQuantizeLinear", ["x"], ["xq", "xs", "xz"]),
             helper.make_node("Mul", ["xs", "ws"], ["scale"]),
             helper.make_node("ConvInteger", ["xq", "w", "xz", "wz"], ["sums"], pads=[1, 1, 1, 1],
                              group=c_in if depthwise else 1),
             helper.make_node("Cast", ["sums"], ["real"], to=TensorProto.FLOAT),
             helper.make_node("Mul", ["real", "scale"], ["scaled" if bias != "none" else "y"])]
    if bias != "none":
        nodes.append(helper.make_node("Add", ["scaled", "b"] if bias == "right" else ["b", "scaled"], ["biased"]))
        nodes.append(helper.make_node("Relu", ["biased"], ["y"]) if bias == "right" else
                     helper.make_node("Clip", ["biased", "lo", "hi"], ["y"]))  # NOTE: fused into the Add
        inits |= {"lo": np.array(0, np.float32), "hi": np.array(6, np.float32)}
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, c_in, 9, 11])
    graph = helper.make_graph(nodes, "dynamic_conv", [x], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(v, name) for name, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("depthwise", [False, True], ids=["dense", "depthwise"])
@pytest.mark.parametrize("bias", ["right", "left", "none"])
@pytest.mark.parametrize("per_channel", [False, True], ids=["tensor", "channel"])
def test_a_dynamically_quantized_convolution_runs_as_one_scaled_integer_product(monkeypatch, per_channel, bias,
                                                                                 depthwise):
    """ConvInteger, Cast, Mul and the Add of the bias as one kernel, a scale and bias a channel:
    bit-identical to its kernels run one by one, within float32 rounding of onnxruntime."""
    from lite import fusion

    onnx_model = dynamic_conv_model(per_channel, bias, depthwise)
    model = build(onnx_model)
    [product] = scaled_products(model)
    kinds = ["ConvInteger", "Cast", "MulFusion", *(["AddFusion"] if bias != "none" else [])]
    assert [part.type for part in product.parts] == kinds
    monkeypatch.setattr(fusion, "_scaled_integer_product", lambda *args: None)
    unfused = build(onnx_model)
    assert not scaled_products(unfused)
    for _ in range(2):
        x = RNG.standard_normal((2, 6 if depthwise else 5, 9, 11)).astype(np.float32)
        got = model.predict([x])[0].get_data_to_numpy()
        np.testing.assert_array_equal(got, unfused.predict([x])[0].get_data_to_numpy())
        [want] = run_exact_oracle(onnx_model, {"x": x})
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_a_scaled_integer_product_leaves_out_an_inner_tensor_the_model_returns():
    onnx_model = dynamic_linear_model(outputs=("y", "real"))
    model = build(onnx_model)
    assert not scaled_products(model)
    x = RNG.standard_normal((2, 20, 70)).astype(np.float32)
    for got, want in zip(model.predict([x]), run_exact_oracle(onnx_model, {"x": x}), strict=True):
        np.testing.assert_allclose(got.get_data_to_numpy(), want, rtol=1e-5, atol=1e-5)


def test_two_threads_share_a_scaled_integer_product_with_the_same_result(monkeypatch):
    from lite import fusion

    onnx_model = dynamic_linear_model(per_column=True)
    model = lite.Model()
    model.build(convert(onnx_model), lite.ModelType.LITE, lite.Context(thread_num=2))
    assert scaled_products(model)
    monkeypatch.setattr(fusion, "_scaled_integer_product", lambda *args: None)
    unfused = build(onnx_model)
    x = RNG.standard_normal((2, 20, 70)).astype(np.float32)
    np.testing.assert_array_equal(model.predict([x])[0].get_data_to_numpy(),
                                  unfused.predict([x])[0].get_data_to_numpy())


def channel_layer_norm(channels: int = 24, axis: int = -1, readers=(), outputs=("y",), back=(0, 3, 1, 2),
                       bias: bool = True) -> onnx.ModelProto:
    """timm's LayerNorm2d: x (batch, channels, h, w) -> Transpose to channels last -> LayerNormalization over
    ``axis`` -> Transpose ``back`` -> y."""
    normalized = channels if axis == -1 else None
    inits = {"scale": RNG.standard_normal(normalized or (10, channels)) + 1,
             **({"bias": RNG.standard_normal(normalized or (10, channels))} if bias else {})}
    nodes = [helper.make_node("Transpose", ["x"], ["t"], perm=[0, 2, 3, 1]),
             helper.make_node("LayerNormalization", ["t", "scale", *(["bias"] if bias else [])], ["n"], axis=axis,
                              epsilon=1e-5),
             helper.make_node("Transpose", ["n"], ["y"], perm=list(back)), *readers]
    return float_model(nodes, "channel_norm", ["batch", channels, "h", 10], outputs, inits)


def channel_norms(model: lite.Model) -> list:
    from lite.fusion_kernels import ChannelNorm

    return [k for k in model._engine.kernels if isinstance(k, ChannelNorm)]


def assert_channel_norm_matches(model: lite.Model, onnx_model: onnx.ModelProto, shape: tuple) -> None:
    if tuple(model.get_inputs()[0].shape) != shape:
        model.resize(model.get_inputs(), [list(shape)])
    x = (RNG.standard_normal(shape) * 3 + 1).astype(np.float32)
    for got, want in zip(model.predict([x]), run_onnxruntime(onnx_model, {"x": x}), strict=True):
        assert relative_l2(got.get_data_to_numpy(), want) < 1e-5


@pytest.mark.parametrize("bias", [True, False])
def test_a_layer_norm_over_the_channels_between_two_transposes_runs_as_one_kernel(bias):
    onnx_model = channel_layer_norm(bias=bias)
    model = build(onnx_model)
    [kernel] = channel_norms(model)
    assert kernel.type == "Transpose+LayerNormFusion+Transpose"
    for shape in ((1, 24, 10, 10), (2, 24, 30, 10), (1, 24, 3, 10)):  # positions across the kernel's blocks of 256
        assert_channel_norm_matches(model, onnx_model, shape)
    profile: dict = {}
    model.predict([RNG.standard_normal((1, 24, 3, 10)).astype(np.float32)], profile=profile)
    norm, *transposes = kernel.parts
    assert norm.type == "LayerNormFusion" and profile[norm] > 0 and all(profile[t] == 0 for t in transposes)


@pytest.mark.parametrize("case, onnx_model", [
    ("the norm takes two axes", channel_layer_norm(axis=-2)),
    ("the channels-last image is also a model output", channel_layer_norm(outputs=("y", "t"))),
    ("the norm's output has another reader", channel_layer_norm(readers=[helper.make_node("Neg", ["n"], ["m"])],
                                                                outputs=("y", "m"))),
    ("the second transpose is another", channel_layer_norm(back=(0, 3, 2, 1))),
])
def test_other_norms_between_transposes_stay_apart(case, onnx_model):
    model = build(onnx_model)
    assert not channel_norms(model), case
    shape = (1, 24, 10, 10)
    x = RNG.standard_normal(shape).astype(np.float32)
    for got, want in zip(model.predict([x]), run_onnxruntime(onnx_model, {"x": x}), strict=True):
        assert relative_l2(got.get_data_to_numpy(), want) < 1e-5
