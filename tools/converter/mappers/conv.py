"""Conv and ConvTranspose -> Conv2DFusion and Conv2dTransposeFusion, of any number of spatial axes
(the length of the per-axis attribute lists)."""

from __future__ import annotations

from typing import Any

from lite.ops.geometry import split_totals, transposed_extent
from lite.tools.converter.context import NodeContext
from lite.tools.converter.mappers.common import ints, pad_attrs, spatial_rank
from lite.tools.converter.registry import mapper


def _weight_shape(ctx: NodeContext) -> tuple[int, ...]:
    shape = ctx.shape(1)
    spatial_rank(ctx, None if shape is None else len(shape), "weight")
    if min(shape) < 0:
        ctx.unsupported(f"the weight shape {shape} is not static; make the weight a constant")
    return shape


def _conv_attrs(ctx: NodeContext, weight_shape: tuple[int, ...]) -> dict[str, Any]:
    rank = len(weight_shape) - 2
    return {
        "kernel_size": ints(ctx, "kernel_shape", list(weight_shape[2:]), rank),
        "stride": ints(ctx, "strides", [1] * rank, rank),
        "dilation": ints(ctx, "dilations", [1] * rank, rank),
        "group": int(ctx.attr("group", 1)),
        **pad_attrs(ctx, rank),
    }


def _inputs(ctx: NodeContext) -> list[int]:
    inputs = [ctx.input(0), ctx.input(1), ctx.input(2, optional=True)]
    return inputs if inputs[2] >= 0 else inputs[:2]


@mapper("Conv", since=1)
def conv_v1(ctx: NodeContext) -> None:
    inputs, w = _inputs(ctx), _weight_shape(ctx)
    attrs = _conv_attrs(ctx, w)
    attrs.update(in_channel=w[1] * attrs["group"], out_channel=w[0])
    ctx.emit("Conv2DFusion", attrs, inputs)


@mapper("ConvTranspose", since=1)
def conv_transpose_v1(ctx: NodeContext) -> None:
    inputs, w = _inputs(ctx), _weight_shape(ctx)
    attrs = _conv_attrs(ctx, w)
    rank = len(w) - 2
    attrs.update(in_channel=w[0], out_channel=w[1] * attrs["group"],
                 output_paddings=ints(ctx, "output_padding", [0] * rank, rank))
    if ctx.has_attr("output_shape"):
        _pads_for_output_shape(ctx, attrs, rank)
    ctx.emit("Conv2dTransposeFusion", attrs, inputs)


def _pads_for_output_shape(ctx: NodeContext, attrs: dict[str, Any], rank: int) -> None:
    """ONNX's pads for an explicit output_shape (needs a static input spatial size); a negative end
    pad (an output larger than the taps reach) becomes output padding."""
    target = [int(v) for v in ctx.attr("output_shape")][-rank:]
    x = ctx.shape(0)
    if x is None or len(x) != rank + 2 or min(x[2:]) < 0:
        ctx.unsupported("output_shape needs a static input spatial size; set it with --input-shape")
    axes = (x[2:], attrs["kernel_size"], attrs["stride"], attrs["dilation"], attrs["output_paddings"], target)
    totals = [transposed_extent(*args) - size for *args, size in zip(*axes, strict=True)]
    begins, ends = split_totals(totals, ctx.attr("auto_pad", "NOTSET"))
    if min(begins) < 0:
        ctx.unsupported(f"output_shape {target} would pad the start of the output (pads {[*begins, *ends]}); "
                        "give output_padding instead")
    attrs.update(pad_mode="PAD", pad_list=[*begins, *(max(e, 0) for e in ends)],
                 output_paddings=[p - min(e, 0) for p, e in zip(attrs["output_paddings"], ends, strict=True)])
