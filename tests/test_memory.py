"""The activation arena: tensors alive together never overlap; dead slots are reused; a Concat's
inputs live inside its output where their slices are contiguous; reshapes view their input."""

import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import lite
from lite.delegates.onnxruntime import ORTDelegate
from lite.errors import MemoryLimitError
from lite.kernel import Kernel
from lite.memory import MemoryPlan, concat_slots, lifetimes, plan_offsets
from lite.primitive import Primitive
from lite.tensor import Tensor
from lite.tools.converter import convert
from tests.support.oracle import run_onnxruntime


def chain(sizes: list[int]) -> tuple[list[Kernel], list[Tensor]]:
    tensors = [Tensor(f"t{i}", np.float32, (n,)) for i, n in enumerate(sizes)]
    kernels = [Kernel([tensors[i]], [tensors[i + 1]], name=f"k{i}") for i in range(len(sizes) - 1)]
    return kernels, tensors


def overlaps(a: tuple[int, int], b: tuple[int, int]) -> bool:
    return a[0] <= b[1] and b[0] <= a[1]


def test_live_tensors_never_share_bytes():
    rng = np.random.default_rng(0)
    kernels, tensors = chain(list(rng.integers(1, 5000, 40)))
    # a skip connection keeps t3 alive until the end
    kernels[-1].inputs.append(tensors[3])
    spans = lifetimes(kernels, keep=set())
    offsets, size = plan_offsets(spans)
    for a in spans:
        assert offsets[a] % 64 == 0
        assert offsets[a] + a.size * 4 <= size
        for b in spans:
            if a is not b and overlaps(spans[a], spans[b]):
                assert offsets[a] + a.size * 4 <= offsets[b] or offsets[b] + b.size * 4 <= offsets[a]


def test_chain_reuses_memory():
    kernels, tensors = chain([1024] * 20)
    _, size = plan_offsets(lifetimes(kernels, keep=set()))
    assert size == 2 * 1024 * 4  # a chain needs two live buffers at a time


def test_kept_tensors_get_their_own_arrays():
    kernels, tensors = chain([16, 16, 16])
    plan = MemoryPlan()
    plan.apply(kernels, keep={tensors[-1]}, limit=1 << 20)
    assert tensors[-1].data.shape == (16,)
    assert not np.shares_memory(tensors[-1].data, plan.arena)
    assert np.shares_memory(tensors[1].data, plan.arena)


def test_placements_of_sizes_seen_before_are_remembered(monkeypatch):
    import lite.memory as memory

    placed = []
    monkeypatch.setattr(memory, "plan_offsets", lambda spans: (placed.append(len(spans)), plan_offsets(spans))[1])
    kernels, tensors = chain([16, 16, 16, 16])
    plan = MemoryPlan()
    views = {}
    for size in [16, 32, 16, 32, 48]:
        for tensor in tensors:
            tensor.shape = (size,)
        plan.apply(kernels, keep={tensors[-1]}, limit=1 << 20)
        offsets = [t.data.__array_interface__["data"][0] - plan.arena.ctypes.data for t in tensors[1:-1]]
        assert views.setdefault(size, offsets) == offsets  # the same placement as the first time
    assert len(placed) == 3  # one placement per size
    for size in range(1, memory.PLANS_KEPT + 3):
        for tensor in tensors:
            tensor.shape = (size,)
        plan.apply(kernels, keep={tensors[-1]}, limit=1 << 20)
    assert len(plan.placements) == memory.PLANS_KEPT


def test_a_placement_seen_before_gets_its_arrays_back_until_the_arena_grows():
    """Alternating shapes (a generator's prefill and decode) reuse the arrays made for each; a larger
    plan reallocates the arena, and the arrays after it view the new one."""
    kernels, tensors = chain([16, 16, 16, 16])
    plan = MemoryPlan()
    seen = {}
    for size in [32, 16, 32, 16]:
        for tensor in tensors:
            tensor.shape = (size,)
        plan.apply(kernels, keep={tensors[-1]}, limit=1 << 20)
        arrays = [t.data for t in tensors[1:-1]]
        assert all(a.shape == (size,) and np.shares_memory(a, plan.arena) for a in arrays)
        assert all(a is b for a, b in zip(seen.setdefault(size, arrays), arrays, strict=True))
    for tensor in tensors:
        tensor.shape = (4096,)
    plan.apply(kernels, keep={tensors[-1]}, limit=1 << 20)
    for tensor in tensors:
        tensor.shape = (16,)
    plan.apply(kernels, keep={tensors[-1]}, limit=1 << 20)
    assert all(np.shares_memory(t.data, plan.arena) and t.data is not old
               for t, old in zip(tensors[1:-1], seen[16], strict=True))


def test_plan_over_the_limit_allocates_nothing():
    kernels, tensors = chain([1024] * 4)
    plan = MemoryPlan()
    with pytest.raises(MemoryLimitError, match="memory limit of 4096"):
        plan.apply(kernels, keep={tensors[-1]}, limit=4096)
    assert plan.nbytes == 0 and tensors[1].data is None


BOMB = """
import resource, numpy as np, lite
from lite.schema.graph import GraphDef, NodeDef, TensorDef
from lite.schema.writer import write_model
resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))
f32 = np.dtype(np.float32)
tensors = [TensorDef("x", f32, (1, 1)), TensorDef("s", np.dtype(np.int64), (2,), data=np.array([30000, 30000])),
           TensorDef("y", f32, (30000, 30000))]
data = write_model(GraphDef(tensors, [NodeDef("bomb", "BroadcastTo", {}, [0, 1], [2])], [0], [2]))
try:
    lite.Model().build(data, lite.ModelType.LITE, lite.Context())
except lite.OutOfMemoryError as exc:
    print("refused:", exc)
"""


def test_an_allocation_the_system_refuses_is_a_lite_error():
    """3.6 GB is under the default memory limit, but not under this child's 2 GiB address space."""
    result = subprocess.run([sys.executable, "-c", BOMB], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("refused: could not allocate 3600000000 bytes")


def branches(shapes: list[tuple[int, ...]], axis: int = 1, read_twice: int | None = None):
    """x -> one kernel per shape (the branches) -> Concat(axis) -> y -> a reader; ``read_twice``:
    that branch's output is also read by the last kernel."""
    x = Tensor("x", np.float32, (1, 4))
    parts = [Tensor(f"b{i}", np.float32, shape) for i, shape in enumerate(shapes)]
    joined = list(shapes[0])
    joined[axis] = sum(shape[axis] for shape in shapes)
    y, z = Tensor("y", np.float32, tuple(joined)), Tensor("z", np.float32, (1,))
    kernels = [Kernel([x], [part], name=f"branch{i}") for i, part in enumerate(parts)]
    kernels.append(Kernel(parts, [y], Primitive("Concat", {"axis": axis}), name="concat"))
    kernels.append(Kernel([y] + ([] if read_twice is None else [parts[read_twice]]), [z], name="reader"))
    return kernels, parts, y


def test_concat_inputs_are_laid_out_inside_the_output():
    kernels, parts, y = branches([(1, 16, 3, 3), (1, 32, 3, 3), (1, 16, 3, 3)])
    MemoryPlan().apply(kernels, keep=set(), limit=1 << 20)
    starts = [0, 16, 48]
    for part, start in zip(parts, starts, strict=True):
        assert np.shares_memory(part.data, y.data)
        assert part.data.__array_interface__["data"][0] == y.data[:, start:].__array_interface__["data"][0]
    y.data[:] = 0
    for i, part in enumerate(parts):  # each branch writes its own slice, nothing else
        part.data[:] = i + 1
    np.testing.assert_array_equal(y.data[0, :, 0, 0], [1] * 16 + [2] * 32 + [3] * 16)


def test_the_output_lives_from_the_first_branch_on():
    """u is dead once the first branch is made from it; y, alive only from the Concat on, could
    reuse its bytes, but not once the branches are written inside y."""
    x, u, z = Tensor("x", np.float32, (1, 4)), Tensor("u", np.float32, (1, 32, 3, 3)), Tensor("z", np.float32, (1,))
    parts = [Tensor(f"b{i}", np.float32, (1, 16, 3, 3)) for i in range(2)]
    y = Tensor("y", np.float32, (1, 32, 3, 3))
    kernels = [Kernel([x], [u]), Kernel([u], [parts[0]]), Kernel([x], [parts[1]]),
               Kernel(parts, [y], Primitive("Concat", {"axis": 1})), Kernel([y], [z])]
    MemoryPlan().apply(kernels, keep=set(), limit=1 << 20)
    assert np.shares_memory(parts[0].data, y.data) and not np.shares_memory(u.data, y.data)


@pytest.mark.parametrize("case, shapes, axis, read_twice, kept", [
    ("two images: a slice is not contiguous", [(2, 16, 3, 3), (2, 16, 3, 3)], 1, None, []),
    ("a branch read again later", [(1, 16, 3, 3), (1, 16, 3, 3)], 1, 0, [1]),
    ("a slice that would start unaligned", [(1, 3, 1, 1), (1, 16, 1, 1)], 1, None, [0]),
    ("rows of one image, joined along the last axis", [(1, 16), (1, 5)], 1, None, [0, 1]),
])
def test_inputs_stay_apart_where_a_slot_would_not_do(case, shapes, axis, read_twice, kept):
    kernels, parts, y = branches(shapes, axis, read_twice)
    slots = concat_slots(kernels, lifetimes(kernels, keep=set()), keep=set())
    assert sorted(parts.index(t) for t in slots) == kept, case


def inception(outputs=("y",)) -> onnx.ModelProto:
    """x (batch, 8, 6, 6) -> four branches (a 1x1 and a 3x3 Conv, a Relu, x itself) -> Concat(axis 1)
    -> y; the concatenated tensor is also an output when ``outputs`` names it."""
    rng = np.random.default_rng(3)
    inits = [numpy_helper.from_array((rng.standard_normal(shape) * 0.3).astype(np.float32), name)
             for name, shape in (("w1", (16, 8, 1, 1)), ("w3", (16, 8, 3, 3)))]
    nodes = [helper.make_node("Conv", ["x", "w1"], ["a"]), helper.make_node("Conv", ["x", "w3"], ["b"], pads=[1] * 4),
             helper.make_node("Relu", ["x"], ["c"]), helper.make_node("Concat", ["a", "b", "c", "x"], ["j"], axis=1),
             helper.make_node("Sigmoid", ["j"], ["y"])]
    graph = helper.make_graph(nodes, "inception", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                               ["batch", 8, 6, 6])],
                              [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("delegated, outputs", [([], ("y",)), ([], ("y", "j")), (["Conv2DFusion"], ("y",))])
def test_branches_written_in_place_match_onnxruntime(delegated, outputs):
    """Batch 1 (the branches in the output, x copied: the model's input is not planned), 2 (all
    copied), then 1 again; with the joined tensor also a model output, and with the convolutions
    on a delegate (its outputs are planned tensors too)."""
    onnx_model = inception(outputs)
    model = lite.Model()
    delegates = [ORTDelegate(ops=delegated)] if delegated else []
    model.build(convert(onnx_model), lite.ModelType.LITE, lite.Context(thread_num=1, delegates=delegates))
    concat = next(k for k in model._engine.kernels if k.type == "Concat")
    rng = np.random.default_rng(4)
    for batch in (1, 2, 1):
        if model.get_inputs()[0].shape[0] != batch:
            model.resize(model.get_inputs(), [[batch, 8, 6, 6]])
        x = rng.standard_normal((batch, 8, 6, 6)).astype(np.float32)
        for got, want in zip(model.predict([x]), run_onnxruntime(onnx_model, {"x": x}), strict=True):
            np.testing.assert_allclose(got.get_data_to_numpy(), want, rtol=1e-5, atol=1e-6)
        in_place = [np.shares_memory(t.data, concat.outputs[0].data) for t in concat.inputs]
        assert in_place == [batch == 1] * 3 + [False]


def reshapes(outputs=("y",)) -> onnx.ModelProto:
    """x (batch, 4, 6) -> Relu -> Reshape (batch, 24) -> Unsqueeze -> Squeeze -> Flatten -> Sigmoid -> y,
    and a Reshape of f into a Concat with a Flatten of the Relu -> z; the reshaped r also a model output
    where ``outputs`` names it."""
    shape = numpy_helper.from_array(np.array([0, -1], np.int64), "shape")
    axes = numpy_helper.from_array(np.array([1], np.int64), "axes")
    nodes = [helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Reshape", ["a", "shape"], ["r"]),
             helper.make_node("Unsqueeze", ["r", "axes"], ["u"]), helper.make_node("Squeeze", ["u", "axes"], ["s"]),
             helper.make_node("Flatten", ["s"], ["f"]), helper.make_node("Sigmoid", ["f"], ["y"]),
             helper.make_node("Reshape", ["f", "shape"], ["g"]), helper.make_node("Flatten", ["a"], ["h"]),
             helper.make_node("Concat", ["g", "h"], ["z"], axis=1)]
    graph = helper.make_graph(nodes, "reshapes", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                              ["batch", 4, 6])],
                              [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs],
                              [shape, axes])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("outputs", [("y", "z"), ("y", "z", "r")])
def test_reshapes_view_their_input_and_match_onnxruntime(outputs):
    """Reshape, Unsqueeze, Squeeze and Flatten of planned tensors view them (no copy) in a chain; one
    whose input or output is a model output, or whose output lies in a Concat's output, copies. Batch 1, 3,
    then 1 again."""
    onnx_model = reshapes(outputs)
    model = lite.Model()
    model.build(convert(onnx_model), lite.ModelType.LITE, lite.Context(thread_num=1))
    kernels = {k.outputs[0].name: k for k in model._engine.kernels}
    rng = np.random.default_rng(5)
    for batch in (1, 3, 1):
        if model.get_inputs()[0].shape[0] != batch:
            model.resize(model.get_inputs(), [[batch, 4, 6]])
        x = rng.standard_normal((batch, 4, 6)).astype(np.float32)
        for got, want in zip(model.predict([x]), run_onnxruntime(onnx_model, {"x": x}), strict=True):
            np.testing.assert_allclose(got.get_data_to_numpy(), want, rtol=1e-6)
        viewing = {name: kernels[name].viewing is not None for name in ("r", "u", "s", "f", "g", "h")}
        chained = "r" not in outputs  # NOTE: r kept: r and u copy, s and f view u
        # NOTE: at batch 1, g lies in z (the Concat's first slot); h would start unaligned, so it does not
        assert viewing == {"r": chained, "u": chained, "s": True, "f": True, "g": batch != 1, "h": True}
        relu = kernels["a"].outputs[0].data
        assert np.shares_memory(kernels["f"].outputs[0].data, relu) == chained


def test_a_reshape_whose_arrays_were_given_again_copies():
    """A view holds only for the two arrays the plan made: given others (as measured placement's native run
    gives every tensor its own), the kernel copies again."""
    onnx_model = reshapes()
    model = lite.Model()
    model.build(convert(onnx_model), lite.ModelType.LITE, lite.Context(thread_num=1))
    model.resize(model.get_inputs(), [[3, 4, 6]])
    model.predict([np.zeros((3, 4, 6), np.float32)])
    reshape = next(k for k in model._engine.kernels if k.outputs[0].name == "r")
    assert reshape.viewing is not None
    x, out = reshape.inputs[0], reshape.outputs[0]
    x.data, out.data = np.arange(72, dtype=np.float32).reshape(x.shape), np.zeros(out.shape, np.float32)
    reshape.execute()
    np.testing.assert_array_equal(out.data, np.arange(72, dtype=np.float32).reshape(out.shape))
