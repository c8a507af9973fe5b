"""Measured placement with the bundled delegates on real models (``lite.delegate.placement``).

The default run decides by injected costs (``injected``: a delegate's graph kernels run for real,
but their time is a set multiple of the native time they replace), so a loaded machine cannot
change a decision. The cases timed for real are marked slow, and only wide gaps are asserted
there: the example NPU is about 8x slower than native on MobileNetV2, onnxruntime about 1.6x
faster on SqueezeNet (on MobileNetV2, since its blocked chains, only 1.1-1.3x: too close to
assert), untuned TVM 50x slower on ResNet-18.
"""

from __future__ import annotations

import numpy as np
import pytest

import lite
from lite.delegate import placement
from lite.delegates.example_npu import ExampleNPUDelegate
from lite.delegates.onnxruntime import ORTDelegate
from lite.delegates.tvm import TVMDelegate
from lite.tools import zoo
from lite.tools.converter import convert
from tests.support.ort_delegate import assert_matches, normal, small_cnn


def measured(onnx_model, delegate, cache=None) -> lite.Model:
    model = lite.Model()
    context = lite.Context(thread_num=1, delegates=[delegate], placement="measured", placement_cache=cache)
    model.build(convert(onnx_model), lite.ModelType.LITE, context)
    return model


def proposals(model: lite.Model) -> list[lite.PlacementRow]:
    return [r for r in model.placement_report() if r.role == "proposed"]


def image(model: lite.Model) -> dict[str, np.ndarray]:
    [x] = model.get_inputs()
    return {x.name: normal(*x.shape)}


@pytest.fixture(scope="module")
def mobilenet():
    return zoo.mobilenet_v2()


@pytest.fixture
def injected(monkeypatch):
    """Delegate class -> its graph kernels' time as a multiple of the native time they replace.

    Each candidate's graph kernel still runs (a warm-up and one timed run: a failure still loses),
    but placement decides by these costs, whatever else the machine is doing."""
    factors: dict[type, float] = {}
    timed_runs = placement.Placer._timed_runs

    def injected_runs(self, partition, native_seconds):
        timed_runs(self, partition, native_seconds)
        return native_seconds * factors[type(partition.delegate)]

    monkeypatch.setattr(placement, "RUNS", 1)
    monkeypatch.setattr(placement.Placer, "_timed_runs", injected_runs)
    return factors


def test_the_example_npu_is_refused_where_it_costs_more(injected):
    cnn = small_cnn(batch=1)  # NOTE: the slow case below times MobileNetV2 for real
    injected[ExampleNPUDelegate] = 8.0
    assert_npu_refused(cnn, measured(cnn, ExampleNPUDelegate()))


def test_onnxruntime_takes_the_partitions_where_it_costs_less(tmp_path, injected):
    injected[ORTDelegate] = 0.5
    assert_onnxruntime_chosen(zoo.squeezenet(), tmp_path)


@pytest.mark.slow
def test_the_example_npu_is_refused_where_it_is_slower(mobilenet):
    assert_npu_refused(mobilenet, measured(mobilenet, ExampleNPUDelegate()))


@pytest.mark.slow
def test_onnxruntime_takes_the_partitions_where_it_is_faster(tmp_path):
    assert_onnxruntime_chosen(zoo.squeezenet(), tmp_path)


def assert_npu_refused(original, model: lite.Model) -> None:
    rows = proposals(model)
    assert rows and all(r.decision == "refused" and r.seconds > 2 * r.native_seconds for r in rows)
    assert {r.runs_on for r in model.partition_report()} == {"native"}
    reasons = [r.reason for r in model.partition_report() if r.op_type == "Conv2DFusion"]
    assert all("ExampleNPUDelegate: measured placement:" in reason and "refused" in reason for reason in reasons)
    assert_matches(model, original, image(model), tolerance=1e-4)


def assert_onnxruntime_chosen(squeezenet, tmp_path) -> None:
    model = measured(squeezenet, ORTDelegate(), cache=tmp_path)
    [row] = proposals(model)
    assert row.decision == "chosen" and row.seconds < row.native_seconds and row.graph_kernel
    assert {r.runs_on for r in model.partition_report() if r.op_type == "Conv2DFusion"} == {"ORTDelegate"}
    assert_matches(model, squeezenet, image(model), tolerance=1e-4)
    again = measured(squeezenet, ORTDelegate(), cache=tmp_path)
    assert [(r.decision, r.source) for r in proposals(again)] == [("chosen", "cache")]
    assert_matches(again, squeezenet, image(again), tolerance=1e-4)


def test_tvm_partitions_run_only_where_they_measured_faster(tmp_path):
    original = small_cnn(batch=2)
    model = measured(original, TVMDelegate("llvm", cache_dir=str(tmp_path)))
    rows = model.placement_report()
    assert rows and all(r.seconds is not None for r in rows)
    chosen = {node for r in rows if r.decision == "chosen" for node in r.nodes}
    assert all(r.seconds < r.native_seconds for r in rows if r.decision == "chosen")
    assert {r.node for r in model.partition_report() if r.runs_on == "TVMDelegate"} == chosen
    for _ in range(2):
        assert_matches(model, original, {"x": normal(2, 3, 12, 12)}, tolerance=1e-4)


@pytest.mark.slow
def test_untuned_tvm_on_resnet18_is_refused(tmp_path):
    original = zoo.resnet18()
    model = measured(original, TVMDelegate("llvm"), cache=tmp_path)
    [row] = proposals(model)
    assert row.decision == "refused" and row.seconds > 10 * row.native_seconds
    assert {r.runs_on for r in model.partition_report()} == {"native"}
    assert_matches(model, original, image(model), tolerance=1e-4)


def cuda_available() -> bool:
    import tvm

    return bool(tvm.cuda(0).exist)


@pytest.mark.skipif(not cuda_available(), reason="no CUDA GPU on this machine: the TVM cuda path (dlight schedules) "
                                                 "and measured placement across cuda + native are unproven here")
@pytest.mark.parametrize("name", ["resnet50", "mobilenet_v2", "bert_encoder"])
def test_cuda_partitions_match_onnxruntime_and_are_measured(name, tmp_path):
    original = getattr(zoo, name)()
    model = measured(original, TVMDelegate("cuda", cache_dir=str(tmp_path)), cache=tmp_path)
    rows = proposals(model)
    assert rows and all(r.seconds is not None for r in rows)
    feeds = {t.name: (normal(*t.shape) if t.dtype == np.float32 else np.zeros(t.shape, t.dtype))
             for t in model.get_inputs()}
    assert_matches(model, original, feeds, tolerance=1e-4)
