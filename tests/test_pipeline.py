"""Pipeline executor: split models match the unsplit one, wiring errors, stage errors, backpressure, close."""

from __future__ import annotations

import itertools
import threading
import time

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import lite
from lite.delegates.example_npu import ExampleNPUDelegate
from lite.pipeline import StageError, _Cutter, balance
from lite.schema.graph import GraphDef, NodeDef, TensorDef
from lite.schema.writer import write_model
from lite.tools import zoo
from lite.tools.converter import convert
from tests.delegate_support import NativeGraphKernel
from tests.oracle import relative_l2

RNG = np.random.default_rng(23)


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


def one_op(op: str, inputs: dict[str, tuple[int, list]], output: tuple[str, int, list],
           consts: dict[str, np.ndarray] | None = None) -> bytes:
    """A one-node model: ``inputs`` {name: (onnx type, dims)} -> ``output`` (name, type, dims)."""
    consts = consts or {}
    name, elem, dims = output
    node = helper.make_node(op, [*inputs, *consts], [name], name=op.lower())
    graph = helper.make_graph(
        [node], op, [helper.make_tensor_value_info(k, t, d) for k, (t, d) in inputs.items()],
        [helper.make_tensor_value_info(name, elem, dims)], [numpy_helper.from_array(v, k) for k, v in consts.items()])
    return convert(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9))


def build(data: bytes, *delegates: lite.Delegate) -> lite.Model:
    model = lite.Model()
    model.build(data, context=lite.Context(thread_num=1, delegates=list(delegates)))
    return model


def relu_model(shape=(1, 4), inp="x", out="h") -> lite.Model:
    return build(one_op("Relu", {inp: (TensorProto.FLOAT, list(shape))}, (out, TensorProto.FLOAT, list(shape))))


def add_model(shape=(1, 4), inp="h", dtype=np.float32) -> lite.Model:
    elem = TensorProto.FLOAT if dtype == np.float32 else TensorProto.DOUBLE
    const = {"c": np.arange(np.prod(shape), dtype=dtype).reshape(shape)}
    return build(one_op("Add", {inp: (elem, list(shape))}, ("y", elem, list(shape)), const))


def chain(first: lite.Model, second: lite.Model) -> lite.PipelineConfig:
    """x -> stage 0 (x -> h) -> stage 1 (h -> y) -> y."""
    return lite.PipelineConfig([first, second]).connect("x", (0, "x")).connect((0, "h"), (1, "h")).connect(
        (1, "y"), "y")


# ---- test delegates: a hook before each execute (raise for one request, or wait at a gate) ----

class HookKernel(NativeGraphKernel):
    """Runs the native kernels it replaced, after calling ``hook(call_number)``."""

    def __init__(self, kernels, inputs, outputs, hook):
        super().__init__(kernels, inputs, outputs, [], "hook")
        self.hook = hook
        self.calls = 0

    def execute(self) -> None:
        self.calls += 1
        self.hook(self.calls - 1)
        super().execute()


class HookDelegate(lite.SimpleDelegate):
    """Takes every kernel into one HookKernel."""

    def __init__(self, hook):
        self.hook = hook
        self.kernels: list[HookKernel] = []

    def is_supported(self, kernel, primitive):
        return True

    def create_graph_kernel(self, kernels, inputs, outputs):
        self.kernels.append(HookKernel(kernels, inputs, outputs, self.hook))
        return self.kernels[-1]

    @property
    def calls(self) -> int:
        return sum(k.calls for k in self.kernels)


def fail_at(call: int):
    def hook(number: int) -> None:
        if number == call:
            raise RuntimeError(f"injected failure at call {number}")
    return hook


class Gate:
    """A hook that, from call ``block_at`` on, says so (``reached``) and waits until ``opened``."""

    def __init__(self, block_at: int):
        self.block_at = block_at
        self.reached = threading.Event()
        self.opened = threading.Event()

    def __call__(self, number: int) -> None:
        if number >= self.block_at:
            self.reached.set()
            assert self.opened.wait(10), "the test never opened the gate"


def pipeline_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("lite-pipeline-")]


@pytest.fixture(autouse=True)
def no_threads_left():
    yield
    assert pipeline_threads() == []


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
        return [pipeline.get_output(block=True, timeout=30) for _ in inputs]


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
        assert got.keys() == want.keys()
        assert all(np.array_equal(got[name], want[name]) for name in want)


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
        assert np.array_equal(got["logits"], want["logits"])


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


def test_stages_with_different_delegates(net):
    contexts = [lite.Context(thread_num=1),
                lite.Context(thread_num=1, delegates=[ExampleNPUDelegate(min_nodes_per_partition=1)])]
    pieces, config = lite.split_model(net, 2, contexts)
    assert {row.runs_on for row in pieces[0].partition_report()} == {"native"}
    assert "ExampleNPUDelegate" in {row.runs_on for row in pieces[1].partition_report()}
    inputs = images(50)
    for got, want in zip(stream(config, inputs), reference(net, inputs), strict=True):
        assert relative_l2(got["logits"], want["logits"]) <= 1e-2
        assert np.array_equal(got["feat"], want["feat"])  # made natively in stage 0


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
    cutter, measured = _Cutter(GraphDef(), list(range(6)), {}, runs=1), []
    monkeypatch.setattr(cutter, "piece_costs", lambda cuts: measured.append(cuts) or inside)
    assert cutter.refine(list("abcdef"), [1.0] * 6, 2) == [2]
    assert measured == [[3], [2]]  # the even cut, then the re-balanced one; it repeats, so it stops


def test_split_model_profiles_the_pieces_of_each_cut_it_tries(caplog):
    with caplog.at_level("INFO", logger="lite"):
        lite.split_model(zoo.add_chain(30), 3, profile_runs=2)
    rounds = [line for line in caplog.messages if "measure" in line]
    assert 1 <= len(rounds) <= _Cutter.ROUNDS

# ---- wiring ---------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def stages():
    return {"relu": relu_model(), "add": add_model(), "add5": add_model((1, 5)),
            "add64": add_model(dtype=np.float64)}


@pytest.mark.parametrize(("second", "source", "target", "message"), [
    ("add", "x", (2, "x"), r"no stage 2; stages are 0..1"),
    ("add", "x", (0, "nope"), r"stage 0 has no input 'nope'; its inputs are \['x'\]"),
    ("add", (0, "nope"), (1, "h"), r"stage 0 has no output 'nope'"),
    ("add", (1, "y"), (0, "x"), r"stage 0 does not run after stage 1 \(this edge would make a cycle\)"),
    ("add", (0, "h"), (0, "x"), r"would make a cycle"),
    ("add", "x", "y", r"cannot feed a pipeline output directly"),
    ("add", ("x", 0), (0, "x"), r"an endpoint is a pipeline name"),
    ("add5", (0, "h"), (1, "h"), r"shape \[1, 4\] cannot feed shape \[1, 5\]"),
    ("add64", (0, "h"), (1, "h"), r"dtype float32 cannot feed dtype float64"),
])
def test_wiring_errors_name_the_connection(stages, second, source, target, message):
    config = lite.PipelineConfig([stages["relu"], stages[second]])
    with pytest.raises(lite.InputError, match=message) as error:
        config.connect(source, target)
    assert str(error.value).startswith(f"connect({source!r}, {target!r}): ")


def test_a_target_is_fed_once(stages):
    config = lite.PipelineConfig([stages["relu"], stages["add"]]).connect("x", (0, "x"))
    with pytest.raises(lite.InputError, match=r"connect\('z', \(0, 'x'\)\): stage 0 'x' is already fed by "
                                              r"pipeline 'x'"):
        config.connect("z", (0, "x"))
    config.connect((0, "h"), (1, "h")).connect((1, "y"), "y")
    with pytest.raises(lite.InputError, match=r"connect\(\(0, 'h'\), 'y'\): pipeline 'y' is already fed by "):
        config.connect((0, "h"), "y")


def test_a_pipeline_input_takes_the_spec_of_its_first_target(stages):
    config = lite.PipelineConfig([relu_model(), add_model((1, 5), inp="x")]).connect("x", (0, "x"))
    with pytest.raises(lite.InputError, match=r"connect\('x', \(1, 'x'\)\): shape \[1, 4\] cannot feed"):
        config.connect("x", (1, "x"))


def test_incomplete_wiring_fails_at_build(stages):
    config = lite.PipelineConfig([stages["relu"], stages["add"]]).connect("x", (0, "x"))
    with pytest.raises(lite.InputError, match=r"stage inputs \[\(1, 'h'\)\] are fed by nothing"):
        lite.PipelineExecutor(config)
    config.connect((0, "h"), (1, "h"))
    with pytest.raises(lite.InputError, match="the pipeline has no outputs"):
        lite.PipelineExecutor(config)


def test_stage_list_errors(stages):
    with pytest.raises(lite.InputError, match="at least one stage"):
        lite.PipelineConfig([])
    with pytest.raises(lite.InputError, match="the same Model appears twice"):
        lite.PipelineConfig([stages["relu"], stages["relu"]])
    with pytest.raises(lite.InputError, match="not built"):
        lite.PipelineConfig([lite.Model()])


def test_str_prints_the_wiring(stages):
    text = str(chain(stages["relu"], stages["add"]))
    assert text.splitlines() == [
        "PipelineConfig: 2 stage(s)",
        "  input  'x': float32[1, 4]",
        "  output 'y': float32[1, 4]",
        "  stage 0: inputs ['x'] -> outputs ['h']",
        "  stage 1: inputs ['h'] -> outputs ['y']",
        "  pipeline 'x' -> stage 0 'x'",
        "  stage 0 'h' -> stage 1 'h'",
        "  stage 1 'y' -> pipeline 'y'",
    ]


def test_inputs_are_checked_when_set(stages):
    with lite.PipelineExecutor(chain(stages["relu"], stages["add"])) as pipeline:
        with pytest.raises(lite.InputError, match=r"'z' is not a pipeline input; inputs are \['x'\]"):
            pipeline.set_input("z", np.zeros((1, 4), np.float32))
        with pytest.raises(lite.InputError, match=r"pipeline input 'x': shape \[1, 5\] cannot feed"):
            pipeline.set_input("x", np.zeros((1, 5), np.float32))
        with pytest.raises(lite.InputError, match=r"pipeline inputs \['x'\] are not set"):
            pipeline.run()
    with pytest.raises(lite.InputError, match="closed"):
        pipeline.run({"x": np.zeros((1, 4), np.float32)})


def test_inputs_stay_set_and_are_copied(stages):
    x = RNG.standard_normal((1, 4)).astype(np.float32)
    with lite.PipelineExecutor(chain(stages["relu"], stages["add"])) as pipeline:
        pipeline.set_input("x", x)
        pipeline.run()
        x[:] = -1  # the caller reuses its buffer: the queued request keeps the value it was given
        first = pipeline.get_output(block=True, timeout=10)["y"]
        pipeline.run()
        second = pipeline.get_output(block=True, timeout=10)["y"]
    assert np.array_equal(first, second) and not np.array_equal(first, np.arange(4, dtype=np.float32)[None])


# ---- errors in stages -----------------------------------------------------------------------

@pytest.mark.parametrize("failing", [0, 1])
def test_a_stage_error_goes_to_its_request_and_later_requests_run(failing):
    hooks = [HookDelegate(fail_at(4) if i == failing else fail_at(-1)) for i in range(2)]
    config = chain(build(one_op("Relu", {"x": (TensorProto.FLOAT, [1, 4])}, ("h", TensorProto.FLOAT, [1, 4])),
                         hooks[0]), build(add_model_bytes(), hooks[1]))
    inputs = [{"x": RNG.standard_normal((1, 4)).astype(np.float32)} for _ in range(10)]
    with lite.PipelineExecutor(config) as pipeline:
        for x in inputs:
            pipeline.run(x)
        for k, x in enumerate(inputs):
            if k == 4:
                with pytest.raises(lite.LiteError, match=f"pipeline stage {failing} failed on request 4: "
                                                         r"DelegateError: .*injected failure") as error:
                    pipeline.get_output(block=True, timeout=10)
                assert isinstance(error.value, StageError) and error.value.stage == failing
            else:
                got = pipeline.get_output(block=True, timeout=10)["y"]
                assert np.array_equal(got, np.maximum(x["x"], 0) + np.arange(4, dtype=np.float32))
    assert hooks[1].calls == (9 if failing == 0 else 10)  # a request that failed is not run by later stages


def add_model_bytes() -> bytes:
    return one_op("Add", {"h": (TensorProto.FLOAT, [1, 4])}, ("y", TensorProto.FLOAT, [1, 4]),
                  {"c": np.arange(4, dtype=np.float32)[None]})


def test_a_shape_the_next_stage_cannot_take_fails_in_that_stage():
    relu = build(one_op("Relu", {"x": (TensorProto.FLOAT, ["N", 4])}, ("h", TensorProto.FLOAT, ["N", 4])))
    reshape = build(one_op("Reshape", {"h": (TensorProto.FLOAT, ["N", 4])}, ("y", TensorProto.FLOAT, [2, 4]),
                           {"shape": np.array([2, 4], np.int64)}))
    batches = [2, 3, 2]
    inputs = [{"x": RNG.standard_normal((n, 4)).astype(np.float32)} for n in batches]
    with lite.PipelineExecutor(chain(relu, reshape)) as pipeline:
        for x in inputs:
            pipeline.run(x)
        assert pipeline.get_output(block=True, timeout=10)["y"].shape == (2, 4)
        with pytest.raises(lite.LiteError, match="pipeline stage 1 failed on request 1: InputError"):
            pipeline.get_output(block=True, timeout=10)
        assert np.array_equal(pipeline.get_output(block=True, timeout=10)["y"], np.maximum(inputs[2]["x"], 0))


# ---- queues, waiting and closing ------------------------------------------------------------

def gated_chain(gate: Gate, where: int) -> lite.PipelineConfig:
    hooks = [HookDelegate(gate if i == where else fail_at(-1)) for i in range(2)]
    relu = build(one_op("Relu", {"x": (TensorProto.FLOAT, [1, 4])}, ("h", TensorProto.FLOAT, [1, 4])), hooks[0])
    return chain(relu, build(add_model_bytes(), hooks[1]))


def expected(x: np.ndarray) -> np.ndarray:
    return np.maximum(x, 0) + np.arange(4, dtype=np.float32)


def vectors(count: int) -> list[np.ndarray]:
    return [RNG.standard_normal((1, 4)).astype(np.float32) for _ in range(count)]


def test_get_output_does_not_wait_unless_asked():
    gate = Gate(block_at=0)
    with lite.PipelineExecutor(gated_chain(gate, 0)) as pipeline:
        x = vectors(1)[0]
        pipeline.run({"x": x})
        assert pipeline.get_output() is None and not pipeline.has_next_output()
        start = time.perf_counter()
        assert pipeline.get_output(block=True, timeout=0.1) is None
        assert time.perf_counter() - start >= 0.09
        gate.opened.set()
        assert np.array_equal(pipeline.get_output(block=True, timeout=10)["y"], expected(x))
        assert pipeline.get_output(block=True, timeout=0.01) is None


def test_run_raises_when_full_and_asked_not_to_block():
    gate = Gate(block_at=0)
    xs = vectors(2)
    with lite.PipelineExecutor(gated_chain(gate, 0), queue_size=1) as pipeline:
        pipeline.run({"x": xs[0]})
        assert gate.reached.wait(10)  # stage 0 holds request 0; its queue has room for one more
        pipeline.run({"x": xs[1]}, block=False)
        with pytest.raises(lite.InputError, match=r"the pipeline is full \(2 stage\(s\), queue_size 1\)"):
            pipeline.run(block=False)
        with pytest.raises(lite.InputError, match="the pipeline is full"):
            pipeline.run(timeout=0.05)
        gate.opened.set()
        results = [pipeline.get_output(block=True, timeout=10)["y"] for _ in xs]
    assert all(np.array_equal(r, expected(x)) for r, x in zip(results, xs, strict=True))


def test_max_outputs_holds_back_the_whole_pipeline(stages):
    # finished 2 + per stage: one in its hands and one in its queue = 6 requests at most
    xs = vectors(7)
    with lite.PipelineExecutor(chain(stages["relu"], stages["add"]), queue_size=1, max_outputs=2) as pipeline:
        assert submit_until_full(pipeline, xs, timeout=0.3) == 6
        results = [pipeline.get_output(block=True, timeout=10)["y"] for _ in range(6)]
    assert all(np.array_equal(r, expected(x)) for r, x in zip(results, xs, strict=False))


def submit_until_full(pipeline: lite.PipelineExecutor, xs: list[np.ndarray], timeout: float) -> int:
    """Runs requests until one finds no room within ``timeout``; returns how many were queued."""
    for count, x in enumerate(xs):
        try:
            pipeline.run({"x": x}, timeout=timeout)
        except lite.InputError:
            return count
    return len(xs)


def test_close_waits_for_every_queued_request(stages):
    xs = vectors(30)
    pipeline = lite.PipelineExecutor(chain(stages["relu"], stages["add"]))
    for x in xs:
        pipeline.run({"x": x})
    pipeline.close()
    assert pipeline_threads() == []
    results = [pipeline.get_output() for _ in xs]
    assert all(np.array_equal(r["y"], expected(x)) for r, x in zip(results, xs, strict=True))
    assert pipeline.get_output() is None and pipeline.get_output(block=True) is None  # closed: never waits


def test_close_mid_stream_keeps_finished_outputs_and_stops_every_thread():
    gate = Gate(block_at=3)
    xs = vectors(8)
    pipeline = lite.PipelineExecutor(gated_chain(gate, 1))
    for x in xs:
        pipeline.run({"x": x})
    assert gate.reached.wait(10)  # requests 0-2 finished, stage 1 is inside request 3
    results = [pipeline.get_output(block=True, timeout=10)]
    closer = threading.Thread(target=pipeline.close, kwargs={"cancel": True})
    closer.start()
    deadline = time.monotonic() + 10
    while not pipeline._cancel.is_set() and time.monotonic() < deadline:  # close() has begun
        time.sleep(0.001)
    gate.opened.set()
    closer.join(10)
    assert not closer.is_alive() and pipeline_threads() == []
    while (result := pipeline.get_output()) is not None:
        results.append(result)
    assert 4 <= len(results) < len(xs)  # 0-2 were finished, 3 was running; the rest were dropped
    assert all(np.array_equal(r["y"], expected(x)) for r, x in zip(results, xs, strict=False))
    with pytest.raises(lite.InputError, match="closed"):
        pipeline.run()


def test_leaving_the_block_with_an_error_cancels_and_joins(stages):
    with pytest.raises(RuntimeError, match="consumer failed"), \
            lite.PipelineExecutor(chain(stages["relu"], stages["add"])) as pipeline:
        for x in vectors(20):
            pipeline.run({"x": x})
        raise RuntimeError("consumer failed")
    assert pipeline_threads() == []


@pytest.mark.parametrize(("option", "value"), [("queue_size", 0), ("max_outputs", 0), ("queue_size", 1.5)])
def test_queue_options_are_checked(stages, option, value):
    with pytest.raises(lite.InputError, match=f"{option} must be a positive int"):
        lite.PipelineExecutor(chain(stages["relu"], stages["add"]), **{option: value})
