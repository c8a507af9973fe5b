"""The compiled small-plane convolution (output channels in vectors) against the numpy kernel it
stands in for (a plain product or im2col), and the oracle."""

from __future__ import annotations

import numpy as np
import pytest

from lite.kernels import fast
from lite.kernels.fast import crew, small_plane
from lite.kernels.fast.tile import WIDTH
from lite.kernels.window import Geometry
from tests.support.conv import (
    EPILOGUE_ACTIVATIONS,
    calls_per_image,
    conv,
    matches_the_numpy_kernel,
    onnx_reference,
    operands,
    residual_kernel,
)

pytestmark = pytest.mark.skipif(fast.numba_module() is None, reason="numba is not importable here")

# (x shape, weight shape, Conv2DFusion attrs), all with output planes of 7 to 49 positions:
# 1x1 in place and strided, 3x3 padded, strided and dilated, uneven pads and kernels, planes of
# 49 (tiles of 7), 48 and 30 (the last tile repeating positions), output channels
# that fill their panels of 48 and ones that do not, batches, more terms than a chunk
CASES = [
    ((1, 512, 7, 7), (96, 512, 1, 1), {}),
    ((2, 200, 14, 14), (130, 200, 1, 1), {"stride": (2, 2), "activation_type": "RELU"}),
    ((1, 64, 7, 7), (48, 64, 3, 3), {"pad_list": (1, 1, 1, 1), "activation_type": "RELU6"}),
    ((1, 96, 14, 14), (144, 96, 3, 3), {"stride": (2, 2), "pad_list": (1, 1, 1, 1)}),
    ((1, 40, 8, 10), (130, 40, 3, 3), {"dilation": (2, 2), "pad_list": (1, 2, 0, 1)}),
    ((2, 33, 6, 8), (48, 33, 1, 5), {"pad_list": (0, 2, 0, 2)}),  # 48 positions
    ((1, 20, 5, 6), (90, 20, 2, 2), {"pad_mode": "SAME_UPPER"}),  # 30 positions
    ((1, 300, 9, 9), (40, 300, 3, 3), {}),  # no pads: 2700 terms in chunks
]


@pytest.mark.parametrize(("x_shape", "w_shape", "attrs"), CASES)
def test_compiled_matches_the_numpy_kernel(monkeypatch, x_shape, w_shape, attrs):
    matches_the_numpy_kernel(monkeypatch, x_shape, w_shape, attrs)


def test_every_case_runs_the_small_plane_kernel(monkeypatch):
    small_plane._warm()  # compiled (and cached) before the kernel is replaced by a probe
    calls, images = calls_per_image(monkeypatch, small_plane, "panels", CASES)
    assert calls == images


@pytest.mark.parametrize(("out_plane", "out_channels", "group", "ends", "taken"), [
    ((7, 7), 512, 1, (1, 1), True),
    ((1, 7), 48, 1, (1, 1), True),  # the fewest positions
    ((8, 7), 512, 1, (1, 1), False),  # 56 positions: more than it takes
    ((2, 3), 512, 1, (1, 1), False),  # fewer than a tile
    ((7, 7), WIDTH + 1, 1, (1, 1), False),  # two panels for a panel's channels and one more
    ((7, 7), 160, 1, (1, 1), True),  # four panels for 160
    ((7, 7), 512, 2, (1, 1), False),
    ((7, 7), 512, 1, (-1, 0), False),  # a pad that crops
])
def test_which_convolutions_it_takes(out_plane, out_channels, group, ends, taken):
    geometry = Geometry((1, 256, 7, 7), (3, 3), (1, 1), (1, 1), (1, 1), ends, out_plane)
    assert small_plane.fits(geometry, group, out_channels) == taken


@pytest.mark.parametrize(("x_shape", "w_shape", "attrs"), [CASES[2], CASES[4]])
def test_matches_onnxruntime(x_shape, w_shape, attrs):
    x, w, b = operands(x_shape, w_shape, seed=2)
    top, left, bottom, right = attrs["pad_list"]
    dilations = list(attrs.get("dilation", (1, 1)))
    expected = onnx_reference("Conv", x, {"w": w, "b": b}, pads=[top, left, bottom, right], dilations=dilations)
    plain = {k: v for k, v in attrs.items() if k != "activation_type"}
    np.testing.assert_allclose(conv(x, w, b, plain), expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(("activation", "function"), EPILOGUE_ACTIVATIONS)
def test_an_activation_follows_the_clip(activation, function):
    """The activation ``lite.fusion`` hands over, applied as the output is written; every position
    written (the output starts as NaN)."""
    from lite.kernels.fast.activation import EPILOGUE_CODES

    x_shape, w_shape, attrs = CASES[2]
    x, w, b = operands(x_shape, w_shape, seed=3)
    linear = conv(x, w, b, {"pad_list": attrs["pad_list"]})
    plan = small_plane.SmallPlanePlan(Geometry(x_shape, w_shape[2:], (1, 1), (1, 1), (1, 1), (1, 1),
                                               linear.shape[2:]), w_shape[0])
    got = np.full(linear.shape, np.nan, np.float32)
    padded, sums = (np.zeros(shape, np.float32) for shape in plan.scratch)
    plan.fill(x, 0, padded)
    plan.run(plan.source(x, 0, padded), plan.arrange(w), sums, got, 0, b, np.float32(-np.inf), np.float32(np.inf),
             EPILOGUE_CODES[activation], np.float32(1.5))
    np.testing.assert_allclose(got, function(linear, 1.5), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(("x_shape", "w_shape", "attrs"), CASES)
def test_panels_on_the_crew_match_the_numpy_kernel(monkeypatch, crew_runs, x_shape, w_shape, attrs):
    threads, runs = crew_runs
    matches_the_numpy_kernel(monkeypatch, x_shape, w_shape, attrs, threads, seed=4)
    panels = -(-w_shape[0] // small_plane.WIDTH)
    ran = [run.job for run in runs]
    assert ran.count(crew.job_address(small_plane.panels_job)) == (x_shape[0] if panels > 1 else 0)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("contiguous", [True, False])
def test_a_residual_is_added_before_the_activation(threads, contiguous):
    """As ``lite.fusion`` sets it: relu(conv + bias + residual); a residual compiled code cannot
    take (a strided view) by the epilogue after."""
    x_shape, w_shape, attrs = CASES[0]
    x, w, b = operands(x_shape, w_shape, seed=5)
    linear = conv(x, w, b, attrs)
    rng = np.random.default_rng(6)
    whole = rng.standard_normal((linear.shape[0], linear.shape[1] * 2, *linear.shape[2:])).astype(np.float32)
    residual = np.ascontiguousarray(whole[:, ::2]) if contiguous else whole[:, ::2]
    kernel = residual_kernel(x, w, b, attrs, residual, threads)
    assert kernel.algorithm == "small_plane" and kernel.plan.takes_residual
    with kernel.threads.lent():
        kernel.execute()
    np.testing.assert_allclose(kernel.outputs[0].data, np.maximum(linear + residual, 0), rtol=1e-4, atol=1e-5)


def test_the_residual_may_be_the_output_itself():
    """relu(conv + bias + out): every sum is taken before a panel's channels are written."""
    x_shape, w_shape, attrs = CASES[0]
    x, w, b = operands(x_shape, w_shape, seed=7)
    linear = conv(x, w, b, attrs)
    plan = small_plane.SmallPlanePlan(Geometry(x_shape, (1, 1), (1, 1), (1, 1), (0, 0), (0, 0), (7, 7)), 96)
    out = np.random.default_rng(8).standard_normal(linear.shape).astype(np.float32)
    expected = np.maximum(linear + out, 0)
    padded, sums = (np.zeros(shape, np.float32) for shape in plan.scratch)
    plan.run(plan.source(x, 0, padded), plan.arrange(w), sums, out, 0, b, np.float32(0), np.float32(np.inf),
             residual=out)
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-5)
