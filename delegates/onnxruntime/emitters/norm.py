"""BatchNorm -> BatchNormalization (inference form); LRN -> LRN; LayerNormFusion -> LayerNormalization;
InstanceNorm -> InstanceNormalization; GroupNorm -> its opset-17 decomposition."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from lite.delegates.onnxruntime.emitters.registry import emitter
from lite.ops.dtypes import FLOAT32, FLOATS_32_64

if TYPE_CHECKING:
    from lite.delegates.onnxruntime.context import NodeContext


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


@emitter("InstanceNorm", FLOATS_32_64)
def instance_norm(ctx: NodeContext) -> None:
    ctx.op("InstanceNormalization", ctx.inputs(), ctx.output(), epsilon=float(ctx.attrs["epsilon"]))


@emitter("GroupNorm", FLOATS_32_64)
def group_norm(ctx: NodeContext) -> None:
    """GroupNormalization is newer than opset 17: x as (N, groups, rest), InstanceNormalization
    without an affine part, x's shape back, then the per-channel scale and bias."""
    groups, dtype = int(ctx.attrs["num_groups"]), ctx.out_dtype()
    grouped = ctx.op("Reshape", [ctx.input(0), ctx.const([0, groups, -1], "groups", np.int64)])
    normalised = ctx.op("InstanceNormalization", [grouped, ctx.const(np.ones(groups), "ones", dtype),
                                                  ctx.const(np.zeros(groups), "zeros", dtype)],
                        epsilon=float(ctx.attrs["epsilon"]))
    restored = ctx.op("Reshape", [normalised, ctx.op("Shape", [ctx.input(0)])])
    channel = ctx.const([-1] + [1] * (ctx.rank(0) - 2), "channel", np.int64)
    scaled = ctx.op("Mul", [restored, ctx.op("Reshape", [ctx.input(1), channel])])
    ctx.op("Add", [scaled, ctx.op("Reshape", [ctx.input(2), channel])], ctx.output())
