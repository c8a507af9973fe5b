"""Conv2DFusion -> Conv and Conv2dTransposeFusion -> ConvTranspose, each with its fused activation."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from lite.delegates.onnxruntime.emitters.activation import with_activation
from lite.delegates.onnxruntime.emitters.common import dilations, window_attrs
from lite.delegates.onnxruntime.emitters.registry import emitter
from lite.ops.dtypes import FLOAT32

if TYPE_CHECKING:
    from lite.delegates.onnxruntime.context import NodeContext


def _conv_attrs(ctx: NodeContext) -> dict[str, Any]:
    return {**window_attrs(ctx.attrs, "stride"), **dilations(ctx.attrs), "group": int(ctx.attrs["group"])}


@emitter("Conv2DFusion", FLOAT32)
def conv(ctx: NodeContext) -> None:
    with_activation(ctx, "Conv", ctx.inputs(), **_conv_attrs(ctx))


@emitter("Conv2dTransposeFusion", FLOAT32)
def conv_transpose(ctx: NodeContext) -> None:
    attrs = _conv_attrs(ctx)
    padding = [int(v) for v in ctx.attrs.get("output_paddings") or ()]
    if any(padding):
        attrs["output_padding"] = padding
    with_activation(ctx, "ConvTranspose", ctx.inputs(), **attrs)
