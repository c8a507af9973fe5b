"""lite.ops.broadcast against numpy broadcasting and ONNX Expand (reference evaluator)."""

from __future__ import annotations

import numpy as np
import pytest

from lite.ops.broadcast import aligned, expand_shape, legacy_broadcast_shape
from tests.support.op_reference import run_reference

PAIRS = [((3, 1), (2, 1, 4)), ((2, 3, 4), (1, 4)), ((1,), (5, 1)), ((4, 1, 6), (4, 5, 1)), ((), (2, 3)),
         ((2, 3), ())]


def test_aligned_puts_ones_in_front():
    assert aligned((3, 4), 4) == [1, 1, 3, 4] and aligned((3, 4), 2) == [3, 4] and aligned((), 1) == [1]


@pytest.mark.parametrize("shape, target", PAIRS)
def test_expand_shape_is_onnx_expand(shape, target):
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    [y] = run_reference("Expand", {"x": x, "shape": np.array(target, np.int64)}, opset=13)
    assert tuple(expand_shape(shape, target)) == y.shape == np.broadcast_shapes(shape, target)


def test_expand_shape_keeps_a_dim_that_stands_for_the_target():
    batch = object()  # a symbolic dim whose value is now 8
    assert expand_shape([batch, 3, 1], [8, 1, 5], lambda dim, value: dim is batch and value == 8) == [batch, 3, 5]
    assert expand_shape([batch, 1], [8, 4]) == [8, 4]


@pytest.mark.parametrize("a_shape, b_shape, axis", [((2, 3, 4, 5), (3, 4), 1), ((2, 3, 4, 5), (3,), 1),
                                                    ((2, 3, 4, 5), (5,), 3), ((2, 3, 4), (2, 3, 4), 0),
                                                    ((2, 3, 4), (2,), 0)])
def test_legacy_broadcast_lines_b_up_at_axis(a_shape, b_shape, axis):
    rng = np.random.default_rng(2)
    a, b = rng.standard_normal(a_shape), rng.standard_normal(b_shape)
    expected = a.copy()
    for index in np.ndindex(*a_shape):
        expected[index] += b[index[axis:axis + len(b_shape)]]
    np.testing.assert_allclose(a + b.reshape(legacy_broadcast_shape(b_shape, len(a_shape), axis)), expected)
