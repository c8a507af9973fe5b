"""The BLAS thread limit follows the model that runs, whichever thread runs it; the load monitor
tells idle cores from busy ones, and the model's threads take over from BLAS's on busy ones."""

import multiprocessing
import os
import threading
import time
import warnings

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from threadpoolctl import threadpool_info

import lite
from lite import threads
from lite.kernels import fast, parallel
from lite.threads import limit_blas_threads
from lite.tools.contention import spin
from lite.tools.converter import convert
from tests.support.oracle import relative_l2, run_onnxruntime


def blas_threads() -> list[int]:
    return [info["num_threads"] for info in threadpool_info() if info["user_api"] == "blas"]


def test_the_blas_controller_is_made_at_build_not_in_the_first_predict(monkeypatch):
    """Its first use scans every loaded library (milliseconds): a build pays it, a predict never."""
    made = []

    class Counting(threads.ThreadpoolController):
        def __init__(self):
            made.append(1)
            super().__init__()

    monkeypatch.setattr(threads, "ThreadpoolController", Counting)
    monkeypatch.setattr(threads, "_controller", None)
    # NOTE: not restored after: the limit the build below sets stays in force, and a restored older value
    # would make the next limit_blas_threads of that value a no-op while BLAS keeps this test's
    threads._current = None
    relu = helper.make_node("Relu", ["x"], ["y"])
    graph = helper.make_graph([relu], "relu", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])
    model = lite.Model()
    model.build(convert(helper.make_model(graph)), context=lite.Context(thread_num=1))
    assert made == [1]
    model.predict([np.ones((1, 4), np.float32)])
    assert made == [1]


def test_a_worker_thread_can_change_the_limit_the_main_thread_set():
    limit_blas_threads(2)
    assert blas_threads() and set(blas_threads()) == {2}
    seen = []

    def worker():
        limit_blas_threads(1)
        seen.extend(blas_threads())

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join()
    assert set(seen) == {1}
    limit_blas_threads(2)  # and back from the main thread while the worker is gone
    assert set(blas_threads()) == {2}


def write_stat(path, busy: int, idle: int) -> None:
    """A /proc/stat whose first line says the cores were busy ``busy`` ticks and idle ``idle``."""
    path.write_text(f"cpu  {busy} 0 0 {idle} 0 0 0 0 0 0\ncpu0 0 0 0 0 0 0 0 0 0 0\n")


@pytest.mark.parametrize("other_cores, expected", [(0.0, False), (0.3, False), (0.6, True), (1.0, True)])
def test_the_load_monitor_counts_what_other_processes_use(tmp_path, monkeypatch, other_cores, expected):
    stat = tmp_path / "stat"
    write_stat(stat, 1000, 5000)
    clock, cpu = [100.0], [7.0]
    monkeypatch.setattr(threads, "_PROC_STAT", str(stat))
    monkeypatch.setattr(threads.time, "perf_counter", lambda: clock[0])
    monkeypatch.setattr(threads.time, "process_time", lambda: cpu[0])
    monitor = threads.LoadMonitor(interval=0.1)
    # one second: this process used 0.5 s of CPU, the others ``other_cores`` s, on 2 cores
    clock[0], cpu[0] = 101.0, 7.5
    ticks = round((0.5 + other_cores) * threads._TICKS_PER_SECOND)
    write_stat(stat, 1000 + ticks, 5000 + 2 * threads._TICKS_PER_SECOND - ticks)
    assert monitor.contended() is expected
    clock[0] = 101.05  # within the interval: the last answer, no new sample
    write_stat(stat, 0, 0)
    assert monitor.contended() is expected


@pytest.mark.skipif(not os.path.exists("/proc/stat"), reason="needs /proc/stat")
def test_a_run_samples_the_load_after_it_on_a_helper_thread(monkeypatch):
    monitor = threads.LoadMonitor(interval=0.0)
    sampled, done = [], threading.Event()
    sample = threads.LoadMonitor._sample

    def recorded(self):
        sampled.append(threading.current_thread())
        done.set()
        return sample(self)

    monkeypatch.setattr(threads, "_monitor", monitor)
    monkeypatch.setattr(threads.LoadMonitor, "_sample", recorded)
    model = lite.Model()
    model.build(convert(conv_net()), lite.ModelType.LITE, lite.Context(thread_num=2))
    model.predict([np.zeros((1, 16, 32, 32), np.float32)])
    assert done.wait(5) and sampled and threading.main_thread() not in sampled


def test_the_load_monitor_answers_no_without_proc_stat(tmp_path, monkeypatch):
    monkeypatch.setattr(threads, "_PROC_STAT", str(tmp_path / "missing"))
    monitor = threads.LoadMonitor(interval=0.0)
    assert not monitor.available and monitor.contended() is False


@pytest.mark.skipif(not os.path.exists("/proc/stat") or (os.cpu_count() or 1) < 2, reason="needs /proc/stat, 2 cores")
def test_the_load_monitor_sees_a_busy_process():
    monitor = threads.LoadMonitor(interval=0.0)
    busy = multiprocessing.get_context("spawn").Process(target=spin, args=(0,), daemon=True)
    busy.start()
    try:
        time.sleep(0.5)  # the child starts (imports) and then spins
        monitor.contended()
        time.sleep(0.5)
        assert monitor.contended()
    finally:
        busy.terminate()
        busy.join()


@pytest.mark.parametrize("thread_num", [2, 3])
def test_a_model_on_dynamic_chunks_matches_onnxruntime(monkeypatch, thread_num):
    runs = []
    monkeypatch.setattr(parallel.Crew, "run", counting(parallel.Crew.run, runs))
    monkeypatch.setattr(threads.LoadMonitor, "latest", lambda self: True)
    onnx_model = conv_net()
    model = lite.Model()
    model.build(convert(onnx_model), lite.ModelType.LITE, lite.Context(thread_num=thread_num))
    assert_matches_onnxruntime(model, onnx_model)
    assert runs and model._engine.threads.dynamic and set(blas_threads()) == {1}
    if fast.enabled():  # the compiled depthwise kernel's planes (a blocked chain's: its blocks) were shared out too
        assert any(runner(chunk) in ("DepthwisePlan", "FlatPlan", "depthwise")
                   for (chunks,) in runs for chunk in chunks)


def runner(chunk) -> str:
    """What a chunk of a dynamic loop runs: its method's class, or its compiled function's name."""
    function = getattr(chunk, "func", None)
    if hasattr(function, "__self__"):
        return type(function.__self__).__name__
    return getattr(getattr(function, "py_func", function), "__name__", "")


def test_idle_cores_leave_products_whole_to_blas(monkeypatch):
    runs = []
    monkeypatch.setattr(parallel.Crew, "run", counting(parallel.Crew.run, runs))
    monkeypatch.setattr(threads.LoadMonitor, "latest", lambda self: False)
    onnx_model = conv_net()
    model = lite.Model()
    model.build(convert(onnx_model), lite.ModelType.LITE, lite.Context(thread_num=2))
    assert_matches_onnxruntime(model, onnx_model)
    assert not runs and set(blas_threads()) == {2}


def counting(method, calls: list):
    def counted(self, *args):
        calls.append(args)
        return method(self, *args)
    return counted


def conv_net() -> onnx.ModelProto:
    """Two 3x3 convolutions around a depthwise one, and a Gemm: large enough that products and the
    depthwise planes are split."""
    rng = np.random.default_rng(3)
    weights = {"w1": rng.standard_normal((32, 16, 3, 3)) * 0.1, "w2": rng.standard_normal((32, 32, 3, 3)) * 0.1,
               "wd": rng.standard_normal((32, 1, 3, 3)) * 0.3,
               "fc": rng.standard_normal((32 * 32 * 32, 64)) * 0.01}
    nodes = [helper.make_node("Conv", ["x", "w1"], ["a"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["a"], ["r"]),
             helper.make_node("Conv", ["r", "wd"], ["b"], pads=[1, 1, 1, 1], group=32),
             helper.make_node("Conv", ["b", "w2"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Flatten", ["c"], ["d"]),
             helper.make_node("MatMul", ["d", "fc"], ["y"])]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 32, 32])
    graph = helper.make_graph(nodes, "conv_net", [x], [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64])],
                              [numpy_helper.from_array(v.astype(np.float32), k) for k, v in weights.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def assert_matches_onnxruntime(model: lite.Model, onnx_model: onnx.ModelProto) -> None:
    x = np.random.default_rng(4).standard_normal((1, 16, 32, 32)).astype(np.float32)
    (got,) = model.predict([x])
    (want,) = run_onnxruntime(onnx_model, {"x": x})
    assert relative_l2(got.get_data_to_numpy(), want) < 1e-5


def crew_word(name: str) -> int | None:
    """The crew's state word ``name`` (SLEEPERS: workers asleep on the futex; WAKE: futex wakes
    posted so far), or None where there is no crew in this process."""
    if not fast.enabled():
        return None
    from lite.kernels.fast import crew

    team = crew.crew()
    return None if team is None else int(team.state[getattr(crew, name)])


def wait_for(condition, seconds: float = 5.0) -> bool:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.001)
    return True


@pytest.mark.parametrize("busy", [False, True])
def test_the_sleeping_crew_is_woken_on_idle_cores_only(monkeypatch, busy):
    """After an idle spell the workers sleep; on idle cores ``wake_threads`` wakes them (a futex
    wake, no job), on busy ones the model's dynamic chunks run instead, so they stay asleep."""
    if crew_word("SLEEPERS") is None:
        pytest.skip("no crew here")
    onnx_model = conv_net()
    model = lite.Model()
    model.build(convert(onnx_model), lite.ModelType.LITE, lite.Context(thread_num=2))
    monkeypatch.setattr(threads.LoadMonitor, "latest", lambda self: False)
    assert_matches_onnxruntime(model, onnx_model)  # the crew has its worker now, and took this run's jobs
    assert model._engine.crew_worked
    assert wait_for(lambda: crew_word("SLEEPERS") > 0)  # it spins a few milliseconds, then sleeps
    monkeypatch.setattr(threads.LoadMonitor, "latest", lambda self: busy)
    wakes = crew_word("WAKE")
    model._engine.wake_threads()
    assert crew_word("WAKE") == wakes + (not busy)


def test_a_run_that_gives_the_crew_no_job_wakes_no_worker_before_the_next(monkeypatch):
    """A model of small elementwise ops posts the crew nothing: its next predict leaves the workers
    asleep (a woken one spins on the other core for milliseconds, and on a VM the neighbouring vCPU
    pays); new shapes may bring jobs, so the predict after a resize wakes them again."""
    if crew_word("SLEEPERS") is None:
        pytest.skip("no crew here")
    nodes = [helper.make_node("Add", ["x", "x"], ["a"]), helper.make_node("Relu", ["a"], ["y"])]
    graph = helper.make_graph(nodes, "small", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 8])])
    model = lite.Model()
    model.build(convert(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])), lite.ModelType.LITE,
                lite.Context(thread_num=2))
    monkeypatch.setattr(threads.LoadMonitor, "latest", lambda self: False)
    wakes = []
    monkeypatch.setattr(parallel.KernelThreads, "wake", lambda self: wakes.append(1))
    x = np.ones((2, 8), np.float32)
    model.predict([x])
    assert wakes == [1] and not model._engine.crew_worked
    (y,) = model.predict([x])
    np.testing.assert_array_equal(y.get_data_to_numpy(), 2 * x)
    assert wakes == [1]
    model.resize(model.get_inputs(), [[3, 8]])
    model.predict([np.ones((3, 8), np.float32)])
    assert wakes == [1, 1]


def test_a_predict_wakes_the_crew_before_it_copies_the_inputs_in(monkeypatch):
    model = lite.Model()
    model.build(convert(conv_net()), lite.ModelType.LITE, lite.Context(thread_num=2))
    calls = []
    monkeypatch.setattr(model._engine, "wake_threads", lambda: calls.append("wake"))
    feed = lite.Model._feed
    monkeypatch.setattr(lite.Model, "_feed", staticmethod(lambda *args: calls.append("feed") or feed(*args)))
    model.predict([np.zeros((1, 16, 32, 32), np.float32)])
    assert calls == ["wake", "feed"]


def test_a_delegates_graph_kernel_runs_with_the_crew_at_rest(monkeypatch):
    """Spinning crew workers would hold the cores the delegate's own threads need (onnxruntime's
    inside Delite read 1.24-1.28x bare onnxruntime on MobileNetV2 at two threads): the crew rests
    before each graph kernel, and a run that starts with one does not wake it."""
    pytest.importorskip("onnxruntime")
    from lite.delegates.onnxruntime import ORTDelegate

    onnx_model = conv_net()
    model = lite.Model()
    context = lite.Context(thread_num=2, delegates=[ORTDelegate(ops=["Conv2DFusion"])])
    model.build(convert(onnx_model), lite.ModelType.LITE, context)
    assert [row.runs_on for row in model.partition_report()][:3] == ["ORTDelegate"] * 3
    calls = []
    monkeypatch.setattr(threads.LoadMonitor, "latest", lambda self: False)
    monkeypatch.setattr(parallel.KernelThreads, "wake", lambda self: calls.append("wake"))
    monkeypatch.setattr(parallel.KernelThreads, "rest", lambda self: calls.append("rest"))
    execute = lite.engine.Engine.execute_graph_kernel
    monkeypatch.setattr(lite.engine.Engine, "execute_graph_kernel",
                        lambda self, partition: calls.append("graph kernel") or execute(self, partition))
    assert_matches_onnxruntime(model, onnx_model)
    assert calls == ["rest", "graph kernel"]


def test_thread_num_beyond_the_cpus_is_capped_with_one_warning(monkeypatch):
    monkeypatch.setattr(threads, "_capped_warned", False)
    with pytest.warns(RuntimeWarning, match="thread_num=1024 is more than"):
        context = lite.Context(thread_num=1024)
    assert context.thread_num == threads.usable_cpus()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert lite.Context(thread_num=512).thread_num == threads.usable_cpus()  # said once


def test_a_thread_the_system_refuses_is_a_lite_error(monkeypatch):
    def refuse(self):
        raise RuntimeError("can't start new thread")

    monkeypatch.setattr(threading.Thread, "start", refuse)
    with pytest.raises(lite.ThreadStartError, match="could not start thread 'lite-kernel'.*thread_num"):
        parallel.Crew(1)
