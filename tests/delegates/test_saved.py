"""Partitions the bundled delegates compile ahead of time into the .lite file (lite-convert --delegate).

TVM: the compiled library loads with the TVM runtime alone (a fresh process where ``import tvm``
fails), only with ``trust_saved_code``, only on a matching target, CPU and TVM version, and
shapes the library does not serve compile again. ONNX Runtime: the saved ONNX graph replaces the
emission, its boundary bound by name; a blob that reads files, runs ops the delegate never emits
(control flow above all), has another boundary or allocates beyond Context.memory_limit is refused.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import onnx
import pytest

import lite
from lite.blob import pack
from lite.model import compile_into
from lite.schema.reader import read_model
from lite.schema.writer import write_model
from lite.tools import zoo
from lite.tools.converter import convert
from tests.support.delegate_graphs import node, onnx_graph
from tests.support.oracle import relative_l2, run_onnxruntime

pytest.importorskip("onnxruntime")
REPO = Path(__file__).resolve().parents[2]
TOLERANCE = 1e-4  # relative L2 against onnxruntime


def feeds_of(onnx_model: onnx.ModelProto, batch: int | None = None) -> dict[str, np.ndarray]:
    rng = np.random.default_rng()
    feeds = {}
    for value in onnx_model.graph.input:
        shape = [d.dim_value for d in value.type.tensor_type.shape.dim]
        feeds[value.name] = rng.standard_normal([batch or shape[0] or 1, *shape[1:]]).astype(np.float32)
    return feeds


def build(data, *delegates: lite.Delegate) -> lite.Model:
    model = lite.Model()
    model.build(data, lite.ModelType.LITE, lite.Context(thread_num=1, delegates=list(delegates)))
    return model


def error(model: lite.Model, onnx_model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> float:
    got = model.predict(feeds)[0].get_data_to_numpy()
    return relative_l2(got, run_onnxruntime(onnx_model, feeds)[0])


def blobs(model: lite.Model) -> set[str]:
    return {r.blob for r in model.partition_report() if r.blob}


def rewritten(data: bytes, **changes) -> bytes:
    graph = read_model(data)
    graph.partitions = [dataclasses.replace(p, **changes) for p in graph.partitions]
    return write_model(graph)


def with_blob(data: bytes, blob: bytes) -> bytes:
    return rewritten(data, blob=blob, digest=hashlib.sha256(blob).hexdigest())


# ---- ONNX Runtime ----------------------------------------------------------------------------------

ORT_MODELS = {"resnet18": lambda: zoo.resnet18(image_size=64),
              "bert_encoder": lambda: zoo.bert_encoder(seq_len=16, layers=2, width=64, heads=4, feed_forward=128)}


@pytest.fixture(scope="module", params=sorted(ORT_MODELS))
def ort_case(request):
    from lite.delegates.onnxruntime import ORTDelegate

    onnx_model = ORT_MODELS[request.param]()
    data, partitions, skipped = compile_into(convert(onnx_model), lite.Context(delegates=[ORTDelegate()]))
    assert partitions and not skipped
    return onnx_model, data


def test_ort_blob_holds_the_graph_but_not_the_weights(ort_case):
    onnx_model, data = ort_case
    weights = sum(t.data.nbytes for t in read_model(data).tensors if t.data is not None)
    assert sum(len(memoryview(p.blob)) for p in read_model(data).partitions) < 0.05 * weights


def test_ort_loads_the_saved_graph_instead_of_emitting_it(ort_case, monkeypatch):
    from lite.delegates.onnxruntime import ORTDelegate, graph_kernel

    onnx_model, data = ort_case

    def no_emission(*args, **kwargs):
        raise AssertionError("the partition was emitted again")

    monkeypatch.setattr(graph_kernel, "emit_partition", no_emission)
    model = build(data, ORTDelegate())
    assert {b.split(":")[0] for b in blobs(model)} == {"loaded"}
    assert {r.runs_on for r in model.partition_report()} == {"ORTDelegate"}
    assert error(model, onnx_model, feeds_of(onnx_model)) < TOLERANCE


def test_ort_file_runs_natively_without_the_delegate(ort_case):
    onnx_model, data = ort_case
    model = build(data)
    assert {r.runs_on for r in model.partition_report()} == {"native"}
    assert error(model, onnx_model, feeds_of(onnx_model)) < TOLERANCE


def test_ort_blob_for_another_opset_is_emitted_again(ort_case):
    from lite.delegates.onnxruntime import ORTDelegate

    onnx_model, data = ort_case
    model = build(rewritten(data, target=json.dumps({"layout": 1, "opset": 99})), ORTDelegate())
    assert all("this ORTDelegate loads" in b for b in blobs(model))
    assert {r.runs_on for r in model.partition_report()} == {"ORTDelegate"}
    assert error(model, onnx_model, feeds_of(onnx_model)) < TOLERANCE


def hostile_graph(kind: str, original: onnx.ModelProto) -> onnx.ModelProto:
    model = onnx.ModelProto()
    model.CopyFrom(original)
    if kind == "external data":
        tensor = model.graph.initializer.add(name="secret", data_type=onnx.TensorProto.FLOAT, dims=[4])
        tensor.data_location = onnx.TensorProto.EXTERNAL
        tensor.external_data.add(key="location", value="../../etc/passwd")
    elif kind == "subgraph":
        branch = onnx.helper.make_graph([], "g", [], [])
        model.graph.node[0].attribute.append(onnx.helper.make_attribute("body", branch))
    else:
        model.graph.input[0].type.tensor_type.elem_type = onnx.TensorProto.INT64
    return model


@pytest.mark.parametrize("kind", ["external data", "subgraph", "other boundary", "constant map"])
def test_ort_refuses_a_hostile_saved_graph(ort_case, kind):
    from lite.blob import unpack
    from lite.delegates.onnxruntime import ORTDelegate

    onnx_model, data = ort_case
    header, arrays = unpack(read_model(data).partitions[0].blob)
    graph = onnx.load_from_string(arrays["onnx"].tobytes())
    if kind == "constant map":  # every constant said to be the first one read: shapes or dtypes disagree
        header = {**header, "constants": {name: [0, 1] for name in header["constants"]}}
    else:
        graph = hostile_graph(kind, graph)
    blob = pack(header, {"onnx": np.frombuffer(graph.SerializeToString(), np.uint8)})
    model = build(with_blob(data, blob), ORTDelegate())
    assert any("the blob failed to load (ModelFormatError: ORT blob" in b for b in blobs(model)), blobs(model)
    assert error(model, onnx_model, feeds_of(onnx_model)) < TOLERANCE


@pytest.fixture(scope="module")
def difference_case():
    """relu(a) - relu(b) on two inputs of one shape, saved as one ORT partition."""
    from lite.delegates.onnxruntime import ORTDelegate

    nodes = [node("Relu", ["a"], "ra"), node("Relu", ["b"], "rb"), node("Sub", ["ra", "rb"], "y")]
    onnx_model = onnx_graph(nodes, {"a": [2, 8], "b": [2, 8]}, ["y"])
    data, partitions, _ = compile_into(convert(onnx_model), lite.Context(delegates=[ORTDelegate()]))
    assert len(partitions) == 1
    return onnx_model, data


def saved_graph(data: bytes) -> tuple[dict, onnx.ModelProto]:
    from lite.blob import unpack

    header, arrays = unpack(read_model(data).partitions[0].blob)
    return header, onnx.load_from_string(arrays["onnx"].tobytes())


def with_graph(data: bytes, header: dict, graph: onnx.ModelProto) -> bytes:
    return with_blob(data, pack(header, {"onnx": np.frombuffer(graph.SerializeToString(), np.uint8)}))


def difference(model: lite.Model) -> float:
    a, b = (np.random.default_rng(seed).standard_normal((2, 8)).astype(np.float32) for seed in (1, 2))
    got = model.predict({"a": a, "b": b})[0].get_data_to_numpy()
    return float(np.abs(got - (np.maximum(a, 0) - np.maximum(b, 0))).max())


def test_ort_partition_inputs_swapped_in_the_file_are_bound_by_name(difference_case):
    from lite.delegates.onnxruntime import ORTDelegate

    _, data = difference_case
    swapped = rewritten(data, inputs=list(reversed(read_model(data).partitions[0].inputs)))
    model = build(swapped, ORTDelegate())
    assert {b.split(":")[0] for b in blobs(model)} == {"loaded"}
    assert difference(model) < 1e-6


def test_ort_partition_inputs_swapped_in_the_saved_graph_are_bound_by_name(difference_case):
    from lite.delegates.onnxruntime import ORTDelegate

    _, data = difference_case
    header, graph = saved_graph(data)
    inputs = [onnx.ValueInfoProto.FromString(v.SerializeToString()) for v in reversed(graph.graph.input)]
    del graph.graph.input[:]
    graph.graph.input.extend(inputs)
    model = build(with_graph(data, header, graph), ORTDelegate())
    assert {b.split(":")[0] for b in blobs(model)} == {"loaded"}
    assert difference(model) < 1e-6


def test_ort_saved_graph_whose_boundary_names_no_tensor_is_refused(difference_case):
    from lite.delegates.onnxruntime import ORTDelegate

    _, data = difference_case
    header, graph = saved_graph(data)
    for value in graph.graph.input:
        value.name = {"a": "b", "b": "a"}[value.name]  # NOTE: the graph reads each input as the other
    graph.graph.input[0].name = "c"
    for each in graph.graph.node:
        each.input[:] = ["c" if name == "b" else name for name in each.input]
    model = build(with_graph(data, header, graph), ORTDelegate())
    assert any("ModelFormatError: ORT blob: the graph's inputs ['a', 'c'] are not the partition's ['a', 'b']" in b
               for b in blobs(model)), blobs(model)
    assert difference(model) < 1e-6


def hostile_node(kind: str) -> tuple[list[onnx.NodeProto], list[onnx.TensorProto]]:
    """Nodes (and initializers) a hostile saved graph adds; their outputs feed nothing."""
    from onnx import TensorProto, helper, numpy_helper

    scalar = functools.partial(helper.make_tensor_value_info, shape=[])
    body = helper.make_graph([], "body", [scalar("i", TensorProto.INT64), scalar("c", TensorProto.BOOL),
                                          scalar("v", TensorProto.FLOAT)],
                             [scalar("c", TensorProto.BOOL), scalar("v", TensorProto.FLOAT)])
    branch = helper.make_graph([helper.make_node("Identity", ["zero_f"], ["z"])], "branch", [],
                               [scalar("z", TensorProto.FLOAT)])
    nodes = {  # NOTE: a Loop of 2^62 trips whose body has no nodes spins for ever
        "Loop": [helper.make_node("Loop", ["trips", "always", "zero_f"], ["spun"], name="spin", body=body)],
        "If": [helper.make_node("If", ["always"], ["chosen"], name="choose", then_branch=branch,
                                else_branch=branch)],
        "Range": [helper.make_node("Range", ["zero", "trips", "one"], ["counted"], name="count")],
        "com.microsoft::FusedGemm": [helper.make_node("FusedGemm", ["a", "a"], ["fused"], name="vendor",
                                                      domain="com.microsoft")],
        "Scan": [helper.make_node("Scan", ["zero_f"], ["scanned"], name="scan", body=body, num_scan_inputs=0)],
    }[kind]
    values = {"trips": np.array(2**62, np.int64), "always": np.array(True), "zero": np.array(0, np.int64),
              "one": np.array(1, np.int64), "zero_f": np.array(0, np.float32)}
    return nodes, [numpy_helper.from_array(value, name) for name, value in values.items()]


@pytest.mark.parametrize("kind", ["Loop", "If", "Scan", "Range", "com.microsoft::FusedGemm"])
def test_ort_saved_graph_runs_only_what_the_delegate_emits(difference_case, kind):
    from lite.delegates.onnxruntime import ORTDelegate

    _, data = difference_case
    header, graph = saved_graph(data)
    nodes, initializers = hostile_node(kind)
    graph.graph.node.extend(nodes)
    graph.graph.initializer.extend(initializers)
    graph.opset_import.add(domain="com.microsoft", version=1)
    model = build(with_graph(data, header, graph), ORTDelegate())
    assert any(f"ModelFormatError: ORT blob: node {nodes[0].name!r} is a {kind}, which ORTDelegate never emits" in b
               for b in blobs(model)), blobs(model)
    assert difference(model) < 1e-6


def bomb(graph: onnx.ModelProto, shape_of: str) -> None:
    """Adds zeros expanded to ``shape_of``'s value, summed into the output (0 when it runs)."""
    from onnx import helper, numpy_helper

    final = next(n for n in graph.graph.node if "y" in n.output)
    final.output[:] = ["y_before"]
    graph.graph.initializer.extend([numpy_helper.from_array(np.array(0, np.float32), "zero"),
                                    numpy_helper.from_array(np.array([1 << 28], np.int64), "gib")])
    graph.graph.node.extend([
        helper.make_node("Expand", ["zero", shape_of], ["bomb"], name="expand"),
        helper.make_node("ReduceSum", ["bomb"], ["bomb_sum"], name="sum", keepdims=0),
        helper.make_node("Add", ["y_before", "bomb_sum"], ["y"], name="add")])


def test_ort_saved_graph_over_the_memory_limit_is_refused(difference_case):
    from lite.delegates.onnxruntime import ORTDelegate

    _, data = difference_case
    header, graph = saved_graph(data)
    bomb(graph, "gib")  # NOTE: 2^28 float32 zeros: 1 GiB
    model = lite.Model()
    model.build(with_graph(data, header, graph), lite.ModelType.LITE,
                lite.Context(thread_num=1, delegates=[ORTDelegate()], memory_limit=64 << 20))
    assert any("ORT blob: Expand node 'expand' makes 'bomb' of at least 1073741824 bytes, more than the memory "
               "limit of 67108864 bytes" in b for b in blobs(model)), blobs(model)
    assert difference(model) < 1e-6


def test_ort_saved_graph_allocating_by_data_is_refused(difference_case):
    from onnx import helper

    from lite.delegates.onnxruntime import ORTDelegate

    _, data = difference_case
    header, graph = saved_graph(data)
    bomb(graph, "sizes")
    graph.graph.node.insert(0, helper.make_node("ReduceMax", ["a"], ["largest"], name="largest", axes=[1],
                                                keepdims=0))
    graph.graph.node.insert(1, helper.make_node("Cast", ["largest"], ["sizes"], name="sizes", to=7))
    model = build(with_graph(data, header, graph), ORTDelegate())
    assert any("ORT blob: Expand node 'expand' takes its output's size from values computed from data "
               "(['sizes'])" in b for b in blobs(model)), blobs(model)
    assert difference(model) < 1e-6


def test_ort_saved_graph_sized_by_values_the_runtime_computes_from_shapes_loads():
    from lite.delegates.onnxruntime import ORTDelegate

    nodes = [node("Shape", ["y"], "s"), node("Relu", ["x"], "r"), node("Expand", ["r", "s"], "e"),
             node("Sigmoid", ["e"], "out")]
    onnx_model = onnx_graph(nodes, {"x": [1, 4], "y": ["N", 4]}, ["out"])
    data, partitions, _ = compile_into(convert(onnx_model), lite.Context(delegates=[ORTDelegate()]))
    model = build(data, ORTDelegate())
    assert {b.split(":")[0] for b in blobs(model)} == {"loaded"}
    for rows in (3, 5):  # NOTE: the Expand's shape is a graph input: the runtime's value of Shape(y)
        feeds = {"x": np.random.default_rng(rows).standard_normal((1, 4)).astype(np.float32),
                 "y": np.zeros((rows, 4), np.float32)}
        assert error(model, onnx_model, feeds) < TOLERANCE


# ---- TVM ----------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def tvm_case():
    pytest.importorskip("tvm")
    from lite.delegates.tvm import TVMDelegate

    onnx_model = zoo.inception_block(dynamic_batch=True)
    plain = convert(onnx_model, input_shapes={"input": [1, 192, 28, 28]})
    data, partitions, _ = compile_into(plain, lite.Context(delegates=[TVMDelegate(cache_dir=None)]))
    assert len(partitions) == 1
    return onnx_model, plain, data


def trusted():
    from lite.delegates.tvm import TVMDelegate

    return TVMDelegate(cache_dir=None, trust_saved_code=True)


def test_tvm_blob_holds_code_and_the_file_keeps_one_copy_of_the_weights(tvm_case):
    _, plain, data = tvm_case
    weights = sum(t.data.nbytes for t in read_model(plain).tensors if t.data is not None)
    (partition,) = read_model(data).partitions
    assert len(memoryview(partition.blob)) < 0.5 * weights and len(data) < len(plain) + 0.5 * weights


def test_tvm_saved_library_loads_without_compiling(tvm_case, monkeypatch):
    from lite.delegates.tvm import compiler, kernel, saved

    onnx_model, _, data = tvm_case
    for module in (compiler, kernel):
        monkeypatch.setattr(module, "compile_module", lambda *a, **k: pytest.fail("TVM compiled"))
    model = build(data, trusted())
    assert {b.split(":")[0] for b in blobs(model)} == {"loaded"}
    (graph_kernel,) = model.graph_kernels()
    assert isinstance(graph_kernel, saved.SavedTVMKernel)
    assert error(model, onnx_model, feeds_of(onnx_model)) < TOLERANCE
    model.resize(model.get_inputs(), [[3, 192, 28, 28]])  # a symbolic batch: the same library serves it
    assert error(model, onnx_model, feeds_of(onnx_model, batch=3)) < TOLERANCE
    assert graph_kernel.recompiled is None


def test_tvm_shapes_the_library_does_not_serve_compile_again(tvm_case):
    _, plain, data = tvm_case
    model, native = build(data, trusted()), build(plain)
    feeds = {"input": np.random.default_rng().standard_normal((2, 192, 32, 32)).astype(np.float32)}
    for each in (model, native):
        each.resize(each.get_inputs(), [list(feeds["input"].shape)])
    got, want = (each.predict(feeds)[0].get_data_to_numpy() for each in (model, native))
    assert relative_l2(got, want) < TOLERANCE  # the native kernels are checked against onnxruntime elsewhere
    assert model.graph_kernels()[0].recompiled is not None


def test_tvm_loads_saved_code_only_when_trusted(tvm_case):
    from lite.delegates.tvm import TVMDelegate

    onnx_model, _, data = tvm_case
    model = build(data, TVMDelegate(cache_dir=None))
    assert all("TVMDelegate(trust_saved_code=True) loads it" in b for b in blobs(model))
    assert {r.runs_on for r in model.partition_report()} == {"TVMDelegate"}  # compiled here instead
    assert error(model, onnx_model, feeds_of(onnx_model)) < TOLERANCE


@pytest.mark.parametrize("text", ["no", "off", "false", "0", "OFF"])
def test_tvm_saved_code_stays_unloaded_for_every_command_line_no(tvm_case, text, monkeypatch):
    from lite.delegates import load_delegate, parse_options
    from lite.delegates.tvm import TVMDelegate

    _, _, data = tvm_case
    monkeypatch.setattr(TVMDelegate, "build", lambda self, model: None)  # NOTE: nothing compiled here
    model = build(data, load_delegate("tvm", parse_options(["cache_dir=off", f"trust_saved_code={text}"])))
    assert all("TVMDelegate(trust_saved_code=True) loads it" in b for b in blobs(model)), blobs(model)
    assert {r.runs_on for r in model.partition_report()} == {"native"}


def saved_target(data: bytes) -> dict:
    return json.loads(read_model(data).partitions[0].target)


@pytest.mark.parametrize("change, reason", [  # NOTE: each case compiles once: two of them under -m slow
    pytest.param(lambda t: t["cpu"]["features"].append("avx9000"),
                 "compiled for a CPU with avx9000, which this one lacks", id="cpu features"),
    pytest.param(lambda t: t["cpu"].update(machine="riscv128"), "compiled for a riscv128 CPU", id="machine",
                 marks=pytest.mark.slow),
    pytest.param(lambda t: t.update(tvm="0.1"), "compiled by TVM 0.1", id="tvm version"),
    pytest.param(lambda t: t.update(kind="cuda"), "compiled for target 'cuda'", id="target", marks=pytest.mark.slow),
])
def test_tvm_library_for_another_machine_is_not_loaded(tvm_case, change, reason):
    onnx_model, _, data = tvm_case
    target = saved_target(data)
    change(target)
    model = build(rewritten(data, target=json.dumps(target)), trusted())
    assert all(reason in b for b in blobs(model)), blobs(model)
    assert error(model, onnx_model, feeds_of(onnx_model)) < TOLERANCE


def test_tvm_target_nested_too_deep_is_declined_without_recursion_error():
    from lite.delegates.tvm.saved import check_target  # NOTE: reads the target before it needs TVM

    with pytest.raises(lite.NotSupportedError, match="unreadable target description.*nests deeper"):
        check_target(None, "[" * 100000)


def test_tvm_malformed_blob_falls_back(tvm_case):
    onnx_model, _, data = tvm_case
    model = build(with_blob(data, pack({"symbolic": True}, {})), trusted())
    assert all("the blob failed to load (ModelFormatError: TVM blob" in b for b in blobs(model)), blobs(model)
    assert error(model, onnx_model, feeds_of(onnx_model)) < TOLERANCE


FRESH_PROCESS = """
import sys, time
sys.modules["tvm"] = None  # TVM's Python package, compiler included, cannot be imported here
import numpy as np
import lite
from lite.delegates.tvm import TVMDelegate

model = lite.Model()
start = time.perf_counter()
model.build_from_file(sys.argv[1], context=lite.Context(delegates=[TVMDelegate(cache_dir=None, trust_saved_code=True)]))
rows = model.partition_report()
assert {r.runs_on for r in rows} == {"TVMDelegate"} and all(r.blob.startswith("loaded") for r in rows), rows
assert not [name for name in sys.modules if name.startswith("tvm.")]
np.save(sys.argv[3], model.predict([np.load(sys.argv[2])])[0].get_data_to_numpy())
"""


def test_tvm_saved_file_builds_in_a_fresh_process_where_tvm_cannot_be_imported(tvm_case, tmp_path):
    onnx_model, _, data = tvm_case
    path, x, y = tmp_path / "m.lite", tmp_path / "x.npy", tmp_path / "y.npy"
    path.write_bytes(data)
    feeds = feeds_of(onnx_model)
    np.save(x, feeds["input"])
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(FRESH_PROCESS), str(path), str(x), str(y)],
                            cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    assert relative_l2(np.load(y), run_onnxruntime(onnx_model, feeds)[0]) < TOLERANCE


DEVICE_COPIES = """
import sys
sys.modules["tvm"] = None  # a device with TVM's runtime and no compiler
import ml_dtypes
import numpy as np
import lite
from lite.delegates.tvm import runtime

class Calls(runtime.VMCalls):
    on_cpu = False  # NOTE: the copies a GPU partition makes, to and from the CPU's memory as its device
    device = runtime.device("llvm")
    _staging = {}

rng = np.random.default_rng(0)
for dtype in (np.float32, np.float16, ml_dtypes.bfloat16, np.int64, np.bool_):
    calls, x, y = Calls(), lite.Tensor("x", dtype, (2, 3, 5)), lite.Tensor("y", dtype, (2, 3, 5))
    for round in range(2):  # NOTE: the second round reuses the staging buffer
        x.set_data_from_numpy((rng.standard_normal((2, 3, 5)) * 4).astype(dtype))
        y.set_data_from_numpy(np.zeros((2, 3, 5), dtype))
        calls._store(y, calls._argument(x))  # NOTE: into the runtime's output array
        assert np.array_equal(y.get_data_to_numpy(), x.get_data_to_numpy()), dtype
    y.data = np.zeros((2, 3, 10), dtype)[..., ::2]  # NOTE: a strided output array
    calls._store(y, calls._argument(x))
    assert np.array_equal(y.data, x.get_data_to_numpy()), dtype
    fresh = lite.Tensor("z", dtype, (2, 3, 5))
    calls._store(fresh, calls._argument(x))  # NOTE: no output array yet: a new one
    assert fresh.get_data_to_numpy().dtype == dtype and np.array_equal(fresh.get_data_to_numpy(), x.get_data_to_numpy())
assert "tvm" not in {name.split(".")[0] for name, module in sys.modules.items() if module is not None}
"""


def test_tvm_device_copies_need_only_the_runtime():
    pytest.importorskip("tvm_ffi")
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(DEVICE_COPIES)], cwd=REPO, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]


def test_tvm_partition_compiled_only_at_its_first_resize_is_not_saved_and_says_why():
    pytest.importorskip("tvm")
    from lite.delegates.tvm import TVMDelegate

    data = convert(zoo.inception_block(dynamic_batch=True))  # the batch stays dynamic: nothing compiles at build
    saved, partitions, skipped = compile_into(data, lite.Context(delegates=[TVMDelegate(cache_dir=None)]))
    assert not partitions and not read_model(saved).partitions
    assert skipped == ["TVMDelegate tvm_0: not saved (its delegate saved nothing for it; one that compiles at its "
                       "first resize needs static input shapes: lite-convert --input-shapes)"]


def test_tvm_saves_the_library_with_weights_compiled_in_when_weights_cannot_be_parameters(tmp_path, monkeypatch):
    pytest.importorskip("tvm")
    from lite.delegates.tvm import TVMDelegate, lowering, saved

    onnx_model = zoo.inception_block()
    plain = convert(onnx_model)
    build(plain, TVMDelegate(cache_dir=tmp_path))  # NOTE: the next build loads the module from the disk cache
    real_lower = lowering.lower

    def no_weight_parameters(*args, weights_as_params=False, **kwargs):
        if weights_as_params:
            raise ValueError("no weights as parameters here")
        return real_lower(*args, **kwargs)

    monkeypatch.setattr(lowering, "lower", no_weight_parameters)
    data, partitions, _ = compile_into(plain, lite.Context(delegates=[TVMDelegate(cache_dir=tmp_path)]))
    header, arrays = saved.unpack(partitions[0].blob)
    assert header["weights"] == [] and arrays["library"].nbytes > 0.5 * sum(
        t.data.nbytes for t in read_model(plain).tensors if t.data is not None)
    model = build(data, trusted())
    assert {b.split(":")[0] for b in blobs(model)} == {"loaded"}
    assert error(model, onnx_model, feeds_of(onnx_model)) < TOLERANCE
