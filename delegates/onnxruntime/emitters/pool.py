"""MaxPoolFusion / AvgPoolFusion -> MaxPool / AveragePool, or GlobalMaxPool / GlobalAveragePool."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from lite.delegates.onnxruntime.emitters.common import dilations, window_attrs
from lite.delegates.onnxruntime.emitters.registry import emitter
from lite.ops.dtypes import FLOAT32

if TYPE_CHECKING:
    from lite.delegates.onnxruntime.builder import NodeContext


def _pool(ctx: NodeContext, op_type: str, **extra: Any) -> None:
    if ctx.attrs["is_global"]:
        ctx.op(f"Global{op_type}", [ctx.input(0)], ctx.output())
        return
    if not ctx.attrs.get("kernel_size"):
        ctx.unsupported("a windowed pool needs kernel_size")
    attrs = window_attrs(ctx.attrs, "strides")
    if ctx.attrs["round_mode"] == "CEIL":
        attrs["ceil_mode"] = 1
    ctx.op(op_type, [ctx.input(0)], ctx.output(), **attrs, **extra)


@emitter("MaxPoolFusion", FLOAT32)
def max_pool(ctx: NodeContext) -> None:
    _pool(ctx, "MaxPool", **dilations(ctx.attrs))


@emitter("AvgPoolFusion", FLOAT32)
def average_pool(ctx: NodeContext) -> None:
    _pool(ctx, "AveragePool", count_include_pad=int(bool(ctx.attrs["count_include_pad"])))
