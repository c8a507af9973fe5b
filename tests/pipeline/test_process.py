"""Process stages: outputs identical to the whole model, stage errors, dead and wedged workers, clean shutdown.

Every test ends with no worker process and no shared-memory block left (``leftovers``).
Spawning a worker costs about a second, so each test starts as few as its path needs. Where a
regression could hang (start-up, close, Ctrl-C), the test runs a script in a child interpreter
with a time limit (``support.Script``), and checks its whole process group ended with it.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import signal
import threading

import numpy as np
import pytest
from onnx import TensorProto

import lite
from lite.errors import WorkerError
from lite.pipeline.process import ProcessStage
from lite.tools import zoo
from lite.tools.converter import convert
from tests.support.oracle import relative_l2
from tests.support.pipeline import (
    NaNRefusingDelegate,
    Script,
    ScriptRun,
    TrapDelegate,
    chain,
    leftovers,
    one_op,
    relu_model,
    run_script,
    tiny_chain,
    tiny_expected,
    wait_until_gone,
)

CLEAN = {"active children": [], "spawned workers": [], "blocks": []}


@pytest.fixture(scope="module")
def net() -> bytes:
    return convert(zoo.squeezenet(image_size=32))


@pytest.fixture(scope="module")
def split(net):
    """Two stages; stage 0 refuses NaN (a stage error on demand), else runs the native kernels."""
    contexts = [lite.Context(thread_num=1, delegates=[NaNRefusingDelegate()]), lite.Context(thread_num=1)]
    return lite.split_model(net, 2, contexts, profile_runs=1)[1]


@pytest.fixture(scope="module")
def whole(net):
    model = lite.Model()
    model.build(net, context=lite.Context(thread_num=1))
    return model


def images(count: int, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((1, 3, 32, 32)).astype(np.float32) for _ in range(count)]


def expect(whole: lite.Model, x: np.ndarray) -> np.ndarray:
    return whole.predict([x])[0].data


def result(pipeline: lite.PipelineExecutor) -> np.ndarray:
    return pipeline.get_output(block=True, timeout=60)[0].data


def same(got: np.ndarray, want: np.ndarray) -> bool:
    """Equal up to summation order: a stage's blocked chains end at the split, where the whole
    model's run on, so a stage may run a convolution on other kernels than the whole model."""
    return got.shape == want.shape and np.abs(got - want).max() <= 1e-5 * max(1.0, np.abs(want).max())


# ---- results --------------------------------------------------------------------------------

def test_process_stages_give_the_whole_models_outputs_and_survive_a_stage_error(split, whole):
    inputs = images(30)
    poisoned = np.full_like(inputs[0], np.nan)
    with lite.PipelineExecutor(split, processes=True) as pipeline:
        assert sorted(pipeline.worker_pids) == [0, 1] and os.getpid() not in pipeline.worker_pids.values()
        for x in inputs[:10]:
            pipeline.run([x])
        pipeline.run([poisoned])
        for x in inputs[10:]:
            pipeline.run([x])
        got = [result(pipeline) for _ in inputs[:10]]
        with pytest.raises(lite.StageError, match="pipeline stage 0 failed on request 10") as failure:
            pipeline.get_output(block=True, timeout=60)
        got += [result(pipeline) for _ in inputs[10:]]
    assert all(same(y, expect(whole, x)) for y, x in zip(got, inputs, strict=True))
    cause = failure.value.__cause__
    assert isinstance(cause, lite.DelegateError) and "refuses NaN" in str(cause)
    assert any("raised in the worker process of stage 0" in note for note in cause.__notes__)
    assert leftovers() == CLEAN


def test_one_stage_in_a_process_and_one_in_a_thread(split, whole):
    inputs = images(8, seed=1)
    with lite.PipelineExecutor(split, processes=[1]) as pipeline:
        assert list(pipeline.worker_pids) == [1]
        for x in inputs:
            pipeline.run([x])
        assert all(same(result(pipeline), expect(whole, x)) for x in inputs)
    assert leftovers() == CLEAN


# ---- dead workers ---------------------------------------------------------------------------

X = np.ones((1, 4), np.float32)
DIES = np.full((1, 4), np.inf, np.float32)  # a TrapDelegate's worker kills itself on it (SIGSTOPs itself on -inf)


def tiny_result(pipeline: lite.PipelineExecutor) -> np.ndarray:
    return pipeline.get_output(block=True, timeout=60)[0].data


def test_a_worker_that_dies_on_a_request_fails_it_then_restarts_until_no_restarts_are_left():
    with lite.PipelineExecutor(tiny_chain(TrapDelegate()), processes=[0], worker_restarts=1) as pipeline:
        first = pipeline.worker_pids[0]
        pipeline.run([DIES])
        with pytest.raises(lite.StageError, match=r"stage 0 failed on request 0: WorkerError: .*SIGKILL") as died:
            pipeline.get_output(block=True, timeout=60)
        assert isinstance(died.value.__cause__, WorkerError) and died.value.stage == 0
        pipeline.run([X])  # a new worker serves it
        assert np.array_equal(tiny_result(pipeline), tiny_expected(X)) and pipeline.worker_pids[0] != first
        pipeline.run([DIES])
        with pytest.raises(lite.StageError, match="SIGKILL"):
            pipeline.get_output(block=True, timeout=60)
        pipeline.run([X])
        with pytest.raises(lite.StageError, match="stage 0 cannot serve any more.*no restarts are left"):
            pipeline.get_output(block=True, timeout=60)
    assert leftovers() == CLEAN


def test_a_worker_that_died_between_requests_is_replaced_before_the_next():
    with lite.PipelineExecutor(tiny_chain(), processes=[0], worker_restarts=1) as pipeline:
        first = pipeline.worker_pids[0]
        os.kill(first, signal.SIGKILL)
        wait_until_gone(first)
        pipeline.run([X])
        assert np.array_equal(tiny_result(pipeline), tiny_expected(X)) and pipeline.worker_pids[0] != first
        os.kill(pipeline.worker_pids[0], signal.SIGKILL)  # the restart is spent: nothing replaces this one
        wait_until_gone(pipeline.worker_pids[0])
        pipeline.run([X])
        with pytest.raises(lite.StageError, match=r"stage 0 cannot serve any more: its worker process \(pid \d+\) "
                                                  r"was killed by SIGKILL between requests, and no restarts are left"):
            pipeline.get_output(block=True, timeout=60)
    assert leftovers() == CLEAN


def test_a_worker_that_cannot_build_its_stage_fails_the_executor_and_stops_the_others():
    relu = one_op("Relu", {"x": (TensorProto.FLOAT, [1, 4])}, ("h", TensorProto.FLOAT, [1, 4]))
    config = chain(relu_model(), relu_model(inp="h", out="y"))
    config.set_source(0, relu).set_source(1, b"not a model")
    with pytest.raises(WorkerError, match="stage 1 could not build the stage: ModelFormatError"):
        lite.PipelineExecutor(config, processes=True)
    assert leftovers() == CLEAN


# ---- starting, closing and Ctrl-C, in a child interpreter --------------------------------------

def assert_nothing_left(run: ScriptRun) -> None:
    """No process of the script's group outlived it, and it left no shared-memory block behind."""
    assert run.survivors == [] and run.blocks == [], run.stderr
    assert "leaked shared_memory" not in run.stderr  # NOTE: the resource tracker unlinked what the script left


def test_a_script_without_a_main_guard_gets_a_worker_error_instead_of_hanging(tmp_path):
    """Each worker imports the main module, which starts a pipeline again and so dies; its model is
    larger than a pipe buffer (64 KiB), which the spawn bootstrap once carried: the parent then
    waited for ever to write it."""
    body = """
try:
    lite.PipelineExecutor(large_config(), processes=True)
except lite.WorkerError as exc:
    report(error=str(exc), leftovers=leftovers())
"""
    run = run_script(tmp_path / "no_guard.py", body, guard=False)
    error = run.report("error")
    assert "stage 0" in error and "before it built the stage" in error and '__name__ == "__main__"' in error
    assert run.report("leftovers") == CLEAN and run.returncode == 0
    assert_nothing_left(run)


def test_a_worker_that_does_not_start_in_time_is_killed(tmp_path):
    body = """
import lite.pipeline.process

lite.pipeline.process.START_SECONDS = 1.0
try:
    lite.PipelineExecutor(tiny_chain(SlowStartDelegate()), processes=True)
except lite.WorkerError as exc:
    report(error=str(exc), leftovers=leftovers())
"""
    run = run_script(tmp_path / "slow_start.py", body)
    assert "stage 0 did not build the stage within 1 s; it was killed" in run.report("error")
    assert run.report("leftovers") == CLEAN
    assert_nothing_left(run)


def test_close_with_cancel_kills_a_wedged_worker(tmp_path):
    body = """
lite.pipeline.executor.CANCEL_GRACE_SECONDS = 0.5
pipeline = lite.PipelineExecutor(tiny_chain(TrapDelegate()), processes=True)
pipeline.run([np.full((1, 4), -np.inf, np.float32)])  # stage 0's worker stops itself on it
for _ in range(2):  # queued behind it (queue_size 2)
    pipeline.run([np.ones((1, 4), np.float32)])
wait_until_stopped(pipeline.worker_pids[0])
pipeline.close(cancel=True)
report(after=repr(pipeline.get_output()), leftovers=leftovers())
"""
    run = run_script(tmp_path / "wedged.py", body)
    assert run.report("leftovers") == CLEAN and run.report("after") == "None"
    assert_nothing_left(run)


def test_ctrl_c_in_close_stops_every_worker(tmp_path):
    """close() waits for a wedged worker's request; Ctrl-C must end it with nothing left behind,
    although requests are still queued (a stage thread once started a new worker for them)."""
    body = """
pipeline = lite.PipelineExecutor(tiny_chain(TrapDelegate()), processes=True, worker_restarts=3)
pipeline.run([np.full((1, 4), -np.inf, np.float32)])
for _ in range(2):  # queued behind it (queue_size 2)
    pipeline.run([np.ones((1, 4), np.float32)])
wait_until_stopped(pipeline.worker_pids[0])
say_when_main_thread_runs("close", "closing")
try:
    pipeline.close()
except KeyboardInterrupt:
    report(interrupted=True, leftovers=settled_leftovers())
"""
    script = Script(tmp_path / "ctrl_c_in_close.py", body)
    script.wait_for_line("closing", timeout=60)
    script.interrupt()
    run = script.finish(timeout=60)
    assert run.report("interrupted") and run.report("leftovers") == CLEAN
    assert_nothing_left(run)


def test_ctrl_c_while_starting_stops_every_worker(tmp_path):
    """The stage's source is larger than a pipe buffer (which once made the parent wait inside the
    spawn, where an interrupt lost the worker) and its build takes minutes."""
    body = """
say_when_main_thread_runs("_start", "starting")
try:
    lite.PipelineExecutor(large_config(SlowStartDelegate()), processes=True)
except KeyboardInterrupt:
    report(interrupted=True, leftovers=settled_leftovers())
"""
    script = Script(tmp_path / "ctrl_c_in_start.py", body)
    script.wait_for_line("starting", timeout=60)
    script.interrupt()
    run = script.finish(timeout=60)
    assert run.report("interrupted") and run.report("leftovers") == CLEAN
    assert_nothing_left(run)


def test_two_threads_closing_at_once_both_return(monkeypatch):
    """Both calls return once every worker is stopped. So that the calls overlap where they once
    raced, the first to reap a worker waits (up to a second) for another to reap it too: only one
    ever may."""
    reap, both = ProcessStage._reap, threading.Barrier(2)

    def overlapping_reap(stage: ProcessStage, seconds: float) -> int | None:
        with contextlib.suppress(threading.BrokenBarrierError):
            both.wait(timeout=1)
        return reap(stage, seconds)

    monkeypatch.setattr(ProcessStage, "_reap", overlapping_reap)
    pipeline = lite.PipelineExecutor(tiny_chain(), processes=True)
    for _ in range(3):
        pipeline.run([X])
    errors: list[BaseException] = []
    closers = [threading.Thread(target=close_into, args=(pipeline, errors), name="closer") for _ in range(2)]
    for closer in closers:
        closer.start()
    for closer in closers:
        closer.join(60)
    assert not any(c.is_alive() for c in closers) and errors == []
    assert [np.array_equal(tiny_result(pipeline), tiny_expected(X)) for _ in range(3)] == [True] * 3
    assert leftovers() == CLEAN


def close_into(pipeline: lite.PipelineExecutor, errors: list[BaseException]) -> None:
    try:
        pipeline.close()
    except Exception as exc:
        errors.append(exc)


# ---- KeyboardInterrupt ----------------------------------------------------------------------

def test_keyboard_interrupt_in_the_consumer_loop_stops_every_worker(split):
    inputs = images(6, seed=3)
    with pytest.raises(KeyboardInterrupt), lite.PipelineExecutor(split, processes=True) as pipeline:
        for x in inputs:
            pipeline.run([x])
        result(pipeline)
        raise KeyboardInterrupt  # as Ctrl-C would, with requests still in flight
    assert leftovers() == CLEAN


def test_sigint_while_waiting_for_an_output_stops_every_worker(split):
    if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:  # NOTE: else the wait below never ends
        pytest.skip("SIGINT does not raise KeyboardInterrupt here (ignored: started as a background job)")
    with pytest.raises(KeyboardInterrupt), lite.PipelineExecutor(split, processes=[0]) as pipeline:
        threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGINT)).start()
        pipeline.get_output(block=True)  # nothing was run: only the signal ends this wait
    assert leftovers() == CLEAN


# ---- arguments ------------------------------------------------------------------------------

def test_a_process_stage_needs_a_source_that_pickles(stages):
    config = chain(stages["relu"], stages["add"])
    with pytest.raises(lite.InputError, match=r"no source for it; call config.set_source\(0, "):
        lite.PipelineExecutor(config, processes=[0])
    config.set_source(0, b"data", lite.Context(delegates=[Unpicklable()]))
    with pytest.raises(lite.InputError, match="stage 0 cannot run in a process: its Context cannot be sent"):
        lite.PipelineExecutor(config, processes=[0])
    with pytest.raises(lite.InputError, match=r"processes: \[5\] are not stage indices"):
        lite.PipelineExecutor(config, processes=[5])
    with pytest.raises(lite.InputError, match="worker_restarts must be an int >= 0"):
        lite.PipelineExecutor(config, processes=[0], worker_restarts=-1)
    assert leftovers() == CLEAN


class Unpicklable(lite.SimpleDelegate):
    """A delegate holding an option that cannot be pickled (a lock)."""

    def __init__(self):
        self.lock = threading.Lock()

    def is_supported(self, kernel, primitive):
        return False


# ---- stages on devices ----------------------------------------------------------------------

@pytest.fixture(scope="module")
def ort_split(net):
    ort = pytest.importorskip("lite.delegates.onnxruntime")
    contexts = [lite.Context(thread_num=1, delegates=[ort.ORTDelegate()]), lite.Context(thread_num=1)]
    return lite.split_model(net, 2, contexts, profile_runs=1)


def test_an_onnxruntime_stage_beside_a_native_stage_in_threads_and_in_a_process(ort_split, whole):
    pieces, config = ort_split
    assert "ORTDelegate" in {row.runs_on for row in pieces[0].partition_report()}
    assert {row.runs_on for row in pieces[1].partition_report()} <= {"native", "folded"}
    pickle.loads(pickle.dumps(config.source(0).context))  # the delegate travels with its Context
    inputs = images(10, seed=4)
    outputs = {}
    for processes in (False, [0]):
        with lite.PipelineExecutor(config, processes=processes) as pipeline:
            for x in inputs:
                pipeline.run([x])
            outputs[bool(processes)] = [result(pipeline) for _ in inputs]
    for threaded, in_process, x in zip(outputs[False], outputs[True], inputs, strict=True):
        assert relative_l2(threaded, expect(whole, x)) < 1e-4
        assert relative_l2(in_process, threaded) < 1e-6
    assert leftovers() == CLEAN
