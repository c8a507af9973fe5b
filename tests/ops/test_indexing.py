"""lite.ops.indexing: Range's length, Einsum's output shapes and TopK's order, against numpy and ONNX."""

from __future__ import annotations

import numpy as np
import pytest

from lite.ops.indexing import einsum_output_shape, range_length, top_k_order


@pytest.mark.parametrize(("start", "limit", "delta"), [(0, 10, 3), (10, 0, -3), (1, 1, 1), (5, 0, 1), (0.5, 2.0, 0.4)])
def test_range_length_is_numpys(start, limit, delta):
    assert range_length(start, limit, delta) == len(np.arange(start, limit, delta))


@pytest.mark.parametrize("values", [(0, 1, 0), (0, float("inf"), 1), (float("nan"), 1, 1)])
def test_range_length_refuses_zero_delta_and_non_finite_values(values):
    with pytest.raises(ValueError, match="delta"):
        range_length(*values)


@pytest.mark.parametrize(("equation", "shapes"), [
    ("ij,jk->ik", [(2, 3), (3, 4)]), ("bhid,bhjd->bhij", [(2, 3, 4, 5), (2, 3, 6, 5)]), ("ii->i", [(3, 3)]),
    ("ij", [(2, 3)]), ("ji", [(2, 3)]), ("...ij,...jk", [(5, 2, 3), (3, 4)]), ("i,i", [(4,), (4,)]),
    ("bij,bjk->bik", [(1, 2, 3), (4, 3, 5)]), ("a...b->...", [(2, 3, 4, 5)]),
])
def test_einsum_shapes_are_numpys(equation, shapes):
    expected = np.einsum(equation, *[np.ones(s) for s in shapes]).shape
    assert einsum_output_shape(equation, shapes) == expected


@pytest.mark.parametrize(("equation", "shapes"), [("ij,jk->ik", [(2, 3), (4, 5)]), ("ij->q", [(2, 3)]),
                                                  ("ijk", [(2, 3)]), ("ij,jk", [(2, 3)]), ("i$", [(2,)])])
def test_einsum_rejects_what_numpy_rejects(equation, shapes):
    with pytest.raises(ValueError):
        einsum_output_shape(equation, shapes)


@pytest.mark.parametrize("largest", [True, False])
def test_top_k_order_breaks_ties_by_lower_index(largest):
    x = np.array([[3, 1, 3, 2, 1, 3]])
    order = top_k_order(x, 1, largest)
    expected = sorted(range(6), key=lambda i: (-x[0, i] if largest else x[0, i], i))
    assert order[0].tolist() == expected
