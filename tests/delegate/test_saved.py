"""Delegate partitions saved in the .lite file (lite.delegate.saved): loaded, or why not, per node.

The example NPU delegate (whose blobs are its converted float16 weights) carries the runtime's
part: loading, every reason a saved partition is not used, the fallback to the file's own
nodes, and the report. TVM and ONNX Runtime blobs are tested in tests/delegates/test_saved.py.
"""

from __future__ import annotations

import dataclasses
import hashlib

import numpy as np
import pytest

import lite
from lite.blob import pack
from lite.delegates.example_npu import ExampleNPUDelegate, NPUGraphKernel
from lite.model import compile_into
from lite.schema.reader import read_model
from lite.schema.writer import write_model
from lite.tools import zoo
from lite.tools.converter import convert
from tests.support.oracle import relative_l2, run_onnxruntime

NPU = "ExampleNPUDelegate"


@pytest.fixture(scope="module")
def onnx_model():
    return zoo.inception_block()


@pytest.fixture(scope="module")
def plain(onnx_model) -> bytes:
    return convert(onnx_model)


@pytest.fixture(scope="module")
def saved(plain) -> bytes:
    data, partitions, skipped = compile_into(plain, lite.Context(delegates=[ExampleNPUDelegate()]))
    assert len(partitions) == 1 and not skipped
    return data


@pytest.fixture()
def feeds(onnx_model) -> dict[str, np.ndarray]:
    shape = [d.dim_value for d in onnx_model.graph.input[0].type.tensor_type.shape.dim]
    return {"input": np.random.default_rng().standard_normal(shape).astype(np.float32)}


def build(data: bytes, *delegates: lite.Delegate, fallback: bool = True) -> lite.Model:
    model = lite.Model()
    model.build(data, lite.ModelType.LITE, lite.Context(delegates=list(delegates), fallback=fallback))
    return model


def predict(model: lite.Model, feeds: dict[str, np.ndarray]) -> np.ndarray:
    return model.predict(feeds)[0].get_data_to_numpy()


def blobs(model: lite.Model) -> set[str]:
    return {r.blob for r in model.partition_report() if r.blob}


def rewritten(data: bytes, **changes) -> bytes:
    """``data`` with its first saved partition's fields replaced (the digest kept unless given)."""
    graph = read_model(data)
    graph.partitions[0] = dataclasses.replace(graph.partitions[0], **changes)
    return write_model(graph)


def assert_same_npu_outputs(actual: np.ndarray, expected: np.ndarray) -> None:
    """Two builds on the example NPU agree to float16's last bit, not bit for bit: its float16 products
    run on BLAS, whose thread count the runtime sets by the machine's load at each predict, and a
    last-bit difference there can round to the neighbouring float16."""
    np.testing.assert_allclose(actual, expected, rtol=2e-3, atol=2e-3)


def test_the_saved_partition_loads_and_computes_what_the_delegate_builds(saved, plain, onnx_model, feeds):
    loaded, built = build(saved, ExampleNPUDelegate()), build(plain, ExampleNPUDelegate())
    assert blobs(loaded) == {f"loaded: {NPU} example_npu_0 (0.3 MB)"}
    assert [r.runs_on for r in loaded.partition_report()] == [r.runs_on for r in built.partition_report()]
    assert isinstance(loaded.graph_kernels()[0], NPUGraphKernel) and loaded.graph_kernels()[0].saved is not None
    assert_same_npu_outputs(predict(loaded, feeds), predict(built, feeds))
    expected = run_onnxruntime(onnx_model, feeds)[0]
    assert relative_l2(predict(loaded, feeds), expected) < 2e-3  # float16 inside the NPU


def test_without_the_delegate_the_file_runs_natively(saved, onnx_model, feeds):
    model = build(saved)
    assert {r.runs_on for r in model.partition_report()} == {"native"}
    assert blobs(model) == {f"not used: no {NPU} in the Context"}
    assert relative_l2(predict(model, feeds), run_onnxruntime(onnx_model, feeds)[0]) < 1e-4


def test_a_declining_delegate_leaves_its_partitions_unused(saved, monkeypatch):
    monkeypatch.setenv("DELITE_EXAMPLE_NPU", "off")
    assert blobs(build(saved, ExampleNPUDelegate())) == {f"not used: {NPU} declined in init()"}


@pytest.mark.parametrize("changes, reason", [
    ({"target": "example-npu/int8-nchw/9"}, "saved for 'example-npu/int8-nchw/9'"),
    ({"digest": "0" * 64}, "the blob is corrupt"),
    ({"delegate": "OtherDelegate"}, "no OtherDelegate in the Context"),
    ({"inputs": [0, 0]}, "boundary tensors differ"),
], ids=["other target", "bad digest", "other delegate", "other boundary"])
def test_an_unusable_partition_builds_from_the_nodes_with_the_reason(saved, plain, feeds, changes, reason):
    model = build(rewritten(saved, **changes), ExampleNPUDelegate())
    assert len(blobs(model)) == 1 and reason in blobs(model).pop()
    built = build(plain, ExampleNPUDelegate())  # the delegate took the nodes itself, as without a blob
    assert [r.runs_on for r in model.partition_report()] == [r.runs_on for r in built.partition_report()]
    assert_same_npu_outputs(predict(model, feeds), predict(built, feeds))


def test_a_corrupt_blob_is_a_fallback_or_a_delegate_error(saved, plain, feeds):
    garbage = pack({"ops": ["Conv"]}, {"0.weights16": np.zeros(3, np.float16)})
    data = rewritten(saved, blob=garbage, digest=hashlib.sha256(garbage).hexdigest())
    model = build(data, ExampleNPUDelegate())
    assert "not used: the blob failed to load (ModelFormatError" in blobs(model).pop()
    assert_same_npu_outputs(predict(model, feeds), predict(build(plain, ExampleNPUDelegate()), feeds))
    with pytest.raises(lite.DelegateError, match="saved graph kernel 'example_npu_0' failed to load"):
        build(data, ExampleNPUDelegate(), fallback=False)


def test_nodes_a_higher_priority_delegate_took_are_not_loaded(saved):
    first = ExampleNPUDelegate(ops={"Conv2DFusion"})

    class SecondNPU(ExampleNPUDelegate):
        pass

    SecondNPU.__name__ = NPU  # the file's partition names the class; the first delegate takes its convs
    model = build(saved, first, SecondNPU())
    assert any("already run elsewhere" in b for b in blobs(model))


def test_a_delegate_without_the_ahead_of_time_half_is_told_so(saved):
    class Plain(lite.SimpleDelegate):
        def is_supported(self, kernel, primitive):
            return False

    Plain.__name__ = NPU
    assert blobs(build(saved, Plain())) == {f"not used: {NPU} in this Context loads no saved graph kernels"}


def test_a_loaded_kernel_failing_in_prepare_falls_back_and_says_so(saved, monkeypatch, onnx_model, feeds):
    def broken(self):
        raise RuntimeError("device lost")

    monkeypatch.setattr(NPUGraphKernel, "prepare", broken)
    model = build(saved, ExampleNPUDelegate())
    assert blobs(model) == {"not used: loaded, then its graph kernel failed in prepare(): device lost"}
    assert relative_l2(predict(model, feeds), run_onnxruntime(onnx_model, feeds)[0]) < 1e-4


def test_measured_placement_does_not_load_saved_partitions(saved):
    model = lite.Model()
    model.build(saved, lite.ModelType.LITE, lite.Context(delegates=[ExampleNPUDelegate()], placement="measured",
                                                         placement_cache=None, placement_budget=5))
    assert all("measured placement" in b for b in blobs(model))


def test_converting_again_replaces_the_saved_partitions(saved):
    again, partitions, _ = compile_into(saved, lite.Context(delegates=[ExampleNPUDelegate()]))
    assert len(read_model(again).partitions) == 1 == len(partitions)
    plain_again, none, _ = compile_into(saved, lite.Context())
    assert not none and not read_model(plain_again).partitions
