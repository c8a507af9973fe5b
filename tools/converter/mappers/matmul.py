"""Gemm and MatMul -> MatMulFusion (y = op(a) @ op(b) + bias)."""

from __future__ import annotations

import numpy as np

from lite.tools.converter.context import NodeContext
from lite.tools.converter.registry import mapper


@mapper("MatMul", since=1)
def matmul_v1(ctx: NodeContext) -> None:
    ctx.emit("MatMulFusion", {}, [ctx.input(0), ctx.input(1)])


@mapper("Gemm", since=1)
def gemm_v1(ctx: NodeContext) -> None:
    """alpha scales B and beta scales C: folded into constants, else a MulFusion node each."""
    alpha, beta = float(ctx.attr("alpha", 1.0)), float(ctx.attr("beta", 1.0))
    b = _scaled(ctx, 1, alpha)
    c = _scaled(ctx, 2, beta) if beta != 0.0 else -1
    attrs = {"transpose_a": bool(ctx.attr("transA", 0)), "transpose_b": bool(ctx.attr("transB", 0))}
    ctx.emit("MatMulFusion", attrs, [ctx.input(0), b] + ([c] if c >= 0 else []))


def _scaled(ctx: NodeContext, i: int, factor: float) -> int:
    """Input ``i`` times ``factor`` (-1 if the input is absent)."""
    index = ctx.input(i, optional=i == 2)
    if factor == 1.0 or index < 0:
        return index
    value, dtype = ctx.const(i), ctx.builder.graph.tensors[index].dtype
    suffix = "alpha" if i == 1 else "beta"
    if value is not None:
        return ctx.add_const(f"{ctx.node.input[i]}_{suffix}", (value * factor).astype(dtype))
    scaled = ctx.add_tensor(f"{ctx.node.input[i]}_{suffix}", dtype, ctx.shape(i) or ())
    factor_index = ctx.add_const(f"{ctx.name}_{suffix}", np.asarray(factor, dtype=dtype))
    ctx.emit("MulFusion", {}, [index, factor_index], [scaled])
    return scaled
