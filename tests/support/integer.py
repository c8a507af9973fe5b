"""Models and oracles for the tests of DynamicQuantizeLinear, MatMulInteger and ConvInteger: one node
in ONNX's reference evaluator or converted and run by ``lite.Model``, and a small float model that
onnxruntime's ``quantize_dynamic`` turns into them (tests/ops, tests/kernels and
tests/tools/converter's test_integer*.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from lite.tools.converter import convert
from tests.support.e2e import build_lite
from tests.support.oracle import onnx_type, run_onnxruntime

OPSET = 13


def integer_model(op_type: str, inputs: dict[str, np.ndarray], consts: dict[str, np.ndarray] | None = None,
                  node_inputs: list[str] | None = None, n_outputs: int = 1, **attrs) -> onnx.ModelProto:
    """One ``op_type`` node: ``inputs`` are graph inputs, ``consts`` initializers; the node reads
    ``node_inputs`` ("" for an absent optional input; default: inputs then consts)."""
    consts = consts or {}
    names = [*inputs, *consts] if node_inputs is None else node_inputs
    outputs = [f"y{j}" for j in range(n_outputs)]
    graph = helper.make_graph(
        [helper.make_node(op_type, names, outputs, name=op_type.lower(), **attrs)], op_type,
        [helper.make_tensor_value_info(k, onnx_type(v.dtype), v.shape) for k, v in inputs.items()],
        [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None) for o in outputs],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in consts.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = 8
    return onnx.shape_inference.infer_shapes(model)


def reference(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    """ONNX's reference evaluator on ``model``."""
    return ReferenceEvaluator(model).run(None, feeds)


def run_reference(op_type: str, inputs: dict[str, np.ndarray], n_outputs: int = 1, **attrs) -> list[np.ndarray]:
    """One node, every input a graph input, in ONNX's reference evaluator."""
    return reference(integer_model(op_type, inputs, n_outputs=n_outputs, **attrs), inputs)


def run_converted(model: onnx.ModelProto | str | Path, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    """``model`` converted to .lite and run natively on ``feeds`` (by name)."""
    source = str(model) if isinstance(model, Path) else model
    lite_model = build_lite(convert(source))
    names = [t.name for t in lite_model.get_inputs()]
    return [t.get_data_to_numpy() for t in lite_model.predict([feeds[n] for n in names])]


def integers(rng: np.random.Generator, dtype: np.dtype | type, shape: tuple[int, ...]) -> np.ndarray:
    """Random values over the whole range of 8-bit ``dtype``."""
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max + 1, shape).astype(dtype)


def float_model(rng: np.random.Generator) -> onnx.ModelProto:
    """Conv -> Relu -> Conv (strided) -> Flatten -> MatMul -> Add on x of shape (2, 3, 8, 8), random
    float32 weights: what ``quantize_dynamic`` makes ConvInteger and MatMulInteger of."""
    def weight(name: str, *shape: int) -> onnx.TensorProto:
        return numpy_helper.from_array(rng.normal(0, 0.3, shape).astype(np.float32), name)

    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], strides=[2, 2], group=2),
             helper.make_node("Flatten", ["c2"], ["f"]),
             helper.make_node("MatMul", ["f", "wm"], ["m"]),
             helper.make_node("Add", ["m", "bm"], ["y"])]
    graph = helper.make_graph(
        nodes, "float", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [weight("w1", 8, 3, 3, 3), weight("b1", 8), weight("w2", 4, 4, 3, 3), weight("b2", 4),
         weight("wm", 36, 5), weight("bm", 5)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = 8
    return model


def dynamic_quantized(folder: Path, per_channel: bool, signed_weights: bool, seed: int = 0) -> Path:
    """``float_model`` through onnxruntime's ``quantize_dynamic``, saved in ``folder``."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    source, target = folder / "float.onnx", folder / "quantized.onnx"
    onnx.save(float_model(np.random.default_rng(seed)), source)
    quantize_dynamic(source, target, per_channel=per_channel,
                     weight_type=QuantType.QInt8 if signed_weights else QuantType.QUInt8)
    return target


def run_ort_file(path: Path, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    """onnxruntime (CPU, no graph optimisations) on the model saved at ``path``."""
    return run_onnxruntime(onnx.load(path), feeds)
