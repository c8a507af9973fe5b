"""ONNX Slice (and Shape) bounds."""

from __future__ import annotations

# An ``end`` that means "to the end" (Shape's default end; Slice's largest end).
INT64_MAX = 2**63 - 1


def clamped_slice(start: int, end: int, step: int, dim: int) -> slice:
    """The python slice for ONNX Slice bounds (negative bounds count from the end, then clamp)."""
    start, end = start + dim if start < 0 else start, end + dim if end < 0 else end
    if step > 0:
        return slice(min(max(start, 0), dim), min(max(end, 0), dim), step)
    start, end = min(max(start, 0), dim - 1), min(max(end, -1), dim - 1)
    return slice(start, None if end < 0 else end, step)
