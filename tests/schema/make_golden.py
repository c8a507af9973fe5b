"""Writes the golden model of the current format version: ``golden/v<FORMAT_VERSION>.lite`` and ``.npz``,
and ``golden/saved-v<FORMAT_VERSION>.lite``: the same graph at batch 3 with the example NPU's partition
saved in it (``lite-convert --delegate``), whose ``.npz`` also holds the outputs with the NPU.

Run it ONLY after bumping ``lite.schema.graph.FORMAT_VERSION``::

    python -m tests.schema.make_golden

It never overwrites: the files of an existing version are the record of what that version
wrote, and every later runtime must still load them and predict the stored outputs
(tests/schema/test_compat.py checks every ``v*.lite`` there). The ``.npz`` holds the input and
the expected outputs, keyed by tensor name, as this runtime computes them.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import ml_dtypes
import numpy as np

import lite
from lite.schema.graph import FORMAT_VERSION, GraphDef, NodeDef, QuantParams, TensorDef
from lite.schema.writer import write_model

GOLDEN = Path(__file__).resolve().parent / "golden"
F32 = np.dtype(np.float32)


def golden_graph(rng: np.random.Generator) -> GraphDef:
    """x (N, 3, 8, 8) -> Conv+RELU -> MaxPool -> Flatten -> MatMul+bias -> Tanh (output t) -> Add -> Softmax (y)."""
    tensors = [
        TensorDef("x", F32, (-1, 3, 8, 8)),
        TensorDef("conv_w", F32, (4, 3, 3, 3), data=rng.standard_normal((4, 3, 3, 3)).astype(F32) / 3),
        TensorDef("conv_b", F32, (4,), data=rng.standard_normal(4).astype(F32)),
        TensorDef("conv", F32, (-1, 4, 8, 8)),
        TensorDef("pool", F32, (-1, 4, 4, 4)),
        TensorDef("flat", F32, (-1, 64)),
        TensorDef("fc_w", F32, (64, 10), data=rng.standard_normal((64, 10)).astype(F32) / 24),
        TensorDef("fc_b", F32, (10,), data=rng.standard_normal(10).astype(F32)),
        TensorDef("fc", F32, (-1, 10)),
        TensorDef("t", F32, (-1, 10)),
        TensorDef("shift", F32, (10,), data=rng.standard_normal(10).astype(F32)),
        TensorDef("logits", F32, (-1, 10)),
        TensorDef("y", F32, (-1, 10)),
    ]
    conv = {"kernel_size": (3, 3), "stride": (1, 1), "dilation": (1, 1), "pad_list": (1, 1, 1, 1), "group": 1,
            "in_channel": 3, "out_channel": 4, "activation_type": "RELU"}
    pool = {"kernel_size": (2, 2), "strides": (2, 2), "pad_list": (0, 0, 0, 0)}
    nodes = [
        NodeDef("conv", "Conv2DFusion", conv, [0, 1, 2], [3]),
        NodeDef("pool", "MaxPoolFusion", pool, [3], [4]),
        NodeDef("flat", "Flatten", {"axis": 1}, [4], [5]),
        NodeDef("fc", "MatMulFusion", {}, [5, 6, 7], [8]),
        NodeDef("tanh", "Activation", {"activation_type": "TANH"}, [8], [9]),
        NodeDef("add", "AddFusion", {}, [9, 10], [11]),
        NodeDef("softmax", "Softmax", {"axis": (-1,)}, [11], [12]),
    ]
    graph = GraphDef(tensors, nodes, inputs=[0], outputs=[12, 9], name="golden",
                     description=f"golden model of .lite format version {FORMAT_VERSION}")
    if FORMAT_VERSION >= 2:
        _add_quantized_branch(graph, rng)
    if FORMAT_VERSION >= 3:
        _add_narrow_branch(graph, rng)
    return graph


def _add_narrow_branch(graph: GraphDef, rng: np.random.Generator) -> None:
    """Version 3's narrow types: flat -> MatMulFusion with a packed int4 weight (blocks of 32 along K,
    DequantizeLinear) -> output ``wy``; t -> Cast to float8 e4m3fn (saturating) -> Cast to float32,
    output ``t8``."""
    i4, f8 = np.dtype(ml_dtypes.int4), np.dtype(ml_dtypes.float8_e4m3fn)
    scale = (rng.random((2, 10)) / 20 + 0.01).astype(F32)
    base = len(graph.tensors)
    graph.tensors += [
        TensorDef("w4", i4, (64, 10), data=rng.integers(-8, 8, (64, 10)).astype(i4),
                  quant=QuantParams(scale.ravel(), np.zeros(0, np.int64), axis=0, bits=4, block_size=32)),
        TensorDef("w4_scale", F32, (2, 10), data=scale),
        TensorDef("w4_float", F32, (64, 10)),
        TensorDef("wy", F32, (-1, 10)),
        TensorDef("t_f8", f8, (-1, 10)),
        TensorDef("t8", F32, (-1, 10)),
    ]
    graph.nodes += [
        NodeDef("dequantize_w4", "DequantizeLinear", {"axis": 0, "block_size": 32, "output_type": "FLOAT32"},
                [base, base + 1], [base + 2]),
        NodeDef("fc4", "MatMulFusion", {}, [5, base + 2], [base + 3]),
        NodeDef("to_float8", "Cast", {"to": "FLOAT8E4M3FN", "saturate": True}, [9], [base + 4]),
        NodeDef("from_float8", "Cast", {"to": "FLOAT32"}, [base + 4], [base + 5]),
    ]
    graph.outputs += [base + 3, base + 5]


def _add_quantized_branch(graph: GraphDef, rng: np.random.Generator) -> None:
    """Version 2's quantized tensors: x -> QuantizeLinear (int8) -> a quantized 1x1 Conv2DFusion
    (int8 weight per output channel, int32 bias) -> DequantizeLinear, a third output ``qy``."""
    i8, i32 = np.dtype(np.int8), np.dtype(np.int32)
    x_params = QuantParams(np.float32([0.05]), np.int64([-3]))
    w_params = QuantParams(np.float32([0.01, 0.02, 0.015, 0.03]), np.int64([0, 0, 0, 0]), axis=0)
    b_params = QuantParams(x_params.scale * w_params.scale, np.zeros(4, np.int64), axis=0, bits=32)
    y_params = QuantParams(np.float32([0.04]), np.int64([5]))
    base = len(graph.tensors)
    graph.tensors += [
        TensorDef("x_scale", F32, (), data=np.float32(0.05)),
        TensorDef("x_zero_point", i8, (), data=np.int8(-3)),
        TensorDef("xq", i8, (-1, 3, 8, 8), quant=x_params),
        TensorDef("qconv_w", i8, (4, 3, 1, 1), data=rng.integers(-127, 128, (4, 3, 1, 1)).astype(i8), quant=w_params),
        TensorDef("qconv_b", i32, (4,), data=rng.integers(-500, 500, 4).astype(i32), quant=b_params),
        TensorDef("yq", i8, (-1, 4, 8, 8), quant=y_params),
        TensorDef("y_scale", F32, (), data=np.float32(0.04)),
        TensorDef("y_zero_point", i8, (), data=np.int8(5)),
        TensorDef("qy", F32, (-1, 4, 8, 8)),
    ]
    conv = {"kernel_size": (1, 1), "stride": (1, 1), "dilation": (1, 1), "pad_list": (0, 0, 0, 0), "group": 1,
            "in_channel": 3, "out_channel": 4, "activation_type": "RELU"}
    linear = {"axis": 1, "block_size": 0}
    graph.nodes += [
        NodeDef("quantize", "QuantizeLinear", {**linear, "output_type": "INT8"}, [0, base, base + 1], [base + 2]),
        NodeDef("qconv", "Conv2DFusion", conv, [base + 2, base + 3, base + 4], [base + 5]),
        NodeDef("dequantize", "DequantizeLinear", {**linear, "output_type": "FLOAT32"}, [base + 5, base + 6, base + 7],
                [base + 8]),
    ]
    graph.outputs.append(base + 8)


def write_golden(folder: Path = GOLDEN, seed: int = FORMAT_VERSION) -> Path:
    """Writes ``v<FORMAT_VERSION>.lite`` and ``.npz`` into ``folder``; returns the .lite path.

    Raises:
        FileExistsError: this version's golden file exists (it is never overwritten).
    """
    path = folder / f"v{FORMAT_VERSION}.lite"
    if path.exists() or path.with_suffix(".npz").exists():
        raise FileExistsError(f"{path} exists: a version's golden file is never rewritten; bump FORMAT_VERSION first")
    rng = np.random.default_rng(seed)
    data = write_model(golden_graph(rng))
    model = lite.Model()
    model.build(data, lite.ModelType.LITE, lite.Context())
    x = rng.standard_normal((3, 3, 8, 8)).astype(F32)
    outputs = model.predict([x])
    folder.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    np.savez(path.with_suffix(".npz"), x=x, **{t.name: t.get_data_to_numpy() for t in outputs})
    return path


def write_saved_golden(folder: Path = GOLDEN, seed: int = FORMAT_VERSION) -> Path:
    """Writes ``saved-v<FORMAT_VERSION>.lite`` and ``.npz`` into ``folder``; returns the .lite path.

    Raises:
        FileExistsError: it exists (it is never overwritten).
    """
    from lite.delegates.example_npu import ExampleNPUDelegate
    from lite.model import compile_into

    path = folder / f"saved-v{FORMAT_VERSION}.lite"
    if path.exists() or path.with_suffix(".npz").exists():
        raise FileExistsError(f"{path} exists: a version's golden file is never rewritten; bump FORMAT_VERSION first")
    rng = np.random.default_rng(seed)
    graph = golden_graph(rng)
    graph.tensors = [dataclasses.replace(t, shape=(3, *t.shape[1:])) if t.shape[:1] == (-1,) else t
                     for t in graph.tensors]
    data, partitions, _ = compile_into(write_model(graph), lite.Context(delegates=[ExampleNPUDelegate()]))
    assert len(partitions) == 1, partitions
    x = rng.standard_normal((3, 3, 8, 8)).astype(F32)
    outputs = {}
    for suffix, delegates in (("", []), ("@npu", [ExampleNPUDelegate()])):
        model = lite.Model()
        model.build(data, lite.ModelType.LITE, lite.Context(delegates=delegates))
        outputs.update({t.name + suffix: t.get_data_to_numpy() for t in model.predict([x])})
    folder.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    np.savez(path.with_suffix(".npz"), x=x, **outputs)
    return path


if __name__ == "__main__":
    for write in (write_golden, write_saved_golden):
        try:
            print(f"wrote {write()}")
        except FileExistsError as exc:
            print(f"make_golden: {exc}", file=sys.stderr)
