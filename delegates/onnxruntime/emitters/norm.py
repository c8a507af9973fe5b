"""BatchNorm -> BatchNormalization (inference form); LRN -> LRN; LayerNormFusion -> LayerNormalization."""

from __future__ import annotations

from typing import TYPE_CHECKING

from lite.delegates.onnxruntime.emitters.registry import emitter
from lite.ops.dtypes import FLOAT32, FLOATS_32_64

if TYPE_CHECKING:
    from lite.delegates.onnxruntime.builder import NodeContext


@emitter("BatchNorm", FLOATS_32_64)
def batch_norm(ctx: NodeContext) -> None:
    ctx.op("BatchNormalization", ctx.inputs(), ctx.output(), epsilon=float(ctx.attrs["epsilon"]))


@emitter("LRN", FLOAT32)
def lrn(ctx: NodeContext) -> None:
    attrs = {name: float(ctx.attrs[name]) for name in ("alpha", "beta", "bias")}
    ctx.op("LRN", [ctx.input(0)], ctx.output(), size=int(ctx.attrs["size"]), **attrs)


@emitter("LayerNormFusion", FLOATS_32_64)
def layer_norm(ctx: NodeContext) -> None:
    ctx.node("LayerNormalization", ctx.inputs(), ctx.outputs(), axis=int(ctx.attrs["begin_norm_axis"]),
             epsilon=float(ctx.attrs["epsilon"]))
