"""split_model: split models match the unsplit one; balance and the cutter; costs on each stage's Context; errors."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import lite
from lite.delegates.example_npu import ExampleNPUDelegate
from lite.pipeline import split
from lite.pipeline.split import Cutter, balance
from lite.schema.graph import GraphDef, NodeDef, TensorDef
from lite.schema.reader import read_model
from lite.schema.writer import write_model
from lite.tools import zoo
from lite.tools.converter import convert
from tests.support.oracle import relative_l2
from tests.support.pipeline import RNG, arrays, build, one_op

# ---- models ---------------------------------------------------------------------------------

def conv_net() -> bytes:
    """Conv/Relu, a residual Conv + Add, a strided Conv, pool, Gemm; ``feat`` (an early tensor) is an output too."""
    rng = np.random.default_rng(5)

    def weight(name, *shape):
        return numpy_helper.from_array(rng.normal(0, 0.3, shape).astype(np.float32), name)

    inits = [weight("w1", 8, 3, 3, 3), weight("b1", 8), weight("w2", 8, 8, 3, 3), weight("b2", 8),
             weight("w3", 16, 8, 3, 3), weight("b3", 16), weight("fc", 10, 16), weight("fb", 10)]
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["feat"], name="relu1"),
        helper.make_node("Conv", ["feat", "w2", "b2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["c2", "feat"], ["s"], name="add"),
        helper.make_node("Relu", ["s"], ["r"], name="relu2"),
        helper.make_node("Conv", ["r", "w3", "b3"], ["c3"], name="conv3", pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("Relu", ["c3"], ["r3"], name="relu3"),
        helper.make_node("GlobalAveragePool", ["r3"], ["g"], name="gap"),
        helper.make_node("Flatten", ["g"], ["f"], name="flatten"),
        helper.make_node("Gemm", ["f", "fc", "fb"], ["logits"], name="gemm", transB=1),
    ]
    graph = helper.make_graph(
        nodes, "conv_net", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 10]),
         helper.make_tensor_value_info("feat", TensorProto.FLOAT, [1, 8, 16, 16])], inits)
    return convert(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9))


def reshape_to_shape_of() -> bytes:
    """x -> relu a -> relu b -> relu c -> Reshape(c, Shape(a)) -> y: Shape is computed from shapes alone."""
    relu = {"activation_type": "RELU", "alpha": 0.0, "beta": 0.0, "min_val": 0.0, "max_val": 0.0}
    f32 = np.dtype(np.float32)
    tensors = [TensorDef(n, f32, (1, 2, 4)) for n in "xabcy"] + [TensorDef("s", np.dtype(np.int64), (3,))]
    nodes = [NodeDef("relu_a", "Activation", relu, [0], [1]),
             NodeDef("shape", "Shape", {"start": 0, "end": 3}, [1], [5]),
             NodeDef("relu_b", "Activation", relu, [1], [2]), NodeDef("relu_c", "Activation", relu, [2], [3]),
             NodeDef("reshape", "Reshape", {"allowzero": False}, [3, 5], [4])]
    return write_model(GraphDef(tensors, nodes, inputs=[0], outputs=[4], name="reshape_to_shape_of"))


@pytest.fixture(scope="module")
def net() -> bytes:
    return conv_net()


def reference(data: bytes, inputs: list[dict[str, np.ndarray]]) -> list[dict[str, np.ndarray]]:
    model = build(data)
    names = [t.name for t in model.get_outputs()]
    return [dict(zip(names, (t.get_data_to_numpy() for t in model.predict(list(x.values()))), strict=True))
            for x in inputs]


def stream(config: lite.PipelineConfig, inputs: list[dict[str, np.ndarray]], **options):
    """Queues every request, then collects every result in order."""
    with lite.PipelineExecutor(config, **options) as pipeline:
        numbers = [pipeline.run(x) for x in inputs]
        assert numbers == list(range(len(inputs)))
        return [arrays(pipeline.get_output(block=True, timeout=30)) for _ in inputs]


def images(count: int, shape=(1, 3, 16, 16), name="x") -> list[dict[str, np.ndarray]]:
    return [{name: RNG.standard_normal(shape).astype(np.float32)} for _ in range(count)]



# ---- split models give the unsplit model's results ------------------------------------------

@pytest.mark.parametrize("stages", [2, 3])
def test_split_model_matches_unsplit_for_200_requests(net, stages):
    pieces, config = lite.split_model(net, stages)
    assert len(pieces) == stages and sorted(config.outputs) == ["feat", "logits"]
    assert ((0, "feat"), "feat") in config.connections  # made by the first conv: wired out of stage 0
    inputs = images(200)
    results = stream(config, inputs)
    for got, want in zip(results, reference(net, inputs), strict=True):
        assert got.keys() == want.keys()  # NOTE: within rounding: a convolution may run in a blocked chain
        assert all(relative_l2(got[name], want[name]) <= 1e-6 for name in want)  # in one and alone in the other


@pytest.mark.parametrize("stages", [2, 3])
def test_split_resnet18_matches_unsplit(stages):
    data = convert(zoo.resnet18(image_size=64))
    _, config = lite.split_model(data, stages)
    inputs = images(24, (1, 3, 64, 64), "input")
    for got, want in zip(stream(config, inputs), reference(data, inputs), strict=True):
        assert relative_l2(got["output"], want["output"]) <= 1e-6


def test_split_from_files_and_saved_pieces(net, tmp_path):
    path = tmp_path / "net.lite"
    path.write_bytes(net)
    pieces, config = lite.split_model(path, 2, save_dir=tmp_path / "pieces")
    saved = [build((tmp_path / "pieces" / f"stage{i}.lite").read_bytes()) for i in range(2)]
    assert [[t.name for t in m.get_inputs()] for m in saved] == [[t.name for t in m.get_inputs()] for m in pieces]
    inputs = images(3)
    for got, want in zip(stream(config, inputs), reference(net, inputs), strict=True):
        assert relative_l2(got["logits"], want["logits"]) <= 1e-6


def test_split_onnx_path(tmp_path):
    model = zoo.add_chain(12)
    path = tmp_path / "chain.onnx"
    path.write_bytes(model.SerializeToString())
    pieces, config = lite.split_model(path, 3)
    assert len(pieces) == 3 and config.inputs == ["x"] and config.outputs == ["y"]
    inputs = [{"x": RNG.standard_normal((1, 16)).astype(np.float32)} for _ in range(5)]
    for got, want in zip(stream(config, inputs), reference(convert(model), inputs), strict=True):
        assert np.array_equal(got["y"], want["y"])


def test_values_computed_from_shapes_become_constants_of_the_pieces_that_read_them():
    data = reshape_to_shape_of()
    assert "folded" in {row.runs_on for row in build(data).partition_report()}
    pieces, config = lite.split_model(data, 4)
    assert [[t.name for t in piece.get_inputs()] for piece in pieces] == [["x"], ["a"], ["b"], ["c"]]
    inputs = [{"x": RNG.standard_normal((1, 2, 4)).astype(np.float32)} for _ in range(5)]
    for got, want in zip(stream(config, inputs), reference(data, inputs), strict=True):
        assert np.array_equal(got["y"], want["y"])


def test_stages_with_different_delegates(net, monkeypatch):
    # NOTE: every kernel costs the same here, so the cut does not depend on timing (the simulated NPU is slow:
    # measured costs may leave its stage no node it takes)
    real_profile = split._profile

    def even(data, runs):
        costs, known = real_profile(data, runs)
        return dict.fromkeys(costs, 1.0), known

    monkeypatch.setattr(split, "_profile", even)
    monkeypatch.setattr(split, "_cost_table", lambda data, contexts, native, runs: np.ones((len(contexts),
                                                                                           len(native))))
    monkeypatch.setattr(Cutter, "piece_costs", lambda self, cuts: {})
    contexts = [lite.Context(thread_num=1),
                lite.Context(thread_num=1, delegates=[ExampleNPUDelegate(min_nodes_per_partition=1)])]
    pieces, config = lite.split_model(net, 2, contexts)
    assert {row.runs_on for row in pieces[0].partition_report()} == {"native"}
    assert "ExampleNPUDelegate" in {row.runs_on for row in pieces[1].partition_report()}
    inputs = images(50)
    for got, want in zip(stream(config, inputs), reference(net, inputs), strict=True):
        assert relative_l2(got["logits"], want["logits"]) <= 1e-2
        assert relative_l2(got["feat"], want["feat"]) <= 1e-6  # made natively in stage 0



# ---- arguments ------------------------------------------------------------------------------

@pytest.mark.parametrize(("num_stages", "contexts", "message"), [
    (0, None, "num_stages must be a positive int"),
    (99, None, "into 99 stages"),
    (2, [lite.Context(thread_num=1)], "1 contexts for 2 stages"),
])
def test_split_model_argument_errors(net, num_stages, contexts, message):
    with pytest.raises(lite.InputError, match=message):
        lite.split_model(net, num_stages, contexts)


def test_split_model_needs_static_input_shapes():
    data = one_op("Relu", {"x": (TensorProto.FLOAT, ["N", 4])}, ("y", TensorProto.FLOAT, ["N", 4]))
    with pytest.raises(lite.InputError, match="static input shapes"):
        lite.split_model(data, 1)



# ---- balancing the cuts ---------------------------------------------------------------------

@pytest.mark.parametrize("seed", range(20))
def test_balance_minimises_the_largest_stage(seed):
    rng = np.random.default_rng(seed)
    costs = list(rng.exponential(1.0, rng.integers(3, 9)))
    parts = int(rng.integers(1, len(costs) + 1))
    cuts = balance(costs, parts)
    assert len(cuts) == parts - 1 and cuts == sorted(set(cuts)) and all(0 < c < len(costs) for c in cuts)

    def worst(cut):
        bounds = [0, *cut, len(costs)]
        return max(sum(costs[a:b]) for a, b in itertools.pairwise(bounds))

    best = min(worst(c) for c in itertools.combinations(range(1, len(costs)), parts - 1))
    assert worst(cuts) == pytest.approx(best)


def test_cuts_rebalance_on_the_costs_measured_in_the_pieces(monkeypatch):
    """The whole-model profile says even; inside their piece the first three kernels cost 3x."""
    inside = {"a": 3.0, "b": 3.0, "c": 3.0, "d": 1.0, "e": 1.0, "f": 1.0}
    cutter, measured = Cutter(GraphDef(), list(range(6)), {}, runs=1), []
    monkeypatch.setattr(cutter, "piece_costs", lambda cuts: measured.append(cuts) or inside)
    assert cutter.refine(list("abcdef"), [1.0] * 6, 2) == [2]
    assert measured == [[3], [2]]  # the even cut, then the re-balanced one; it repeats, so it stops


def test_split_model_profiles_the_pieces_of_each_cut_it_tries(caplog):
    with caplog.at_level("INFO", logger="lite"):
        lite.split_model(zoo.add_chain(30), 3, profile_runs=2)
    rounds = [line for line in caplog.messages if "measure" in line]
    assert 1 <= len(rounds) <= Cutter.ROUNDS


# ---- placement: each stage costed on its own Context ----------------------------------------

def test_balance_gives_a_faster_part_more_items():
    costs = [4, 1, 1, 1, 1, 4]
    assert balance([costs, [c / 4 for c in costs]], 2) == [1]  # the second part runs 4x faster
    assert balance([[c / 4 for c in costs], costs], 2) == [5]


def test_the_cost_table_profiles_each_distinct_context_once(net, monkeypatch):
    profiled = []

    def halved(data, context, native, first_outputs, runs):
        profiled.append(context)
        return {name: seconds / 2 for name, seconds in native.items()}

    monkeypatch.setattr(split, "_profile_with", halved)
    native, _ = split._profile(net, 1)
    npu = lite.Context(thread_num=1, delegates=[ExampleNPUDelegate()])
    table = split._cost_table(net, [lite.Context(thread_num=1), npu, npu, lite.Context(thread_num=1)], native, 1)
    assert profiled == [npu]
    expected = np.array(list(native.values()))
    assert np.array_equal(table[0], expected) and np.array_equal(table[3], expected)
    assert np.allclose(table[1], expected / 2) and np.array_equal(table[1], table[2])


def test_a_graph_kernels_time_is_shared_among_its_nodes_by_native_cost(net):
    model = build(net, ExampleNPUDelegate(min_nodes_per_partition=1))
    [kernel] = model.graph_kernels()[:1]
    graph = read_model(net)
    first_outputs = split._first_outputs(graph)
    covered = [first_outputs[r.node] for r in model.partition_report() if r.graph_kernel == kernel.name]
    native = {name: float(i + 1) for i, name in enumerate(covered)}
    costs = split._kernel_costs(model, [{kernel: 6.0}], native, first_outputs, min)
    weights = np.arange(1, len(covered) + 1)
    assert [costs[name] for name in covered] == pytest.approx(list(6.0 * weights / weights.sum()))


def test_cuts_refined_per_context_keep_each_pieces_costs_on_its_own_row(monkeypatch):
    """Parts 0 and 1 share a Context, part 2 has its own: a piece's measured costs reach only its Context's rows."""
    shared, other = lite.Context(thread_num=1), lite.Context(thread_num=2)
    cutter = Cutter(GraphDef(), list(range(6)), {}, runs=1, contexts=[shared, shared, other])
    table = np.ones((3, 6))
    cutter._update(table, list("abcdef"), [2, 4], dict(zip("abcdef", [2.0, 2, 3, 3, 4, 4], strict=True)))
    assert table[0].tolist() == table[1].tolist() == [2, 2, 3, 3, 1, 1]
    assert table[2].tolist() == [1, 1, 1, 1, 4, 4]
