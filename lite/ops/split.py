"""Split sizes when only the number of parts is given."""

from __future__ import annotations

import itertools


def split_sizes(dim: int, parts: int) -> list[int]:
    """ceil(dim / parts) per part, the last ones smaller (ONNX Split-18 ``num_outputs``).

    The reference evaluator slices this way too: it gives the last part what is left, and
    nothing when nothing is left (dim 5 in 4 parts is 2, 2, 1, 0).
    """
    part = -(-dim // parts)
    return [min(part, max(dim - i * part, 0)) for i in range(parts)]


def explicit_split_sizes(dim: int, parts: int) -> list[int]:
    """The sizes an ONNX Split node must be given: [] when ONNX's own even split is the same
    (``dim`` divides) or ``dim`` is unknown (negative), else ``split_sizes``."""
    return [] if dim < 0 or dim % parts == 0 else split_sizes(dim, parts)


def split_offsets(sizes: list[int]) -> list[int]:
    """Where each part starts along the axis, then the end: [0, s0, s0 + s1, ..., sum]."""
    return list(itertools.accumulate(sizes, initial=0))
