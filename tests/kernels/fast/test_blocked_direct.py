"""The compiled direct convolution on channel blocks against the numpy kernel it stands in for
(im2col), and the oracle."""

from __future__ import annotations

import numpy as np
import pytest

from lite.kernels import fast
from lite.kernels.fast import blocked_direct, crew
from lite.kernels.parallel import KernelThreads
from lite.kernels.window import Geometry
from tests.support.conv import (
    EPILOGUE_ACTIVATIONS,
    build,
    calls_per_image,
    conv,
    matches_the_numpy_kernel,
    onnx_reference,
    operands,
    residual_kernel,
)

pytestmark = pytest.mark.skipif(fast.numba_module() is None, reason="numba is not importable here")

# (x shape, weight shape, Conv2DFusion attrs), all with more terms than fast.direct takes:
# channels and output channels that are and are not multiples of a block (16) and of a group
# of blocks (48), pads on some sides only, batches, rows narrower than a tile, wide kernels
CASES = [
    ((1, 130, 9, 9), (20, 130, 3, 3), {"pad_list": (1, 1, 1, 1)}),
    ((2, 144, 7, 6), (50, 144, 3, 3), {"pad_list": (1, 1, 1, 1), "activation_type": "RELU"}),
    ((1, 160, 8, 8), (96, 160, 3, 3), {"pad_mode": "SAME_UPPER", "activation_type": "RELU6"}),
    ((1, 131, 6, 11), (17, 131, 3, 3), {"pad_list": (0, 2, 1, 0)}),
    ((1, 48, 8, 8), (33, 48, 5, 5), {"pad_list": (2, 2, 2, 2)}),
    ((1, 129, 4, 4), (16, 129, 3, 3), {}),  # no pads: a 2 x 2 output
    ((1, 200, 3, 3), (8, 200, 1, 7), {"pad_list": (0, 3, 0, 3)}),  # one row of taps
    ((1, 130, 14, 14), (20, 130, 3, 3), {"stride": (2, 2), "pad_list": (1, 1, 1, 1), "activation_type": "RELU"}),
    ((2, 140, 9, 12), (17, 140, 3, 3), {"stride": (2, 3), "pad_list": (0, 1, 2, 1)}),  # odd sizes, uneven pads
    ((1, 64, 11, 11), (20, 64, 5, 5), {"stride": (3, 3), "pad_list": (2, 2, 2, 2)}),
    ((1, 132, 9, 10), (112, 132, 3, 3), {"pad_list": (1, 1, 1, 1)}),  # seven blocks: groups of three, two, two
]


@pytest.mark.parametrize(("x_shape", "w_shape", "attrs"), CASES)
def test_compiled_matches_the_numpy_kernel(monkeypatch, x_shape, w_shape, attrs):
    matches_the_numpy_kernel(monkeypatch, x_shape, w_shape, attrs)


def test_every_case_runs_the_blocked_kernel(monkeypatch):
    blocked_direct._warm()  # compiled (and cached) before the kernel is replaced by a probe
    calls, images = calls_per_image(monkeypatch, blocked_direct, "write_out", CASES)
    assert calls == images


@pytest.mark.parametrize(("strides", "dilations", "kernel", "group", "taken"), [
    ((1, 1), (1, 1), (3, 3), 1, True),
    ((2, 2), (1, 1), (3, 3), 1, True),
    ((1, 1), (2, 2), (3, 3), 1, False),
    ((1, 1), (1, 1), (3, 3), 2, False),
    ((1, 1), (1, 1), (1, 1), 1, False),  # one tap: a plain product
])
def test_which_convolutions_it_takes(strides, dilations, kernel, group, taken):
    geometry = Geometry((1, 256, 14, 14), kernel, strides, dilations, (1, 1), (1, 1), (14, 14))
    assert blocked_direct.fits(geometry, group) == taken


@pytest.mark.parametrize(("x_shape", "w_shape", "attrs"), [CASES[0], CASES[1]])
def test_matches_onnxruntime(x_shape, w_shape, attrs):
    x, w, b = operands(x_shape, w_shape, seed=2)
    expected = onnx_reference("Conv", x, {"w": w, "b": b}, pads=[1, 1, 1, 1])  # NOTE: both cases pad 1 all round
    np.testing.assert_allclose(conv(x, w, b, {"pad_list": (1, 1, 1, 1)}), expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(("activation", "function"), EPILOGUE_ACTIVATIONS)
@pytest.mark.parametrize(("x_shape", "w_shape", "attrs"), [CASES[1], CASES[3]])
def test_an_activation_follows_the_clip(activation, function, x_shape, w_shape, attrs):
    """The activation ``lite.fusion`` hands over, applied as the output is written out; every
    position written (the output starts as NaN)."""
    from lite.kernels.fast.activation import EPILOGUE_CODES

    x, w, b = operands(x_shape, w_shape, seed=3)
    plain = {k: v for k, v in attrs.items() if k != "activation_type"}
    linear = conv(x, w, b, plain)
    top, left, bottom, right = plain["pad_list"]
    plan = blocked_direct.BlockedDirectPlan(Geometry(x_shape, w_shape[2:], (1, 1), (1, 1), (top, left),
                                                     (bottom, right), linear.shape[2:]), w_shape[0])
    got = np.full(linear.shape, np.nan, np.float32)
    padded, wide = (np.zeros(shape, np.float32) for shape in plan.scratch)
    weights, lo, hi = plan.arrange(w), np.float32(-np.inf), np.float32(np.inf)
    for image in range(x_shape[0]):
        plan.fill(x, image, padded)
        plan.products(weights, padded, wide)
        plan.write_out(wide, got, image, b, lo, hi, EPILOGUE_CODES[activation], np.float32(1.5))
    np.testing.assert_allclose(got, function(linear, 1.5), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(("x_shape", "w_shape", "attrs"), CASES)
def test_products_on_the_crew_match_the_numpy_kernel(monkeypatch, crew_runs, x_shape, w_shape, attrs):
    threads, runs = crew_runs
    matches_the_numpy_kernel(monkeypatch, x_shape, w_shape, attrs, threads, seed=4)
    reference = conv(*operands(x_shape, w_shape), attrs)
    top, left, bottom, right = (1, 1, 1, 1) if "pad_mode" in attrs else attrs.get("pad_list", (0, 0, 0, 0))
    plan = blocked_direct.BlockedDirectPlan(Geometry(x_shape, w_shape[2:], attrs.get("stride", (1, 1)), (1, 1),
                                                     (top, left), (bottom, right), reference.shape[2:]), w_shape[0])
    units = plan.units
    ran = [run.job for run in runs]
    job = {name: crew.job_address(getattr(blocked_direct, name)) for name in ("fill_job", "products_job", "write_job")}
    assert ran.count(job["products_job"]) == (x_shape[0] if units > 1 else 0)  # each image's products, if split
    assert ran.count(job["fill_job"]) == (x_shape[0] if x_shape[1] > 16 else 0)  # its input blocks, if several
    assert ran.count(job["write_job"]) == x_shape[0]  # its output channels


@pytest.mark.parametrize("threads", [1, 2])
def test_a_residual_is_added_before_the_activation(threads):
    """As ``lite.fusion`` sets it: relu(conv + bias + residual)."""
    x_shape, w_shape, attrs = CASES[0]
    x, w, b = operands(x_shape, w_shape, seed=5)
    linear = conv(x, w, b, attrs)
    residual = np.random.default_rng(6).standard_normal(linear.shape).astype(np.float32)
    kernel = residual_kernel(x, w, b, attrs, residual, threads)
    assert kernel.algorithm == "blocked_direct" and kernel.plan.takes_residual
    with kernel.threads.lent():
        kernel.execute()
    np.testing.assert_allclose(kernel.outputs[0].data, np.maximum(linear + residual, 0), rtol=1e-4, atol=1e-5)


POINTWISE = [  # 1x1 layers blocked_pointwise takes where BLAS runs AVX2 kernels on a 512-bit core
    ((1, 256, 14, 14), (130, 256, 1, 1), {"activation_type": "RELU"}),
    ((2, 128, 9, 9), (160, 128, 1, 1), {}),
    ((1, 144, 28, 28), (256, 144, 1, 1), {"stride": (2, 2)}),  # a ResNet's downsampling shortcut
]


@pytest.mark.parametrize(("x_shape", "w_shape", "attrs"), POINTWISE)
@pytest.mark.parametrize("threads", [1, 2])
def test_1x1_layers_on_the_blocked_kernel_match_the_numpy_kernel(monkeypatch, x_shape, w_shape, attrs, threads):
    """With BLAS on its AVX2 kernels (``lite.threads.blas_architectures``), these run ``blocked_pointwise``
    on 512-bit cores; with its AVX-512 ones, BLAS."""
    from lite.kernels import conv_plans

    for blas, chosen in (("haswell", fast.wide_registers()), ("skylakex", False)):
        monkeypatch.setattr(conv_plans, "blas_architectures", lambda kind=blas: frozenset({kind}))
        x, w, b = operands(x_shape, w_shape)
        kernel = build("Conv2DFusion", {"group": 1, **attrs}, [x, w, b])
        kernel.prepare()
        kernel.resize()
        assert (kernel.algorithm == "blocked_pointwise") == chosen
        matches_the_numpy_kernel(monkeypatch, x_shape, w_shape, attrs, KernelThreads(threads))


# (x shape, weight shape, strides, pads): the stems of SqueezeNet and ResNet, one channel, a
# 24-channel input (its blocks would be a quarter padding), planes whose last tile is short
NARROW = [
    ((2, 3, 31, 31), (64, 3, 3, 3), (2, 2), (0, 0, 0, 0)),
    ((1, 3, 30, 30), (64, 3, 7, 7), (2, 2), (3, 3, 3, 3)),
    ((1, 1, 15, 13), (40, 1, 3, 3), (2, 1), (1, 0, 1, 2)),
    ((1, 24, 9, 9), (50, 24, 3, 3), (1, 1), (1, 1, 1, 1)),
    ((1, 3, 3, 3), (20, 3, 3, 3), (1, 1), (0, 0, 0, 0)),
]


@pytest.mark.parametrize("residual", [False, True])
@pytest.mark.parametrize(("x_shape", "w_shape", "strides", "pads"), NARROW)
def test_the_narrow_form_reads_nchw_into_channel_blocks(x_shape, w_shape, strides, pads, residual):
    """``fill`` with each position's channels alone, then ``block_products`` into channel blocks:
    the convolution with bias, residual and clip."""
    from lite.kernels.fast.blocks import LANES, blocks, from_blocks, padded_bias, to_blocks

    x, w, b = operands(x_shape, w_shape, seed=7)
    top, left, bottom, right = pads
    expected = onnx_reference("Conv", x, {"w": w, "b": b}, strides=list(strides), pads=[top, left, bottom, right])
    added = np.random.default_rng(8).standard_normal(expected.shape).astype(np.float32)
    plan = blocked_direct.BlockedDirectPlan(Geometry(x_shape, w_shape[2:], strides, (1, 1), (top, left),
                                                     (bottom, right), expected.shape[2:]), w_shape[0], narrow=True)
    assert plan.offsets.size == np.prod(w_shape[1:])  # NOTE: the real terms alone
    padded, tail = (np.full(shape, np.nan, np.float32) for shape in plan.block_scratch)
    out_blocks, positions = blocks(w_shape[0]), expected.shape[2] * expected.shape[3]
    out, blocked_residual = (np.full((out_blocks, positions, LANES), np.nan, np.float32) for _ in range(2))
    got = np.empty_like(expected)
    weights, bias, lo = plan.arrange(w), padded_bias(b, out_blocks), np.float32(-1.0)
    for image in range(x_shape[0]):
        plan.fill(x, image, padded)
        if residual:
            to_blocks(added, image, blocked_residual)
        plan.block_products(weights, padded, out, tail, bias, lo, np.float32(np.inf),
                            residual=blocked_residual if residual else blocked_direct.NO_BLOCKS_RESIDUAL)
        from_blocks(out, image, got)
    want = np.maximum(expected + added if residual else expected, -1.0)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("narrow", [True, False])
@pytest.mark.parametrize(("x_shape", "w_shape", "strides", "pads"), NARROW)
def test_the_fill_by_rows_places_what_the_fill_places_whatever_the_pieces(crew_runs, x_shape, w_shape, strides, pads,
                                                                        narrow):
    """``fill_rows`` in one piece, in pieces of one row and as crew jobs over a padded input of NaN:
    the same array as ``fill`` (pads and each phase's tail zero)."""
    threads, runs = crew_runs
    x, _, _ = operands(x_shape, w_shape, seed=9)
    top, left, bottom, right = pads
    out = [(size + a + b - k) // s + 1
           for size, a, b, k, s in zip(x_shape[2:], pads[:2], pads[2:], w_shape[2:], strides, strict=True)]
    plan = blocked_direct.BlockedDirectPlan(Geometry(x_shape, w_shape[2:], strides, (1, 1), (top, left),
                                                     (bottom, right), tuple(out)), w_shape[0], narrow=narrow)
    image = x_shape[0] - 1
    want = np.full(plan.block_scratch[0], np.nan, np.float32)
    plan.fill(x, image, want)
    rows = plan.padded_rows
    for pieces in ([(0, rows)], [(r, r + 1) for r in range(rows)][::-1]):
        got = np.full_like(want, np.nan)
        for first, last in pieces:
            plan.fill_rows(x, image, got, first, last)
        np.testing.assert_array_equal(got, want)
    got = np.full_like(want, np.nan)
    jobs = blocked_direct.fill_rows_jobs(plan, got, threads.crew_bounds(rows, 2))
    blocked_direct.aim_fill_rows(jobs, x, image)
    jobs()
    assert runs == [jobs]
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize(("activation", "function"), EPILOGUE_ACTIVATIONS)
def test_the_activation_runs_on_every_tile_of_every_piece(activation, function):
    """Tiles take their activation in runs of ACTIVATION_TILES after their last terms: a plane of
    29 tiles (the last short) in pieces that cut runs, two groups of blocks, every position once."""
    from lite.kernels.fast.activation import EPILOGUE_CODES
    from lite.kernels.fast.blocks import LANES, blocks, from_blocks, padded_bias

    x_shape, w_shape = (1, 3, 31, 31), (80, 3, 3, 3)
    x, w, b = operands(x_shape, w_shape, seed=9)
    expected = onnx_reference("Conv", x, {"w": w, "b": b}, strides=[2, 2], pads=[0, 0, 0, 0])
    plan = blocked_direct.BlockedDirectPlan(Geometry(x_shape, w_shape[2:], (2, 2), (1, 1), (0, 0), (0, 0),
                                                     expected.shape[2:]), w_shape[0], narrow=True)
    padded, tail = (np.full(shape, np.nan, np.float32) for shape in plan.block_scratch)
    out = np.full((blocks(w_shape[0]), expected.shape[2] * expected.shape[3], LANES), np.nan, np.float32)
    weights, bias, infinity = plan.arrange(w), padded_bias(b, out.shape[0]), np.float32(np.inf)
    plan.fill(x, 0, padded)
    cuts = [0, 5, 23, plan.block_tiles + 3, plan.block_units]
    assert plan.block_tiles > blocked_direct.ACTIVATION_TILES and plan.block_units > plan.block_tiles
    for first, last in zip(cuts[:-1], cuts[1:], strict=True):
        plan.block_products(weights, padded, out, tail, bias, -infinity, infinity, EPILOGUE_CODES[activation],
                            np.float32(1.5), first, last)
    got = np.empty_like(expected)
    from_blocks(out, 0, got)
    np.testing.assert_allclose(got, function(expected, 1.5), rtol=1e-5, atol=1e-5)


# (x shape, weight shape, group, strides, pads): channels a group a divisor of a block (2, 4, 8,
# the last block half empty) and a multiple (16, 32: an output block reads its group's blocks)
GROUPED = [
    ((2, 48, 9, 9), (48, 8, 3, 3), 6, (1, 1), (1, 1, 1, 1)),
    ((1, 104, 10, 10), (104, 8, 3, 3), 13, (2, 2), (1, 1, 1, 1)),
    ((1, 32, 7, 7), (32, 4, 3, 3), 8, (1, 1), (1, 1, 1, 1)),
    ((1, 20, 6, 6), (20, 2, 3, 3), 10, (1, 1), (0, 0, 0, 0)),
    ((1, 64, 5, 5), (64, 16, 3, 3), 4, (1, 1), (1, 1, 1, 1)),
    ((1, 96, 11, 11), (96, 32, 3, 3), 3, (2, 2), (1, 1, 1, 1)),  # NOTE: 288 terms: two chunks
]


@pytest.mark.parametrize("residual", [False, True])
@pytest.mark.parametrize(("x_shape", "w_shape", "group", "strides", "pads"), GROUPED)
def test_a_grouped_convolution_on_channel_blocks(x_shape, w_shape, group, strides, pads, residual):
    """``refill``, then ``block_products`` with the plan's group width: each output block from
    the input blocks of its groups, with bias, residual and clip."""
    from lite.kernels.fast.blocks import LANES, blocks, from_blocks, padded_bias, to_blocks

    x, w, b = operands(x_shape, w_shape, seed=9)
    top, left, bottom, right = pads
    expected = onnx_reference("Conv", x, {"w": w, "b": b}, group=group, strides=list(strides),
                              pads=[top, left, bottom, right])
    added = np.random.default_rng(10).standard_normal(expected.shape).astype(np.float32)
    plan = blocked_direct.BlockedDirectPlan(Geometry(x_shape, w_shape[2:], strides, (1, 1), (top, left),
                                                     (bottom, right), expected.shape[2:]), w_shape[0],
                                            width=w_shape[1])
    assert plan.offsets.size == max(w_shape[1], LANES) * w_shape[2] * w_shape[3]
    padded, tail = (np.full(shape, np.nan, np.float32) for shape in plan.block_scratch)
    positions = expected.shape[2] * expected.shape[3]
    image_blocks, out, blocked_residual = (np.zeros((blocks(c), p, LANES), np.float32) for c, p in
                                           [(x_shape[1], x_shape[2] * x_shape[3]), (w_shape[0], positions),
                                            (w_shape[0], positions)])
    got = np.empty_like(expected)
    weights, bias, lo = plan.arrange(w), padded_bias(b, blocks(w_shape[0])), np.float32(-1.0)
    for image in range(x_shape[0]):
        to_blocks(x, image, image_blocks)
        to_blocks(added, image, blocked_residual)
        plan.refill(image_blocks, padded)
        out[:] = np.nan
        plan.block_products(weights, padded, out, tail, bias, lo, np.float32(np.inf),
                            residual=blocked_residual if residual else blocked_direct.NO_BLOCKS_RESIDUAL)
        from_blocks(out, image, got)
    want = np.maximum(expected + added if residual else expected, -1.0)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
