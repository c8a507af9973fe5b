"""Attention: matmul, scale, mask add, softmax over the last axis, matmul."""

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
    return relax.op.matmul(relax.op.nn.softmax(scores, axis=-1), node.x(2))
