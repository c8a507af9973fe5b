"""Shapes computed from input data: kernels whose output shapes depend on values known only at
predict time infer them there (lite.shapes.classify / infer_at_run), checked against onnxruntime."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import lite
from lite.delegate import RUNTIME_SHAPES_REASON
from lite.delegates.onnxruntime import ORTDelegate
from lite.tools.converter import convert
from tests.support.converter import fill_and_sum
from tests.support.oracle import run_onnxruntime

RNG = np.random.default_rng(11)


def model_of(nodes, inputs: dict[str, tuple[int, list]], outputs: list[str], inits=None) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(k, t, s) for k, (t, s) in inputs.items()],
                              [onnx.ValueInfoProto(name=o) for o in outputs],
                              [numpy_helper.from_array(v, k) for k, v in (inits or {}).items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def build(onnx_model: onnx.ModelProto, *delegates, memory_limit: int | None = None) -> lite.Model:
    model = lite.Model()
    context = lite.Context(thread_num=1, delegates=list(delegates))
    if memory_limit is not None:
        context.memory_limit = memory_limit
    model.build(convert(onnx_model), lite.ModelType.LITE, context)
    return model


def predict(model: lite.Model, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    return [t.get_data_to_numpy() for t in model.predict([feeds[t.name] for t in model.get_inputs()])]


def assert_like_onnxruntime(model: lite.Model, onnx_model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> None:
    for got, want in zip(predict(model, feeds), run_onnxruntime(onnx_model, feeds), strict=True):
        assert got.shape == want.shape and got.dtype == want.dtype
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


F, I64 = TensorProto.FLOAT, TensorProto.INT64
# x -> Reshape(s) -> Add(bias row) -> Transpose -> y, and Shape(y) -> ConstantOfShape -> ones
RESHAPE_CHAIN = model_of(
    [helper.make_node("Reshape", ["x", "s"], ["r"]), helper.make_node("Add", ["r", "r"], ["a"]),
     helper.make_node("Transpose", ["a"], ["y"]), helper.make_node("Shape", ["y"], ["sy"]),
     helper.make_node("ConstantOfShape", ["sy"], ["ones"], value=numpy_helper.from_array(np.ones(1, np.float32)))],
    {"x": (F, [2, 3, 4]), "s": (I64, [2])}, ["y", "ones"])


@pytest.mark.parametrize("targets", [[[2, 12], [6, 4], [24, 1], [-1, 3]]])
def test_a_shape_given_as_data_reshapes_at_every_predict(targets):
    model = build(RESHAPE_CHAIN)
    x = RNG.standard_normal((2, 3, 4)).astype(np.float32)
    for target in targets:
        assert_like_onnxruntime(model, RESHAPE_CHAIN, {"x": x, "s": np.array(target, np.int64)})


def test_only_the_kernels_downstream_of_data_are_runtime_shaped():
    model = build(RESHAPE_CHAIN)
    engine = model._engine
    assert sorted(k.type for k in engine.runtime_shaped) == ["AddFusion", "ConstantOfShape", "Reshape", "Shape",
                                                             "Transpose"]
    assert not engine.folded  # Shape of a runtime-shaped tensor is not folded


def test_a_bad_value_fails_clearly_and_the_model_keeps_working():
    model = build(RESHAPE_CHAIN)
    x = RNG.standard_normal((2, 3, 4)).astype(np.float32)
    with pytest.raises(lite.ModelFormatError, match="Reshape.*cannot reshape"):
        predict(model, {"x": x, "s": np.array([5, 5], np.int64)})
    assert_like_onnxruntime(model, RESHAPE_CHAIN, {"x": x, "s": np.array([4, 6], np.int64)})


def test_a_shape_value_beyond_the_memory_limit_is_refused_at_predict():
    fill = model_of([helper.make_node("ConstantOfShape", ["s"], ["y"])], {"s": (I64, [2])}, ["y"])
    model = build(fill, memory_limit=1 << 20)
    with pytest.raises(lite.MemoryLimitError, match="memory limit"):
        predict(model, {"s": np.array([1 << 20, 1 << 20], np.int64)})
    [y] = predict(model, {"s": np.array([3, 5], np.int64)})
    assert y.shape == (3, 5) and not y.any()


def test_a_large_value_computable_at_build_runs_at_predict_within_the_memory_limit():
    count = 1 << 25  # 128 MiB of ones: more than FOLD_LIMIT
    model = build(fill_and_sum(count))
    assert not model._engine.folded and {r.runs_on for r in model.partition_report()} == {"native"}
    assert predict(model, {})[0] == count
    with pytest.raises(lite.LiteError, match="memory limit"):
        build(fill_and_sum(count), memory_limit=64 << 20)


def test_values_folded_at_build_count_against_the_memory_limit_together():
    fills = [helper.make_node("ConstantOfShape", ["s"], [name]) for name in ("a", "b")]
    two = model_of(fills, {}, ["a", "b"], {"s": np.array([100_000], np.int64)})  # 400 kB each
    assert build(two, memory_limit=1 << 20)._engine.folded
    with pytest.raises(lite.MemoryLimitError, match="computed at build .* memory limit of 600000"):
        build(two, memory_limit=600_000)


def test_runtime_shapes_follow_a_resized_input():
    dynamic = model_of([helper.make_node("Reshape", ["x", "s"], ["y"])], {"x": (F, ["N", 4]), "s": (I64, [2])},
                       ["y"])
    model = build(dynamic)
    for batch in (1, 3, 5):
        x = RNG.standard_normal((batch, 4)).astype(np.float32)
        assert_like_onnxruntime(model, dynamic, {"x": x, "s": np.array([2, -1], np.int64)})


def test_delegates_leave_runtime_shaped_kernels_native_and_say_why():
    model = build(RESHAPE_CHAIN, ORTDelegate(min_nodes_per_partition=1))
    rows = {r.op_type: r for r in model.partition_report()}
    assert rows["Reshape"].runs_on == "native" and RUNTIME_SHAPES_REASON in rows["Reshape"].reason
    x = RNG.standard_normal((2, 3, 4)).astype(np.float32)
    assert_like_onnxruntime(model, RESHAPE_CHAIN, {"x": x, "s": np.array([3, 8], np.int64)})


class TakesEverything(lite.Delegate):
    def build(self, model: lite.DelegateModel) -> None:
        model.replace(0, len(model), lite.Kernel(model.subgraph_inputs(0, len(model)),
                                                 model.subgraph_outputs(0, len(model)), None, "all"))


def test_replace_refuses_runtime_shaped_kernels():
    with pytest.raises(lite.DelegateError, match="computed from input data"):
        build(RESHAPE_CHAIN, TakesEverything())


@pytest.mark.parametrize(("op", "axes"), [("Squeeze", [0, 2]), ("Unsqueeze", [1, -1])])
def test_axes_given_as_data(op, axes):
    shape = [1, 3, 1] if op == "Squeeze" else [2, 3]
    graph = model_of([helper.make_node(op, ["x", "a"], ["y"])], {"x": (F, shape), "a": (I64, [2])}, ["y"])
    x = RNG.standard_normal(shape).astype(np.float32)
    assert_like_onnxruntime(build(graph), graph, {"x": x, "a": np.array(axes, np.int64)})


def test_split_sizes_given_as_data():
    graph = model_of([helper.make_node("Split", ["x", "s"], ["a", "b"], axis=1)], {"x": (F, [2, 7]), "s": (I64, [2])},
                     ["a", "b"])
    model = build(graph)
    x = RNG.standard_normal((2, 7)).astype(np.float32)
    for sizes in ([3, 4], [7, 0], [1, 6]):
        assert_like_onnxruntime(model, graph, {"x": x, "s": np.array(sizes, np.int64)})


def test_what_a_runtime_shaped_kernel_reads_stays_alive_until_it_runs():
    # s2 is planned memory read only by the runtime-shaped Reshape; a and b come between
    graph = model_of([helper.make_node("Add", ["s", "zero"], ["s2"]), helper.make_node("Mul", ["x", "x"], ["a"]),
                      helper.make_node("Add", ["a", "x"], ["b"]), helper.make_node("Reshape", ["b", "s2"], ["y"])],
                     {"x": (F, [4, 6]), "s": (I64, [2])}, ["y"], {"zero": np.zeros(2, np.int64)})
    x = RNG.standard_normal((4, 6)).astype(np.float32)
    assert_like_onnxruntime(build(graph), graph, {"x": x, "s": np.array([3, 8], np.int64)})


def test_values_folded_from_shapes_follow_ieee_without_warnings(recwarn):
    """T5's position buckets take the log of position 0 (-inf) in a chain computed from shapes alone."""
    onnx_model = model_of(
        [helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Cast", ["s"], ["f"], to=F),
         helper.make_node("Sub", ["f", "f"], ["zero"]), helper.make_node("Log", ["zero"], ["y"])],
        {"x": (F, ["batch", 3])}, ["y"])
    model = build(onnx_model)
    x = RNG.standard_normal((2, 3)).astype(np.float32)
    assert_like_onnxruntime(model, onnx_model, {"x": x})
    assert not [w for w in recwarn if issubclass(w.category, RuntimeWarning)]


# x (batch, seq) -> y = x reshaped to (batch, seq, 1) + a causal mask (seq, seq) row sum, the mask and the reshape
# target computed from Shape(x) as exported transformers compute theirs: every kernel but the last two folded
SHAPE_COMPUTED = model_of(
    [helper.make_node("Shape", ["x"], ["sx"]),
     helper.make_node("Gather", ["sx", "one"], ["seq"], axis=0),
     helper.make_node("Concat", ["seq", "seq"], ["square"], axis=0),
     helper.make_node("ConstantOfShape", ["square"], ["ones"], value=numpy_helper.from_array(np.ones(1, np.float32))),
     helper.make_node("Trilu", ["ones"], ["mask"], upper=0),
     helper.make_node("ReduceSum", ["mask", "one"], ["counts"], keepdims=0),
     helper.make_node("Concat", ["sx", "one"], ["target"], axis=0),
     helper.make_node("Reshape", ["x", "target"], ["column"]),
     helper.make_node("Squeeze", ["column", "two"], ["row"]),
     helper.make_node("Add", ["row", "counts"], ["y"])],
    {"x": (F, ["batch", "seq"])}, ["y"], {"one": np.array([1], np.int64), "two": np.array([2], np.int64)})


def test_folded_values_of_shapes_seen_before_come_back_without_running_their_kernels(monkeypatch):
    model = build(SHAPE_COMPUTED)
    engine = model._engine
    runs = []
    for kernel in engine.folded:
        monkeypatch.setattr(kernel, "execute", lambda run=kernel.execute, k=kernel: (runs.append(k), run())[1])
    seen = set()
    for shape in [(2, 5), (1, 3), (2, 5), (1, 3), (4, 7)]:
        ran = len(runs)
        x = RNG.standard_normal(shape).astype(np.float32)
        assert_like_onnxruntime(model, SHAPE_COMPUTED, {"x": x})
        assert (len(runs) > ran) is (shape not in seen)
        seen.add(shape)
    assert len(engine.folded_values.entries) == 3


def test_folded_values_keep_the_last_shape_sets_within_the_memory_limit():
    from lite.shapes import FOLDED_SHAPE_SETS, FoldedValues

    memo = FoldedValues(memory_limit=100)
    for i in range(FOLDED_SHAPE_SETS + 2):
        memo.put((i,), {}, 10)
    assert list(memo.entries) == [(i,) for i in range(2, FOLDED_SHAPE_SETS + 2)]
    assert memo.get((2,)) == {} and list(memo.entries)[-1] == (2,)  # the one used last is kept longest
    memo.put(("big",), {}, 95)
    assert list(memo.entries) == [("big",)]  # the others dropped: together they would pass the limit
    assert memo.get((3,)) is None


def weight_only_linear(k: int = 6, n: int = 5) -> onnx.ModelProto:
    """x (batch, k) @ DequantizeLinear(uint8 weight, per-column scale and zero point) -> y: a weight-only layer."""
    inits = {"w": RNG.integers(0, 255, (k, n)).astype(np.uint8), "s": RNG.uniform(0.01, 0.1, n).astype(np.float32),
             "z": RNG.integers(100, 150, n).astype(np.uint8)}
    nodes = [helper.make_node("DequantizeLinear", ["w", "s", "z"], ["wf"], axis=1),
             helper.make_node("MatMul", ["x", "wf"], ["y"])]
    return model_of(nodes, {"x": (F, ["batch", k])}, ["y"], inits)


def test_a_dequantized_constant_is_computed_once_whatever_the_shapes(monkeypatch):
    onnx_model = weight_only_linear()
    model = build(onnx_model)
    engine = model._engine
    [dequantize] = [k for k in engine.folded if k.type == "DequantizeLinear"]
    assert dequantize in engine.constant_folded
    runs = []
    monkeypatch.setattr(dequantize, "execute", lambda run=dequantize.execute: (runs.append(1), run())[1])
    for batch in (1, 3, 2, 5, 1, 4):
        assert_like_onnxruntime(model, onnx_model, {"x": RNG.standard_normal((batch, 6)).astype(np.float32)})
    assert len(runs) <= 1  # NOTE: once, at the first predict's shapes (the build had none: the batch is free)
    assert all(not any(k is dequantize for k in values) for values, _ in engine.folded_values.entries.values())


def test_a_dequantized_constant_is_folded_whatever_its_size():
    from lite.shapes import _foldable

    graph_kernels = build(weight_only_linear())._engine.shape_kernels
    [dequantize] = [k for k in graph_kernels if k.type == "DequantizeLinear"]
    assert _foldable(dequantize, fold_limit=1)  # 120 bytes of float32 output, above a limit of 1 byte
    [matmul] = [k for k in graph_kernels if k.type == "MatMulFusion"]
    assert not _foldable(matmul, fold_limit=1)
