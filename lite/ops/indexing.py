"""Indexing ops: Range's length, Einsum's equations, DepthToSpace's permutations, TopK's order."""

from __future__ import annotations

import math
import re

import numpy as np


def range_length(start: float, limit: float, delta: float) -> int:
    """How many values ONNX Range gives: max(ceil((limit - start) / delta), 0).

    Raises:
        ValueError: delta is 0 or a value is not finite.
    """
    if delta == 0 or not all(math.isfinite(float(v)) for v in (start, limit, delta)):
        raise ValueError(f"Range({start}, {limit}, {delta}): delta must be non-zero and every value finite")
    return max(math.ceil((float(limit) - float(start)) / float(delta)), 0)


_TERM = re.compile(r"^(?:[A-Za-z]|\.\.\.)*$")


def einsum_output_shape(equation: str, shapes: list[tuple[int, ...]]) -> tuple[int, ...]:
    """The output shape numpy's einsum gives for ``equation`` on operands of ``shapes``.

    Raises:
        ValueError: a malformed equation, a term that does not fit its operand, or sizes that disagree.
    """
    equation = equation.replace(" ", "")
    inputs, arrow, output = equation.partition("->")
    terms = inputs.split(",")
    if len(terms) != len(shapes) or not all(_TERM.match(t) for t in [*terms, output]):
        raise ValueError(f"equation {equation!r} does not fit {len(shapes)} operands")
    sizes: dict[str, int] = {}
    batch: tuple[int, ...] = ()
    for term, shape in zip(terms, shapes, strict=True):
        letters = term.replace("...", "")
        extra = len(shape) - len(letters)
        if extra < 0 or (extra and "..." not in term):
            raise ValueError(f"term {term!r} does not fit an operand of shape {list(shape)}")
        head = term.index("...") if "..." in term else len(letters)
        batch = np.broadcast_shapes(batch, tuple(shape[head:head + extra]))
        for letter, size in zip(letters, shape[:head] + shape[head + extra:], strict=True):
            if sizes.setdefault(letter, size) != size and 1 not in (size, sizes[letter]):
                raise ValueError(f"label {letter!r} has sizes {sizes[letter]} and {size}")
            sizes[letter] = max(sizes[letter], size)
    if not arrow:
        counts = {c: inputs.count(c) for c in sizes}
        output = ("..." if "..." in inputs else "") + "".join(sorted(c for c, n in counts.items() if n == 1))
    if any(c not in sizes for c in output.replace("...", "")):
        raise ValueError(f"output {output!r} names a label no operand has")
    head = output.index("...") if "..." in output else len(output)
    letters = output.replace("...", "")
    return tuple(sizes[c] for c in letters[:head]) + (batch if "..." in output else ()) + \
        tuple(sizes[c] for c in letters[head:])


def depth_to_space_order(crd: bool) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(split, permutation) of DepthToSpace: (N, C, H, W) is viewed as N then ``split`` (b: block,
    c: C / b^2) then H, W, and transposed by the permutation into (N, c, H, b, W, b)."""
    if crd:  # (N, c, b, b, H, W)
        return ("c", "b", "b"), (0, 1, 4, 2, 5, 3)
    return ("b", "b", "c"), (0, 3, 4, 1, 5, 2)  # DCR: (N, b, b, c, H, W)


def top_k_order(x: np.ndarray, axis: int, largest: bool) -> np.ndarray:
    """Indices sorting ``x`` along ``axis``, largest (or smallest) first, ties by lower index first."""
    if not largest:
        return np.argsort(x, axis=axis, kind="stable")
    n = x.shape[axis]
    ascending = np.argsort(np.flip(x, axis=axis), axis=axis, kind="stable")
    return n - 1 - np.flip(ascending, axis=axis)
