"""MatMulFusion -> Gemm (both operands 2-D) or Transpose + MatMul + Add, then its fused activation;
Attention -> MatMul, Mul, Add, Softmax, [IsNaN, Where,] MatMul."""

from __future__ import annotations

from typing import TYPE_CHECKING

from lite.delegates.onnxruntime.emitters.activation import with_activation
from lite.delegates.onnxruntime.emitters.registry import emitter
from lite.ops.dtypes import FLOATS_32_64

if TYPE_CHECKING:
    from lite.delegates.onnxruntime.context import NodeContext


@emitter("MatMulFusion", FLOATS_32_64)
def matmul(ctx: NodeContext) -> None:
    trans_a, trans_b = bool(ctx.attrs["transpose_a"]), bool(ctx.attrs["transpose_b"])
    if ctx.rank(0) == 2 and ctx.rank(1) == 2:
        with_activation(ctx, "Gemm", ctx.inputs(), transA=int(trans_a), transB=int(trans_b))
        return
    a, b = _transposed(ctx, 0, trans_a), _transposed(ctx, 1, trans_b)
    if ctx.has_input(2):
        with_activation(ctx, "Add", [ctx.op("MatMul", [a, b]), ctx.input(2)])
    else:
        with_activation(ctx, "MatMul", [a, b])


def _transposed(ctx: NodeContext, i: int, flag: bool) -> str:
    """Input ``i`` with its last two axes swapped when ``flag`` is set and it has two or more."""
    rank = ctx.rank(i)
    if not flag or rank < 2:
        return ctx.input(i)
    perm = [*range(rank - 2), rank - 1, rank - 2]
    return ctx.op("Transpose", [ctx.input(i)], perm=perm)


@emitter("Attention", FLOATS_32_64)
def attention(ctx: NodeContext) -> None:
    """MatMul -> Mul by the scale -> Add the mask -> Softmax over the last axis [-> Where(IsNaN(p), 0,
    p)] -> MatMul."""
    scores = ctx.op("MatMul", [ctx.input(0), ctx.input(1)])
    scale = float(ctx.attrs["scale"])
    if scale != 1.0:
        scores = ctx.op("Mul", [scores, ctx.const(scale, "scale", ctx.out_dtype())])
    if ctx.has_input(3):
        scores = ctx.op("Add", [scores, ctx.input(3)])
    weights = ctx.op("Softmax", [scores], axis=-1)
    if ctx.attrs.get("nan_to_zero"):
        weights = ctx.op("Where", [ctx.op("IsNaN", [weights]), ctx.const(0, "zero", ctx.out_dtype()), weights])
    ctx.op("MatMul", [weights, ctx.input(2)], ctx.output())
