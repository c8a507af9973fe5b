"""Pad (PadFusion): its modes, and its pads as begins and ends (a negative pad crops)."""

from __future__ import annotations

from collections.abc import Sequence

PADDING_MODES = ("CONSTANT", "REFLECT", "EDGE")


def begins_ends(pads: Sequence[int], rank: int) -> tuple[list[int], list[int]]:
    """ONNX's pads [begin of each axis..., end of each axis...] as (begins, ends)."""
    return list(pads[:rank]), list(pads[rank:])


def kept(dim: int, begin: int, end: int) -> slice:
    """The part of an axis of length ``dim`` that negative pads leave (they crop it first)."""
    return slice(max(-begin, 0), dim + min(end, 0))
