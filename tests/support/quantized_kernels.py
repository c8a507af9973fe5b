"""Quantized convolutions and products built as kernels, run on their compiled integer path and on
the float64 reference path (``DELITE_FAST_KERNELS=0``) on the same data."""

from __future__ import annotations

import os
from contextlib import contextmanager

import numpy as np

import lite
from lite.kernels.base import NativeKernel
from lite.kernels.quantized import QuantizedProduct
from lite.ops.quant import qrange
from lite.primitive import Primitive
from lite.schema.primitives import default_attrs
from lite.tensor import Tensor


@contextmanager
def compiled_kernels(on: bool):
    """Compiled kernels on or off (``DELITE_FAST_KERNELS``) inside."""
    before = os.environ.get("DELITE_FAST_KERNELS")
    os.environ["DELITE_FAST_KERNELS"] = "1" if on else "0"
    try:
        yield
    finally:
        if before is None:
            del os.environ["DELITE_FAST_KERNELS"]
        else:
            os.environ["DELITE_FAST_KERNELS"] = before


def params(scale, zero_point, axis: int = 0) -> lite.QuantParams:
    """QuantParams of float32 scales and int64 zero points."""
    return lite.QuantParams(np.atleast_1d(np.asarray(scale, np.float32)),
                            np.atleast_1d(np.asarray(zero_point, np.int64)), axis)


def random_q(rng: np.random.Generator, shape: tuple[int, ...], dtype) -> np.ndarray:
    """Uniform random values over the whole range of ``dtype``."""
    low, high = qrange(dtype)
    return rng.integers(low, high + 1, shape).astype(dtype)


def build(op_type: str, attrs: dict, x: Tensor, w: Tensor, bias: Tensor | None, out: Tensor,
          threads=None) -> QuantizedProduct:
    """A QuantizedProduct on these tensors, shapes inferred, output allocated, resized."""
    inputs = [x, w] + ([bias] if bias is not None else [])
    kernel = QuantizedProduct(inputs, [out], Primitive(op_type, {**default_attrs(op_type), **attrs}), name="node")
    if threads is not None:
        kernel.threads = threads
    out.shape = tuple(kernel.infer_shapes()[0])
    out.data = np.full(out.shape, 77, out.dtype)
    kernel.prepare()
    kernel.resize()
    return kernel


def run_both(op_type: str, attrs: dict, x: np.ndarray, x_params, w: np.ndarray, w_params, bias: np.ndarray | None,
             out_dtype, out_params, threads=None) -> tuple[np.ndarray, np.ndarray, QuantizedProduct]:
    """(compiled output, float64 reference output, the compiled kernel) of one quantized layer."""
    results = []
    for on in (True, False):
        with compiled_kernels(on):
            tensors = layer_tensors(x, x_params, w, w_params, bias, out_dtype, out_params)
            kernel = build(op_type, attrs, *tensors, threads)
            kernel.execute()
            results.append((tensors[-1].data.copy(), kernel))
    return results[0][0], results[1][0], results[0][1]


def layer_tensors(x: np.ndarray, x_params, w: np.ndarray, w_params, bias: np.ndarray | None, out_dtype,
                  out_params) -> tuple[Tensor, Tensor, Tensor | None, Tensor]:
    """The tensors of one quantized layer for ``build``: x, the constant w, the int32 bias (scale
    x_scale * w_scale) or None, and the output, each with its parameters."""
    xt = Tensor("x", x.dtype, x.shape, data=x)
    xt.quant_params = x_params
    wt = Tensor("w", w.dtype, w.shape, data=w, is_const=True)
    wt.quant_params = w_params
    bt = None if bias is None else Tensor("b", np.int32, bias.shape, data=bias, is_const=True)
    if bt is not None:
        bt.quant_params = params(x_params.scale[0] * w_params.scale, 0, 0)
    out = Tensor("y", np.dtype(out_dtype), ())
    out.quant_params = out_params
    return xt, wt, bt, out


def run_arithmetic(op_type: str, a: np.ndarray, b: np.ndarray, quant: list, out_dtype, threads=None
                   ) -> tuple[np.ndarray, np.ndarray, NativeKernel]:
    """(compiled output, numpy output, the compiled kernel's inner kernel) of a quantized Add, Sub or
    Mul of ``a`` and ``b`` (``quant``: the parameters of a, b and the output; ``threads``: the
    kernel's ``KernelThreads``, default one)."""
    from lite.kernels.quantized_elementwise import QuantizedArithmetic

    return run_quantized(QuantizedArithmetic, op_type, {}, [a, b], quant, a.shape, out_dtype, threads)


def run_quantized(kernel_class: type, op_type: str, attrs: dict, arrays: list[np.ndarray], quant: list,
                  out_shape: tuple[int, ...], out_dtype, threads=None) -> tuple[np.ndarray, np.ndarray, NativeKernel]:
    """(compiled output, reference output, the compiled kernel's inner kernel) of a quantized op of
    ``kernel_class`` on ``arrays`` (``quant``: the inputs' and the output's parameters)."""
    results = []
    for on in (True, False):
        with compiled_kernels(on):
            tensors = [Tensor(f"x{i}", data.dtype, data.shape, data=data) for i, data in enumerate(arrays)]
            out = Tensor("y", np.dtype(out_dtype), out_shape, data=np.zeros(out_shape, out_dtype))
            for tensor, param in zip([*tensors, out], quant, strict=True):
                tensor.quant_params = param
            kernel = kernel_class(tensors, [out], Primitive(op_type, {**default_attrs(op_type), **attrs}),
                                  name="node")
            if threads is not None:
                kernel.threads = threads
            kernel.prepare()
            kernel.resize()
            kernel.execute()
            results.append((out.data.copy(), kernel.inner))
    return results[0][0], results[1][0], results[0][1]
