"""lite.ops.slicing against ONNX Slice (onnxruntime), bounds far outside the dim included."""

from __future__ import annotations

import numpy as np
import pytest

from lite.ops.slicing import INT64_MAX, clamped_slice
from tests.support.op_reference import run_ort

BOUNDS = [-9, -7, -3, -1, 0, 1, 2, 5, 6, 7, 11]


@pytest.mark.parametrize("step", [1, 2, 3, -1, -2, -4])
@pytest.mark.parametrize("dim", [1, 6, 7])
def test_clamped_slice_is_onnx_slice(step, dim):
    x = np.random.default_rng(6).standard_normal(dim).astype(np.float32)
    ends = [*BOUNDS, INT64_MAX if step > 0 else -INT64_MAX]  # the usual "to the end"
    for start in BOUNDS:
        for end in ends:
            inputs = {"x": x, **{k: np.array([v], np.int64) for k, v in
                                 {"starts": start, "ends": end, "axes": 0, "steps": step}.items()}}
            [expected] = run_ort("Slice", inputs, opset=13)
            np.testing.assert_array_equal(x[clamped_slice(start, end, step, dim)], expected,
                                          err_msg=f"start {start}, end {end}")
