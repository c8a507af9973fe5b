"""lite.ops.padding against ONNX Pad (onnxruntime): negative pads crop, then positive ones pad."""

from __future__ import annotations

import numpy as np
import pytest

from lite.ops.padding import PADDING_MODES, begins_ends, kept
from lite.schema.fb.PaddingMode import PaddingMode
from lite.schema.primitives import enum_names
from tests.support.op_reference import run_ort


def test_padding_modes_are_the_schemas():
    assert set(PADDING_MODES) == set(enum_names(PaddingMode).values())


@pytest.mark.parametrize("mode", PADDING_MODES)
@pytest.mark.parametrize("pads", [[1, -2, 0, 2, 1, -1], [-1, 0, -3, 0, 2, 1], [0, 0, 0, 0, 0, 0], [2, 1, 0, -1, -2, 3]])
def test_crop_then_pad_is_onnx_pad(mode, pads):
    x = np.random.default_rng(4).standard_normal((4, 5, 6)).astype(np.float32)
    [expected] = run_ort("Pad", {"x": x, "pads": np.array(pads, np.int64)}, opset=19, mode=mode.lower())
    begins, ends = begins_ends(pads, x.ndim)
    cropped = x[tuple(kept(d, b, e) for d, b, e in zip(x.shape, begins, ends, strict=True))]
    widths = [(max(b, 0), max(e, 0)) for b, e in zip(begins, ends, strict=True)]
    np.testing.assert_array_equal(np.pad(cropped, widths, mode=mode.lower()), expected)
