"""Unique names for tensors and nodes."""

from __future__ import annotations


def unique_name(hint: str, taken: set[str]) -> str:
    """``hint``, or ``hint_1``, ``hint_2``, ... whichever is not in ``taken``; adds it to ``taken``."""
    name, k = hint, 0
    while name in taken:
        k += 1
        name = f"{hint}_{k}"
    taken.add(name)
    return name
