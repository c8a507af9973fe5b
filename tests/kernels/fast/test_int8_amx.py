"""Quantized convolutions and products on AMX tiles (``lite.kernels.fast.int8_amx``): bit-identical
to the float64 reference path wherever they run, on one thread and on two."""

from __future__ import annotations

import numpy as np
import pytest

from lite.kernels import fast
from lite.kernels.fast.int8_plans import AMX_PRODUCT_ROWS, AMX_SCRATCH_SLOT, ConvPlan, ProductPlan
from lite.kernels.parallel import KernelThreads
from tests.support.quantized_kernels import compiled_kernels, params, random_q, run_both

pytestmark = pytest.mark.skipif(not fast.enabled(), reason="compiled kernels are off")
RNG = np.random.default_rng(21)


def _amx_runs() -> bool:
    with compiled_kernels(True):
        from lite.kernels.fast import int8_amx

        return int8_amx.available()


needs_tiles = pytest.mark.skipif(not fast.enabled() or not _amx_runs(),
                                 reason="AMX tiles need AMX-INT8 and Linux's permission to use them")


def _attrs(kernel: int, stride: int = 1, pad: int = 0, dilation: int = 1) -> dict:
    return {"kernel_size": (kernel, kernel), "stride": (stride, stride), "dilation": (dilation, dilation),
            "pad_list": (pad,) * 4, "group": 1}


CONVS = {  # x shape, out channels, attrs
    "3x3_pad": ((1, 64, 14, 14), 64, _attrs(3, pad=1)),
    "3x3_small_plane": ((1, 128, 7, 7), 144, _attrs(3, pad=1)),
    "1x1_two_images_padded_channels": ((2, 70, 9, 11), 40, _attrs(1)),
    "3x3_stride2": ((1, 64, 15, 15), 48, _attrs(3, stride=2, pad=1)),
    "1x1_stride2": ((1, 96, 10, 10), 32, _attrs(1, stride=2)),
    "3x3_dilated": ((1, 64, 12, 12), 33, _attrs(3, pad=2, dilation=2)),
}


def _run(case: str, dtype, per_channel: bool, threads=None):
    shape, out_c, attrs = CONVS[case]
    w = RNG.integers(-100, 101, (out_c, shape[1], *attrs["kernel_size"])).astype(np.int8)
    count = out_c if per_channel else 1
    w_params = params(RNG.uniform(0.001, 0.004, count), RNG.integers(-20, 21, count))
    x = random_q(RNG, shape, dtype)
    bias = RNG.integers(-30000, 30000, out_c).astype(np.int32)
    x_zp = 131 if dtype == np.uint8 else -7
    spread = 0.02 * 0.0025 * 74 * 58 * np.sqrt(w[0].size)  # NOTE: about the sums' standard deviation, real
    return run_both("Conv2DFusion", attrs, x, params(0.02, x_zp), w, w_params, bias, dtype,
                    params(spread / 30, 3 if dtype == np.int8 else 125), threads)


@needs_tiles
@pytest.mark.parametrize("per_channel", [False, True], ids=["tensor", "channel"])
@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
@pytest.mark.parametrize("case", sorted(CONVS))
def test_a_convolution_on_tiles_is_bit_identical(case, dtype, per_channel):
    """Channels padded to whole tiles (70 -> 128, and output channels 33, 40, 48, 144), two
    images, strides, dilation, small planes (each image's panels held at once) and large ones."""
    actual, expected, kernel = _run(case, dtype, per_channel)
    assert isinstance(kernel.compiled, ConvPlan) and kernel.compiled.amx
    assert len(np.unique(expected)) > 20
    np.testing.assert_array_equal(actual, expected)


@needs_tiles
@pytest.mark.parametrize("case", ["3x3_pad", "3x3_small_plane", "1x1_two_images_padded_channels"])
@pytest.mark.parametrize("dynamic", [False, True], ids=["crew", "python_threads"])
def test_two_threads_split_the_tiles_with_the_same_result(dynamic, case):
    threads = KernelThreads(2)
    threads.dynamic = dynamic
    actual, expected, kernel = _run(case, np.uint8, True, threads)
    assert kernel.compiled.amx
    np.testing.assert_array_equal(actual, expected)


@needs_tiles
@pytest.mark.parametrize("case", ["3x3_pad", "3x3_small_plane"])
def test_the_tile_scratch_is_the_shared_workspace_whatever_it_held(case):
    """The pieces' scratch is one buffer of the model's workspace (not a copy per convolution and
    piece); another kernel's leftovers in it change nothing (panel items, and whole-image items)."""
    actual, expected, kernel = _run(case, np.uint8, True, KernelThreads(2))
    np.testing.assert_array_equal(actual, expected)
    buffer = kernel.workspace._buffers[AMX_SCRATCH_SLOT]
    scratch = kernel.compiled._amx_scratch()
    assert scratch.ctypes.data == buffer.ctypes.data
    assert len(scratch) == kernel.threads.loop_pieces(kernel.compiled.items)
    buffer.fill(0x5A)
    kernel.execute()
    np.testing.assert_array_equal(kernel.outputs[0].data, expected)
    assert (buffer != 0x5A).any()  # NOTE: the pieces wrote their scratch there


@needs_tiles
def test_tiles_sum_the_worst_case_exactly():
    """Every term 255 * -128 over 4608 terms: -150 million, the products at their extremes."""
    x, w = np.full((1, 512, 3, 3), 255, np.uint8), np.full((4, 512, 3, 3), -128, np.int8)
    actual, expected, kernel = run_both("Conv2DFusion", _attrs(3, pad=1), x, params(1.0, 0), w,
                                        params(np.full(4, 0.001), np.zeros(4)), None, np.int8, params(5000.0, 0))
    assert kernel.compiled.amx
    np.testing.assert_array_equal(actual, expected)
    assert expected.min() < -20


@needs_tiles
def test_delite_amx_0_keeps_the_vector_quads(monkeypatch):
    monkeypatch.setenv("DELITE_AMX", "0")
    actual, expected, kernel = _run("3x3_pad", np.int8, True)
    assert isinstance(kernel.compiled, ConvPlan) and kernel.compiled.quad_bias is not None
    assert not kernel.compiled.amx
    np.testing.assert_array_equal(actual, expected)


def test_the_weight_is_packed_tile_by_tile():
    """pack_amx_weight's layout: (block of 32 rows, step of 16 words, half, row, word), word k of
    a row being tap k // W's channel word k % W (zero past the channel words and past the rows)."""
    from lite.kernels.fast import int8_amx

    rows, channel_words, taps, tile_words = 40, 5, 9, 16
    quads = RNG.integers(-2**31, 2**31 - 1, (rows, channel_words * taps)).astype(np.int32)
    packed = np.zeros((64, taps * tile_words), np.int32)
    int8_amx.pack_amx_weight(quads, channel_words, taps, packed)
    by_tap = np.zeros((64, taps, tile_words), np.int32)
    by_tap[:rows, :, :channel_words] = quads.reshape(rows, channel_words, taps).transpose(0, 2, 1)
    expected = by_tap.reshape(2, 2, 16, taps, tile_words).transpose(0, 3, 1, 2, 4)
    np.testing.assert_array_equal(packed.reshape(-1), expected.reshape(-1))


PRODUCTS = {  # x shape, weight shape (K, N), transpose_b
    "whole_blocks": ((64, 128), (128, 64), False),
    "rows_columns_and_k_past_the_tiles": ((40, 100), (100, 33), False),
    "fewest_rows": ((AMX_PRODUCT_ROWS, 64), (64, 48), False),
    "batched_rows": ((2, 35, 96), (96, 70), False),
    "transposed_weight": ((33, 200), (200, 130), True),
}


def _product(case: str, dtype, per_channel: bool, threads=None, weight_zero_point: int = 9):
    x_shape, (k, n), transpose_b = PRODUCTS[case]
    w = RNG.integers(-110, 111, (n, k) if transpose_b else (k, n)).astype(np.int8)
    count = n if per_channel else 1
    w_params = params(RNG.uniform(0.001, 0.004, count), RNG.integers(-weight_zero_point, weight_zero_point + 1, count),
                      axis=0 if transpose_b else 1)
    x = random_q(RNG, x_shape, dtype)
    spread = 0.02 * 0.0025 * 74 * 64 * np.sqrt(k)  # NOTE: about the sums' standard deviation, real
    return run_both("MatMulFusion", {"transpose_b": transpose_b}, x, params(0.02, 131 if dtype == np.uint8 else -7),
                    w, w_params, RNG.integers(-30000, 30000, n).astype(np.int32), dtype,
                    params(spread / 30, 3 if dtype == np.int8 else 125), threads)


@needs_tiles
@pytest.mark.parametrize("per_channel", [False, True], ids=["tensor", "channel"])
@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
@pytest.mark.parametrize("case", sorted(PRODUCTS))
def test_a_product_on_tiles_is_bit_identical(case, dtype, per_channel):
    """Rows past 32 (and a last block of rows partly outside), columns and K past whole tiles
    (33 columns, K = 100: padded to 128), batch dims, a transposed weight, weight zero points."""
    actual, expected, kernel = _product(case, dtype, per_channel)
    assert isinstance(kernel.compiled, ProductPlan) and kernel.compiled.amx
    assert len(np.unique(expected)) > 20
    np.testing.assert_array_equal(actual, expected)


@needs_tiles
@pytest.mark.parametrize("dynamic", [False, True], ids=["crew", "python_threads"])
def test_two_threads_split_a_products_blocks_with_the_same_result(dynamic):
    threads = KernelThreads(2)
    threads.dynamic = dynamic
    actual, expected, kernel = _product("transposed_weight", np.uint8, True, threads)
    assert kernel.compiled.amx
    np.testing.assert_array_equal(actual, expected)


@needs_tiles
def test_a_product_of_fewer_rows_than_a_tile_keeps_the_vector_quads():
    x = random_q(RNG, (AMX_PRODUCT_ROWS - 1, 64), np.int8)
    w = RNG.integers(-100, 101, (64, 40)).astype(np.int8)
    actual, expected, kernel = run_both("MatMulFusion", {}, x, params(0.02, 3), w, params(0.002, 0), None, np.int8,
                                        params(0.5, 0))
    assert kernel.compiled.quad_bias is not None and not kernel.compiled.amx
    np.testing.assert_array_equal(actual, expected)


@needs_tiles
@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_tiles_sum_a_products_worst_case_exactly(dtype):
    """Every term at the offsets' extremes (x - zero point of 255 or -255, w of -128 or 127) over
    4097 terms: -133 million, the rows' corrections at their largest."""
    x = np.full((20, 4097), 255 if dtype == np.uint8 else -128, dtype)
    x_params = params(1.0, 0 if dtype == np.uint8 else 127)
    for value in (-128, 127):
        w = np.full((4097, 5), value, np.int8)
        actual, expected, kernel = run_both("MatMulFusion", {}, x, x_params, w,
                                            params(np.full(5, 0.001), np.zeros(5), axis=1), None, np.int8,
                                            params(5000.0, 0))
        assert kernel.compiled.amx
        np.testing.assert_array_equal(actual, expected)
        assert np.abs(expected).min() > 20


def test_a_products_weight_is_tiled_block_by_block():
    """tile_product_weight's layout: (block of 32 columns, step of 16 words, half, word, column), from
    panels (panel, word, column of WIDTH); the last block's columns past the panels' zero."""
    from lite.kernels.fast import int8_amx
    from lite.kernels.fast.tile import WIDTH

    words, columns = 32, 80
    blocks = -(-columns // 32)
    panel_count = -(-blocks * 32 // WIDTH)  # as int8_plans._tile_layout pads them, whatever WIDTH is here
    by_word = np.zeros((words, panel_count * WIDTH), np.int32)
    by_word[:, :columns] = RNG.integers(-2**31, 2**31 - 1, (words, columns))
    panels = np.ascontiguousarray(by_word.reshape(words, panel_count, WIDTH).transpose(1, 0, 2))
    tiles = np.zeros((blocks, words // 16, 2, 16, 16), np.int32)
    int8_amx.tile_product_weight(panels, blocks, tiles)
    for block in range(blocks):
        for step in range(words // 16):
            for half in range(2):
                first = block * 32 + half * 16
                np.testing.assert_array_equal(tiles[block, step, half],
                                              by_word[step * 16:step * 16 + 16, first:first + 16])
