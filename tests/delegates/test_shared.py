"""Delegates are factories: one instance serves several models at once, each owning what its build made."""

import threading

import pytest

import lite
from lite.tools.converter import convert
from tests.support.delegate_graphs import feeds_for, mixed_model
from tests.support.oracle import relative_l2, run_onnxruntime


def ort_delegate():
    pytest.importorskip("onnxruntime")
    from lite.delegates.onnxruntime import ORTDelegate

    return ORTDelegate(ops={"Conv2DFusion", "Activation", "MatMulFusion", "Softmax", "AvgPoolFusion", "Flatten"})


def tvm_delegate(cache_dir):
    pytest.importorskip("tvm")
    from lite.delegates.tvm import TVMDelegate

    return TVMDelegate("llvm", cache_dir=cache_dir)


@pytest.fixture(params=["ort", "tvm"])
def shared(request, tmp_path):
    """(delegate class name, graph kernel prefix, a delegate instance)."""
    if request.param == "ort":
        return "ORTDelegate", "onnxruntime", ort_delegate()
    return "TVMDelegate", "tvm", tvm_delegate(tmp_path / "cache")


def test_one_delegate_serves_three_runner_copies_concurrently(shared, tmp_path):
    name, prefix, delegate = shared
    onnx_model = mixed_model(batch=2)
    path = tmp_path / "mixed.lite"
    convert(onnx_model, path, fusion=False)
    runner = lite.ModelParallelRunner(path, lite.Context(thread_num=1, delegates=[delegate]), workers=3)
    reports = [model.partition_report() for model in runner.models]
    for model, rows in zip(runner.models, reports, strict=True):
        delegated = [r for r in rows if r.runs_on == name]
        assert delegated and {r.node for r in delegated} == {r.node for r in reports[0] if r.runs_on == name}
        kernels = model.graph_kernels()
        assert [k.name for k in kernels] == [f"{prefix}_{i}" for i in range(len(kernels))]
        assert {r.graph_kernel for r in delegated} == {k.name for k in kernels}
    kernel_sets = [set(map(id, m.graph_kernels())) for m in runner.models]
    assert not (kernel_sets[0] & kernel_sets[1] or kernel_sets[1] & kernel_sets[2])  # each copy owns its own
    for index, model in enumerate(runner.models):
        written = [p for k in model.graph_kernels() for p in k.dump(tmp_path / f"dump_{index}")]
        assert written and all(p.stat().st_size > 0 for p in written)
    assert not hasattr(delegate, "graph_kernels")
    assert_concurrent_predictions_match(runner, onnx_model)


def assert_concurrent_predictions_match(runner: lite.ModelParallelRunner, onnx_model) -> None:
    requests = [feeds_for(onnx_model) for _ in range(6)]
    expected = [run_onnxruntime(onnx_model, feeds) for feeds in requests]
    errors: list[float] = []

    def client(offset: int) -> None:
        for k in range(8):
            i = (offset + k) % len(requests)
            outputs = runner.predict([requests[i]["x"]])
            errors.extend(relative_l2(o.get_data_to_numpy(), e) for o, e in zip(outputs, expected[i], strict=True))

    threads = [threading.Thread(target=client, args=(offset,)) for offset in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(errors) == 3 * 8 * 2 and max(errors) < 1e-4, max(errors)
