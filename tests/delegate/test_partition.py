"""Misbehaving delegates, table-driven: each fault, with fallback on and off.

One delegate (``Faulty``) takes the chain model's Add/Relu/Mul/Sigmoid kernels and misbehaves
in one way: it raises in a stage of the Delegate API or of its graph kernels, writes wrong
outputs, writes into its inputs, calls ``replace`` badly, or keeps references to what it was
given. Every row says what the user sees: the LiteError subclass and a message naming the
delegate, the graph kernel and the problem, at build or at predict, and the model (when it
was built) must give onnxruntime's numbers afterwards. Faults at run time happen once (on the
second predict), so the recovery is checked too.
"""

from __future__ import annotations

import gc
import weakref
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pytest

import lite
from tests.support.delegates import RNG, NativeGraphKernel, assert_matches_onnxruntime, build, chain_model

OPS = {"AddFusion", "Activation", "MulFusion"}
FAILING_CALL = 2  # run-time faults hit the second execute()


class Faulty(lite.SimpleDelegate):
    """Takes OPS; ``fault(stage, subject)`` runs at each stage and may raise or tamper."""

    def __init__(self, fault: Callable[[str, object], None]):
        self.fault = fault
        self.executes = 0
        self.kept: list = []

    def init(self) -> None:
        self.fault("init", self)

    def build(self, model: lite.DelegateModel) -> None:
        self.fault("build", model)
        super().build(model)

    def is_supported(self, kernel, primitive):
        self.fault("is_supported", kernel)
        return primitive.type in OPS

    def create_graph_kernel(self, kernels, inputs, outputs, model):
        self.fault("create_graph_kernel", (kernels, inputs, outputs))
        kernel = FaultyKernel(self, kernels, inputs, outputs, model.kernel_name("faulty"))
        self.fault("created", (kernel, model))
        return kernel


class FaultyKernel(NativeGraphKernel):
    def __init__(self, delegate: Faulty, kernels, inputs, outputs, name: str):
        super().__init__(kernels, inputs, outputs, [], name)
        self.delegate = delegate

    def prepare(self) -> None:
        self.delegate.fault("prepare", self)
        super().prepare()

    def resize(self) -> None:
        self.delegate.fault("resize", self)
        super().resize()

    def execute(self) -> None:
        super().execute()
        self.delegate.executes += 1
        if self.delegate.executes == FAILING_CALL:
            self.delegate.fault("execute", self)


# ---- faults -------------------------------------------------------------------------------------


def raises(stage: str, error: BaseException | None = None, when: Callable[[object], bool] = lambda _: True):
    """A fault raising ``error`` (a RuntimeError by default) in ``stage``."""

    def fault(at: str, subject) -> None:
        if at == stage and when(subject):
            raise error if error is not None else RuntimeError(f"device lost in {stage}")

    return fault


def in_execute(tamper: Callable[[FaultyKernel], None]):
    def fault(at: str, subject) -> None:
        if at == "execute":
            tamper(subject)

    return fault


def at_creation(tamper: Callable[[FaultyKernel, lite.DelegateModel], None]):
    def fault(at: str, subject) -> None:
        if at == "created":
            tamper(*subject)

    return fault


def in_build(action: Callable[[lite.DelegateModel], None]):
    def fault(at: str, subject) -> None:
        if at == "build":
            action(subject)

    return fault


def wrong_shape(kernel: FaultyKernel) -> None:
    kernel.outputs[0].data = kernel.outputs[0].data[:1]


def wrong_dtype(kernel: FaultyKernel) -> None:
    kernel.outputs[0].data = kernel.outputs[0].data.astype(np.float64)


def no_output(kernel: FaultyKernel) -> None:
    kernel.outputs[0].data = None


def writes_into_input(kernel: FaultyKernel) -> None:
    kernel.inputs[0].data[...] = 0.0


def rebinds_input(kernel: FaultyKernel) -> None:
    kernel.inputs[0].data = np.zeros_like(kernel.inputs[0].data)


def lists_model_input_as_output(kernel: FaultyKernel, model: lite.DelegateModel) -> None:
    kernel.outputs.append(model.inputs[0])


def drops_an_output(kernel: FaultyKernel, model: lite.DelegateModel) -> None:
    kernel.outputs.pop()


def reads_a_later_tensor(kernel: FaultyKernel, model: lite.DelegateModel) -> None:
    kernel.inputs.append(model[len(model) - 1].outputs[0])


def reversed_range(model: lite.DelegateModel) -> None:
    model.replace(2, 1, lite.Kernel([], []))


def past_the_end(model: lite.DelegateModel) -> None:
    model.replace(0, len(model) + 1, lite.Kernel([], []))


def not_a_kernel(model: lite.DelegateModel) -> None:
    model.replace(0, 1, object())


def big_batch(kernel: FaultyKernel) -> bool:
    return kernel.inputs[0].shape[0] >= 3


# ---- the table ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Outcome:
    """What the user sees: where it fails (build, predict, resize; "" for nowhere), how, and
    where the delegated nodes run once the model is built."""

    stage: str = ""
    error: type[BaseException] | None = None
    message: str | None = None
    runs_on: str = "Faulty"


@dataclass(frozen=True)
class Row:
    """A fault, its outcome, and the outcome when fallback is on (if it differs)."""

    id: str
    fault: Callable[[str, object], None]
    outcome: Outcome
    with_fallback: Outcome | None = None


FELL_BACK = Outcome(runs_on="native")


ROWS = [
    Row("declines in init", raises("init", lite.NotSupportedError("no device")), FELL_BACK),
    Row("raises in init", raises("init"), Outcome("build", lite.DelegateError,
        "delegate Faulty failed in init\\(\\): RuntimeError: device lost in init")),
    Row("raises in build", raises("build"), Outcome("build", lite.DelegateError,
        "delegate Faulty failed in build\\(\\): RuntimeError: device lost in build")),
    Row("raises in is_supported", raises("is_supported"), Outcome("build", lite.DelegateError,
        "delegate Faulty failed in build\\(\\): RuntimeError: device lost in is_supported")),
    Row("raises in create_graph_kernel", raises("create_graph_kernel"), Outcome("build", lite.DelegateError,
        "delegate Faulty failed in build\\(\\): RuntimeError: device lost in create_graph_kernel")),
    Row("raises in prepare", raises("prepare"), Outcome("build", lite.DelegateError,
        "delegate Faulty: graph kernel 'faulty_0' failed in prepare\\(\\): RuntimeError: device lost in prepare"),
        with_fallback=FELL_BACK),
    Row("raises in resize", raises("resize", when=big_batch), Outcome("resize", lite.DelegateError,
        "delegate Faulty: graph kernel 'faulty_0' failed in resize\\(\\): RuntimeError: device lost in resize"),
        with_fallback=FELL_BACK),
    Row("raises in execute", raises("execute"), Outcome("predict", lite.DelegateError,
        "delegate Faulty: graph kernel 'faulty_0' failed in execute\\(\\): RuntimeError: device lost in execute")),
    Row("raises MemoryError in execute", raises("execute", MemoryError()), Outcome("predict", lite.DelegateError,
        "graph kernel 'faulty_0' failed in execute\\(\\): MemoryError")),
    Row("interrupted in execute", raises("execute", KeyboardInterrupt()), Outcome("predict", KeyboardInterrupt)),
    Row("writes a wrong shape", in_execute(wrong_shape), Outcome("predict", lite.DelegateError,
        "graph kernel 'faulty_0' wrote float32\\[1, 8\\] to 'b', expected float32\\[2, 8\\]")),
    Row("writes a wrong dtype", in_execute(wrong_dtype), Outcome("predict", lite.DelegateError,
        "graph kernel 'faulty_0' wrote float64\\[2, 8\\] to 'b', expected float32\\[2, 8\\]")),
    Row("writes no output", in_execute(no_output), Outcome("predict", lite.DelegateError,
        "graph kernel 'faulty_0' wrote nothing to 'b'")),
    Row("writes into its input", in_execute(writes_into_input), Outcome("predict", lite.DelegateError,
        "delegate Faulty: graph kernel 'faulty_0' wrote into an input .*read-only")),
    Row("replaces its input's array", in_execute(rebinds_input), Outcome("predict", lite.DelegateError,
        "graph kernel 'faulty_0' replaced the arrays of its inputs \\['x'\\]")),
    Row("lists a model input among its outputs", at_creation(lists_model_input_as_output), Outcome(
        "build", lite.DelegateError, "delegate Faulty: graph kernel 'faulty_0' lists \\['x'\\] among its outputs")),
    Row("leaves out an output", at_creation(drops_an_output), Outcome("build", lite.DelegateError,
        "delegate Faulty: graph kernel 'faulty_0' does not produce \\['y'\\]")),
    Row("reads a tensor made after it", at_creation(reads_a_later_tensor), Outcome("build", lite.DelegateError,
        "graph kernel 'faulty_0' reads 'y', which is not available before kernel 0")),
    Row("replaces a reversed range", in_build(reversed_range), Outcome("build", lite.DelegateError,
        "delegate Faulty: run \\[2, 1\\) is not a non-empty range of the 5 kernels")),
    Row("replaces past the end", in_build(past_the_end), Outcome("build", lite.DelegateError,
        "delegate Faulty: run \\[0, 6\\) is not a non-empty range")),
    Row("replaces with something that is not a kernel", in_build(not_a_kernel), Outcome("build", lite.DelegateError,
        "delegate Faulty: replace\\(\\) needs a lite.Kernel, got object")),
]


def runs_on(model: lite.Model) -> set[str]:
    return {r.runs_on for r in model.partition_report()}


def fails(model: lite.Model, stage: str, error: type[BaseException], message: str | None) -> None:
    """The failing call at ``stage`` raises ``error``; the model's inputs are left as they were."""
    x = RNG.standard_normal((2, 8)).astype(np.float32)
    with pytest.raises(error, match=message):
        if stage == "predict":
            model.predict([x])
        else:
            model.resize(model.get_inputs(), [[4, 8]])
    if stage == "predict":
        np.testing.assert_array_equal(model.get_inputs()[0].data, x)  # as the user gave it
    assert model.get_inputs()[0].shape == (2, 8)


@pytest.mark.parametrize("fallback", [True, False], ids=["fallback", "no-fallback"])
@pytest.mark.parametrize("row", ROWS, ids=[r.id for r in ROWS])
def test_a_misbehaving_delegate_gets_a_clear_error_and_the_model_keeps_working(row, fallback):
    onnx_model = chain_model(dynamic_batch=True)
    expected = row.with_fallback if fallback and row.with_fallback is not None else row.outcome
    delegate = Faulty(row.fault)
    if expected.stage == "build":
        with pytest.raises(expected.error, match=expected.message):
            build(onnx_model, delegate, fallback=fallback)
        return
    model = build(onnx_model, delegate, fallback=fallback)
    assert_matches_onnxruntime(model, onnx_model, batch=2)  # the first execute: no fault yet
    if expected.stage:
        fails(model, expected.stage, expected.error, expected.message)
    else:
        model.resize(model.get_inputs(), [[4, 8]])
        assert_matches_onnxruntime(model, onnx_model, batch=4)
    assert runs_on(model) == {expected.runs_on}
    for batch in (2, 1):
        assert_matches_onnxruntime(model, onnx_model, batch=batch)


@pytest.mark.parametrize("fallback", [True, False], ids=["fallback", "no-fallback"])
def test_a_delegate_keeping_everything_it_was_given_keeps_no_model_alive(fallback):
    kept: list = []
    delegate = Faulty(lambda stage, subject: kept.append(subject))
    onnx_model = chain_model(dynamic_batch=True)
    engines = []
    for _ in range(3):
        model = build(onnx_model, delegate, fallback=fallback)
        assert_matches_onnxruntime(model, onnx_model, batch=2)
        engines.append(weakref.ref(model._engine))
        del model
    gc.collect()
    assert len(kept) > 10 and [e() for e in engines] == [None, None, None]
