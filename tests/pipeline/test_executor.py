"""PipelineExecutor: inputs, stage errors, backpressure, waiting and closing."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from onnx import TensorProto

import lite
from tests.support.delegates import NativeGraphKernel
from tests.support.pipeline import RNG, arrays, build, chain, one_op, pipeline_threads

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



# ---- inputs ---------------------------------------------------------------------------------

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
        first = arrays(pipeline.get_output(block=True, timeout=10))["y"]
        pipeline.run()
        second = arrays(pipeline.get_output(block=True, timeout=10))["y"]
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
                assert isinstance(error.value, lite.StageError) and error.value.stage == failing
            else:
                got = arrays(pipeline.get_output(block=True, timeout=10))["y"]
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
        assert arrays(pipeline.get_output(block=True, timeout=10))["y"].shape == (2, 4)
        with pytest.raises(lite.LiteError, match="pipeline stage 1 failed on request 1: InputError"):
            pipeline.get_output(block=True, timeout=10)
        assert np.array_equal(arrays(pipeline.get_output(block=True, timeout=10))["y"], np.maximum(inputs[2]["x"], 0))



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
        assert np.array_equal(arrays(pipeline.get_output(block=True, timeout=10))["y"], expected(x))
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
        results = [arrays(pipeline.get_output(block=True, timeout=10))["y"] for _ in xs]
    assert all(np.array_equal(r, expected(x)) for r, x in zip(results, xs, strict=True))


def test_max_outputs_holds_back_the_whole_pipeline(stages):
    # finished 2 + per stage: one in its hands and one in its queue = 6 requests at most
    xs = vectors(7)
    with lite.PipelineExecutor(chain(stages["relu"], stages["add"]), queue_size=1, max_outputs=2) as pipeline:
        assert submit_until_full(pipeline, xs, timeout=0.3) == 6
        results = [arrays(pipeline.get_output(block=True, timeout=10))["y"] for _ in range(6)]
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
    assert all(np.array_equal(arrays(r)["y"], expected(x)) for r, x in zip(results, xs, strict=True))
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
    assert all(np.array_equal(arrays(r)["y"], expected(x)) for r, x in zip(results, xs, strict=False))
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


def test_inputs_and_outputs_follow_model_predict(stages):
    """A list or a dict of inputs in, named Tensors out (``output_names`` picks), as Model.predict."""
    x = vectors(1)[0]
    with lite.PipelineExecutor(chain(stages["relu"], stages["add"])) as pipeline:
        pipeline.run([x])
        (y,) = pipeline.get_output(block=True, timeout=10)
        assert isinstance(y, lite.Tensor) and y.name == "y" and (y.dtype, y.shape) == (np.float32, (1, 4))
        np.testing.assert_array_equal(y.get_data_to_numpy(), expected(x))
        pipeline.run({"x": -x})
        (y,) = pipeline.get_output(block=True, timeout=10, output_names=["y"])
        np.testing.assert_array_equal(y.get_data_to_numpy(), expected(-x))
        with pytest.raises(lite.InputError, match=r"output_names \['z'\] are not outputs of the pipeline"):
            pipeline.get_output(output_names=["z"])
        with pytest.raises(lite.InputError, match=r"expected 1 input\(s\) \['x'\], got 2"):
            pipeline.run([x, x])
