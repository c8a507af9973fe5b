"""lite.ops.resize against ONNX Resize (onnxruntime, and the ONNX reference's own functions): output dims from
scales, scales from sizes, keep_aspect_ratio_policy, coordinates and interpolation weights."""

from __future__ import annotations

import numpy as np
import pytest
from onnx.reference.ops.op_resize import _compute_x_ori, _cubic_coeffs

from lite.ops.resize import (
    cubic_weight,
    interpolation_taps,
    keep_aspect_ratio,
    outside,
    resize_scale,
    resized_dim,
    source_coordinates,
)
from tests.support.op_reference import run_ort


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


@pytest.mark.parametrize("policy", ["not_larger", "not_smaller"])
@pytest.mark.parametrize("shape, sizes, axes", [((1, 2, 7, 9), [4, 6], [2, 3]), ((1, 3, 5, 6), [9, 13], [2, 3]),
                                                ((2, 7, 5), [3, 11], [2, 0]), ((1, 2, 6, 4), [5, 9], [3, 2])])
def test_keep_aspect_ratio_dims_are_onnxruntimes(policy, shape, sizes, axes):
    x = np.random.default_rng(12).standard_normal(shape).astype(np.float32)
    full = list(shape)
    for axis, size in zip(axes, sizes, strict=True):
        full[axis] = size
    [y] = run_ort("Resize", {"x": x, "sizes": np.array(sizes, np.int64)}, opset=18, node_inputs=["x", "", "", "sizes"],
                  axes=axes, keep_aspect_ratio_policy=policy)
    dims, scales = keep_aspect_ratio(shape, full, axes, policy)
    assert y.shape == tuple(dims)
    assert len({scales[a] for a in axes}) == 1 and all(scales[a] == 1 for a in range(len(shape)) if a not in axes)


def test_stretch_keeps_the_sizes():
    assert keep_aspect_ratio((1, 2, 4, 4), [1, 2, 6, 2], [2, 3], "stretch") == ([1, 2, 6, 2], [1.0, 1.0, 1.5, 0.5])


@pytest.mark.parametrize("a", [-0.75, -0.5])
@pytest.mark.parametrize("ratio", [0.1, 0.5, 0.73, 1.0])
def test_cubic_weights_are_the_onnx_references(a, ratio):
    expected = _cubic_coeffs(ratio, A=a)
    np.testing.assert_allclose(cubic_weight(np.array([ratio + 1, ratio, 1 - ratio, 2 - ratio]), a), expected,
                               rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("method", ["LINEAR", "CUBIC"])
@pytest.mark.parametrize("scale, antialias", [(2.0, False), (0.6, False), (0.6, True), (0.25, True), (1.5, True)])
def test_taps_sum_to_one_and_stay_inside(method, scale, antialias):
    n_in = 9
    n_out = resized_dim(n_in, scale)
    coords = source_coordinates("HALF_PIXEL", n_out, n_in, scale)
    indices, weights = interpolation_taps(method, coords, n_in, scale, antialias=antialias)
    np.testing.assert_allclose(weights.sum(axis=1), 1, rtol=1e-6)
    assert indices.min() >= 0 and indices.max() < n_in
    support = (1 if method == "LINEAR" else 2) / (min(scale, 1) if antialias else 1)
    assert weights.shape[1] == 2 * int(np.ceil(support))  # the footprint of the (widened) kernel


@pytest.mark.parametrize("mode", ["HALF_PIXEL", "ASYMMETRIC", "PYTORCH_HALF_PIXEL", "HALF_PIXEL_SYMMETRIC"])
@pytest.mark.parametrize("n_in, scale", [(5, 1.5), (7, 0.6), (4, 2.0), (9, 0.35)])
def test_coordinates_are_the_onnx_references(mode, n_in, scale):
    """Where onnxruntime and the reference agree (the reference's output_width is n_in * scale, unfloored)."""
    n_out = resized_dim(n_in, scale)
    expected, _ = _compute_x_ori(mode.lower(), np.arange(n_out, dtype=np.float64), float(np.float32(scale)), n_in,
                                 float(np.float32(scale)) * n_in, n_out, None)
    if mode == "PYTORCH_HALF_PIXEL" and n_out == 1:
        expected = np.zeros(1)  # NOTE: the spec's 0 (the reference writes -0.5; both round to index 0)
    np.testing.assert_allclose(source_coordinates(mode, n_out, n_in, scale), expected, rtol=1e-5, atol=1e-5)


def test_tf_crop_and_resize_coordinates_and_the_outside():
    coords = source_coordinates("TF_CROP_AND_RESIZE", 5, 6, 1.0, (-0.2, 1.2))
    np.testing.assert_allclose(coords, np.linspace(-0.2 * 5, 1.2 * 5, 5), rtol=1e-6)
    assert outside(coords, 6).tolist() == [True, False, False, False, True]
    np.testing.assert_allclose(source_coordinates("TF_CROP_AND_RESIZE", 1, 6, 1.0, (0.2, 0.6)), [2.0])
