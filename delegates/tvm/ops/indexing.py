"""Indexing primitives with a Relax op: GatherElements, GatherNd, CumSum, TileFusion, Trilu, Einsum.

Indices, the CumSum axis, Tile repeats and the Trilu diagonal are baked in at compile time
(``values``): a partition compiles float32 tensors, so they must be constants or values the
runtime computed from shapes. The other indexing primitives produce or read integer tensors and
stay native with the reasons in ``UNSUPPORTED``.
"""

from __future__ import annotations

import numpy as np
from tvm import relax

from lite.delegates.tvm.ops.common import UNSUPPORTED, Node, emitter


@emitter("GatherElements", values=(1,))
def gather_elements(node: Node) -> relax.Expr:
    indices, axis = node.value(1), int(node.attrs["axis"]) % len(node.shape(0))
    dim = node.g.static(node.shape(0)[axis], "GatherElements' axis")
    return relax.op.gather_elements(node.x(0), relax.const((indices % dim).astype(np.int64), "int64"), axis)


@emitter("GatherNd", values=(1,))
def gather_nd(node: Node) -> relax.Expr:
    indices, b = node.value(1), int(node.attrs["batch_dims"])
    dims = [node.g.static(d, "a GatherND axis") for d in node.shape(0)[b:b + indices.shape[-1]]]
    return relax.op.gather_nd(node.x(0), relax.const((indices % np.array(dims)).astype(np.int64), "int64"), b)


@emitter("CumSum", values=(1,))
def cum_sum(node: Node) -> relax.Expr:
    x, axis = node.x(0), int(node.value(1).reshape(-1)[0]) % len(node.shape(0))
    if node.attrs["reverse"]:
        x = relax.op.flip(x, axis)
    y = relax.op.cumsum(x, axis, exclusive=bool(node.attrs["exclusive"]))
    return relax.op.flip(y, axis) if node.attrs["reverse"] else y


@emitter("TileFusion", values=(1,))
def tile(node: Node) -> relax.Expr:
    return relax.op.tile(node.x(0), node.ints(1))


@emitter("Trilu", values=(1,))
def trilu(node: Node) -> relax.Expr:
    k = node.ints(1)[0] if node.has(1) else 0
    return (relax.op.triu if node.attrs["upper"] else relax.op.tril)(node.x(0), k)


@emitter("Einsum")
def einsum(node: Node) -> relax.Expr:
    operands = [node.x(i) for i in range(len(node.inputs))]
    return relax.op.einsum(operands, str(node.attrs["equation"]).replace(" ", ""))


_INTEGERS = "it produces or reads integer tensors; this delegate compiles float32 partitions"
UNSUPPORTED.update({op: _INTEGERS for op in (
    "ScatterNd", "ScatterElements", "OneHot", "ArgMaxFusion", "ArgMinFusion", "TopKFusion")})
UNSUPPORTED.update({op: "no Relax lowering yet (it runs natively)" for op in (
    "DepthToSpace", "SpaceToDepth", "Hardmax", "LpNormalization")})
