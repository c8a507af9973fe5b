"""Scaled dot-product attention (the Attention primitive): its shapes."""

from __future__ import annotations

import numpy as np


def attention_shapes(q: tuple[int, ...], k: tuple[int, ...], v: tuple[int, ...],
                     mask: tuple[int, ...] | None) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(scores shape, output shape) of softmax(q @ k + mask) @ v with numpy matmul broadcasting.

    ``k`` is already transposed: (..., D, Sk).

    Raises:
        ValueError: ranks below 2, inner dims that differ, or batch dims / a mask that do not broadcast.
    """
    if min(len(q), len(k), len(v)) < 2:
        raise ValueError(f"q, k and v need 2 or more dims, got shapes {list(q)}, {list(k)}, {list(v)}")
    if q[-1] != k[-2] or k[-1] != v[-2]:
        raise ValueError(f"q {list(q)} @ k {list(k)} @ v {list(v)}: inner dims differ")
    scores = (*_broadcast(q[:-2], k[:-2], "q and k"), q[-2], k[-1])
    if mask is not None and _broadcast(mask, scores, "the mask and the scores") != scores:
        raise ValueError(f"the mask of shape {list(mask)} does not broadcast to the scores {list(scores)}")
    return scores, (*_broadcast(scores[:-2], v[:-2], "the scores and v"), q[-2], v[-1])


def _broadcast(a: tuple[int, ...], b: tuple[int, ...], what: str) -> tuple[int, ...]:
    try:
        return np.broadcast_shapes(a, b)
    except ValueError:
        raise ValueError(f"the batch dims of {what} do not broadcast: {list(a)} and {list(b)}") from None
