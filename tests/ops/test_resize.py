"""lite.ops.resize against ONNX Resize (onnxruntime): output dims from scales, scales from sizes."""

from __future__ import annotations

import numpy as np
import pytest

from lite.ops.resize import resize_scale, resized_dim
from tests.ops.reference import run_ort


@pytest.mark.parametrize("scales", [(1.0, 1.0, 2.0, 0.5), (1.0, 1.0, 1.7, 0.34), (1.0, 1.0, 0.999, 3.01),
                                    (1.0, 1.0, 2.5, 1.25)])
def test_resized_dims_are_onnxruntimes(scales):
    x = np.random.default_rng(10).standard_normal((1, 2, 7, 9)).astype(np.float32)
    inputs = {"x": x, "roi": np.zeros(0, np.float32), "scales": np.array(scales, np.float32)}
    [y] = run_ort("Resize", inputs, opset=13, mode="nearest")
    assert y.shape == tuple(resized_dim(n, s) for n, s in zip(x.shape, scales, strict=True))


@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_sizes_resize_as_their_scales_do(mode):
    x = np.random.default_rng(11).standard_normal((1, 2, 6, 7)).astype(np.float32)
    sizes = np.array([1, 2, 9, 5], np.int64)
    scales = np.array([resize_scale(n, d) for n, d in zip(x.shape, sizes, strict=True)], np.float32)
    empty = np.zeros(0, np.float32)
    [by_sizes] = run_ort("Resize", {"x": x, "sizes": sizes}, opset=13, node_inputs=["x", "", "", "sizes"], mode=mode)
    [by_scales] = run_ort("Resize", {"x": x, "roi": empty, "scales": scales}, opset=13, mode=mode)
    assert scales.dtype == np.float32 and by_sizes.shape == tuple(sizes)
    np.testing.assert_allclose(by_sizes, by_scales, rtol=1e-6, atol=1e-6)
