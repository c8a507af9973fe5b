"""ONNX models, builds and checks shared by the ORTDelegate tests (tests/delegates/test_onnxruntime*.py and the
tests that mix ORTDelegate with other delegates): fresh random inputs, a model per case, a build with
ORTDelegate and its comparison with onnxruntime on the original ONNX."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper, numpy_helper

import lite
from lite.delegates.onnxruntime import ORTDelegate
from lite.delegates.onnxruntime.builder import emit_partition
from lite.kernels.registry import find_kernel
from lite.tools.converter import convert
from tests.support.oracle import onnx_type, relative_l2, run_onnxruntime

RNG = np.random.default_rng(77)


ORT = "ORTDelegate"


TOLERANCE = 1e-5


def normal(*shape: int, scale: float = 3.0) -> np.ndarray:
    return (scale * RNG.standard_normal(shape)).astype(np.float32)


def positive(*shape: int) -> np.ndarray:
    return (RNG.random(shape) * 4 + 0.1).astype(np.float32)


def integers(*shape: int, low: int = -9, high: int = 10, dtype=np.int64) -> np.ndarray:
    return RNG.integers(low, high, shape).astype(dtype)


def weight(*shape: int) -> np.ndarray:
    fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else 1
    return (RNG.standard_normal(shape) / np.sqrt(fan_in)).astype(np.float32)


def node(op_type: str, inputs: list[str], output: str = "y", **attrs) -> onnx.NodeProto:
    return helper.make_node(op_type, inputs, [output], name=f"{op_type.lower()}_{output}", **attrs)


def onnx_model(nodes: list[onnx.NodeProto], feeds: dict[str, np.ndarray], outputs: list[str] | None = None,
               inits: dict[str, np.ndarray] | None = None, opset: int = 17,
               dims: dict[str, list] | None = None) -> onnx.ModelProto:
    """An ONNX model whose graph inputs take ``feeds`` (``dims`` overrides their declared shapes)."""
    inputs = [helper.make_tensor_value_info(k, onnx_type(v.dtype), (dims or {}).get(k, v.shape))
              for k, v in feeds.items()]
    graph = helper.make_graph(nodes, "ort_test", inputs, [onnx.ValueInfoProto(name=o) for o in outputs or ["y"]],
                              [numpy_helper.from_array(v, k) for k, v in (inits or {}).items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=9)


def build(model: onnx.ModelProto, *delegates: lite.Delegate, **convert_args) -> lite.Model:
    built = lite.Model()
    context = lite.Context(thread_num=1, delegates=list(delegates))
    built.build(convert(model, **convert_args), lite.ModelType.LITE, context)
    return built


def assert_matches(model: lite.Model, original: onnx.ModelProto, feeds: dict[str, np.ndarray],
                   tolerance: float = TOLERANCE) -> list[float]:
    """Predicts and compares every output with onnxruntime on ``original``; returns the relative L2 errors."""
    outputs = model.predict([feeds[t.name] for t in model.get_inputs()])
    errors = []
    for got, want in zip(outputs, run_onnxruntime(original, feeds), strict=True):
        got = got.get_data_to_numpy()
        assert got.shape == want.shape and got.dtype == want.dtype, (got.shape, want.shape, got.dtype, want.dtype)
        if got.dtype.kind == "f":
            errors.append(relative_l2(got, want))
            assert errors[-1] < tolerance, f"relative L2 {errors[-1]}"
        else:
            np.testing.assert_array_equal(got, want)
    return errors


def check_on_ort(model: onnx.ModelProto, feeds: dict[str, np.ndarray], **convert_args) -> lite.Model:
    """Builds with ORTDelegate taking single ops; every node must run on it, outputs must match."""
    built = build(model, ORTDelegate(min_nodes_per_partition=1), **convert_args)
    report = built.partition_report()
    assert {(r.runs_on, r.reason) for r in report} == {(ORT, "")}, report
    assert_matches(built, model, feeds)
    return built


def outputs_of(nodes: list[onnx.NodeProto]) -> list[str]:
    """Graph outputs: every output no node reads."""
    read = {name for n in nodes for name in n.input}
    return [o for n in nodes for o in n.output if o not in read]


def run_both(op_type: str, attrs: dict, inputs: list[np.ndarray | None], consts: set[int] = frozenset(),
             n_outputs: int = 1) -> None:
    """One native kernel and its emitted ONNX model on the same inputs: outputs must agree."""
    tensors = [None if a is None else lite.Tensor(f"in{i}", a.dtype, a.shape, data=a, is_const=i in consts)
               for i, a in enumerate(inputs)]
    outputs = [lite.Tensor(f"out{j}", np.float32, ()) for j in range(n_outputs)]
    for tensor in filter(None, tensors):
        tensor.value_known = True  # as for values folded from shapes, which shape inference may read
    first = next(t for t in tensors if t is not None)
    kernel = find_kernel(op_type, first.dtype)(tensors, outputs, lite.Primitive(op_type, attrs), "k")
    for tensor, shape, dtype in zip(outputs, kernel.infer_shapes(), kernel.output_dtypes(), strict=True):
        tensor.shape, tensor.dtype = tuple(shape), np.dtype(dtype)
        tensor.data = np.empty(shape, dtype)
    kernel.prepare()
    kernel.resize()
    kernel.execute()
    feeds = [t for t in tensors if t is not None and not t.is_const]
    model, _, _ = emit_partition([kernel], feeds, outputs, "single")
    onnx.checker.check_model(model)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    got = session.run(None, {v.name: t.data for v, t in zip(model.graph.input, feeds, strict=True)})
    for want, have in zip(outputs, got, strict=True):
        assert have.shape == want.shape and have.dtype == want.dtype
        np.testing.assert_allclose(have, want.data, rtol=1e-5, atol=1e-6)


def small_cnn(batch: int | str = 1, height: int | str = 12, width: int | str = 12) -> onnx.ModelProto:
    """Conv + BN + Relu -> MaxPool -> Conv -> Add -> GlobalAveragePool -> Flatten -> Gemm -> Softmax."""
    inits = {"w0": weight(8, 3, 3, 3), "g": positive(8), "b": normal(8), "m": normal(8, scale=0.1),
             "v": positive(8), "w1": weight(8, 8, 3, 3), "fc": weight(5, 8), "fb": normal(5)}
    nodes = [
        node("Conv", ["x", "w0"], "c0", pads=[1, 1, 1, 1]),
        node("BatchNormalization", ["c0", "g", "b", "m", "v"], "n0"),
        node("Relu", ["n0"], "r0"), node("MaxPool", ["r0"], "p0", kernel_shape=[2, 2], strides=[2, 2]),
        node("Conv", ["p0", "w1"], "c1", pads=[1, 1, 1, 1]), node("Add", ["c1", "p0"], "a"),
        node("GlobalAveragePool", ["a"], "gap"), node("Flatten", ["gap"], "f"),
        node("Gemm", ["f", "fc", "fb"], "logits", transB=1), node("Softmax", ["logits"], "y"),
    ]
    return onnx_model(nodes, {"x": normal(1, 3, 12, 12)}, inits=inits, dims={"x": [batch, 3, height, width]})
