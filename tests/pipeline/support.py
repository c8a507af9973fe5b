"""Helpers shared by the pipeline tests: one-node models, two-stage chains, pipeline threads, worker leftovers."""

from __future__ import annotations

import multiprocessing
import threading

import numpy as np
import psutil
from onnx import TensorProto, helper, numpy_helper

import lite
from lite.pipeline.shared import block_names
from lite.tools.converter import convert
from tests.delegate_support import NativeGraphKernel

RNG = np.random.default_rng(23)


def one_op(op: str, inputs: dict[str, tuple[int, list]], output: tuple[str, int, list],
           consts: dict[str, np.ndarray] | None = None) -> bytes:
    """A one-node model: ``inputs`` {name: (onnx type, dims)} -> ``output`` (name, type, dims)."""
    consts = consts or {}
    name, elem, dims = output
    node = helper.make_node(op, [*inputs, *consts], [name], name=op.lower())
    graph = helper.make_graph(
        [node], op, [helper.make_tensor_value_info(k, t, d) for k, (t, d) in inputs.items()],
        [helper.make_tensor_value_info(name, elem, dims)], [numpy_helper.from_array(v, k) for k, v in consts.items()])
    return convert(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9))


def build(data: bytes, *delegates: lite.Delegate) -> lite.Model:
    """Builds ``.lite`` bytes with one thread and ``delegates``."""
    model = lite.Model()
    model.build(data, context=lite.Context(thread_num=1, delegates=list(delegates)))
    return model


def relu_model(shape=(1, 4), inp="x", out="h") -> lite.Model:
    """A built Relu: ``inp`` -> ``out``."""
    return build(one_op("Relu", {inp: (TensorProto.FLOAT, list(shape))}, (out, TensorProto.FLOAT, list(shape))))


def add_model(shape=(1, 4), inp="h", dtype=np.float32) -> lite.Model:
    """A built Add of the constant ``arange``: ``inp`` -> ``y``."""
    elem = TensorProto.FLOAT if dtype == np.float32 else TensorProto.DOUBLE
    const = {"c": np.arange(np.prod(shape), dtype=dtype).reshape(shape)}
    return build(one_op("Add", {inp: (elem, list(shape))}, ("y", elem, list(shape)), const))


def chain(first: lite.Model, second: lite.Model) -> lite.PipelineConfig:
    """x -> stage 0 (x -> h) -> stage 1 (h -> y) -> y."""
    return lite.PipelineConfig([first, second]).connect("x", (0, "x")).connect((0, "h"), (1, "h")).connect(
        (1, "y"), "y")


def pipeline_threads() -> list[threading.Thread]:
    """The pipeline worker threads alive now."""
    return [t for t in threading.enumerate() if t.name.startswith("lite-pipeline-")]


def arrays(outputs: list[lite.Tensor]) -> dict[str, np.ndarray]:
    """``{name: array}`` of the Tensors ``get_output`` (or ``Model.predict``) returned."""
    return {t.name: t.get_data_to_numpy() for t in outputs}


class NaNRefusingKernel(NativeGraphKernel):
    """Runs the native kernels it replaced, but raises on an input holding NaN (a stage error on demand)."""

    def execute(self) -> None:
        if any(np.isnan(t.data).any() for t in self.inputs):
            raise RuntimeError("this stage refuses NaN")
        super().execute()


class NaNRefusingDelegate(lite.SimpleDelegate):
    """Takes every kernel into one NaNRefusingKernel; holds no state, so it pickles to a worker process."""

    def is_supported(self, kernel, primitive):
        return True

    def create_graph_kernel(self, kernels, inputs, outputs):
        return NaNRefusingKernel(kernels, inputs, outputs, [], "nan-refusing")


def worker_processes() -> list[psutil.Process]:
    """This process's children that are spawned workers (not the resource tracker)."""
    children = psutil.Process().children(recursive=True)
    return [p for p in children if _is_spawned_worker(p)]


def _is_spawned_worker(process: psutil.Process) -> bool:
    try:
        return "spawn_main" in " ".join(process.cmdline())
    except psutil.Error:  # NOTE: it ended while we looked
        return False


def leftovers() -> dict[str, list]:
    """Worker processes and shared-memory blocks of this process that still exist (all empty when clean)."""
    return {"active children": multiprocessing.active_children(), "spawned workers": worker_processes(),
            "blocks": block_names()}
