"""The compiled direct convolution for few input channels against the numpy kernel it stands in
for (im2col), and the oracle."""

from __future__ import annotations

import numpy as np
import pytest

from lite.kernels import fast
from lite.kernels.fast import direct
from lite.kernels.fast.tile import ROWS
from lite.kernels.window import Geometry
from tests.support.conv import (
    EPILOGUE_ACTIVATIONS,
    calls_per_image,
    conv,
    matches_the_numpy_kernel,
    onnx_attrs,
    onnx_reference,
    operands,
    residual_kernel,
)

pytestmark = pytest.mark.skipif(fast.numba_module() is None, reason="numba is not importable here")

# (x shape, weight shape, Conv2DFusion attrs): strides, dilations, pads, output channels that are
# and are not multiples of the tile's rows, batches, planes narrower than one tile
CASES = [
    ((1, 3, 20, 20), (8, 3, 3, 3), {"pad_list": (1, 1, 1, 1)}),
    ((2, 3, 21, 19), (20, 3, 3, 3), {"stride": (2, 2), "pad_list": (1, 1, 1, 1), "activation_type": "RELU6"}),
    ((1, 3, 23, 23), (13, 3, 7, 7), {"stride": (2, 2), "pad_list": (3, 3, 3, 3), "activation_type": "RELU"}),
    ((1, 4, 24, 22), (5, 4, 3, 3), {"dilation": (2, 3), "pad_list": (2, 3, 1, 0)}),
    ((1, 2, 25, 29), (16, 2, 5, 5), {"stride": (3, 2), "pad_list": (2, 2, 1, 3)}),
    ((1, 16, 13, 13), (24, 16, 3, 3), {"pad_mode": "SAME_UPPER"}),
    ((1, 6, 11, 10), (9, 6, 4, 4), {"stride": (2, 2), "pad_mode": "SAME_LOWER"}),
    ((1, 5, 9, 11), (7, 5, 1, 3), {"pad_list": (0, 1, 0, 1)}),  # one row of taps
    ((1, 3, 4, 3), (2, 3, 3, 3), {"pad_list": (1, 1, 1, 1)}),  # a plane narrower than one tile
    ((3, 1, 6, 6), (1, 1, 2, 2), {}),  # one input and one output channel, no pads
    ((1, 64, 9, 9), (8, 64, 3, 3), {"pad_list": (1, 1, 1, 1)}),  # 576 terms
    ((1, 128, 9, 9), (16, 128, 3, 3), {"pad_list": (1, 1, 1, 1)}),  # 1152 terms: the most it takes
]










@pytest.mark.parametrize(("x_shape", "w_shape", "attrs"), CASES)
def test_compiled_matches_the_numpy_kernel(monkeypatch, x_shape, w_shape, attrs):
    matches_the_numpy_kernel(monkeypatch, x_shape, w_shape, attrs)


def test_every_case_runs_the_direct_kernel(monkeypatch):
    direct._warm()  # compiled (and cached) before the kernel is replaced by a probe
    calls, images = calls_per_image(monkeypatch, direct, "rows", CASES)
    assert calls == images


@pytest.mark.parametrize(("x_shape", "w_shape", "group"), [
    ((1, 3, 8, 8), (4, 3, 3, 3), 1),
    ((1, 128, 8, 8), (4, 128, 3, 3), 1),
    ((1, 129, 8, 8), (4, 129, 3, 3), 1),  # 1161 terms: more than it takes
    ((1, 8, 8, 8), (8, 4, 3, 3), 2),  # groups
    ((1, 3, 8, 8), (4, 3, 1, 1), 1),  # one tap: a plain product
])
def test_which_convolutions_it_takes(x_shape, w_shape, group):
    geometry = Geometry(x_shape, w_shape[2:], (1, 1), (1, 1), (1, 1), (1, 1), x_shape[2:])
    terms = x_shape[1] // group * w_shape[2] * w_shape[3]
    assert direct.fits(geometry, x_shape[1] // group, group) == (group == 1 and 1 < terms <= 1152 and w_shape[2] > 1)


@pytest.mark.parametrize("band", [1, 3])
def test_bands_of_rows(monkeypatch, band):
    """Output rows in bands of one row, and of three (the last band shorter), each band's tiles
    running past its end into the spare columns."""
    row_floats = -(-8 // ROWS) * ROWS * 22  # the row blocks of 8 output channels, 22 wide columns
    monkeypatch.setattr(direct, "BAND_FLOATS", 1 if band == 1 else band * row_floats)
    x, w, b = operands((1, 3, 40, 40), (8, 3, 3, 3), seed=1)
    plan = direct.DirectPlan(Geometry(x.shape, (3, 3), (2, 2), (1, 1), (1, 1), (1, 1), (20, 20)), 8)
    assert plan.band == band
    expected = onnx_reference("Conv", x, {"w": w, "b": b}, strides=[2, 2], pads=[1, 1, 1, 1])
    np.testing.assert_allclose(conv(x, w, b, {"stride": (2, 2), "pad_list": (1, 1, 1, 1)}), expected,
                               rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("rest", [5, 16, 20, 40, 48])
def test_a_band_ends_in_a_tile_as_narrow_as_its_last_columns(rest):
    """One output row whose wide row is 48 + ``rest`` columns: the last tile one, two or three
    vectors wide (or none past a whole one); it must neither drop nor corrupt columns."""
    width = 48 + rest - 2  # NOTE: the wide row holds the two pad columns
    x, w, b = operands((1, 3, 1, width), (16, 3, 3, 3), seed=4)
    assert direct.DirectPlan(Geometry(x.shape, (3, 3), (1, 1), (1, 1), (1, 1), (1, 1), (1, width)), 16).wq == 48 + rest
    expected = onnx_reference("Conv", x, {"w": w, "b": b}, pads=[1, 1, 1, 1])
    np.testing.assert_allclose(conv(x, w, b, {"pad_list": (1, 1, 1, 1)}), expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(("x_shape", "w_shape", "attrs"), [
    ((1, 3, 224, 224), (32, 3, 3, 3), {"stride": (2, 2), "pad_list": (1, 1, 1, 1), "activation_type": "RELU6"}),
    ((1, 3, 224, 224), (64, 3, 7, 7), {"stride": (2, 2), "pad_list": (3, 3, 3, 3), "activation_type": "RELU"}),
    ((1, 16, 55, 55), (64, 16, 3, 3), {"pad_list": (1, 1, 1, 1), "activation_type": "RELU"}),
])
def test_matches_onnxruntime_on_real_layers(x_shape, w_shape, attrs):
    """MobileNetV2's and ResNet's stems and a SqueezeNet expand layer, on 1 and 2 threads."""
    from lite.kernels.parallel import KernelThreads
    from tests.support.conv import ACTIVATIONS

    x, w, b = operands(x_shape, w_shape, seed=2)
    expected = ACTIVATIONS[attrs["activation_type"]](onnx_reference("Conv", x, {"w": w, "b": b}, **onnx_attrs(attrs)))
    for threads in (None, KernelThreads(2)):
        np.testing.assert_allclose(conv(x, w, b, attrs, threads), expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(("activation", "function"), EPILOGUE_ACTIVATIONS)
@pytest.mark.parametrize(("x_shape", "w_shape", "attrs"), [CASES[0], CASES[1], CASES[4], CASES[8]])
def test_an_activation_follows_the_clip(monkeypatch, activation, function, x_shape, w_shape, attrs):
    from lite.kernels.fast.activation import EPILOGUE_CODES

    x, w, b = operands(x_shape, w_shape, seed=3)
    plain = {k: v for k, v in attrs.items() if k != "activation_type"}
    monkeypatch.setenv("DELITE_FAST_KERNELS", "0")
    linear = conv(x, w, b, plain)
    top, left, bottom, right = plain["pad_list"]
    plan = direct.DirectPlan(Geometry(x_shape, w_shape[2:], plain.get("stride", (1, 1)), (1, 1), (top, left),
                                      (bottom, right), linear.shape[2:]), w_shape[0])
    got = np.full(linear.shape, np.nan, np.float32)
    phases, wide = (np.zeros(shape, np.float32) for shape in plan.scratch)
    weights, lo, hi = plan.arrange(w), np.float32(-np.inf), np.float32(np.inf)
    for image in range(x_shape[0]):
        plan.fill(x, image, phases)
        plan.rows(weights, phases, wide, got, image, b, lo, hi, EPILOGUE_CODES[activation], np.float32(1.5))
    np.testing.assert_allclose(got, function(linear, 1.5), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(("x_shape", "w_shape", "attrs"), CASES)
def test_rows_on_the_crew_match_the_numpy_kernel(monkeypatch, crew_runs, x_shape, w_shape, attrs):
    threads, runs = crew_runs
    matches_the_numpy_kernel(monkeypatch, x_shape, w_shape, attrs, threads, seed=4)
    output_rows = conv(*operands(x_shape, w_shape), attrs).shape[2]
    assert len(runs) == (x_shape[0] if output_rows > 1 else 0)  # each image's rows on the crew




@pytest.mark.parametrize("contiguous", [True, False])
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize(("x_shape", "w_shape", "attrs"), [CASES[0], CASES[1], CASES[5], CASES[9]])
def test_a_residual_is_added_before_the_activation(threads, contiguous, x_shape, w_shape, attrs):
    """As ``lite.fusion`` sets it: relu(conv + bias + residual), written out by the rows (on the crew
    with two threads); a residual compiled code cannot take (a strided view) by the epilogue after."""
    x, w, b = operands(x_shape, w_shape, seed=5)
    plain = {k: v for k, v in attrs.items() if k != "activation_type"}
    linear = conv(x, w, b, plain)
    rng = np.random.default_rng(6)
    residual = rng.standard_normal(linear.shape).astype(np.float32) if contiguous else \
        rng.standard_normal((*linear.shape[:-1], 2 * linear.shape[-1])).astype(np.float32)[..., ::2]
    kernel = residual_kernel(x, w, b, plain, residual, threads)
    assert kernel.algorithm == "compiled_direct" and kernel.plan.takes_residual
    with kernel.threads.lent():
        kernel.execute()
    np.testing.assert_allclose(kernel.outputs[0].data, np.maximum(linear + residual, 0), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("ow", [1, 15, 16, 17, 31, 33, 111])
@pytest.mark.parametrize("residual_kind", ["none", "separate", "the output itself"])
def test_rows_are_written_out_with_bias_residual_and_clip(ow, residual_kind):
    """write_out's vector spans (rows of at least 16 columns; the last vector overlaps the one
    before) and scalar rows: every column once, a residual that is the output array itself read
    before it is overwritten, a NaN kept as numpy keeps it."""
    rng = np.random.default_rng(ow)
    channels, rows, wq = 3, 4, ow + 2
    wide = rng.standard_normal((channels, rows * wq + 8)).astype(np.float32)
    wide[1, wq + ow // 2] = np.nan
    bias = rng.standard_normal(channels).astype(np.float32)
    out = rng.standard_normal((1, channels, rows, ow)).astype(np.float32)
    sums = wide[:, :rows * wq].reshape(channels, rows, wq)[None, :, :, :ow] + bias[:, None, None]
    if residual_kind == "none":
        residual = direct.NO_RESIDUAL
    else:
        residual = out if residual_kind == "the output itself" else rng.standard_normal(out.shape).astype(np.float32)
        sums = sums + residual
    expected = np.minimum(np.maximum(sums, np.float32(-0.5)), np.float32(0.5))
    direct.write_out(wide, out, 0, bias, np.float32(-0.5), np.float32(0.5), direct.CLIP_CODE, direct.ONE, wq, 0,
                     rows, residual.reshape(-1))
    np.testing.assert_array_equal(out, expected)
