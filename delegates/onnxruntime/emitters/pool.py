"""MaxPoolFusion / AvgPoolFusion -> MaxPool / AveragePool, or GlobalMaxPool / GlobalAveragePool (any rank)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from lite.delegates.onnxruntime.context import OPSET
from lite.delegates.onnxruntime.emitters.common import dilations, window_attrs
from lite.delegates.onnxruntime.emitters.registry import emitter
from lite.ops.dtypes import FLOAT32, FLOATS_32_64

# onnxruntime's MaxPool-12 also takes float64 and 8-bit integers (GlobalMaxPool float32 only)
MAX_POOL_DTYPES = (*FLOATS_32_64, np.dtype(np.int8), np.dtype(np.uint8))

if TYPE_CHECKING:
    from lite.delegates.onnxruntime.context import NodeContext


def emitted_opset() -> int:
    """The opset the delegate writes."""
    return OPSET


def _pool(ctx: NodeContext, op_type: str, **extra: Any) -> None:
    if ctx.rank(0) > 5:
        ctx.unsupported(f"{ctx.rank(0) - 2} spatial axes: onnxruntime pools 1 to 3")
    if ctx.attrs["is_global"]:
        dtype = ctx.in_dtype(0)
        if dtype not in FLOAT32:
            ctx.unsupported(f"Global{op_type} on {dtype.name}: onnxruntime runs it on float32 only")
        ctx.op(f"Global{op_type}", [ctx.input(0)], ctx.output())
        return
    if not ctx.attrs.get("kernel_size"):
        ctx.unsupported("a windowed pool needs kernel_size")
    attrs = window_attrs(ctx.attrs, "strides")
    kernel, pads = attrs["kernel_shape"], attrs.get("pads")
    if pads and any(p >= k for p, k in zip(pads, kernel * 2, strict=True)):
        ctx.unsupported(f"pads {attrs['pads']} reach the kernel_shape {kernel}: onnxruntime wants them smaller")
    if ctx.attrs["round_mode"] == "CEIL":
        attrs["ceil_mode"] = 1
    ctx.node(op_type, [ctx.input(0)], ctx.outputs(), **attrs, **extra)


@emitter("MaxPoolFusion", MAX_POOL_DTYPES)
def max_pool(ctx: NodeContext) -> None:
    """The Indices output is MaxPool's second output (storage_order 0, the default)."""
    _pool(ctx, "MaxPool", **dilations(ctx.attrs))


@emitter("AvgPoolFusion", FLOAT32)
def average_pool(ctx: NodeContext) -> None:
    extra = dilations(ctx.attrs)
    if extra and emitted_opset() < 19:
        ctx.unsupported(f"dilations {extra['dilations']}: AveragePool takes them from opset 19; this delegate "
                        f"emits opset {emitted_opset()}")
    _pool(ctx, "AveragePool", count_include_pad=int(bool(ctx.attrs["count_include_pad"])), **extra)
