"""QuantizeLinear and DequantizeLinear -> the primitives of the same names.

Where the scale (and zero point) are constants, the quantized tensor (QuantizeLinear's output,
DequantizeLinear's input) also carries them as its ``QuantParams`` in the .lite file.
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto

from lite.ops.dtypes import NARROW_FLOATS
from lite.ops.quant import DEQUANT_DTYPES, QUANT_DTYPES
from lite.schema.graph import DTYPE_NAMES, QuantParams, integer_bits, integer_kind, quant_params_error
from lite.tools.converter.context import NodeContext
from lite.tools.converter.onnx_graph import LITE_DTYPES
from lite.tools.converter.registry import mapper

_UNSTORED = ("the .lite types are int8/uint8, int16/uint16, int4/uint4, int2/uint2, float8 (e4m3fn, e5m2) and "
             "float4 (e2m1); the float8 *fnuz variants are not")


@mapper("QuantizeLinear", since=10)
def quantize_linear_v10(ctx: NodeContext) -> None:
    """Per tensor only (a scalar scale); uint8 unless the zero point says int8."""
    _quantize(ctx, axis=1, block_size=0)


@mapper("QuantizeLinear", since=13)
def quantize_linear_v13(ctx: NodeContext) -> None:
    """Adds ``axis`` (per-axis scales); from 19 also float16/bfloat16 scales and float8 outputs."""
    _quantize(ctx, axis=int(ctx.attr("axis", 1)), block_size=0)


@mapper("QuantizeLinear", since=19)
def quantize_linear_v19(ctx: NodeContext) -> None:
    """Adds float8 outputs and ``saturate`` (theirs, as Cast's)."""
    _quantize(ctx, axis=int(ctx.attr("axis", 1)), block_size=0, saturate=bool(ctx.attr("saturate", 1)))


@mapper("QuantizeLinear", since=21)
def quantize_linear_v21(ctx: NodeContext) -> None:
    """Adds ``block_size`` (blocked scales), ``output_dtype`` and int16/uint16/int4/uint4 outputs."""
    _quantize(ctx, axis=int(ctx.attr("axis", 1)), block_size=int(ctx.attr("block_size", 0)),
              output_dtype=int(ctx.attr("output_dtype", 0)), saturate=bool(ctx.attr("saturate", 1)))


@mapper("QuantizeLinear", since=23)
def quantize_linear_v23(ctx: NodeContext) -> None:
    """Adds ``precision``, the type of the division; only the scale's own type is supported."""
    precision = int(ctx.attr("precision", 0))
    if precision and LITE_DTYPES.get(precision) != ctx.dtype(1):
        ctx.unsupported(f"precision={precision} differs from y_scale's type; the division runs in y_scale's "
                        "type (leave precision unset)")
    quantize_linear_v21(ctx)


@mapper("DequantizeLinear", since=10)
def dequantize_linear_v10(ctx: NodeContext) -> None:
    """Per tensor only; the result has the scale's type. (An ``axis`` and a ``block_size`` are read
    all the same: the expansions of QLinearConv and QLinearMatMul, whose opset-10 forms take
    per-axis weight scales, and of MatMulNBits, a blocked uint4 weight, write them at any opset.)"""
    _dequantize(ctx, axis=int(ctx.attr("axis", 1)), block_size=int(ctx.attr("block_size", 0)))


@mapper("DequantizeLinear", since=13)
def dequantize_linear_v13(ctx: NodeContext) -> None:
    """Adds ``axis`` (per-axis scales); ``block_size`` is read as in opset 10."""
    _dequantize(ctx, axis=int(ctx.attr("axis", 1)), block_size=int(ctx.attr("block_size", 0)))


@mapper("DequantizeLinear", since=21)
def dequantize_linear_v21(ctx: NodeContext) -> None:
    """Adds ``block_size`` and int16/uint16/int4/uint4 inputs."""
    _dequantize(ctx, axis=int(ctx.attr("axis", 1)), block_size=int(ctx.attr("block_size", 0)))


@mapper("DequantizeLinear", since=23)
def dequantize_linear_v23(ctx: NodeContext) -> None:
    """Adds ``output_dtype`` (the result's type, the scale's by default)."""
    _dequantize(ctx, axis=int(ctx.attr("axis", 1)), block_size=int(ctx.attr("block_size", 0)),
                output_dtype=int(ctx.attr("output_dtype", 0)))


def _quantize(ctx: NodeContext, axis: int, block_size: int, output_dtype: int = 0, saturate: bool = True) -> None:
    if ctx.has_input(2):
        out = _lite_dtype(ctx, ctx.builder.g.tensor_info(ctx.node.input[2]).elem_type, "y_zero_point")
    else:
        out = _lite_dtype(ctx, output_dtype or TensorProto.UINT8, "output_dtype")
    if out not in QUANT_DTYPES:
        ctx.unsupported(f"QuantizeLinear to {out.name}: {_UNSTORED}")
    if output_dtype and LITE_DTYPES.get(output_dtype) != out:
        ctx.invalid(f"output_dtype={output_dtype} disagrees with y_zero_point's type {out.name}")
    axis, block_size = _placement(ctx, axis, block_size)
    ctx.emit("QuantizeLinear", {"axis": axis, "block_size": block_size, "output_type": DTYPE_NAMES[out],
                                "saturate": saturate}, ctx.inputs()[:3])
    _attach(ctx, ctx.output(0), axis, block_size)


def _dequantize(ctx: NodeContext, axis: int, block_size: int, output_dtype: int = 0) -> None:
    x = _lite_dtype(ctx, ctx.builder.g.tensor_info(ctx.node.input[0]).elem_type, "x")
    if x not in DEQUANT_DTYPES:
        ctx.unsupported(f"DequantizeLinear of {x.name}: {_UNSTORED}")
    if ctx.has_input(2) and ctx.dtype(2) != x:
        ctx.invalid(f"x_zero_point {ctx.node.input[2]!r} is {ctx.dtype(2)}, but x {ctx.node.input[0]!r} is {x.name}")
    out = _lite_dtype(ctx, output_dtype, "output_dtype") if output_dtype else ctx.dtype(1)
    if out is None or out.kind != "f" or out in NARROW_FLOATS:
        ctx.unsupported(f"DequantizeLinear to {out}: the result must be a float type .lite stores")
    axis, block_size = _placement(ctx, axis, block_size)
    ctx.emit("DequantizeLinear", {"axis": axis, "block_size": block_size, "output_type": DTYPE_NAMES[out]},
             ctx.inputs()[:3])
    _attach(ctx, ctx.input(0), axis, block_size)


def _lite_dtype(ctx: NodeContext, elem_type: int, what: str) -> np.dtype:
    dtype = LITE_DTYPES.get(elem_type)
    if dtype is None:
        name = TensorProto.DataType.Name(elem_type) if elem_type in TensorProto.DataType.values() else elem_type
        ctx.unsupported(f"{what} has type {name}: {_UNSTORED}")
    return dtype


def _placement(ctx: NodeContext, axis: int, block_size: int) -> tuple[int, int]:
    """``axis`` made non-negative where x's rank is known (a per-tensor scale ignores it, so an
    axis out of range stays for the kernel to refuse if the scales turn out per axis)."""
    if block_size < 0:
        ctx.invalid(f"block_size={block_size} must be >= 0")
    rank = ctx.rank(0)
    if rank and -rank <= axis < rank:
        axis %= rank
    return axis, block_size


def _attach(ctx: NodeContext, index: int, axis: int, block_size: int) -> None:
    """Records constant scales and zero points as the quantized tensor's QuantParams."""
    scale = ctx.const(1)
    zero_point = ctx.const(2) if ctx.has_input(2) else np.zeros(0, np.int64)
    tensor = ctx.builder.graph.tensors[index]
    if (scale is None or zero_point is None or tensor.quant is not None or -1 in tensor.shape
            or not integer_kind(tensor.dtype)):  # NOTE: float8/float4 tensors are scaled floats, not QuantParams'
        return
    if tensor.is_const and np.all(np.isfinite(scale)) and np.any(scale < 0):
        return  # NOTE: onnxruntime's symmetric 4-bit weights have negative scales; the DequantizeLinear reads
        # them as its inputs, and the weight carries no QuantParams (whose scales are positive)
    rank = len(tensor.shape)
    quant = QuantParams(scale.astype(np.float32).ravel(), zero_point.astype(np.int64).ravel(),
                        axis if rank and (scale.size > 1 or block_size) else 0, integer_bits(tensor.dtype), block_size)
    error = quant_params_error(quant, tensor.dtype, tensor.shape)
    if error:
        ctx.invalid(f"tensor {tensor.name!r}: {error}")
    tensor.quant = quant
