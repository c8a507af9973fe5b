"""Runs of convolutions on the channel-blocked layout (lite.blocking.BlockedChain): checked
against onnxruntime and against the same model's kernels run one by one in NCHW."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import lite
from lite import blocking
from lite.blocking import BlockedChain
from lite.kernels import fast
from lite.tools.converter import convert
from tests.support.oracle import relative_l2, run_onnxruntime

pytestmark = pytest.mark.skipif(fast.numba_module() is None, reason="numba is not importable here")

RNG = np.random.default_rng(8)


def conv_node(inits: dict, name: str, x: str, out_c: int, in_c: int, kernel: int = 1, group: int = 1,
              **attrs) -> onnx.NodeProto:
    """A Conv of ``x`` to ``name`` with a fresh random weight and bias, put in ``inits``."""
    scale = np.sqrt(in_c // group * kernel * kernel)
    inits[f"w{name}"] = RNG.standard_normal((out_c, in_c // group, kernel, kernel)) / scale
    inits[f"b{name}"] = RNG.standard_normal(out_c) * 0.1
    return helper.make_node("Conv", [x, f"w{name}", f"b{name}"], [name], group=group, **attrs)


def inverted_residuals(channels: int = 24, plane: int | str = 12, outputs=("y",), extra=()) -> onnx.ModelProto:
    """x (batch, channels, plane, plane) -> two inverted residual blocks, MobileNet style:
    1x1 expansion to 4x (Clip 0..6) -> depthwise 3x3 (Clip) -> 1x1 projection + x (Add) -> r;
    then 1x1 expansion (HardSwish) -> depthwise 5x5 stride 2 pads 2 (Relu) -> 1x1 projection
    to 40 -> y; plus ``extra`` nodes; ``plane`` a number or a dim name (a dynamic plane)."""
    wide = 4 * channels
    inits = {"lo": np.array(0.0), "hi": np.array(6.0)}

    def conv(*args, **attrs):
        return conv_node(inits, *args, **attrs)

    nodes = [conv("e1", "x", wide, channels), helper.make_node("Clip", ["e1", "lo", "hi"], ["a1"]),
             conv("d1", "a1", wide, wide, 3, wide, pads=[1] * 4), helper.make_node("Clip", ["d1", "lo", "hi"], ["a2"]),
             conv("p1", "a2", channels, wide), helper.make_node("Add", ["p1", "x"], ["r"]),
             conv("e2", "r", wide, channels), helper.make_node("HardSwish", ["e2"], ["a3"]),
             conv("d2", "a3", wide, wide, 5, wide, pads=[2] * 4, strides=[2, 2]),
             helper.make_node("Relu", ["d2"], ["a4"]), conv("y", "a4", 40, wide), *extra]
    return model_of(nodes, "inverted", ["batch", channels, plane, plane], inits, outputs)


def model_of(nodes: list[onnx.NodeProto], name: str, x_shape: list, inits: dict,
             outputs: tuple[str, ...] = ("y",)) -> onnx.ModelProto:
    """An opset-17 model of ``nodes``: float input x of ``x_shape``, the named outputs, ``inits`` as
    float32 initializers."""
    graph = helper.make_graph(
        nodes, name, [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs],
        [numpy_helper.from_array(np.asarray(v, np.float32), k) for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def build(onnx_model: onnx.ModelProto, thread_num: int = 1) -> lite.Model:
    model = lite.Model()
    model.build(convert(onnx_model), lite.ModelType.LITE, lite.Context(thread_num=thread_num))
    return model


def chains(model: lite.Model) -> list[BlockedChain]:
    return [k for k in model._engine.kernels if isinstance(k, BlockedChain)]


def one_chain(onnx_model: onnx.ModelProto, thread_num: int = 1) -> tuple[lite.Model, BlockedChain]:
    """The model built, and the one chain it runs."""
    model = build(onnx_model, thread_num)
    [chain] = chains(model)
    return model, chain


def predict(model: lite.Model, x: np.ndarray) -> list[np.ndarray]:
    if list(model.get_inputs()[0].shape) != list(x.shape):
        model.resize(model.get_inputs(), [list(x.shape)])
    return [t.get_data_to_numpy() for t in model.predict([x])]


def assert_matches(model: lite.Model, onnx_model: onnx.ModelProto, x: np.ndarray) -> None:
    for got, want in zip(predict(model, x), run_onnxruntime(onnx_model, {"x": x}), strict=True):
        assert got.shape == want.shape
        assert relative_l2(got, want) < 1e-5


@pytest.mark.parametrize("channels", [24, 16, 40])
def test_inverted_residual_blocks_run_as_one_chain(channels):
    onnx_model = inverted_residuals(channels)
    model, chain = one_chain(onnx_model)
    assert len(chain.members) == 6 and not chain.fallback
    assert [m.depthwise for m in chain.members] == [False, True, False, False, True, False]
    for batch in (1, 3, 2):
        assert_matches(model, onnx_model, RNG.standard_normal((batch, channels, 12, 12)).astype(np.float32))
    rows = model.partition_report()  # every node keeps its place
    assert [r.op_type for r in rows].count("Conv2DFusion") == 6 and {r.runs_on for r in rows} == {"native"}


def test_the_chain_gives_what_the_kernels_give_one_by_one(monkeypatch):
    onnx_model = inverted_residuals()
    x = RNG.standard_normal((2, 24, 12, 12)).astype(np.float32)
    chained = predict(build(onnx_model), x)
    monkeypatch.setattr(blocking, "MIN_MEMBERS", 100)
    alone = build(onnx_model)
    assert not chains(alone)
    for a, b in zip(chained, predict(alone, x), strict=True):
        assert np.abs(a - b).max() <= 1e-4 * max(1.0, np.abs(b).max())


def test_tensors_read_after_the_chain_come_back_in_nchw():
    extra = [helper.make_node("ReduceMean", ["a2"], ["m"], axes=[1])]
    onnx_model = inverted_residuals(outputs=("y", "r", "m"), extra=extra)
    model, chain = one_chain(onnx_model)
    assert {t.name for t in chain.outputs} >= {"y", "r"}
    assert_matches(model, onnx_model, RNG.standard_normal((1, 24, 12, 12)).astype(np.float32))


def test_a_plane_too_small_for_the_tiles_runs_the_kernels_one_by_one():
    onnx_model = inverted_residuals(plane="side")
    model, chain = one_chain(onnx_model)
    assert_matches(model, onnx_model, RNG.standard_normal((1, 24, 12, 12)).astype(np.float32))
    assert not chain.fallback
    assert_matches(model, onnx_model, RNG.standard_normal((2, 24, 2, 2)).astype(np.float32))
    assert chain.fallback  # 2 x 2 positions: fewer than a 1x1 tile takes
    assert_matches(model, onnx_model, RNG.standard_normal((1, 24, 9, 9)).astype(np.float32))
    assert not chain.fallback


def test_a_lone_convolution_stays_in_nchw():
    onnx_model = inverted_residuals(extra=[helper.make_node("Sigmoid", ["y"], ["z"])], outputs=("z",))
    onnx_model.graph.node.insert(2, helper.make_node("Sigmoid", ["a1"], ["a1r"]))  # NOTE: splits the first run
    onnx_model.graph.node[3].input[0] = "a1r"
    model = build(onnx_model)
    assert [len(c.members) for c in chains(model)] == [5]
    assert_matches(model, onnx_model, RNG.standard_normal((1, 24, 12, 12)).astype(np.float32))


def test_a_profile_charges_each_member_of_the_chain():
    model = build(inverted_residuals())
    profile: dict = {}
    model.predict([RNG.standard_normal((1, 24, 12, 12)).astype(np.float32)], profile=profile)
    [chain] = chains(model)
    for m in chain.members:
        first, *rest = getattr(m.kernel, "parts", (m.kernel,))
        assert profile[first] > 0 and all(profile[part] == 0 for part in rest)


def test_two_threads_share_the_chain_on_the_crew():
    from lite.kernels.fast.crew import crew

    if crew() is None:
        pytest.skip("no crew here")
    onnx_model = inverted_residuals(32, 20)
    model, chain = one_chain(onnx_model, thread_num=2)
    for batch in (1, 2):
        assert_matches(model, onnx_model, RNG.standard_normal((batch, 32, 20, 20)).astype(np.float32))
        assert any(type(step).__name__ == "CrewStep" for steps in chain.steps for step in steps)


def squeeze_excite_block(gate: str = "Sigmoid", plane: int = 12) -> onnx.ModelProto:
    """x (batch, 16, plane, plane) -> 1x1 expansion to 64 (SiLU) -> depthwise 3x3 (SiLU) -> d; a gate of d
    (global average pool, 1x1 to 8, Relu, 1x1 to 64, ``gate``) scales d -> 1x1 projection + x -> y:
    an EfficientNet / MobileNetV3 block."""
    inits = {}

    def conv(*args, **attrs):
        return conv_node(inits, *args, **attrs)

    def silu(x, name):
        return [helper.make_node("Sigmoid", [x], [f"{name}s"]), helper.make_node("Mul", [x, f"{name}s"], [name])]

    nodes = [conv("e", "x", 64, 16), *silu("e", "a"), conv("d0", "a", 64, 64, 3, 64, pads=[1] * 4), *silu("d0", "d"),
             helper.make_node("GlobalAveragePool", ["d"], ["p"]), conv("s1", "p", 8, 64),
             helper.make_node("Relu", ["s1"], ["s1r"]), conv("s2", "s1r", 64, 8),
             helper.make_node(gate, ["s2"], ["g"]), helper.make_node("Mul", ["d", "g"], ["m"]), conv("j", "m", 16, 64),
             helper.make_node("Add", ["j", "x"], ["y"])]
    return model_of(nodes, "excite", ["batch", 16, plane, plane], inits)


@pytest.mark.parametrize("gate", ["Sigmoid", "HardSigmoid"])
@pytest.mark.parametrize("plane, scaled, thread_num", [(12, True, 1), (12, True, 2), (3, False, 2)])
def test_a_squeeze_and_excitation_block_runs_in_one_chain(monkeypatch, gate, plane, scaled, thread_num):
    """On 12 x 12 the gate scales the projection's weight (ScaledInput); on 3 x 3, fewer positions
    than the projection's outputs, the Mul stays a kernel: the chain takes it too. On two threads
    the gate's products and the weight's scaling are shared out (where their weights are large
    enough: here all are)."""
    monkeypatch.setattr(blocking, "SHARED_WEIGHTS", 0)
    onnx_model = squeeze_excite_block(gate, plane)
    model, chain = one_chain(onnx_model, thread_num)
    kinds = [("gate" if m.conv is None and m.gate is None else "mul" if m.conv is None else
              "scaled" if m.gate is not None else "conv") for m in chain.members]
    assert kinds == ["conv", "conv", "gate", *(["scaled"] if scaled else ["mul", "conv"])]
    for batch in (1, 3):
        assert_matches(model, onnx_model, RNG.standard_normal((batch, 16, plane, plane)).astype(np.float32))
    if thread_num == 2 and model._engine.threads.crew() is not None:
        shared = [sum(type(step).__name__ == "CrewStep" for step in steps) for steps in chain.steps]
        assert shared[2] == 2  # NOTE: the gate's two products
        assert not scaled or shared[3] == 2  # NOTE: the weight's scaling, then the product


def test_a_small_gate_runs_in_one_call():
    onnx_model = squeeze_excite_block()
    model, chain = one_chain(onnx_model, thread_num=2)
    assert_matches(model, onnx_model, RNG.standard_normal((1, 16, 12, 12)).astype(np.float32))
    assert [len(steps) for steps in chain.steps][2:] == [1, 2]  # NOTE: the gate; the scaling, then the product
    assert all(type(step).__name__ != "CrewStep" for step in chain.steps[2])


def test_the_chain_buffers_stay_within_the_memory_limit():
    """The blocked buffers come from the model's workspace, the NCHW arrays of a chain run kernel by
    kernel are counted too: a limit neither fits gives a clear error naming it, and nothing worse."""
    data = convert(inverted_residuals(channels=24, plane=12))
    x = RNG.standard_normal((1, 24, 12, 12)).astype(np.float32)
    roomy = lite.Model()
    roomy.build(data, lite.ModelType.LITE, lite.Context(thread_num=1, memory_limit=1 << 20))
    roomy.predict([x])
    [chain] = chains(roomy)
    assert not chain.fallback
    with pytest.raises(lite.LiteError, match="more than the memory limit of 60000 bytes"):
        tight = lite.Model()
        tight.build(data, lite.ModelType.LITE, lite.Context(thread_num=1, memory_limit=60_000))
        tight.predict([x])


def bottlenecks(channels: int = 32, plane: int = 14) -> onnx.ModelProto:
    """x (batch, 3, plane, plane) -> a 3x3 stem to ``channels`` (Relu) -> a ResNet bottleneck
    (1x1, 3x3 pads 1, 1x1 + the block's input, Relu) -> a downsampling one (1x1, 3x3 stride 2,
    1x1 + a 1x1 stride-2 shortcut to 2x channels, Relu) -> y."""
    inits: dict = {}

    def conv(*args, **attrs):
        return conv_node(inits, *args, **attrs)

    def relu(x: str) -> onnx.NodeProto:
        return helper.make_node("Relu", [x], [f"{x}r"])

    c, wide = channels, 2 * channels
    nodes = [conv("s", "x", c, 3, 3, pads=[1] * 4), relu("s"),
             conv("a1", "sr", c // 2, c), relu("a1"), conv("a2", "a1r", c // 2, c // 2, 3, pads=[1] * 4), relu("a2"),
             conv("a3", "a2r", c, c // 2), helper.make_node("Add", ["a3", "sr"], ["a"]), relu("a"),
             conv("b1", "ar", c, c), relu("b1"), conv("b2", "b1r", c, c, 3, pads=[1] * 4, strides=[2, 2]), relu("b2"),
             conv("b3", "b2r", wide, c), conv("d", "ar", wide, c, strides=[2, 2]),
             helper.make_node("Add", ["d", "b3"], ["b"]), helper.make_node("Relu", ["b"], ["y"])]
    return model_of(nodes, "bottlenecks", ["batch", 3, plane, plane], inits)


@pytest.mark.parametrize("wide", [True, False])
def test_dense_convolutions_join_chains_whatever_the_registers(monkeypatch, wide):
    monkeypatch.setattr(fast, "wide_registers", lambda: wide)
    onnx_model = bottlenecks(32, 14)
    model, chain = one_chain(onnx_model)
    assert [m.dense for m in chain.members] == [True, False, True, False, False, True, False, True]
    assert_matches(model, onnx_model, RNG.standard_normal((1, 3, 14, 14)).astype(np.float32))


def test_a_dense_convolution_reads_blocks_where_its_channels_fill_them():
    """Else it is narrow: it reads its NCHW input, so it only starts a chain."""
    for channels, fills in [(32, True), (40, True), (16, True), (24, True), (8, True), (17, True), (7, False),
                            (3, False), (1, False)]:
        assert blocking._fills_blocks(channels) == fills


@pytest.mark.parametrize(("channels", "plane", "thread_num"), [(32, 14, 1), (80, 13, 1), (64, 20, 2)])
def test_bottleneck_blocks_run_as_one_chain_with_their_dense_convolutions(channels, plane, thread_num):
    onnx_model = bottlenecks(channels, plane)
    model, chain = one_chain(onnx_model, thread_num)
    assert [m.dense for m in chain.members] == [True, False, True, False, False, True, False, True]
    assert [m.narrow for m in chain.members] == [True] + [False] * 7  # NOTE: the 3-channel stem reads NCHW
    assert chain.converted == []  # NOTE: so the image does not go into blocks
    for batch in (1, 3):
        assert_matches(model, onnx_model, RNG.standard_normal((batch, 3, plane, plane)).astype(np.float32))
    assert gathers(chain.steps[-1][0])  # NOTE: the stride-2 1x1 shortcut's input, gathered for the 1x1 kernel


def gathers(step) -> bool:
    """Whether a chain's step is ``blocks.subsample``, on the caller's thread or the crew's."""
    from lite.kernels.fast import blocks, crew

    native = getattr(step, "native", step)
    return getattr(step, "func", None) is blocks.subsample or \
        getattr(native, "job", None) == crew.job_address(blocks.subsample_job)


@pytest.mark.parametrize(("plane", "gathered"), [(32, True), (7, False)])
def test_a_strided_1x1_convolution_gathers_its_input_where_its_output_fills_a_tile(plane, gathered):
    """x -> 1x1 -> 1x1 stride 4 -> global average pool: on a 7 x 7 plane the strided output is 2 x 2,
    fewer positions than a tile, and the dense kernel runs it."""
    inits: dict = {}
    nodes = [conv_node(inits, "a", "x", 32, 32), helper.make_node("Relu", ["a"], ["ar"]),
             conv_node(inits, "d", "ar", 48, 32, strides=[4, 4]), helper.make_node("GlobalAveragePool", ["d"], ["y"])]
    onnx_model = model_of(nodes, "strided", ["batch", 32, plane, plane], inits)
    model, chain = one_chain(onnx_model)
    assert_matches(model, onnx_model, RNG.standard_normal((2, 32, plane, plane)).astype(np.float32))
    assert gathers(chain.steps[1][0]) == gathered


def test_a_dense_member_gives_what_its_kernel_gives_alone(monkeypatch):
    onnx_model = bottlenecks(80, 11)
    x = RNG.standard_normal((2, 3, 11, 11)).astype(np.float32)
    chained = predict(build(onnx_model), x)
    monkeypatch.setattr(blocking, "MIN_MEMBERS", 100)
    alone = build(onnx_model)
    assert not chains(alone)
    [a], [b] = chained, predict(alone, x)
    assert np.abs(a - b).max() <= 1e-4 * max(1.0, np.abs(b).max())


@pytest.mark.parametrize("thread_num", [1, 2])
def test_a_narrow_convolution_starts_a_chain_of_its_own(thread_num):
    """The bottlenecks' second 3x3 convolution has 7 input channels (16 lanes: more than twice as
    many): the chain ends before it and a new one starts with it, taking the residual it reads back
    into blocks."""
    onnx_model = bottlenecks(14, 13)
    model, chain = one_chain(onnx_model, thread_num)  # NOTE: the stem and first 1x1 keep nothing inside: no chain
    assert chain.members[0].narrow and chain.members[0].x.name == "a1r"
    assert [t.name for t in chain.converted] == ["sr"]
    for batch in (1, 2):
        assert_matches(model, onnx_model, RNG.standard_normal((batch, 3, 13, 13)).astype(np.float32))


@pytest.mark.parametrize(("narrow_channels", "one_run"), [(24, True), (3, False)])
@pytest.mark.parametrize("thread_num", [1, 2])
def test_a_dense_convolution_of_few_channels_inside_a_run_reads_blocks_unless_they_are_mostly_padding(
        narrow_channels, one_run, thread_num):
    """GoogLeNet's 3x3 convolutions of 24 channels (32 lanes) stay in the run; one of 3 channels (16
    lanes) is narrow: it ends the run and starts its own, reading NCHW."""
    inits: dict = {}
    nodes = [conv_node(inits, "a", "x", 32, 32), helper.make_node("Relu", ["a"], ["ar"]),
             conv_node(inits, "b", "ar", narrow_channels, 32), helper.make_node("Relu", ["b"], ["br"]),
             conv_node(inits, "c", "br", 48, narrow_channels, 3, pads=[1] * 4), helper.make_node("Relu", ["c"], ["cr"]),
             conv_node(inits, "d", "cr", 32, 48), helper.make_node("Add", ["d", "ar"], ["y"])]
    onnx_model = model_of(nodes, "narrow_inside", ["batch", 32, 12, 12], inits)
    model = build(onnx_model, thread_num)
    found = chains(model)
    for batch in (1, 2):
        assert_matches(model, onnx_model, RNG.standard_normal((batch, 32, 12, 12)).astype(np.float32))
    if one_run:
        [chain] = found
        assert [m.narrow for m in chain.members] == [False] * 4 and chain.members[2].dense
    for chain in found:  # NOTE: 3 channels: a narrow member only ever starts a chain
        assert not any(m.narrow for m in chain.members[1:])


def resnet_stem(plane: int = 32) -> onnx.ModelProto:
    """x (batch, 3, plane, plane) -> 7x7 stride 2 pads 3 to 64 (Relu) -> MaxPool 3x3 stride 2 pads
    1 -> 1x1 (Relu) -> + AveragePool 4x4 stride 4 of a 1x1 convolution of x -> y: ResNet's start,
    the image read by the stem in NCHW and by the second 1x1 convolution in blocks."""
    inits: dict = {}
    nodes = [conv_node(inits, "s", "x", 64, 3, 7, pads=[3] * 4, strides=[2, 2]),
             helper.make_node("Relu", ["s"], ["sr"]),
             helper.make_node("MaxPool", ["sr"], ["p"], kernel_shape=[3, 3], strides=[2, 2], pads=[1] * 4),
             conv_node(inits, "a", "p", 64, 64), helper.make_node("Relu", ["a"], ["ar"]),
             conv_node(inits, "q", "x", 64, 3),
             helper.make_node("AveragePool", ["q"], ["qp"], kernel_shape=[4, 4], strides=[4, 4]),
             helper.make_node("Add", ["ar", "qp"], ["y"])]
    return model_of(nodes, "stem", ["batch", 3, plane, plane], inits)


@pytest.mark.parametrize("thread_num", [1, 2])
def test_a_stem_starts_the_chain_with_its_pool(thread_num):
    onnx_model = resnet_stem()
    model, chain = one_chain(onnx_model, thread_num)
    assert [m.kernel.type for m in chain.members] == ["Conv2DFusion", "MaxPoolFusion", *["Conv2DFusion"] * 2,
                                                      "AvgPoolFusion"]
    assert [m.narrow for m in chain.members] == [True] + [False] * 4
    assert [t.name for t in chain.converted] == ["x"]  # NOTE: for the 1x1 convolution
    for batch in (1, 3):
        assert_matches(model, onnx_model, RNG.standard_normal((batch, 3, 32, 32)).astype(np.float32))
    assert "_narrow_fill" in chain.steps[0][0].__qualname__  # NOTE: the stem still reads x in NCHW, not those blocks


def dense_run(channels: int = 32) -> onnx.ModelProto:
    """x (batch, channels, side, side) -> 3x3 pads 1 (HardSwish) -> 3x3 stride 2 pads 1 (Clip 0..6)
    -> 3x3 pads 1 -> y: dense convolutions alone, on planes that may hold fewer positions than a tile."""
    inits = {"lo": np.array(0.0), "hi": np.array(6.0)}
    nodes = [conv_node(inits, "a", "x", channels, channels, 3, pads=[1] * 4),
             helper.make_node("HardSwish", ["a"], ["h"]),
             conv_node(inits, "b", "h", channels, channels, 3, pads=[1] * 4, strides=[2, 2]),
             helper.make_node("Clip", ["b", "lo", "hi"], ["c"]),
             conv_node(inits, "y", "c", channels, channels, 3, pads=[1] * 4)]
    return model_of(nodes, "dense", ["batch", channels, "side", "side"], inits)


@pytest.mark.parametrize("thread_num", [1, 2])
def test_dense_members_take_planes_of_any_size(thread_num):
    onnx_model = dense_run()
    model, chain = one_chain(onnx_model, thread_num)
    assert [m.dense for m in chain.members] == [True, True, True]
    for side in (9, 5, 3, 1, 12):  # NOTE: 81/25, 25/9, 9/4, 1/1 and 144/36 positions: tiles short of ROWS
        assert_matches(model, onnx_model, RNG.standard_normal((2, 32, side, side)).astype(np.float32))
        assert not chain.fallback


def dense_kinds(chain: BlockedChain) -> list[str]:
    """The plan each dense member of the chain runs at the current shapes."""
    return [type(chain.dense[m.kernel][0]).__name__ for m in chain.members if m.direct]


@pytest.mark.parametrize("thread_num", [1, 2])
def test_3x3_stride_1_members_run_winograd_where_their_output_fills_a_register_tile_of_blocks(thread_num):
    """On a 40 x 40 plane both stride-1 layers run Winograd (10 x 10 and 5 x 5 output blocks of 4 x 4);
    on 12 x 12 the last one's 6 x 6 output is 4 blocks, fewer than a register tile: direct; the
    stride-2 layer always direct."""
    onnx_model = dense_run()
    model, chain = one_chain(onnx_model, thread_num)
    for side, kinds in [(40, ["BlockedWinogradPlan", "BlockedDirectPlan", "BlockedWinogradPlan"]),
                        (12, ["BlockedWinogradPlan", "BlockedDirectPlan", "BlockedDirectPlan"])]:
        assert_matches(model, onnx_model, RNG.standard_normal((2, 32, side, side)).astype(np.float32))
        assert dense_kinds(chain) == kinds


def test_a_memory_limit_winograds_scratch_would_pass_keeps_the_direct_kernel():
    """At 40 x 40, 32 channels, Winograd's two scratch arrays take about 0.93 MB, the direct
    kernel's padded input 0.23 MB: under a 0.7 MB limit the members run direct, in the chain."""
    onnx_model = dense_run()
    x = RNG.standard_normal((1, 32, 40, 40)).astype(np.float32)
    for limit, kinds in [(None, ["BlockedWinogradPlan", "BlockedDirectPlan", "BlockedWinogradPlan"]),
                         (700_000, ["BlockedDirectPlan"] * 3)]:
        model = lite.Model()
        context = lite.Context(thread_num=1) if limit is None else lite.Context(thread_num=1, memory_limit=limit)
        model.build(convert(onnx_model), lite.ModelType.LITE, context)
        assert_matches(model, onnx_model, x)
        [chain] = chains(model)
        assert not chain.fallback and dense_kinds(chain) == kinds


def test_members_of_few_channels_keep_the_direct_kernel():
    onnx_model = dense_run(channels=8)
    model, chain = one_chain(onnx_model)
    assert_matches(model, onnx_model, RNG.standard_normal((1, 8, 40, 40)).astype(np.float32))
    assert dense_kinds(chain) == ["BlockedDirectPlan"] * 3
    assert not blocking.worth_winograd(8, 64) and blocking.worth_winograd(16, 16)


def fire_modules(squeeze: int = 16, expand: int = 32, plane: int = 15, ceil: int = 1,
                 head: str | None = None) -> onnx.ModelProto:
    """x (batch, 32, plane, plane) -> MaxPool 3x3 stride 2 -> a SqueezeNet fire module (1x1 squeeze,
    Relu; 1x1 and 3x3 expands, Relu; Concat) -> MaxPool 3x3 stride 2 (``ceil`` mode) -> another
    fire module -> y; with a ``head`` (a global pool's op), that pool and a 1x1 convolution to 10
    channels follow."""
    inits: dict = {}

    def fire(name: str, x: str, channels: int) -> list[onnx.NodeProto]:
        return [conv_node(inits, f"{name}s", x, squeeze, channels),
                helper.make_node("Relu", [f"{name}s"], [f"{name}r"]),
                conv_node(inits, f"{name}a", f"{name}r", expand, squeeze),
                helper.make_node("Relu", [f"{name}a"], [f"{name}ar"]),
                conv_node(inits, f"{name}b", f"{name}r", expand, squeeze, 3, pads=[1] * 4),
                helper.make_node("Relu", [f"{name}b"], [f"{name}br"]),
                helper.make_node("Concat", [f"{name}ar", f"{name}br"], [f"{name}c"], axis=1)]

    nodes = [helper.make_node("MaxPool", ["x"], ["p0"], kernel_shape=[3, 3], strides=[2, 2]), *fire("f1", "p0", 32),
             helper.make_node("MaxPool", ["f1c"], ["p1"], kernel_shape=[3, 3], strides=[2, 2], ceil_mode=ceil),
             *fire("f2", "p1", 2 * expand), helper.make_node("Identity", ["f2c"], ["f" if head else "y"])]
    if head:  # NOTE: a classifier head: the global pool, then a 1x1 convolution to 10 channels
        inits["wh"] = RNG.standard_normal((10, 2 * expand, 1, 1)) * 0.1
        nodes += [helper.make_node(head, ["f"], ["g"]), helper.make_node("Conv", ["g", "wh"], ["y"])]
    return model_of(nodes, "fire", ["batch", 32, plane, plane], inits)


@pytest.mark.parametrize(("expand", "plane", "ceil", "thread_num"), [(32, 15, 1, 1), (32, 16, 0, 2), (48, 21, 1, 2)])
def test_fire_modules_run_as_one_chain_with_their_concats_and_pools(expand, plane, ceil, thread_num):
    onnx_model = fire_modules(expand=expand, plane=plane, ceil=ceil)
    model, chain = one_chain(onnx_model, thread_num)
    kinds = [m.kernel.type if m.conv is None else "conv" for m in chain.members]
    assert kinds == ["conv"] * 3 + ["Concat", "MaxPoolFusion"] + ["conv"] * 3 + ["Concat"]  # NOTE: not the first pool
    for batch in (1, 2):
        assert_matches(model, onnx_model, RNG.standard_normal((batch, 32, plane, plane)).astype(np.float32))


def join_steps(chain: BlockedChain) -> list[int]:
    """How many calls each Concat member of ``chain`` makes (none where its inputs are in place)."""
    return [len(steps) for m, steps in zip(chain.members, chain.steps, strict=True) if m.joined is not None]


def test_fire_modules_write_their_expands_into_the_concat():
    onnx_model = fire_modules()
    model, chain = one_chain(onnx_model)
    for batch in (1, 2):
        assert_matches(model, onnx_model, RNG.standard_normal((batch, 32, 15, 15)).astype(np.float32))
        assert join_steps(chain) == [0, 0]


def nested_concats() -> onnx.ModelProto:
    """x (batch, 16, 13, 13) -> a (1x1, 32) -> b (3x3 of a, 16) -> c = Concat(a, b) -> d (1x1 of a, 16:
    a read after c) -> y = Concat(c, d) (a Concat's output joined again), Relu."""
    inits: dict = {}
    nodes = [conv_node(inits, "a", "x", 32, 16), conv_node(inits, "b", "a", 16, 32, 3, pads=[1] * 4),
             helper.make_node("Concat", ["a", "b"], ["c"], axis=1), conv_node(inits, "d", "a", 16, 32),
             helper.make_node("Concat", ["c", "d"], ["j"], axis=1), helper.make_node("Relu", ["j"], ["y"])]
    return model_of(nodes, "nested", ["batch", 16, 13, 13], inits)


def test_a_concat_input_read_after_the_concat_keeps_a_buffer_of_its_own():
    onnx_model = nested_concats()
    model, chain = one_chain(onnx_model)
    for batch in (1, 2):
        assert_matches(model, onnx_model, RNG.standard_normal((batch, 16, 13, 13)).astype(np.float32))
        assert join_steps(chain) == [1, 1]  # NOTE: a is read after c; c is a Concat's output
    slotted = {t.name for t in chain._join_slots({t: i for i, m in enumerate(chain.members) for t in m.reads})}
    assert slotted == {"b", "d"}


def test_a_concat_of_channels_short_of_a_block_ends_the_chain():
    onnx_model = fire_modules(expand=24)  # NOTE: 24 channels before the 3x3 expand's: not whole blocks
    model = build(onnx_model)
    assert all(m.kernel.type != "Concat" for c in chains(model) for m in c.members)
    assert_matches(model, onnx_model, RNG.standard_normal((1, 32, 15, 15)).astype(np.float32))


def dense_block(channels: int = 32, growth: int = 16, plane: int = 12, outputs=("y",)) -> onnx.ModelProto:
    """x (batch, channels, plane, plane) -> a DenseNet layer (BatchNorm, Relu, 1x1, Relu, 3x3 to
    ``growth``; Concat with its input; Clip 0..6) -> a transition (BatchNorm, Relu, 1x1,
    AveragePool 2x2 stride 2) -> y. Each BatchNorm follows a Concat, a Clip or the input: none
    folds into a convolution."""
    inits: dict = {}

    def norm(name: str, x: str, c: int) -> list[onnx.NodeProto]:
        for part, value in (("s", RNG.uniform(0.5, 1.5, c)), ("b", RNG.standard_normal(c) * 0.1),
                            ("m", RNG.standard_normal(c) * 0.1), ("v", RNG.uniform(0.5, 1.5, c))):
            inits[f"{name}{part}"] = value
        return [helper.make_node("BatchNormalization", [x, *(f"{name}{p}" for p in "sbmv")], [name]),
                helper.make_node("Relu", [name], [f"{name}r"])]

    c = channels + growth
    inits.update(lo=np.array(0.0), hi=np.array(6.0))
    nodes = [*norm("n1", "x", channels), conv_node(inits, "a", "n1r", 64, channels),
             helper.make_node("Relu", ["a"], ["ar"]), conv_node(inits, "b", "ar", growth, 64, 3, pads=[1] * 4),
             helper.make_node("Concat", ["x", "b"], ["cat"], axis=1),
             helper.make_node("Clip", ["cat", "lo", "hi"], ["catc"]), *norm("n2", "catc", c),
             conv_node(inits, "t", "n2r", c // 2, c),
             helper.make_node("AveragePool", ["t"], ["y"], kernel_shape=[2, 2], strides=[2, 2])]
    return model_of(nodes, "dense", ["batch", channels, plane, plane], inits, outputs)


@pytest.mark.parametrize("thread_num", [1, 2])
def test_a_dense_block_runs_as_one_chain_with_its_norms_activations_and_pool(thread_num):
    onnx_model = dense_block()
    model, chain = one_chain(onnx_model, thread_num)
    kinds = {m.kernel.type for m in chain.members}
    assert {"BatchNorm", "Activation", "Concat", "AvgPoolFusion"} <= kinds
    norms = [m for m in chain.members if m.kernel.type == "BatchNorm"]
    assert [m.absorbed.type for m in norms] == ["Activation"] * 2  # NOTE: each norm applies its Relu: one pass
    for batch in (1, 3):
        assert_matches(model, onnx_model, RNG.standard_normal((batch, 32, 12, 12)).astype(np.float32))


def test_a_norm_whose_result_is_read_elsewhere_keeps_its_activation_apart():
    onnx_model = dense_block(outputs=("y", "n2"))
    model, chain = one_chain(onnx_model)
    norms = [m for m in chain.members if m.kernel.type == "BatchNorm"]
    assert [m.absorbed is not None for m in norms] == [True, False]
    assert_matches(model, onnx_model, RNG.standard_normal((2, 32, 12, 12)).astype(np.float32))


def grouped_blocks() -> onnx.ModelProto:
    """x (batch, 64, side, side) -> a ResNeXt bottleneck (1x1 to 128, Relu; 3x3 in 32 groups of 4,
    Relu; 1x1 to 64 + x, Relu) -> a RegNetY block (1x1 to 96, Relu; 3x3 stride 2 in 12 groups of 8,
    Relu; a squeeze-and-excitation gate; 1x1 to 96 + a 1x1 stride-2 shortcut, Relu) -> 3x3 in 3
    groups of 32 -> y."""
    inits: dict = {}

    def conv(*args, **attrs):
        return conv_node(inits, *args, **attrs)

    def relu(x: str) -> onnx.NodeProto:
        return helper.make_node("Relu", [x], [f"{x}r"])

    nodes = [conv("a1", "x", 128, 64), relu("a1"), conv("a2", "a1r", 128, 128, 3, 32, pads=[1] * 4), relu("a2"),
             conv("a3", "a2r", 64, 128), helper.make_node("Add", ["a3", "x"], ["a"]), relu("a"),
             conv("b1", "ar", 96, 64), relu("b1"), conv("b2", "b1r", 96, 96, 3, 12, pads=[1] * 4, strides=[2, 2]),
             relu("b2"), helper.make_node("GlobalAveragePool", ["b2r"], ["p"]), conv("s1", "p", 16, 96), relu("s1"),
             conv("s2", "s1r", 96, 16), helper.make_node("Sigmoid", ["s2"], ["g"]),
             helper.make_node("Mul", ["b2r", "g"], ["m"]), conv("b3", "m", 96, 96),
             conv("d", "ar", 96, 64, strides=[2, 2]), helper.make_node("Add", ["b3", "d"], ["b"]), relu("b"),
             conv("y", "br", 96, 96, 3, 3, pads=[1] * 4)]
    return model_of(nodes, "grouped", ["batch", 64, "side", "side"], inits)


@pytest.mark.parametrize("thread_num", [1, 2])
def test_grouped_convolutions_run_in_the_chain(thread_num):
    onnx_model = grouped_blocks()
    model, chain = one_chain(onnx_model, thread_num)
    assert sum(m.grouped for m in chain.members) == 3
    assert not any(m.depthwise for m in chain.members)
    for batch, plane in ((1, 14), (2, 9)):
        assert_matches(model, onnx_model, RNG.standard_normal((batch, 64, plane, plane)).astype(np.float32))


def test_a_grouped_convolution_joins_where_no_group_straddles_a_block():
    for out_channels, width, group, joins in [(128, 4, 32, True), (96, 8, 12, True), (104, 8, 13, True),
                                              (96, 32, 3, True), (96, 24, 4, False), (64, 4, 8, False),
                                              (36, 12, 3, False)]:
        assert blocking._grouped_fits(out_channels, width, group) == joins


@pytest.mark.parametrize("pool", ["GlobalAveragePool", "GlobalMaxPool"])
@pytest.mark.parametrize("thread_num", [1, 2])
def test_a_global_pool_ends_the_chain(pool, thread_num):
    """Its one position read in blocks, and the 1x1 convolution after it on a 1 x 1 plane runs in
    NCHW (a classifier head)."""
    onnx_model = fire_modules(head=pool)
    model, chain = one_chain(onnx_model, thread_num)
    assert chain.members[-1].closing and chain.members[-1].out.name == "g"
    assert any(k.type == "Conv2DFusion" for k in model._engine.kernels)  # NOTE: the head, after the chain
    for batch in (1, 2):
        assert_matches(model, onnx_model, RNG.standard_normal((batch, 32, 15, 15)).astype(np.float32))
