"""Attention: matmul, scale, mask add, softmax over the last axis, [NaN weights to 0,] matmul."""

from __future__ import annotations

from tvm import relax

from lite.delegates.tvm.ops.common import Node, emitter


@emitter("Attention")
def attention(node: Node) -> relax.Expr:
    scores = relax.op.matmul(node.x(0), node.x(1))
    scale = float(node.attrs["scale"])
    if scale != 1.0:
        scores = relax.op.multiply(scores, node.g.const(scale))
    if node.has(3):
        scores = relax.op.add(scores, node.x(3))
    weights = relax.op.nn.softmax(scores, axis=-1)
    if node.attrs.get("nan_to_zero"):
        weights = relax.op.where(relax.op.isnan(weights), node.g.const(0.0), weights)
    return relax.op.matmul(weights, node.x(2))
