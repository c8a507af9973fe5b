"""The channel-blocked 1x1 convolution and layout changes (lite.kernels.fast.blocks) against numpy."""

from __future__ import annotations

import numpy as np
import pytest

from lite.kernels import fast

pytestmark = pytest.mark.skipif(fast.numba_module() is None, reason="numba is not importable here")

RNG = np.random.default_rng(5)


def blocked(x: np.ndarray) -> np.ndarray:
    """x (C, H, W) as (CB, H * W, 16), zero channels past C: the layout spelled out in numpy."""
    channels, h, w = x.shape
    padded = np.zeros((-(-channels // 16) * 16, h * w), np.float32)
    padded[:channels] = x.reshape(channels, -1)
    return np.ascontiguousarray(padded.reshape(-1, 16, h * w).transpose(0, 2, 1))


def test_images_go_into_blocks_and_back():
    from lite.kernels.fast.blocks import blocks, from_blocks, to_blocks

    x = RNG.standard_normal((3, 21, 5, 7)).astype(np.float32)
    image = np.full((blocks(21), 35, 16), np.nan, np.float32)
    to_blocks(x, 1, image)
    np.testing.assert_array_equal(image, blocked(x[1]))
    back = np.zeros_like(x)
    from_blocks(image, 2, back)
    np.testing.assert_array_equal(back[2], x[1])
    assert not back[:2].any()


def reference(x, weight, bias, residual, lo, hi, activation):
    """The 1x1 convolution of one image in NCHW: act(clip(w @ x + bias (+ residual), lo, hi))."""
    out = np.einsum("ok,kp->op", weight.reshape(weight.shape[:2]).astype(np.float64), x.reshape(x.shape[0], -1))
    out += bias[:, None]
    if residual is not None:
        out += residual.reshape(out.shape)
    out = np.clip(out, lo, hi)
    if activation == "SWISH":
        out = out / (1 + np.exp(-out))
    elif activation == "HARD_SWISH":
        out = out * np.clip(out / 6 + 0.5, 0, 1)
    return out.reshape(-1, *x.shape[1:])


@pytest.mark.parametrize("out_c, in_c, plane", [
    (16, 32, (11, 11)),   # one block: the one-vector tile
    (40, 24, (7, 7)),     # three blocks, the last padded; 49 positions: the last tile overlaps
    (96, 16, (4, 2)),     # two groups of three blocks; exactly one tile
    (80, 200, (14, 14)),  # a group of two blocks after one of three; K past 128
    (64, 32, (6, 6)),     # four blocks: two groups of two, not three and one
    (100, 24, (5, 5)),    # seven blocks: three, two and two, the last padded
    (64, 1040, (13, 13)),  # bands of a few tiles (band_tiles), the last shorter
    (32, 19, (7, 7)),     # 19 terms: passes of UNROLL, then the rest one at a time
    (16, 3, (6, 6)),      # fewer terms than a pass: the rest's loop alone
    (24, 144, (8, 7)),    # MobileNetV2's 144 -> 24: the last block half used, its tile half a block wide
    (8, 33, (6, 6)),      # one block, half used
    (28, 20, (5, 5)),     # the last block 12 lanes: more than half, the whole tile
])
@pytest.mark.parametrize("epilogue", ["none", "relu6+residual", "SWISH", "HARD_SWISH"])
def test_the_pointwise_convolution_matches_numpy(out_c, in_c, plane, epilogue):
    from lite.kernels.fast.activation import EPILOGUE_CODES
    from lite.kernels.fast.blocks import NO_RESIDUAL, pack_pointwise, pointwise, units

    x = RNG.standard_normal((in_c, *plane)).astype(np.float32)
    weight = (RNG.standard_normal((out_c, in_c, 1, 1)) / np.sqrt(in_c)).astype(np.float32)
    bias = RNG.standard_normal(out_c).astype(np.float32)
    residual = RNG.standard_normal((out_c, *plane)).astype(np.float32) if "residual" in epilogue else None
    lo, hi = (0.0, 6.0) if "relu6" in epilogue else (-np.inf, np.inf)
    code = EPILOGUE_CODES.get(epilogue, 0)
    panels, shift = pack_pointwise(weight, bias)
    out = np.full((-(-out_c // 16), plane[0] * plane[1], 16), np.nan, np.float32)
    added = NO_RESIDUAL if residual is None else blocked(residual)
    count = units(plane[0] * plane[1], out.shape[0])
    source = blocked(x)
    source[-1, :, (in_c - 1) % 16 + 1:] = np.nan  # NOTE: the last block's padded lanes are no terms of the product
    for first, last in ((0, count // 3), (count // 3, count)):  # NOTE: in two pieces, as two threads take them
        pointwise(source, panels, shift, np.float32(lo), np.float32(hi), code, np.float32(1), added, out, out_c,
                  first, last)
    want = blocked(reference(x, weight, bias, residual, lo, hi, epilogue).astype(np.float32))
    assert np.abs(out - want).max() <= 1e-4 * max(1.0, np.abs(want).max())
    assert not out[-1, :, (out_c - 1) % 16 + 1:].any()  # the padded channels stay zero


@pytest.mark.parametrize("plane, in_c", [((7, 7), 24), ((13, 13), 1040)])  # one band; bands of a few tiles
def test_a_planes_last_two_tiles_run_in_one_unit_so_their_shared_rows_are_activated_once(plane, in_c):
    """The last tile overlaps the one before; each tile stores, then activates its rows in place.
    Were they units that two threads ran at once, both stores could precede both activations."""
    from lite.kernels.fast.activation import EPILOGUE_CODES
    from lite.kernels.fast.blocks import (
        NO_RESIDUAL,
        ROWS,
        band_tiles,
        pack_pointwise,
        pointwise,
        tiles,
        unit_place,
    )

    positions, out_c = plane[0] * plane[1], 40
    assert positions % ROWS
    x = RNG.standard_normal((in_c, *plane)).astype(np.float32)
    weight = (RNG.standard_normal((out_c, in_c, 1, 1)) / np.sqrt(in_c)).astype(np.float32)
    panels, shift = pack_pointwise(weight, None)
    count, groups = tiles(positions), panels.shape[0]
    band = band_tiles(panels.shape[1], count, groups)  # NOTE: pointwise's own terms: the input's channels
    place = {unit_place(unit, count, groups, band): unit for unit in range(count * groups)}
    out = np.full((-(-out_c // 16), positions, 16), np.nan, np.float32)

    def run(unit):
        pointwise(blocked(x), panels, shift, np.float32(-np.inf), np.float32(np.inf), EPILOGUE_CODES["HARD_SWISH"],
                  np.float32(1), NO_RESIDUAL, out, out_c, unit, unit + 1)

    run(place[(0, count - 1)])
    assert np.isnan(out).all()  # the last tile's own unit stores nothing...
    run(place[(0, count - 2)])  # ...the unit of the tile before stores both
    written = ~np.isnan(out[0])
    assert written[(count - 2) * ROWS:].all() and not written[:(count - 2) * ROWS].any()
    want = blocked(reference(x, weight, np.zeros(out_c, np.float32), None, -np.inf, np.inf, "HARD_SWISH")
                   .astype(np.float32))
    np.testing.assert_allclose(out[0, (count - 2) * ROWS:], want[0, (count - 2) * ROWS:], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("count", [1, 2, 7, 22])
@pytest.mark.parametrize("groups", [1, 3])
@pytest.mark.parametrize("band", [1, 3, 30])
def test_the_banded_units_take_every_tile_of_every_group_once(count, groups, band):
    from lite.kernels.fast.blocks import unit_place

    places = [unit_place(unit, count, groups, band) for unit in range(count * groups)]
    assert sorted(places) == [(group, tile) for group in range(groups) for tile in range(count)]
    for first in range(0, count, band):  # NOTE: a band's units: its tiles for group 0, then for group 1...
        here = [place for place in places if first <= place[1] < first + band]
        assert here == sorted(here)
        assert places.index(here[0]) == first * groups


@pytest.mark.parametrize("count", [1, 2, 7, 22])
@pytest.mark.parametrize("groups", [1, 3])
@pytest.mark.parametrize("band", [1, 3, 30])
def test_counting_from_a_unit_gives_the_places_of_the_units_after_it(count, groups, band):
    """pointwise finds its first unit's place by unit_place and the next ones by next_place."""
    from lite.kernels.fast.blocks import next_place, unit_place

    for first in range(count * groups):
        group, tile = unit_place(first, count, groups, band)
        band_first = tile // band * band
        for unit in range(first + 1, count * groups):
            group, tile, band_first = next_place(group, tile, band_first, count, groups, band)
            assert (group, tile) == unit_place(unit, count, groups, band)


def test_bands_are_taken_where_they_read_less_from_memory():
    from lite.kernels.fast.blocks import BAND_BYTES, ROWS, band_tiles, tiles, units

    def band(in_c, out_c, plane):
        count = tiles(plane)
        return band_tiles(in_c, count, units(plane, -(-out_c // 16)) // count), count

    assert band(1040, 64, 169)[0] == BAND_BYTES // (ROWS * 1040 * 4) > 1  # the test above's: small panels, large input
    assert band(256, 64, 56 * 56)[0] == BAND_BYTES // (ROWS * 256 * 4)  # ResNet-50's first reducing 1x1
    for in_c, out_c, plane in ((256, 1024, 14 * 14), (2048, 512, 7 * 7), (16, 96, 9)):
        taken, count = band(in_c, out_c, plane)  # NOTE: panels past the cache, or an input within it: one band
        assert taken == count


@pytest.mark.parametrize("out_blocks", range(1, 23))
def test_the_groups_of_blocks_cover_each_block_once_with_no_lone_block(out_blocks):
    from lite.kernels.fast.blocks import VECTORS, group_blocks

    groups = [group_blocks(group, out_blocks) for group in range(-(-out_blocks // VECTORS))]
    covered = [block for first, count in groups for block in range(first, first + count)]
    assert covered == list(range(out_blocks))
    assert all(1 <= count <= VECTORS for _, count in groups)
    if VECTORS == 3 and out_blocks > 1:
        assert min(count for _, count in groups) >= 2


@pytest.mark.parametrize(("channels", "plane", "strides"), [(16, (9, 9), (2, 2)), (40, (7, 11), (2, 3)),
                                                           (32, (14, 14), (1, 2))])
def test_the_subsample_gathers_a_strided_1x1_convolutions_input(channels, plane, strides):
    from lite.kernels.fast.blocks import subsample

    image = RNG.standard_normal((channels, *plane)).astype(np.float32)
    want = blocked(np.ascontiguousarray(image[:, ::strides[0], ::strides[1]]))
    out = np.full_like(want, np.nan)
    ow, cut = want.shape[1] // -(-plane[0] // strides[0]), want.shape[0] // 2
    for first, last in ((0, cut), (cut, want.shape[0])):
        subsample(blocked(image), plane[1], *strides, out, ow, first, last)
    np.testing.assert_array_equal(out, want)


def test_the_subsample_runs_as_crew_jobs(crew_runs):
    from lite.kernels.fast import crew
    from lite.kernels.fast.blocks import subsample, subsample_job, subsample_jobs

    threads, runs = crew_runs
    x = blocked(RNG.standard_normal((80, 9, 10)).astype(np.float32))
    crew.warm(subsample_job)
    whole, pieces = np.zeros((5, 20, 16), np.float32), np.full((5, 20, 16), np.nan, np.float32)
    subsample(x, 10, 2, 2, whole, 5, 0, 5)
    threads.staff()
    subsample_jobs(x, 10, 2, 2, pieces, 5, threads.loop_bounds(5))()
    np.testing.assert_array_equal(pieces, whole)
    assert len(runs) == 1


def test_the_pointwise_convolution_runs_as_crew_jobs(crew_runs):
    from lite.kernels.fast import crew
    from lite.kernels.fast.blocks import NO_RESIDUAL, crew_jobs, pack_pointwise, pointwise, pointwise_job, units

    threads, runs = crew_runs
    x = blocked(RNG.standard_normal((48, 9, 9)).astype(np.float32))
    panels, shift = pack_pointwise(RNG.standard_normal((56, 48, 1, 1)).astype(np.float32), None)
    crew.warm(pointwise_job)
    terms = (x, panels, shift, np.float32(0), np.float32(6), 0, np.float32(1), NO_RESIDUAL)
    whole, pieces = np.zeros((4, 81, 16), np.float32), np.zeros((4, 81, 16), np.float32)
    count = units(81, 4)
    pointwise(*terms, whole, 56, 0, count)
    threads.staff()
    crew_jobs(*terms, pieces, 56, threads.loop_bounds(count))()
    np.testing.assert_array_equal(pieces, whole)
    assert len(runs) == 1


@pytest.mark.parametrize(("plane", "window"), [
    ((9, 9), (3, 3, 2, 2, 0, 0)),    # SqueezeNet's pool, no pads
    ((8, 8), (3, 3, 2, 2, 1, 1)),    # ResNet's, pads 1
    ((7, 10), (2, 3, 1, 2, 1, 0)),   # uneven window, strides and pads
    ((14, 14), (3, 3, 1, 1, 1, 1)),  # GoogLeNet's stride-1 pools: every window but the edges clear of the pads
    ((11, 13), (5, 4, 3, 3, 2, 3)),  # strides past the window's rows, the first window in the pads but one column
    ((6, 6), (2, 2, 2, 2, 1, 1)),    # pads one short of the window: a first row and column of one position
])
def test_the_blocked_max_pool_matches_numpy(plane, window):
    from lite.kernels.fast.blocks import NO_SCALE, pool

    (h, w), (kh, kw, sh, sw, top, left) = plane, window
    x = RNG.standard_normal((20, h, w)).astype(np.float32)
    oh, ow = -(-(h + top - kh) // sh) + 1, (w + left - kw) // sw + 1  # NOTE: ceil rows: a window past the end
    padded = np.full((20, top + oh * sh + kh, left + ow * sw + kw), -np.inf, np.float32)
    padded[:, top:top + h, left:left + w] = x
    want = np.empty((20, oh, ow), np.float32)
    for r in range(oh):
        for i in range(ow):
            want[:, r, i] = padded[:, r * sh:r * sh + kh, i * sw:i * sw + kw].max(axis=(1, 2))
    out = np.full((2, oh * ow, 16), np.nan, np.float32)
    for first, last in ((0, oh // 2), (oh // 2, oh)):
        pool(blocked(x), out, h, w, kh, kw, sh, sw, top, left, ow, NO_SCALE, first, last)
    np.testing.assert_array_equal(out, blocked(want))


@pytest.mark.parametrize(("plane", "window"), [((8, 8), (2, 2, 2, 2, 0, 0)), ((7, 10), (3, 3, 2, 2, 1, 1)),
                                               ((14, 14), (3, 3, 1, 1, 1, 1)), ((6, 6), (2, 2, 2, 2, 1, 1))])
def test_the_blocked_average_pool_matches_numpy(plane, window):
    """The sums over each window's positions inside x, times the divisor's reciprocal given."""
    from lite.kernels.fast.blocks import pool

    (h, w), (kh, kw, sh, sw, top, left) = plane, window
    x = RNG.standard_normal((20, h, w)).astype(np.float32)
    oh, ow = (h + 2 * top - kh) // sh + 1, (w + 2 * left - kw) // sw + 1
    padded = np.zeros((20, h + 2 * top, w + 2 * left), np.float32)
    padded[:, top:top + h, left:left + w] = x
    scale = RNG.uniform(0.1, 1, (oh, ow)).astype(np.float32)
    want = np.empty((20, oh, ow), np.float32)
    for r in range(oh):
        for i in range(ow):
            want[:, r, i] = padded[:, r * sh:r * sh + kh, i * sw:i * sw + kw].sum(axis=(1, 2)) * scale[r, i]
    out = np.full((2, oh * ow, 16), np.nan, np.float32)
    pool(blocked(x), out, h, w, kh, kw, sh, sw, top, left, ow, scale.ravel(), 0, oh)
    np.testing.assert_allclose(out, blocked(want), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("average", [False, True])
def test_the_blocked_pools_run_as_crew_jobs(crew_runs, average):
    from lite.kernels.fast import crew
    from lite.kernels.fast.blocks import NO_SCALE, pool, pool_job, pool_jobs

    threads, runs = crew_runs
    x = blocked(RNG.standard_normal((40, 11, 11)).astype(np.float32))
    whole, pieces = np.zeros((3, 25, 16), np.float32), np.zeros((3, 25, 16), np.float32)
    scale = np.full(25, 1 / 9, np.float32) if average else NO_SCALE
    pool(x, whole, 11, 11, 3, 3, 2, 2, 0, 0, 5, scale, 0, 5)
    crew.warm(pool_job)
    threads.staff()
    pool_jobs(x, pieces, 11, 11, 5, 5, (3, 3, 2, 2, 0, 0), scale, threads.loop_bounds(5))()
    np.testing.assert_array_equal(pieces, whole)
    assert len(runs) == 1


@pytest.mark.parametrize("code", ["none", "SWISH"])
def test_the_blocked_affine_map_matches_numpy(code):
    from lite.kernels.fast.activation import EPILOGUE_CODES
    from lite.kernels.fast.blocks import affine, padded_bias

    x = RNG.standard_normal((20, 5, 5)).astype(np.float32)
    multiplier, offset = RNG.standard_normal(20).astype(np.float32), RNG.standard_normal(20).astype(np.float32)
    want = np.clip(x * multiplier[:, None, None] + offset[:, None, None], 0, 6)
    if code == "SWISH":
        want = want / (1 + np.exp(-want))
    out = np.full((2, 25, 16), np.nan, np.float32)
    affine(blocked(x), padded_bias(multiplier, 2), padded_bias(offset, 2), np.float32(0), np.float32(6),
           EPILOGUE_CODES.get(code, 0), np.float32(1), out, 0, 2)
    np.testing.assert_allclose(out, blocked(want.astype(np.float32)), rtol=1e-6, atol=1e-6)
