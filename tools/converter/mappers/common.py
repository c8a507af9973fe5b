"""Helpers shared by the mapper families."""

from __future__ import annotations

from collections.abc import Mapping
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


def attr_choice(ctx: NodeContext, name: str, default: str, choices: Mapping[str, str]) -> str:
    """A string attribute translated by ``choices`` (ONNX value -> .lite value); others are unsupported."""
    value = ctx.attr(name, default)
    if value not in choices:
        ctx.unsupported(f"{name}={value!r} is not supported; use one of {sorted(choices)}")
    return choices[value]


def ints(ctx: NodeContext, name: str, default: list[int] | None, length: int) -> list[int]:
    """An integer-list attribute that must have ``length`` entries (required when ``default`` is None)."""
    raw = ctx.attr(name) if default is None else ctx.attr(name, default)
    value = [int(v) for v in raw]
    if len(value) != length:
        ctx.invalid(f"attribute {name!r} has {len(value)} values, expected {length}")
    return value


def pad_attrs(ctx: NodeContext, rank: int) -> dict[str, Any]:
    """``pad_mode`` and ``pad_list`` ([begins..., ends...] of ``rank`` spatial axes) from auto_pad/pads."""
    auto_pad = ctx.attr("auto_pad", "NOTSET")
    if auto_pad not in AUTO_PADS:
        ctx.unsupported(f"auto_pad={auto_pad!r} is not one of {sorted(AUTO_PADS)}")
    none = [0] * (2 * rank)
    pads = ints(ctx, "pads", none, 2 * rank) if auto_pad == "NOTSET" else none
    return {"pad_mode": AUTO_PADS[auto_pad], "pad_list": pads}


def spatial_rank(ctx: NodeContext, rank: int | None, what: str) -> int:
    """The number of spatial axes of an (N, C, spatial...) ``what`` of ``rank`` (at least one)."""
    if rank is None:
        ctx.unsupported(f"the rank of the {what} is unknown; give the inputs static ranks (--input-shape)")
    if rank < 3:
        ctx.unsupported(f"{ctx.node.op_type} needs an (N, C, spatial...) {what} of rank 3 or more; this {what} "
                        f"has rank {rank}")
    return rank - 2
