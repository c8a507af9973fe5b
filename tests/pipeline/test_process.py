"""Process stages: outputs identical to the whole model, stage errors, dead workers, clean shutdown.

Every test ends with no worker process and no shared-memory block left (``leftovers``).
Spawning a worker costs about a second, so each test starts as few as its path needs.
"""

from __future__ import annotations

import os
import pickle
import signal
import threading

import numpy as np
import pytest
from onnx import TensorProto

import lite
from lite.errors import WorkerError
from lite.tools import zoo
from lite.tools.converter import convert
from tests.oracle import relative_l2
from tests.pipeline.support import NaNRefusingDelegate, chain, leftovers, one_op, relu_model

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
    assert all(np.array_equal(y, expect(whole, x)) for y, x in zip(got, inputs, strict=True))
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
        assert all(np.array_equal(result(pipeline), expect(whole, x)) for x in inputs)
    assert leftovers() == CLEAN


# ---- dead workers ---------------------------------------------------------------------------

def test_a_killed_worker_fails_its_request_then_restarts_until_no_restarts_are_left(split, whole):
    x = images(1, seed=2)[0]
    with lite.PipelineExecutor(split, processes=[1], worker_restarts=1) as pipeline:
        first = pipeline.worker_pids[1]
        pipeline.run([x])
        assert np.array_equal(result(pipeline), expect(whole, x))
        os.kill(first, signal.SIGKILL)
        pipeline.run([x])
        with pytest.raises(lite.StageError, match=r"stage 1 failed on request 1: WorkerError: .*SIGKILL") as died:
            pipeline.get_output(block=True, timeout=60)
        assert isinstance(died.value.__cause__, WorkerError) and died.value.stage == 1
        pipeline.run([x])  # a new worker serves it
        assert np.array_equal(result(pipeline), expect(whole, x))
        assert pipeline.worker_pids[1] != first
        os.kill(pipeline.worker_pids[1], signal.SIGKILL)
        pipeline.run([x])
        with pytest.raises(lite.StageError, match="SIGKILL"):
            pipeline.get_output(block=True, timeout=60)
        pipeline.run([x])
        with pytest.raises(lite.StageError, match="stage 1 cannot serve any more.*no restarts are left"):
            pipeline.get_output(block=True, timeout=60)
    assert leftovers() == CLEAN


def test_a_worker_that_cannot_build_its_stage_fails_the_executor_and_stops_the_others():
    relu = one_op("Relu", {"x": (TensorProto.FLOAT, [1, 4])}, ("h", TensorProto.FLOAT, [1, 4]))
    config = chain(relu_model(), relu_model(inp="h", out="y"))
    config.set_source(0, relu).set_source(1, b"not a model")
    with pytest.raises(WorkerError, match="stage 1 could not build the stage: ModelFormatError"):
        lite.PipelineExecutor(config, processes=True)
    assert leftovers() == CLEAN


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
