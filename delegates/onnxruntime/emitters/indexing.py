"""Indexing primitives -> the ONNX ops they came from (opset 17): gathers, scatters, CumSum, Tile,
Trilu, OneHot, ArgMax/ArgMin, TopK, Einsum, DepthToSpace, SpaceToDepth, Hardmax, LpNormalization.

Range and NonZero have no emitter: their output shapes come from values, so the runtime runs them
(folded from shapes, or natively at every predict); Size and EyeLike are folded from shapes."""

from __future__ import annotations

from typing import TYPE_CHECKING

from lite.delegates.onnxruntime.emitters.registry import emitter
from lite.ops.dtypes import ALL, FLOATS_32_64, NUMBERS_32_64

if TYPE_CHECKING:
    from lite.delegates.onnxruntime.context import NodeContext

_REDUCTIONS_17 = {"NONE": "none", "ADD": "add", "MUL": "mul"}  # max and min are ScatterND/-Elements-18


def _reduction(ctx: NodeContext) -> str:
    reduction = ctx.attrs["reduction"]
    if reduction not in _REDUCTIONS_17:
        ctx.unsupported(f"reduction {reduction} is newer than opset 17")
    return _REDUCTIONS_17[reduction]


def _same(op_type: str, **fixed):
    """An emitter writing one ``op_type`` node with the kernel's inputs and outputs."""
    def emit(ctx: NodeContext) -> None:
        ctx.node(op_type, ctx.inputs(), ctx.outputs(), **{k: f(ctx) for k, f in fixed.items()})

    return emit


emitter("GatherElements", ALL)(_same("GatherElements", axis=lambda c: int(c.attrs["axis"])))
emitter("GatherNd", ALL)(_same("GatherND", batch_dims=lambda c: int(c.attrs["batch_dims"])))
emitter("ScatterNd", ALL)(_same("ScatterND", reduction=_reduction))
emitter("ScatterElements", ALL)(_same("ScatterElements", axis=lambda c: int(c.attrs["axis"]),
                                      reduction=_reduction))
emitter("CumSum", NUMBERS_32_64)(_same("CumSum", exclusive=lambda c: int(c.attrs["exclusive"]),
                                       reverse=lambda c: int(c.attrs["reverse"])))
emitter("TileFusion", ALL)(_same("Tile"))
emitter("Trilu", ALL)(_same("Trilu", upper=lambda c: int(c.attrs["upper"])))
emitter("OneHot", NUMBERS_32_64)(_same("OneHot", axis=lambda c: int(c.attrs["axis"])))
emitter("Einsum", FLOATS_32_64)(_same("Einsum", equation=lambda c: str(c.attrs["equation"])))
emitter("Hardmax", FLOATS_32_64)(_same("Hardmax", axis=lambda c: int(c.attrs["axis"])))
emitter("LpNormalization", FLOATS_32_64)(_same("LpNormalization", axis=lambda c: int(c.attrs["axis"]),
                                               p=lambda c: int(c.attrs["p"])))


@emitter("ArgMaxFusion", NUMBERS_32_64)
@emitter("ArgMinFusion", NUMBERS_32_64)
def arg_reduce(ctx: NodeContext) -> None:
    op_type = "ArgMax" if ctx.kernel.type == "ArgMaxFusion" else "ArgMin"
    ctx.node(op_type, ctx.inputs(), ctx.outputs(), axis=int(ctx.attrs["axis"]), keepdims=int(ctx.attrs["keep_dims"]),
             select_last_index=int(ctx.attrs["select_last_index"]))


@emitter("TopKFusion", NUMBERS_32_64)
def top_k(ctx: NodeContext) -> None:
    ctx.node("TopK", ctx.inputs(), ctx.outputs(), axis=int(ctx.attrs["axis"]), largest=int(ctx.attrs["largest"]),
             sorted=1)


@emitter("DepthToSpace", ALL)
@emitter("SpaceToDepth", ALL)
def depth_to_space(ctx: NodeContext) -> None:
    op_type, crd = ctx.kernel.type, bool(ctx.attrs["mode_crd"])
    if op_type == "SpaceToDepth" and crd:
        ctx.unsupported("SpaceToDepth in CRD mode is newer than opset 17")
    mode = {"mode": "CRD" if crd else "DCR"} if op_type == "DepthToSpace" else {}
    ctx.node(op_type, ctx.inputs(), ctx.outputs(), blocksize=int(ctx.attrs["block_size"]), **mode)
