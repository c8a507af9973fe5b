"""lite.ops.split against ONNX Split-18 ``num_outputs`` (reference evaluator)."""

from __future__ import annotations

import numpy as np
import pytest

from lite.ops.split import explicit_split_sizes, split_offsets, split_sizes
from tests.support.op_reference import run_reference


@pytest.mark.parametrize("dim, parts", [(6, 3), (7, 3), (5, 2), (5, 4), (1, 3), (10, 4), (0, 2), (9, 1)])
def test_split_sizes_are_onnx_splits(dim, parts):
    x = np.random.default_rng(8).standard_normal((2, dim)).astype(np.float32)
    pieces = run_reference("Split", {"x": x}, n_outputs=parts, axis=1, num_outputs=parts)
    assert split_sizes(dim, parts) == [p.shape[1] for p in pieces]
    offsets = split_offsets(split_sizes(dim, parts))
    for piece, start, stop in zip(pieces, offsets, offsets[1:], strict=False):
        np.testing.assert_array_equal(x[:, start:stop], piece)


def test_explicit_sizes_only_where_onnx_would_split_otherwise():
    assert explicit_split_sizes(6, 3) == [] and explicit_split_sizes(-1, 3) == []
    assert explicit_split_sizes(7, 3) == [3, 3, 1] and explicit_split_sizes(5, 4) == [2, 2, 1, 0]


def test_split_offsets():
    assert split_offsets([2, 3, 0, 1]) == [0, 2, 5, 5, 6] and split_offsets([]) == [0]
