"""BatchNormalization (when not folded into a Conv/Gemm) -> BatchNorm; LRN -> LRN;
LayerNormalization -> LayerNormFusion; InstanceNormalization, GroupNormalization -> InstanceNorm, GroupNorm."""

from __future__ import annotations

import numpy as np

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



@mapper("LayerNormalization", since=17)
def layer_normalization_v17(ctx: NodeContext) -> None:
    """Statistics in float32: stash_type 1, the only type ONNX defines them for."""
    if ctx.attr("stash_type", 1) != 1:
        ctx.unsupported(f"stash_type={ctx.attr('stash_type')} is not supported; only 1 (float32 statistics)")
    inputs = [ctx.input(0), ctx.input(1)] + ([ctx.input(2)] if ctx.has_input(2) else [])
    attrs = {"begin_norm_axis": int(ctx.attr("axis", -1)), "epsilon": float(ctx.attr("epsilon", 1e-5))}
    ctx.emit("LayerNormFusion", attrs, inputs, _statistics_outputs(ctx))


def _statistics_outputs(ctx: NodeContext) -> list[int]:
    """y, then the statistics outputs up to the last one read; an unnamed one before it gets a placeholder."""
    last = max((j for j in (1, 2) if ctx.output_used(j)), default=0)
    names = ctx.node.output
    return [ctx.output(j) if names[j] else ctx.add_tensor(f"{ctx.name}_statistic{j}", np.float32, ())
            for j in range(last + 1)]


@mapper("InstanceNormalization", since=1)
def instance_normalization_v1(ctx: NodeContext) -> None:
    ctx.emit("InstanceNorm", {"epsilon": float(ctx.attr("epsilon", 1e-5))}, [ctx.input(i) for i in range(3)])


@mapper("GroupNormalization", since=18)
def group_normalization_v18(ctx: NodeContext) -> None:
    """Opset 18: scale and bias per group, repeated here to per channel (they must be constants)."""
    groups = int(ctx.attr("num_groups"))
    channels = (ctx.shape(0) or (0, -1))[1] if ctx.rank(0) and ctx.rank(0) >= 2 else -1
    if channels < 1 or groups < 1 or channels % groups:
        ctx.unsupported(f"GroupNormalization-18 needs a static channel count that num_groups={groups} divides, "
                        "to repeat its per-group scale and bias per channel; re-export at opset 21")
    params = [ctx.const_input(i, f"the per-group {what}") for i, what in ((1, "scale"), (2, "bias"))]
    repeated = [ctx.add_const(f"{ctx.name}_{what}", np.repeat(p.reshape(-1), channels // groups))
                for p, what in zip(params, ("scale", "bias"), strict=True)]
    _group_norm(ctx, [ctx.input(0), *repeated])


@mapper("GroupNormalization", since=21)
def group_normalization_v21(ctx: NodeContext) -> None:
    """Opset 21: per-channel scale and bias; statistics in float32 (stash_type 1)."""
    if ctx.attr("stash_type", 1) != 1:
        ctx.unsupported(f"stash_type={ctx.attr('stash_type')} is not supported; only 1 (float32 statistics)")
    _group_norm(ctx, [ctx.input(i) for i in range(3)])


def _group_norm(ctx: NodeContext, inputs: list[int]) -> None:
    attrs = {"num_groups": int(ctx.attr("num_groups")), "epsilon": float(ctx.attr("epsilon", 1e-5))}
    ctx.emit("GroupNorm", attrs, inputs)
