"""Test delegates written against the public API only, and the small models the delegate tests build."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper

import lite
from lite.tools.converter import convert
from tests.support.oracle import relative_l2, run_onnxruntime

RNG = np.random.default_rng(7)


def chain_model(dynamic_batch: bool = False):
    """x -> Add c1 -> a -> Relu -> b -> Mul c2 -> c -> Sigmoid -> d -> Add(a, d) -> y; b is an output too."""
    batch = "N" if dynamic_batch else 2
    c1 = numpy_helper.from_array(RNG.standard_normal((1, 8)).astype(np.float32), "c1")
    c2 = numpy_helper.from_array(RNG.standard_normal((1, 8)).astype(np.float32), "c2")
    nodes = [
        helper.make_node("Add", ["x", "c1"], ["a"], name="add1"),
        helper.make_node("Relu", ["a"], ["b"], name="relu"),
        helper.make_node("Mul", ["b", "c2"], ["c"], name="mul"),
        helper.make_node("Sigmoid", ["c"], ["d"], name="sigmoid"),
        helper.make_node("Add", ["a", "d"], ["y"], name="add2"),
    ]
    graph = helper.make_graph(
        nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 8]),
         helper.make_tensor_value_info("b", TensorProto.FLOAT, [batch, 8])], [c1, c2])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


def inception_block():
    """Four branches on one input, concatenated; the pool branch's MaxPool is unsupported below."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8, 8])
    inits, nodes = [], []

    def conv(name, src, out_channels, in_channels, k):
        w = numpy_helper.from_array(RNG.standard_normal((out_channels, in_channels, k, k)).astype(np.float32),
                                    f"{name}_w")
        inits.append(w)
        nodes.append(helper.make_node("Conv", [src, w.name], [name], name=name, pads=[k // 2] * 4))
        return name

    b1 = conv("b1", "x", 2, 4, 1)
    b2 = conv("b2b", conv("b2a", "x", 2, 4, 1), 3, 2, 3)
    b3 = conv("b3b", conv("b3a", "x", 2, 4, 1), 3, 2, 5)
    nodes.append(helper.make_node("MaxPool", ["x"], ["pool"], name="pool", kernel_shape=[3, 3], pads=[1] * 4))
    b4 = conv("b4", "pool", 2, 4, 1)
    nodes.append(helper.make_node("Concat", [b1, b2, b3, b4], ["y"], name="concat", axis=1))
    graph = helper.make_graph(nodes, "inception", [x], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


def build(onnx_model, *delegates, fallback=True):
    model = lite.Model()
    model.build(convert(onnx_model, fusion=False), lite.ModelType.LITE,
                lite.Context(thread_num=1, fallback=fallback, delegates=list(delegates)))
    return model


def assert_matches_onnxruntime(model, onnx_model, batch=2):
    x = RNG.standard_normal((batch, 8)).astype(np.float32)
    outputs = model.predict([x])
    expected = run_onnxruntime(onnx_model, {"x": x})
    for got, want in zip(outputs, expected, strict=True):
        assert relative_l2(got.get_data_to_numpy(), want) < 1e-6


class NativeGraphKernel(lite.Kernel):
    """A graph kernel that runs the native kernels it replaced, keeping inner tensors private."""

    def __init__(self, kernels, inputs, outputs, events: list, name: str):
        weights = [t for k in kernels for t in k.inputs]
        super().__init__(inputs, outputs, name=name, constants=weights)  # the model keeps the constants
        self.kernels = kernels
        self.events = events
        outs = set(outputs)
        self.inner = [t for k in kernels for t in k.outputs if t not in outs]

    def _allocate_inner(self) -> None:
        for tensor in self.inner:
            tensor.data = np.empty(tensor.shape, tensor.dtype)

    def prepare(self) -> None:
        self.events.append(("prepare", self.name))
        for kernel in self.kernels:
            kernel.prepare()
        if all(-1 not in t.shape for t in self.inner):  # static shapes: ready to run now
            self._allocate_inner()
            for kernel in self.kernels:
                kernel.resize()

    def resize(self) -> None:
        self.events.append(("resize", self.name))
        self._allocate_inner()
        for kernel in self.kernels:
            kernel.resize()

    def execute(self) -> None:
        self.events.append(("execute", self.name))
        for kernel in self.kernels:
            kernel.execute()


class CountingDelegate(lite.SimpleDelegate):
    """Takes the op types it is given; records every lifecycle call in ``events``."""

    def __init__(self, ops: set[str], events: list | None = None, label: str = "counting"):
        self.ops = ops
        self.events = events if events is not None else []
        self.label = label
        self.made: list[NativeGraphKernel] = []

    def init(self) -> None:
        self.events.append(("init", self.label))

    def build(self, model: lite.DelegateModel) -> None:
        self.events.append(("build", self.label))
        super().build(model)

    def is_supported(self, kernel, primitive):
        return primitive.type in self.ops or f"{primitive.type} is not in {sorted(self.ops)}"

    def create_graph_kernel(self, kernels, inputs, outputs):
        kernel = NativeGraphKernel(kernels, inputs, outputs, self.events, f"{self.label}_{len(self.made)}")
        self.made.append(kernel)
        return kernel


class ConvAndConcat(CountingDelegate):
    """A no-argument delegate for command-line tests (``tests.support.delegates:ConvAndConcat``)."""

    def __init__(self, label: str = "npu"):
        super().__init__({"Conv2DFusion", "Concat"}, label=label)


class AbsentDevice(ConvAndConcat):
    """A command-line test delegate whose device is missing: it declines in init()."""

    def init(self) -> None:
        raise lite.NotSupportedError("no accelerator on this machine")
