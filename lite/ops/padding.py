"""Pad (PadFusion): its modes, and its pads as begins and ends (a negative pad crops)."""

from __future__ import annotations

from collections.abc import Sequence

PADDING_MODES = ("CONSTANT", "REFLECT", "EDGE", "WRAP")


def begins_ends(pads: Sequence[int], rank: int) -> tuple[list[int], list[int]]:
    """ONNX's pads [begin of each axis..., end of each axis...] as (begins, ends)."""
    return list(pads[:rank]), list(pads[rank:])


def full_rank_pads(pads: Sequence[int], axes: Sequence[int], rank: int) -> list[int]:
    """Pads given for ``axes`` only (ONNX Pad-18's ``axes`` input) as pads of every axis.

    Raises:
        ValueError: an axis out of [-rank, rank) or repeated, or not 2 pads per axis.
    """
    if len(pads) != 2 * len(axes):
        raise ValueError(f"pads {list(pads)} must have 2 values per axis of {list(axes)}")
    if any(not -rank <= a < rank for a in axes) or len({a % rank for a in axes}) != len(axes):
        raise ValueError(f"axes {list(axes)} must be distinct axes of a rank-{rank} tensor")
    full = [0] * (2 * rank)
    for k, axis in enumerate(axes):
        full[axis % rank], full[axis % rank + rank] = pads[k], pads[k + len(axes)]
    return full


def kept(dim: int, begin: int, end: int) -> slice:
    """The part of an axis of length ``dim`` that negative pads leave (they crop it first)."""
    return slice(max(-begin, 0), dim + min(end, 0))
