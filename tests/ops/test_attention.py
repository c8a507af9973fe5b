"""lite.ops.attention: the scores and output shapes of softmax(q @ k + mask) @ v, as numpy's matmul gives them."""

from __future__ import annotations

import numpy as np
import pytest

from lite.ops.attention import attention_shapes


@pytest.mark.parametrize(("q", "k", "v", "mask"), [
    ((2, 4, 7, 16), (2, 4, 16, 9), (2, 4, 9, 8), (7, 9)),
    ((5, 8), (8, 6), (6, 3), None),
    ((2, 1, 5, 4), (1, 3, 4, 9), (3, 9, 4), (2, 1, 1, 9)),
])
def test_shapes_are_numpys(q, k, v, mask):
    a, b, c = (np.ones(s) for s in (q, k, v))
    scores = a @ b + (0 if mask is None else np.ones(mask))
    assert attention_shapes(q, k, v, mask) == (scores.shape, (scores @ c).shape)


@pytest.mark.parametrize(("q", "k", "v", "mask", "message"), [
    ((4, 8), (7, 5), (5, 8), None, "inner dims"), ((4, 8), (8, 5), (6, 8), None, "inner dims"),
    ((2, 4, 8), (3, 8, 5), (5, 8), None, "q and k"), ((4, 8), (8, 5), (5, 8), (3, 5), "mask"),
    ((8,), (8, 5), (5, 8), None, "2 or more"),
])
def test_bad_shapes_raise(q, k, v, mask, message):
    with pytest.raises(ValueError, match=message):
        attention_shapes(q, k, v, mask)
