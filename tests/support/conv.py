"""Convolution kernel checks shared by the numpy kernel's tests (tests/kernels/test_conv.py) and the compiled
kernels' (tests/kernels/fast/): the onnxruntime reference, one kernel built or run on numpy operands, the
epilogue activations."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from lite.kernels.parallel import KernelThreads
from lite.kernels.registry import find_kernel
from lite.primitive import Primitive
from lite.schema.primitives import default_attrs
from lite.tensor import Tensor
from tests.support.kernel_harness import run_kernel
from tests.support.oracle import onnx_type, run_onnxruntime, single_node_model

AUTO_PADS = {"PAD": "NOTSET", "SAME_UPPER": "SAME_UPPER", "SAME_LOWER": "SAME_LOWER", "VALID": "VALID"}
ACTIVATIONS = {"NO_ACTIVATION": lambda y: y, "RELU": lambda y: np.maximum(y, 0), "RELU6": lambda y: np.clip(y, 0, 6)}


def onnx_reference(op_type: str, x: np.ndarray, initializers: dict[str, np.ndarray], **attrs) -> np.ndarray:
    model = single_node_model(op_type, {"x": x}, initializers=initializers, **attrs)
    model.graph.output[0].type.tensor_type.elem_type = onnx_type(x.dtype)  # onnxruntime needs a typed output
    return run_onnxruntime(model, {"x": x})[0]


def onnx_attrs(attrs: dict) -> dict:
    """ONNX Conv/ConvTranspose attributes for primitive attrs."""
    out = {"group": attrs.get("group", 1), "auto_pad": AUTO_PADS[attrs.get("pad_mode", "PAD")]}
    for ours, theirs in (("stride", "strides"), ("dilation", "dilations"), ("output_paddings", "output_padding")):
        if attrs.get(ours):
            out[theirs] = list(attrs[ours])
    if attrs.get("pad_list") and out["auto_pad"] == "NOTSET":
        out["pads"] = list(attrs["pad_list"])
    return out


def build(op_type: str, attrs: dict, arrays: list[np.ndarray]):
    """A kernel whose weight and bias are constants, with shapes inferred and outputs allocated."""
    tensors = [Tensor(f"in{i}", a.dtype, a.shape, data=a, is_const=i > 0) for i, a in enumerate(arrays)]
    kernel = find_kernel(op_type, np.float32)(
        tensors, [Tensor("y", np.float32, ())], Primitive(op_type, {**default_attrs(op_type), **attrs}), "node")
    kernel.outputs[0].shape = kernel.infer_shapes()[0]
    kernel.outputs[0].data = np.empty(kernel.outputs[0].shape, np.float32)
    return kernel

EPILOGUE_ACTIVATIONS = [  # (an EPILOGUE_CODES activation, its float64 reference of (values, alpha))
    ("SWISH", lambda v, a: v / (1 + np.exp(-a * v.astype(np.float64)))),
    ("HARD_SWISH", lambda v, _a: v * np.clip(v.astype(np.float64) / 6 + 0.5, 0, 1)),
    ("GELU", lambda v, _a: v * (1 + np.vectorize(math.erf)(v.astype(np.float64) / np.sqrt(2))) / 2),
]


def conv(x, w, b, attrs, threads=None):
    return run_kernel("Conv2DFusion", {"group": 1, **attrs}, [x, w, b], threads=threads)[0]


def operands(x_shape, w_shape, seed=0):
    rng = np.random.default_rng([seed, *x_shape, *w_shape])
    x = rng.standard_normal(x_shape).astype(np.float32)
    w = (rng.standard_normal(w_shape) / np.sqrt(np.prod(w_shape[1:]))).astype(np.float32)
    return x, w, rng.standard_normal(w_shape[0]).astype(np.float32)


def matches_the_numpy_kernel(monkeypatch, x_shape, w_shape, attrs, threads=None, seed=0) -> None:
    """The compiled kernels' convolution (on ``threads``) against the numpy kernels' one."""
    x, w, b = operands(x_shape, w_shape, seed)
    monkeypatch.setenv("DELITE_FAST_KERNELS", "0")
    reference = conv(x, w, b, attrs)
    monkeypatch.setenv("DELITE_FAST_KERNELS", "1")
    got = conv(x, w, b, attrs, threads)
    assert got.dtype == reference.dtype and got.shape == reference.shape
    np.testing.assert_allclose(got, reference, rtol=1e-4, atol=1e-5)


def calls_per_image(monkeypatch, module, name: str, cases) -> tuple[int, int]:
    """(calls of ``module.name`` while the cases' convolutions run, images in the cases)."""
    calls = []
    monkeypatch.setattr(module, name, lambda *args: calls.append(args))
    for x_shape, w_shape, attrs in cases:
        zeros = [np.zeros(x_shape, np.float32), np.zeros(w_shape, np.float32)]
        run_kernel("Conv2DFusion", {"group": 1, **attrs}, zeros)
    return len(calls), sum(x_shape[0] for x_shape, _, _ in cases)


def residual_kernel(x, w, b, attrs, residual, threads):
    """A convolution of these operands with ``residual`` and a ReLU after it, as ``lite.fusion``
    sets them, on ``threads`` threads: prepared and resized, not run."""
    kernel = build("Conv2DFusion", {"group": 1, **attrs}, [x, w, b])
    kernel.threads = KernelThreads(threads)
    kernel.set_epilogue(replace(kernel.epilogue, residual=Tensor("residual", np.float32, residual.shape, data=residual),
                                residual_activation="RELU"))
    kernel.prepare()
    kernel.resize()
    return kernel
