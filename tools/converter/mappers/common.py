"""Helpers shared by the mapper families."""

from __future__ import annotations

from typing import Any

from lite.tools.converter.context import NodeContext

# ONNX auto_pad -> pad_mode (one of lite.ops.geometry.PAD_MODES)
AUTO_PADS = {"NOTSET": "PAD", "SAME_UPPER": "SAME_UPPER", "SAME_LOWER": "SAME_LOWER", "VALID": "VALID"}


def same(ctx: NodeContext, op_type: str, attrs: dict[str, Any] | None = None) -> None:
    """Emits ``op_type`` with the node's inputs (trailing absent ones dropped) and outputs."""
    inputs = ctx.inputs()
    while inputs and inputs[-1] == -1:
        inputs.pop()
    ctx.emit(op_type, attrs, inputs)


def ints(ctx: NodeContext, name: str, default: list[int] | None, length: int) -> list[int]:
    """An integer-list attribute that must have ``length`` entries (required when ``default`` is None)."""
    raw = ctx.attr(name) if default is None else ctx.attr(name, default)
    value = [int(v) for v in raw]
    if len(value) != length:
        ctx.invalid(f"attribute {name!r} has {len(value)} values, expected {length}")
    return value


def pad_attrs(ctx: NodeContext) -> dict[str, Any]:
    """``pad_mode`` and ``pad_list`` ([top, left, bottom, right]) from auto_pad/pads."""
    auto_pad = ctx.attr("auto_pad", "NOTSET")
    if auto_pad not in AUTO_PADS:
        ctx.unsupported(f"auto_pad={auto_pad!r} is not one of {sorted(AUTO_PADS)}")
    pads = ints(ctx, "pads", [0, 0, 0, 0], 4) if auto_pad == "NOTSET" else [0, 0, 0, 0]
    return {"pad_mode": AUTO_PADS[auto_pad], "pad_list": pads}


def require_2d(ctx: NodeContext, rank: int | None, what: str) -> None:
    """Only 2-D spatial ops (4-D N,C,H,W tensors) convert."""
    if rank is None:
        ctx.unsupported(f"the rank of the {what} is unknown; give the inputs static ranks (--input-shape)")
    if rank != 4:
        ctx.unsupported(f"only 2-D {ctx.node.op_type} (a 4-D N,C,H,W {what}) is supported; this {what} "
                        f"has rank {rank}")
