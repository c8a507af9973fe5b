"""The compiled depthwise convolution on the channel-blocked layout (NCHW16c) against a numpy
depthwise convolution on NCHW: strides, dilations, pads, channels that do not fill a block,
activations, and ranges of blocks."""

from __future__ import annotations

import math

import numpy as np
import pytest

from lite.kernels import fast

pytestmark = pytest.mark.skipif(fast.numba_module() is None, reason="numba is not importable here")

LANES = 16
NONE, RELU, RELU6 = (-np.inf, np.inf), (0.0, np.inf), (0.0, 6.0)
ACTIVATIONS = {  # an activation code's float64 reference of (values, alpha)
    "SWISH": lambda v, a: v / (1 + np.exp(-a * v)),
    "HARD_SWISH": lambda v, _a: v * np.clip(v / 6 + 0.5, 0, 1),
    "GELU": lambda v, _a: v * (1 + np.vectorize(math.erf)(v / np.sqrt(2))) / 2,
}

# (channels, H, W, (KH, KW), (SH, SW), (top, left, bottom, right), (DH, DW), bias, (lo, hi), activation)
CASES = [
    (16, 7, 7, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), True, RELU6, None),
    (24, 7, 7, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), True, NONE, None),  # 8 padded channels
    (40, 14, 13, (3, 3), (2, 2), (1, 1, 1, 1), (1, 1), False, RELU, None),
    (96, 14, 13, (3, 3), (1, 1), (0, 0, 0, 0), (1, 1), True, NONE, None),  # a quad of blocks and two single ones
    (64, 20, 21, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), True, RELU6, None),  # rows past QUAD_ROW: AVX2's blocks alone
    (96, 14, 13, (5, 5), (1, 1), (2, 2, 2, 2), (1, 1), True, RELU6, None),
    (40, 14, 13, (5, 5), (2, 2), (2, 2, 2, 2), (1, 1), False, NONE, None),  # EfficientNet's 5x5 stride 2
    (24, 14, 13, (1, 3), (1, 1), (0, 1, 0, 1), (1, 1), True, NONE, None),
    (16, 14, 13, (1, 3), (2, 2), (0, 2, 0, 0), (1, 1), True, RELU, None),
    (96, 14, 13, (3, 3), (1, 1), (0, 0, 1, 1), (1, 1), True, NONE, None),  # asymmetric: bottom and right only
    (40, 14, 13, (3, 3), (2, 1), (1, 0, 0, 2), (1, 1), True, NONE, None),
    (24, 14, 13, (3, 3), (1, 1), (2, 2, 2, 2), (2, 2), True, NONE, None),  # dilation 2
    (96, 14, 13, (3, 3), (2, 2), (2, 1, 1, 2), (2, 1), False, RELU6, None),
    (40, 7, 7, (5, 5), (1, 2), (2, 0, 1, 2), (1, 2), True, NONE, None),
    (16, 1, 1, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), True, NONE, None),  # 1x1 planes: only border taps
    (96, 1, 1, (5, 5), (2, 2), (2, 2, 2, 2), (1, 1), True, RELU6, None),
    (24, 1, 1, (1, 1), (1, 1), (1, 1, 1, 1), (1, 1), True, NONE, None),  # outputs that no tap reaches: the bias
    (32, 112, 112, (3, 3), (2, 2), (1, 1, 1, 1), (1, 1), True, RELU6, None),  # MobileNetV2's first depthwise
    (96, 7, 7, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), True, NONE, "SWISH"),
    (40, 14, 13, (5, 5), (2, 2), (2, 2, 2, 2), (1, 1), True, NONE, "SWISH"),
    (24, 14, 13, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), True, NONE, "HARD_SWISH"),
    (96, 14, 13, (5, 5), (1, 1), (2, 2, 2, 2), (1, 1), False, NONE, "GELU"),
]


def reference(x, weight, bias, strides, pads, dilations):
    """The depthwise convolution of x (C, H, W) by weight (C, 1, KH, KW) (+ bias), float64, from
    the zero-padded input and a sum over the taps."""
    (kh, kw), (sh, sw), (dh, dw) = weight.shape[2:], strides, dilations
    top, left, bottom, right = pads
    padded = np.pad(x.astype(np.float64), ((0, 0), (top, bottom), (left, right)))
    out_h = (padded.shape[1] - (kh - 1) * dh - 1) // sh + 1
    out_w = (padded.shape[2] - (kw - 1) * dw - 1) // sw + 1
    out = np.zeros((x.shape[0], out_h, out_w))
    for i in range(kh):
        for j in range(kw):
            window = padded[:, i * dh:i * dh + (out_h - 1) * sh + 1:sh, j * dw:j * dw + (out_w - 1) * sw + 1:sw]
            out += window * weight[:, 0, i, j, None, None]
    return out if bias is None else out + bias[:, None, None]


def to_blocks(x: np.ndarray) -> np.ndarray:
    """x (C, H, W) as (CB, H, W, LANES), the channels past C zero."""
    channels, h, w = x.shape
    blocks = -(-channels // LANES)
    padded = np.zeros((blocks * LANES, h, w), np.float32)
    padded[:channels] = x
    return np.ascontiguousarray(padded.reshape(blocks, LANES, h, w).transpose(0, 2, 3, 1))


def from_blocks(out: np.ndarray) -> np.ndarray:
    """out (CB, OH, OW, LANES) as (CB * LANES, OH, OW), the padded channels kept."""
    blocks, h, w, _ = out.shape
    return out.transpose(0, 3, 1, 2).reshape(blocks * LANES, h, w)


def expected_output(x, weight, bias, strides, pads, dilations, bounds, activation):
    """act(clip(conv + bias, lo, hi)) in float64 (alpha 1.0)."""
    value = np.clip(reference(x, weight, bias, strides, pads, dilations), *bounds)
    return value if activation is None else ACTIVATIONS[activation](value, 1.0)


def run(x, weight, bias, strides, pads, dilations, bounds, activation, out_shape, first=0, last=None, rows=(0, -1)):
    """The compiled kernel on the blocked layout (blocks ``first`` to ``last - 1``, output ``rows``);
    ``out`` starts as NaN (to see what it writes)."""
    from lite.kernels.fast.activation import CLIP_CODE, EPILOGUE_CODES
    from lite.kernels.fast.blocked_depthwise import arrange, depthwise

    blocks = -(-x.shape[0] // LANES)
    w, b = arrange(weight, bias, blocks)
    out = np.full((blocks, *out_shape, LANES), np.nan, np.float32)
    code = CLIP_CODE if activation is None else EPILOGUE_CODES[activation]
    lo, hi = (np.float32(v) for v in bounds)
    depthwise(to_blocks(x), w, b, out, *weight.shape[2:], *strides, pads[0], pads[1], *dilations, lo, hi, code,
              np.float32(1.0), first, blocks if last is None else last, *rows)
    return out


@pytest.mark.parametrize(("channels", "h", "w", "kernel", "strides", "pads", "dilations", "with_bias", "bounds",
                          "activation"), CASES)
def test_matches_numpy_on_nchw(channels, h, w, kernel, strides, pads, dilations, with_bias, bounds, activation):
    """Within 1e-4 of the largest output; the padded channels exactly zero."""
    rng = np.random.default_rng([channels, h, w, *kernel, *strides, *pads, *dilations, len(activation or "")])
    x = rng.standard_normal((channels, h, w)).astype(np.float32)
    weight = rng.standard_normal((channels, 1, *kernel)).astype(np.float32)
    bias = rng.standard_normal(channels).astype(np.float32) if with_bias else None
    expected = expected_output(x, weight, bias, strides, pads, dilations, bounds, activation)
    out = run(x, weight, bias, strides, pads, dilations, bounds, activation, expected.shape[1:])
    got = from_blocks(out)
    error = np.abs(got[:channels] - expected).max()
    assert error <= 1e-4 * max(1.0, np.abs(expected).max()), error
    assert (got[channels:] == 0).all()  # NOTE: the zero padding of bias and weight keeps padded channels exactly 0


@pytest.mark.parametrize(("channels", "first", "last"), [(96, 1, 5), (96, 2, 3), (40, 0, 2), (96, 0, 6)])
def test_a_range_of_blocks_writes_only_its_blocks(channels, first, last):
    """Blocks ``first`` to ``last - 1`` are written (a quad of blocks where four are left, single
    blocks after), the others stay as they were."""
    rng = np.random.default_rng([channels, first, last])
    x = rng.standard_normal((channels, 9, 11)).astype(np.float32)
    weight = rng.standard_normal((channels, 1, 3, 3)).astype(np.float32)
    bias = rng.standard_normal(channels).astype(np.float32)
    args = ((1, 1), (1, 1, 1, 1), (1, 1), RELU6, None)
    expected = np.full((-(-channels // LANES) * LANES, 9, 11), np.nan)
    expected[:channels] = expected_output(x, weight, bias, *args)
    expected[channels:] = 0
    got = from_blocks(run(x, weight, bias, *args, (9, 11), first, last))
    inside = slice(first * LANES, last * LANES)
    np.testing.assert_allclose(got[inside], expected[inside], rtol=0, atol=1e-4 * max(1, np.nanmax(expected)))
    assert np.isnan(got[:first * LANES]).all() and np.isnan(got[last * LANES:]).all()


@pytest.mark.parametrize(("strides", "rows"), [((1, 1), (0, 4)), ((1, 1), (3, 9)), ((2, 2), (1, 3)), ((2, 2), (4, 5))])
def test_a_range_of_rows_writes_only_its_rows(strides, rows):
    """Output rows ``rows`` of every block are written (border and interior rows both), the others
    stay as they were: threads share a plane of few blocks by rows."""
    rng = np.random.default_rng([*strides, *rows])
    x = rng.standard_normal((40, 9, 11)).astype(np.float32)
    weight = rng.standard_normal((40, 1, 3, 3)).astype(np.float32)
    args = (strides, (1, 1, 1, 1), (1, 1), RELU6, None)
    expected = expected_output(x, weight, None, *args)
    got = from_blocks(run(x, weight, None, *args, expected.shape[1:], rows=rows))
    inside = slice(*rows)
    np.testing.assert_allclose(got[:40, inside], expected[:, inside], rtol=0, atol=1e-4 * max(1, expected.max()))
    assert np.isnan(got[:, :rows[0]]).all() and np.isnan(got[:, rows[1]:]).all()


def test_arrange_lays_the_taps_out_by_block_and_lane():
    """w[cb, t, l] = weight[cb * 16 + l, 0, t // KW, t % KW]; zero past C and without a bias."""
    from lite.kernels.fast.blocked_depthwise import arrange

    weight = np.arange(20 * 2 * 3, dtype=np.float32).reshape(20, 1, 2, 3)
    w, b = arrange(weight, np.arange(20, dtype=np.float32), 2)
    assert w.shape == (2, 6, LANES) and b.shape == (2, LANES) and w.flags.c_contiguous
    for block, tap, lane in [(0, 0, 0), (0, 4, 7), (1, 5, 3), (1, 2, 0)]:
        assert w[block, tap, lane] == weight[block * LANES + lane, 0, tap // 3, tap % 3]
    assert (w[1, :, 4:] == 0).all() and (b[1, 4:] == 0).all() and b[1, 3] == 19
    assert (arrange(weight, None, 2)[1] == 0).all()


def test_warm_compiles_the_kernel():
    """``warm`` leaves a compiled ``depthwise``."""
    from lite.kernels.fast.blocked_depthwise import depthwise, warm

    warm()
    assert depthwise.signatures
