"""The Delegate API: lifecycle, subgraph boundaries, priority, failures, fallback, partitioning."""

import contextlib
import ctypes
import gc
import os
import weakref

import numpy as np
import pytest

import lite
from lite.tools.converter import convert
from lite.tools.inspector import summary
from tests.support.delegates import (
    RNG,
    CountingDelegate,
    NativeGraphKernel,
    assert_matches_onnxruntime,
    build,
    chain_model,
    inception_block,
)
from tests.support.oracle import relative_l2, run_onnxruntime


def test_lifecycle_order_and_counts():
    delegate = CountingDelegate({"AddFusion", "Activation", "MulFusion"})
    onnx_model = chain_model(dynamic_batch=True)
    model = build(onnx_model, delegate)
    names = [k.name for k in delegate.made]
    assert delegate.events[:2] == [("init", "counting"), ("build", "counting")]
    assert sorted(e for e in delegate.events[2:]) == sorted(("prepare", n) for n in names)
    delegate.events.clear()
    for _ in range(3):
        assert_matches_onnxruntime(model, onnx_model, batch=2)
    executes = [e for e in delegate.events if e[0] == "execute"]
    resizes = [e for e in delegate.events if e[0] == "resize"]
    assert len(executes) == 3 * len(names)
    assert len(resizes) == len(names)  # the first predict fixed the dynamic batch once
    delegate.events.clear()
    model.resize(model.get_inputs(), [[5, 8]])
    assert sorted(delegate.events) == sorted(("resize", n) for n in names)
    assert_matches_onnxruntime(model, onnx_model, batch=5)


def test_subgraph_inputs_and_outputs_in_the_hard_cases():
    seen = {}

    class Probe(lite.Delegate):
        def build(self, model):
            seen["inputs"] = [t.name for t in model.subgraph_inputs(0, 3)]
            seen["outputs"] = [t.name for t in model.subgraph_outputs(0, 3)]
            seen["all_in"] = [t.name for t in model.subgraph_inputs(0, len(model))]
            seen["types"] = [model.get_primitive(k).type for k in model]

    build(chain_model(), Probe())
    assert seen["types"] == ["AddFusion", "Activation", "MulFusion", "Activation", "AddFusion"]
    # run = add1, relu, mul: reads graph input x (consts c1, c2 are not inputs);
    # a is read inside and after the run; b is a model output and read inside; c is read after.
    assert seen["inputs"] == ["x"]
    assert seen["outputs"] == ["a", "b", "c"]
    assert seen["all_in"] == ["x"]


def test_two_delegates_in_priority_order():
    first = CountingDelegate({"Activation"}, label="first")
    second = CountingDelegate({"Activation", "AddFusion", "MulFusion"}, label="second")
    onnx_model = chain_model()
    model = build(onnx_model, first, second)
    report = {row.node: row for row in model.partition_report()}
    assert report["relu"].runs_on == "CountingDelegate" and report["relu"].graph_kernel.startswith("first")
    assert report["sigmoid"].graph_kernel.startswith("first")
    assert report["add1"].graph_kernel.startswith("second")
    assert report["mul"].graph_kernel.startswith("second")
    assert_matches_onnxruntime(model, onnx_model)


def test_declining_delegate_leaves_the_model_native_and_says_why(caplog):
    class Declines(CountingDelegate):
        def init(self):
            raise lite.NotSupportedError("no such device here")

    onnx_model = chain_model()
    with caplog.at_level("WARNING", logger="lite"):
        model = build(onnx_model, Declines({"AddFusion"}))
    report = model.partition_report()
    assert {row.runs_on for row in report} == {"native"}
    assert all(row.reason == "Declines: declined in init(): no such device here" for row in report)
    assert "delegate Declines declined: no such device here" in caplog.text
    assert "Declines declined: no such device here" in summary(report)
    assert_matches_onnxruntime(model, onnx_model)


def test_raising_in_build_is_a_delegate_error_naming_the_delegate():
    class Broken(lite.Delegate):
        def build(self, model):
            raise RuntimeError("driver crashed")

    with pytest.raises(lite.DelegateError, match="Broken.*build.*driver crashed") as info:
        build(chain_model(), Broken())
    assert isinstance(info.value.__cause__, RuntimeError)


class FailsInPrepare(CountingDelegate):
    failure = "out of device memory"

    def before_failing(self, kernel) -> None:
        """What the graph kernel does in prepare() before it raises."""

    def create_graph_kernel(self, kernels, inputs, outputs):
        kernel = super().create_graph_kernel(kernels, inputs, outputs)

        def prepare():
            self.before_failing(kernel)
            raise RuntimeError(self.failure)

        kernel.prepare = prepare
        return kernel


def test_prepare_failure_falls_back_to_native_kernels():
    onnx_model = chain_model()
    model = build(onnx_model, FailsInPrepare({"AddFusion", "Activation", "MulFusion"}))
    rows = model.partition_report()
    assert {row.runs_on for row in rows} == {"native"}
    assert any("out of device memory" in row.reason for row in rows)
    assert_matches_onnxruntime(model, onnx_model)


def test_prepare_failure_without_fallback_fails_the_build():
    with pytest.raises(lite.DelegateError, match="FailsInPrepare.*counting_\\d.*prepare.*out of device memory"):
        build(chain_model(), FailsInPrepare({"AddFusion"}), fallback=False)


@pytest.mark.parametrize("bad_replace, message", [
    (lambda m: m.replace(3, 2, lite.Kernel([], [])), "not a non-empty range"),
    (lambda m: m.replace(0, 99, lite.Kernel([], [])), "not a non-empty range"),
    (lambda m: m.replace(0, 2, "kernel"), "needs a lite.Kernel"),
    (lambda m: m.replace(0, 2, lite.Kernel(m.subgraph_inputs(0, 2), [])), "does not produce"),
    (lambda m: m.replace(0, 1, lite.Kernel([m[3].outputs[0]], m.subgraph_outputs(0, 1))), "not available"),
    (lambda m: m.replace(0, 1, lite.Kernel(m.subgraph_inputs(0, 1), m.subgraph_outputs(0, 1) + m.inputs)),
     "lists \\['x'\\] among its outputs"),
    (lambda m: m.replace(0, 1, lite.Kernel(m.subgraph_inputs(0, 1), m.subgraph_outputs(0, 1) + [m[0].inputs[1]])),
     "lists \\['c1'\\] among its outputs"),
    (lambda m: m.replace(0, 1, lite.Kernel(m.subgraph_inputs(0, 1), m.subgraph_outputs(0, 1) + m[1].outputs)),
     "which kernels 0..0 do not produce"),
])
def test_bad_replace_is_a_delegate_error(bad_replace, message):
    class Bad(lite.Delegate):
        def build(self, model):
            bad_replace(model)

    with pytest.raises(lite.DelegateError, match=f"Bad.*{message}"):
        build(chain_model(), Bad())


def test_later_delegate_cannot_replace_an_earlier_graph_kernel():
    class Greedy(lite.Delegate):
        def build(self, model):
            model.replace(0, len(model), NativeGraphKernel([], model.subgraph_inputs(0, len(model)),
                                                           model.subgraph_outputs(0, len(model)), [], "g"))

    with pytest.raises(lite.DelegateError, match="Greedy.*another delegate"):
        build(chain_model(), CountingDelegate({"Activation"}), Greedy())


def test_min_nodes_and_max_partitions():
    delegate = CountingDelegate({"AddFusion", "MulFusion", "Activation"})
    delegate.max_partitions = 1
    model = build(chain_model(), delegate)
    assert len(delegate.made) == 1
    few = CountingDelegate({"Activation", "AddFusion"})
    few.min_nodes_per_partition = 3
    model = build(chain_model(), few)
    assert few.made == []
    assert all("min_nodes_per_partition" in row.reason or "not in" in row.reason
               for row in model.partition_report())


def test_parallel_branches_share_a_partition():
    onnx_model = inception_block()
    delegate = CountingDelegate({"Conv2DFusion", "Concat"})
    model = build(onnx_model, delegate)
    # file order: b1, b2a, b2b, b3a, b3b, pool, b4, concat -> contiguous runs: 2; re-sorted: pool first, then 1
    assert len(delegate.made) == 1
    x = RNG.standard_normal((1, 4, 8, 8)).astype(np.float32)
    got = model.predict([x])[0].get_data_to_numpy()
    assert relative_l2(got, run_onnxruntime(onnx_model, {"x": x})[0]) < 1e-5
    report = {row.node: row for row in model.partition_report()}
    assert report["pool"].runs_on == "native" and "MaxPoolFusion is not in" in report["pool"].reason


class OwnMul(lite.SimpleDelegate):
    """Takes MulFusion by a constant, keeping its own copy of the constant."""

    def is_supported(self, kernel, primitive):
        return primitive.type == "MulFusion" and kernel.inputs[1].is_const

    def create_graph_kernel(self, kernels, inputs, outputs):
        (mul,) = kernels
        factor, source, out = np.array(mul.inputs[1].data), mul.inputs[0], outputs[0]

        class Scale(lite.Kernel):
            def execute(self):
                np.multiply(source.data, factor, out=out.data)

        self.weight = mul.inputs[1]
        return Scale(inputs, outputs, name="scale")


def test_replaced_kernels_weights_are_released():
    onnx_model = chain_model()
    delegate = OwnMul()
    model = build(onnx_model, delegate)
    assert delegate.weight.is_const and delegate.weight.data is None
    assert_matches_onnxruntime(model, onnx_model)


class Misbehaves(CountingDelegate):
    """Its graph kernel misbehaves on chosen calls: raises, or writes a wrong shape/dtype."""

    def __init__(self, how: str, on_calls: set[int]):
        super().__init__({"AddFusion", "Activation", "MulFusion"})
        self.how, self.on_calls, self.calls = how, on_calls, 0

    def create_graph_kernel(self, kernels, inputs, outputs):
        kernel = super().create_graph_kernel(kernels, inputs, outputs)
        run = kernel.execute

        def execute():
            self.calls += 1
            run()
            if self.calls in self.on_calls:
                if self.how == "raise":
                    raise RuntimeError("device lost")
                out = kernel.outputs[0]
                out.data = out.data[:1] if self.how == "shape" else out.data.astype(np.float64)

        kernel.execute = execute
        return kernel


@pytest.mark.parametrize("how, message", [
    ("raise", "Misbehaves: graph kernel 'counting_0' failed in execute\\(\\): RuntimeError: device lost"),
    ("shape", "Misbehaves: graph kernel 'counting_0' wrote float32\\[1, 8\\] to 'b', expected float32\\[2, 8\\]"),
    ("dtype", "Misbehaves: graph kernel 'counting_0' wrote float64\\[2, 8\\] to 'b', expected float32\\[2, 8\\]"),
])
def test_graph_kernel_misbehaving_at_run_time_is_a_delegate_error_and_model_recovers(how, message):
    onnx_model = chain_model()
    model = build(onnx_model, Misbehaves(how, on_calls={2}))
    assert_matches_onnxruntime(model, onnx_model)
    with pytest.raises(lite.DelegateError, match=message):
        model.predict([RNG.standard_normal((2, 8)).astype(np.float32)])
    assert_matches_onnxruntime(model, onnx_model)


class FailsInResize(CountingDelegate):
    """Its graph kernels raise in resize() once the batch reaches ``from_batch``."""

    def __init__(self, ops: set[str], from_batch: int = 3):
        super().__init__(ops)
        self.from_batch = from_batch

    def create_graph_kernel(self, kernels, inputs, outputs):
        kernel = super().create_graph_kernel(kernels, inputs, outputs)
        resize = kernel.resize

        def failing_resize():
            if kernel.inputs[0].shape[0] >= self.from_batch:
                raise RuntimeError("no program for this shape")
            resize()

        kernel.resize = failing_resize
        return kernel


def test_resize_failure_falls_back_to_the_native_kernels():
    onnx_model = chain_model(dynamic_batch=True)
    model = build(onnx_model, FailsInResize({"AddFusion", "Activation", "MulFusion"}))
    assert_matches_onnxruntime(model, onnx_model, batch=2)
    assert {row.runs_on for row in model.partition_report()} == {"FailsInResize"}
    model.resize(model.get_inputs(), [[4, 8]])
    rows = model.partition_report()
    assert {row.runs_on for row in rows} == {"native"} and model.graph_kernels() == []
    assert any("failed in resize(): no program for this shape" in row.reason for row in rows)
    for batch in (4, 1, 5):
        assert_matches_onnxruntime(model, onnx_model, batch=batch)


def test_resize_failure_without_fallback_is_a_delegate_error_and_keeps_the_old_shapes():
    onnx_model = chain_model(dynamic_batch=True)
    model = build(onnx_model, FailsInResize({"AddFusion", "Activation", "MulFusion"}), fallback=False)
    assert_matches_onnxruntime(model, onnx_model, batch=2)
    with pytest.raises(lite.DelegateError, match="FailsInResize: graph kernel 'counting_0' failed in resize"):
        model.resize(model.get_inputs(), [[4, 8]])
    assert model.get_inputs()[0].shape == (2, 8)
    assert_matches_onnxruntime(model, onnx_model, batch=2)


class DropsWeights(OwnMul):
    """OwnMul (which copies its weight and lets the model release it) failing in resize() from batch 3."""

    def create_graph_kernel(self, kernels, inputs, outputs):
        kernel = super().create_graph_kernel(kernels, inputs, outputs)

        def resize():
            if inputs[0].shape[0] >= 3:
                raise RuntimeError("no program for this shape")

        kernel.resize = resize
        return kernel


def test_fallback_after_the_weights_were_released_says_how_to_keep_them():
    model = build(chain_model(dynamic_batch=True), DropsWeights())
    model.predict([RNG.standard_normal((2, 8)).astype(np.float32)])
    with pytest.raises(lite.DelegateError, match="were released.*constants="):
        model.resize(model.get_inputs(), [[4, 8]])


class ReplacesWeights(FailsInPrepare):
    """Converts the weights in place (as a device upload might) and then fails in prepare()."""

    failure = "compiler crashed"

    def before_failing(self, kernel) -> None:
        for tensor in kernel.constants:
            tensor.data = tensor.data.astype(np.float16)


def test_fallback_after_prepare_runs_on_the_original_weights():
    onnx_model = chain_model()
    model = build(onnx_model, ReplacesWeights({"AddFusion", "Activation", "MulFusion"}))
    assert {row.runs_on for row in model.partition_report()} == {"native"}
    assert_matches_onnxruntime(model, onnx_model)


def test_a_delegate_keeping_its_graph_kernels_does_not_keep_models_alive():
    delegate = CountingDelegate({"AddFusion", "Activation", "MulFusion"})
    model = build(chain_model(dynamic_batch=True), delegate)
    model.predict([RNG.standard_normal((2, 8)).astype(np.float32)])
    engine = weakref.ref(model._engine)
    (x,) = model.get_inputs()
    del model
    gc.collect()
    assert delegate.made and engine() is None
    x.set_data_from_numpy(RNG.standard_normal((3, 8)).astype(np.float32))  # a new shape: nobody to tell
    assert x.shape == (3, 8)


def resident_bytes() -> int:
    """This process's resident set size, after returning freed heap pages to the system (glibc)."""
    gc.collect()
    with contextlib.suppress(OSError):  # not glibc: the figure then includes freed pages
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="needs /proc to read the resident set size")
def test_200_builds_with_a_delegate_keeping_its_graph_kernels_leave_no_model_and_no_memory_behind():
    delegate = CountingDelegate({"AddFusion", "Activation", "MulFusion"})
    data = convert(chain_model(dynamic_batch=True))
    x = RNG.standard_normal((2, 8)).astype(np.float32)

    def cycle() -> weakref.ref:
        model = lite.Model()
        model.build(data, lite.ModelType.LITE, lite.Context(thread_num=1, delegates=[delegate]))
        model.predict([x])
        return weakref.ref(model._engine)

    for _ in range(20):  # warm up: caches, pools and lazy imports
        cycle()
    before = resident_bytes()
    engines = [cycle() for _ in range(200)]
    growth = resident_bytes() - before
    assert len(delegate.made) >= 220 and not any(engine() is not None for engine in engines)
    assert growth < 10 << 20, f"resident memory grew by {growth / 2**20:.1f} MiB over 200 builds"


class MisbehavesMidway(Misbehaves):
    """Takes only the Mul, so a native kernel (the Sigmoid) reads what its graph kernel wrote."""

    def __init__(self, how: str, on_calls: set[int]):
        super().__init__(how, on_calls)
        self.ops = {"MulFusion"}


def test_a_wrong_output_is_blamed_on_the_graph_kernel_not_on_the_native_kernel_reading_it():
    onnx_model = chain_model()
    model = build(onnx_model, MisbehavesMidway("shape", on_calls={1}))
    assert [r.runs_on for r in model.partition_report() if r.op_type == "MulFusion"] == ["MisbehavesMidway"]
    with pytest.raises(lite.DelegateError, match="MisbehavesMidway: graph kernel 'counting_0' wrote float32\\[1, 8\\] "
                                                 "to 'c', expected float32\\[2, 8\\]"):
        model.predict([RNG.standard_normal((2, 8)).astype(np.float32)])
    assert_matches_onnxruntime(model, onnx_model)


class RaisesItsOwnError(lite.Delegate):
    def build(self, model: lite.DelegateModel) -> None:
        raise lite.DelegateError("the device rejected the graph")


def test_a_delegate_error_raised_in_build_names_the_delegate():
    message = "delegate RaisesItsOwnError failed in build\\(\\): the device rejected"
    with pytest.raises(lite.DelegateError, match=message):
        build(chain_model(), RaisesItsOwnError())
