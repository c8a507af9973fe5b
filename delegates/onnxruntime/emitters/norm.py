"""BatchNorm -> BatchNormalization (inference form); LRN -> LRN."""

from __future__ import annotations

from typing import TYPE_CHECKING

from lite.delegates.onnxruntime.emitters.registry import FLOAT32, FLOATS, emitter

if TYPE_CHECKING:
    from lite.delegates.onnxruntime.builder import NodeContext


@emitter("BatchNorm", FLOATS)
def batch_norm(ctx: NodeContext) -> None:
    ctx.op("BatchNormalization", ctx.inputs(), ctx.output(), epsilon=float(ctx.attrs["epsilon"]))


@emitter("LRN", FLOAT32)
def lrn(ctx: NodeContext) -> None:
    attrs = {name: float(ctx.attrs[name]) for name in ("alpha", "beta", "bias")}
    ctx.op("LRN", [ctx.input(0)], ctx.output(), size=int(ctx.attrs["size"]), **attrs)
