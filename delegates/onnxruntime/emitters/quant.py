"""QuantizeLinear and DequantizeLinear, and every quantized op as its QDQ group.

A quantized op (its input and output tensors carry QuantParams) is written as onnxruntime's
quantizer writes it: a DequantizeLinear per quantized input, the op's float form by its own
emitter, a QuantizeLinear per output. onnxruntime fuses such groups into its int8 kernels
(QLinearConv, QLinearMatMul, QGemm, QLinearAdd...), so a quantized partition runs as int8 there.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from lite.delegates.onnxruntime.emitters.registry import emitter
from lite.ops.dtypes import FLOAT32
from lite.ops.quant import DEQUANT_DTYPES, param_arrays
from lite.schema.graph import DTYPES

if TYPE_CHECKING:
    from lite.delegates.onnxruntime.context import NodeContext
    from lite.tensor import Tensor

# The ONNX types these QuantizeLinear and DequantizeLinear take at the emitted opset (17).
_ONNX_QUANT_DTYPES = (np.dtype(np.int8), np.dtype(np.uint8))


@emitter("QuantizeLinear", FLOAT32)
def quantize_linear(ctx: NodeContext) -> None:
    out = DTYPES[ctx.attrs["output_type"]]
    if out not in _ONNX_QUANT_DTYPES or ctx.attrs["block_size"]:
        ctx.unsupported(f"QuantizeLinear to {out.name} (block_size {ctx.attrs['block_size']}): opset 17 quantizes "
                        "to int8 and uint8, per tensor or per axis")
    inputs = ctx.inputs() if ctx.has_input(2) else [*ctx.inputs(), ctx.const(np.zeros((), out), "zero_point")]
    ctx.node("QuantizeLinear", inputs, ctx.outputs(), axis=int(ctx.attrs["axis"]))


@emitter("DequantizeLinear", DEQUANT_DTYPES)
def dequantize_linear(ctx: NodeContext) -> None:
    x = ctx.kernel.inputs[0].dtype
    if x not in (*_ONNX_QUANT_DTYPES, np.dtype(np.int32)) or ctx.attrs["block_size"] or ctx.out_dtype() != np.float32:
        ctx.unsupported(f"DequantizeLinear of {x.name} to {ctx.out_dtype().name}: opset 17 dequantizes int8, uint8 "
                        "and int32 to float32, per tensor or per axis")
    ctx.node("DequantizeLinear", ctx.inputs(), ctx.outputs(), axis=int(ctx.attrs["axis"]))


def quantized_group_problem(kernel) -> str | None:
    """Why a quantized kernel's tensors cannot be written as a QDQ group at opset 17, or None."""
    for tensor in [*kernel.inputs, *kernel.outputs]:
        params = None if tensor is None else tensor.quant_params
        if params is None:
            continue
        allowed = _ONNX_QUANT_DTYPES + ((np.dtype(np.int32),) if tensor in kernel.inputs else ())
        if tensor.dtype not in allowed or params.block_size or params.bits != tensor.dtype.itemsize * 8:
            return (f"quantized tensor {tensor.name!r} ({tensor.dtype.name}, {params.bits} bits, block_size "
                    f"{params.block_size}): opset 17's QDQ takes int8/uint8 (int32 bias), per tensor or per axis")
    return None


def dequantized(ctx: NodeContext, tensor: Tensor, name: str) -> str:
    """A DequantizeLinear of ``tensor`` (named ``name``) by its QuantParams; returns the float name."""
    params = tensor.quant_params
    scale, zero_point = param_arrays(params, tensor.shape)
    inputs = [name, ctx.const(scale, f"{tensor.name}_scale")]
    if zero_point is not None:
        inputs.append(ctx.const(zero_point.astype(tensor.dtype), f"{tensor.name}_zero_point"))
    return ctx.op("DequantizeLinear", inputs, axis=int(params.axis))


def quantized(ctx: NodeContext, tensor: Tensor, float_name: str, name: str) -> None:
    """A QuantizeLinear of ``float_name`` into ``name`` by ``tensor``'s QuantParams."""
    scale, zero_point = param_arrays(tensor.quant_params, tensor.shape)
    zero_point = np.zeros(scale.shape, np.int64) if zero_point is None else zero_point
    ctx.node("QuantizeLinear", [float_name, ctx.const(scale, f"{tensor.name}_scale"),
                                ctx.const(zero_point.astype(tensor.dtype), f"{tensor.name}_zero_point")], [name],
             axis=int(tensor.quant_params.axis))


