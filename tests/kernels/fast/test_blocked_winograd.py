"""Winograd F(4x4, 3x3) on channel blocks against the ONNX reference convolution: its three steps
on the caller's thread and as crew jobs, every tile edge, pad, residual and activation."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from lite.kernels import fast
from lite.kernels.fast import blocked_winograd, crew
from tests.support.conv import EPILOGUE_ACTIVATIONS, onnx_reference, operands

pytestmark = pytest.mark.skipif(fast.numba_module() is None, reason="numba is not importable here")

# (channels, out channels, plane, pads (top, left, bottom, right)): channels short of a block and
# past one, output blocks in groups of one to three vectors, planes that are and are not multiples
# of the 4 x 4 output block, not square, pads of 0 to 2 on some sides only
CASES = [
    (32, 32, (16, 16), (1, 1, 1, 1)),
    (20, 70, (9, 9), (1, 1, 1, 1)),
    (40, 17, (14, 11), (1, 1, 1, 1)),
    (64, 96, (13, 13), (0, 0, 0, 0)),
    (16, 48, (10, 15), (2, 0, 1, 2)),
    (130, 36, (12, 11), (0, 1, 2, 0)),
    (3, 5, (30, 6), (1, 1, 1, 1)),
]


def blocked(x: np.ndarray) -> np.ndarray:
    from lite.kernels.fast.blocks import LANES, blocks, to_blocks

    out = np.full((blocks(x.shape[1]), x.shape[2] * x.shape[3], LANES), np.nan, np.float32)
    to_blocks(x, 0, out)
    return out


def unblocked(x: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    from lite.kernels.fast.blocks import from_blocks

    out = np.empty(shape, np.float32)
    from_blocks(x, 0, out)
    return out


def layer(channels: int, out_channels: int, plane: tuple[int, int], pads: tuple[int, ...], seed: int = 0,
          window: int | None = None):
    """(plan, x, weight, bias, the reference output without epilogue) for one case."""
    x, w, b = operands((1, channels, *plane), (out_channels, channels, 3, 3), seed=seed)
    expected = onnx_reference("Conv", x, {"w": w, "b": b}, pads=list(pads))
    plan = blocked_winograd.BlockedWinogradPlan(channels, plane, out_channels, pads[:2], expected.shape[2:], window)
    return plan, x, w, b, expected


def run(plan, x, w, b, residual, lo, hi, code, alpha, pieces: int = 1) -> np.ndarray:
    """The three steps on the caller's thread, each in ``pieces`` pieces; the output in NCHW."""
    from lite.kernels.fast.blocks import LANES, padded_bias

    v, m = (np.full(shape, np.nan, np.float32) for shape in plan.block_scratch)
    bias = padded_bias(b, plan.out_blocks)
    out = np.full((plan.out_blocks, plan.out[0] * plan.out[1], LANES), np.nan, np.float32)
    added = blocked(residual) if residual is not None else blocked_winograd.NO_RESIDUAL
    steps = [(blocked_winograd.input_transform, plan.input_terms(blocked(x), v), plan.input_units),
             (blocked_winograd.products, plan.product_terms(v, blocked_winograd.arrange(w, plan.window), m),
              plan.product_units),
             (blocked_winograd.output_transform, plan.output_terms(m, bias, added, lo, hi, code, alpha, out),
              plan.output_units)]
    for function, terms, count in steps:
        cuts = np.linspace(0, count, pieces + 1).astype(int)
        for first, last in zip(cuts[:-1], cuts[1:], strict=True):
            function(*terms, first, last)
    return unblocked(out, (1, len(b), *plan.out))


def close(got: np.ndarray, want: np.ndarray) -> None:
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * max(1.0, float(np.abs(want).max())))


@pytest.mark.parametrize(("channels", "out_channels", "plane", "pads"), CASES)
@pytest.mark.parametrize("pieces", [1, 3])
@pytest.mark.parametrize("window", [6, 4])
def test_matches_the_reference_convolution(channels, out_channels, plane, pads, pieces, window):
    plan, x, w, b, expected = layer(channels, out_channels, plane, pads, window=window)
    from lite.kernels.fast.activation import CLIP_CODE

    infinity = np.float32(np.inf)
    close(run(plan, x, w, b, None, -infinity, infinity, CLIP_CODE, np.float32(1), pieces), expected)


@pytest.mark.parametrize(("channels", "out_channels", "plane", "pads"), CASES[:3])
@pytest.mark.parametrize("window", [6, 4])
def test_a_residual_is_added_before_the_clip(channels, out_channels, plane, pads, window):
    from lite.kernels.fast.activation import CLIP_CODE

    plan, x, w, b, expected = layer(channels, out_channels, plane, pads, seed=3, window=window)
    residual = np.random.default_rng(4).standard_normal(expected.shape).astype(np.float32)
    got = run(plan, x, w, b, residual, np.float32(0), np.float32(6), CLIP_CODE, np.float32(1), 2)
    close(got, np.clip(expected + residual, 0, 6))


@pytest.mark.parametrize(("activation", "function"), EPILOGUE_ACTIVATIONS)
@pytest.mark.parametrize("window", [6, 4])
def test_an_activation_follows_the_clip_on_every_row_of_tiles(activation, function, window):
    from lite.kernels.fast.activation import EPILOGUE_CODES

    plan, x, w, b, expected = layer(40, 17, (14, 11), (1, 1, 1, 1), seed=5, window=window)
    infinity = np.float32(np.inf)
    got = run(plan, x, w, b, None, -infinity, infinity, EPILOGUE_CODES[activation], np.float32(1.5), 3)
    close(got, function(expected, 1.5))


@pytest.mark.parametrize(("channels", "out_channels", "plane", "pads"), [CASES[1], CASES[5]])
@pytest.mark.parametrize("window", [6, 4])
def test_the_steps_on_the_crew_match_the_reference(crew_runs, channels, out_channels, plane, pads, window):
    from lite.kernels.fast.activation import CLIP_CODE
    from lite.kernels.fast.blocks import LANES, padded_bias

    threads, runs = crew_runs
    plan, x, w, b, expected = layer(channels, out_channels, plane, pads, seed=6, window=window)
    residual = np.random.default_rng(7).standard_normal(expected.shape).astype(np.float32)
    v, m = (np.full(shape, np.nan, np.float32) for shape in plan.block_scratch)
    out = np.full((plan.out_blocks, plan.out[0] * plan.out[1], LANES), np.nan, np.float32)
    terms = (plan, blocked(x), v, blocked_winograd.arrange(w, plan.window), padded_bias(b, plan.out_blocks), m,
             blocked(residual), np.float32(0), np.float32(np.inf), CLIP_CODE, np.float32(1), out)
    crew.warm(blocked_winograd.input_job, blocked_winograd.products_job, blocked_winograd.output_job)
    threads.staff()
    for step, count in enumerate((plan.input_units, plan.product_units, plan.output_units)):
        blocked_winograd.crew_jobs(*terms, step, threads.crew_bounds(count, 2))()
    assert len(runs) == 3
    close(unblocked(out, expected.shape), np.maximum(expected + residual, 0))


@pytest.mark.parametrize(("kernel", "strides", "dilations", "pads", "out", "taken"), [
    ((3, 3), (1, 1), (1, 1), (1, 1), (16, 16), True),
    ((3, 3), (1, 1), (1, 1), (0, 2), (9, 9), True),
    ((3, 3), (1, 1), (1, 1), (1, 1), (7, 7), False),  # four output blocks: fewer than a register tile
    ((3, 3), (2, 2), (1, 1), (1, 1), (16, 16), False),
    ((3, 3), (1, 1), (2, 2), (2, 2), (16, 16), False),
    ((5, 5), (1, 1), (1, 1), (2, 2), (16, 16), False),
    ((3, 3), (1, 1), (1, 1), (3, 3), (20, 20), False),  # a pad past the tile's reach
])
def test_which_layers_it_takes(kernel, strides, dilations, pads, out, taken):
    assert blocked_winograd.fits(kernel, strides, dilations, pads, out) == taken


def test_a_plane_of_fewer_tiles_than_a_register_tile_is_refused():
    with pytest.raises(ValueError, match="tiles"):
        blocked_winograd.BlockedWinogradPlan(32, (7, 7), 32, (1, 1), (7, 7))


def test_wide_layers_take_the_smaller_tile_and_its_smaller_weight():
    assert blocked_winograd.window_for(128, 256) == 6 and blocked_winograd.window_for(256, 256) == 4
    weight = np.ones((256, 256, 3, 3), np.float32)
    small, large = blocked_winograd.arrange(weight, 4), blocked_winograd.arrange(weight, 6)
    assert small.shape[0] == 16 and large.shape[0] == 36 and 2 * small.nbytes < large.nbytes


@pytest.mark.parametrize("vectors", [1, 2, 3, 16, 64, 255, 256])
def test_product_planes_lie_an_odd_number_of_lines_apart(vectors):
    from lite.kernels.fast.blocks import LANES

    floats = blocked_winograd.plane_floats(vectors)
    assert floats >= vectors * LANES and (floats // LANES) % 2 == 1


CONCURRENT = """
import sys, threading
import numpy as np
from lite.kernels.fast import blocked_winograd as bw
from lite.kernels.fast.activation import CLIP_CODE
from lite.kernels.fast.blocks import LANES

def layer(seed):
    rng = np.random.default_rng(seed)
    plan = bw.BlockedWinogradPlan(32, (28, 28), 32, (1, 1), (28, 28))
    x = rng.standard_normal((plan.in_blocks, 28 * 28, LANES)).astype(np.float32)
    v, m = (rng.standard_normal(shape).astype(np.float32) for shape in plan.block_scratch)
    bias, out = np.zeros((plan.out_blocks, LANES), np.float32), np.zeros_like(x)
    def run():
        bw.input_transform(*plan.input_terms(x, v), 0, plan.input_units)
        bw.output_transform(*plan.output_terms(m, bias, bw.NO_RESIDUAL, bw.LOWEST, bw.HIGHEST, CLIP_CODE,
                                               np.float32(1), out), 0, plan.output_units)
        return v.copy(), out.copy()
    return run

runs = [layer(seed) for seed in range(2)]
wanted = [run() for run in runs]
wrong = []

def repeat(index):
    for _ in range(100):
        if not all(np.array_equal(a, b) for a, b in zip(runs[index](), wanted[index])):
            wrong.append(index)
            return

threads = [threading.Thread(target=repeat, args=(index,)) for index in range(2)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
print("wrong" if wrong else "same")
"""


def test_two_threads_running_the_transforms_at_once_keep_their_own_scratch():
    """Each transform's scratch stays allocated while its loop writes there: in one malloc arena (as
    threads share them late in a long process), a scratch freed as the loop began was taken by the
    other thread's, which gave wrong results and corrupted the heap. In a child process: the arena
    is set at its start."""
    environment = {**os.environ, "MALLOC_ARENA_MAX": "1"}
    result = subprocess.run([sys.executable, "-c", CONCURRENT], capture_output=True, text=True, timeout=120,
                            env=environment)
    assert result.returncode == 0 and result.stdout.split() == ["same"], result.stderr[-2000:]
