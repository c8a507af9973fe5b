"""BatchNormalization (when not folded into a Conv/Gemm) -> BatchNorm; LRN -> LRN."""

from __future__ import annotations

from lite.tools.converter.context import NodeContext
from lite.tools.converter.registry import mapper


@mapper("BatchNormalization", since=1)
def batch_normalization_v1(ctx: NodeContext) -> None:
    if ctx.attr("training_mode", 0) or any(ctx.output_used(j) for j in range(1, 5)):
        ctx.unsupported("training mode (running statistics outputs) is not supported; export in eval mode")
    if not ctx.attr("spatial", 1):
        ctx.unsupported("spatial=0 (per-activation statistics) is not supported; re-export with spatial=1")
    ctx.emit("BatchNorm", {"epsilon": float(ctx.attr("epsilon", 1e-5))},
             [ctx.input(i) for i in range(5)], [ctx.output(0)])


@mapper("LRN", since=1)
def lrn_v1(ctx: NodeContext) -> None:
    attrs = {
        "size": int(ctx.attr("size")),
        "alpha": float(ctx.attr("alpha", 1e-4)),
        "beta": float(ctx.attr("beta", 0.75)),
        "bias": float(ctx.attr("bias", 1.0)),
    }
    ctx.emit("LRN", attrs, [ctx.input(0)])
