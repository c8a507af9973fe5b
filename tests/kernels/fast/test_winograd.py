"""Winograd F(4x4, 3x3) against the numpy kernel it stands in for (im2col), and the oracle."""

from __future__ import annotations

import numpy as np
import pytest

from lite.kernels import fast
from lite.kernels.fast import direct, winograd
from tests.support.conv import build, onnx_reference
from tests.support.kernel_harness import run_kernel

pytestmark = pytest.mark.skipif(fast.numba_module() is None, reason="numba is not importable here")

DIRECT_TERMS = direct.MAX_TERMS


@pytest.fixture(autouse=True)
def no_direct_kernel(monkeypatch):
    """These cases have few enough terms for the direct kernel (``lite.kernels.fast.direct``),
    which keeps them with 512-bit registers: here it takes none, and the rule is that of 512-bit
    registers whatever this machine's (``winograd.DIRECT_FIRST``)."""
    monkeypatch.setattr("lite.kernels.fast.direct.MAX_TERMS", 0)
    monkeypatch.setattr(winograd, "DIRECT_FIRST", True)
    monkeypatch.setattr(winograd, "MIN_CHANNELS", 32)


# (x shape, out channels, Conv2DFusion attrs): planes that are and are not multiples of 4, pads, batches
CASES = [
    ((1, 32, 24, 24), 32, {"pad_list": (1, 1, 1, 1)}),
    ((2, 40, 27, 25), 36, {"pad_list": (1, 1, 1, 1), "activation_type": "RELU"}),
    ((1, 32, 30, 26), 48, {"pad_list": (0, 0, 0, 0), "activation_type": "RELU6"}),
    ((1, 33, 26, 29), 32, {"pad_list": (2, 0, 1, 2)}),
    ((1, 64, 56, 56), 64, {"pad_mode": "SAME_UPPER"}),
]


def conv(x, w, b, attrs):
    return run_kernel("Conv2DFusion", {"group": 1, **attrs}, [x, w] + ([] if b is None else [b]))[0]


def operands(x_shape, out_channels, dtype, with_bias=True):
    rng = np.random.default_rng([*x_shape, out_channels])
    x = rng.standard_normal(x_shape).astype(dtype)
    w = (rng.standard_normal((out_channels, x_shape[1], 3, 3)) / np.sqrt(9 * x_shape[1])).astype(dtype)
    return x, w, rng.standard_normal(out_channels).astype(dtype) if with_bias else None


# NOTE: float64 compiles kernels of its own: the slow suite
@pytest.mark.parametrize("dtype", [np.float32, pytest.param(np.float64, marks=pytest.mark.slow)])
@pytest.mark.parametrize("with_bias", [True, False])
@pytest.mark.parametrize(("x_shape", "out_channels", "attrs"), CASES)
def test_winograd_matches_the_numpy_kernel(monkeypatch, x_shape, out_channels, attrs, dtype, with_bias):
    x, w, b = operands(x_shape, out_channels, dtype, with_bias)
    monkeypatch.setenv("DELITE_FAST_KERNELS", "0")
    reference = conv(x, w, b, attrs)
    monkeypatch.setenv("DELITE_FAST_KERNELS", "1")
    got = conv(x, w, b, attrs)
    assert got.dtype == reference.dtype and got.shape == reference.shape
    relative = np.linalg.norm(got - reference) / np.linalg.norm(reference)
    assert relative < (1e-5 if dtype == np.float32 else 1e-12)
    np.testing.assert_allclose(got, reference, rtol=1e-4, atol=1e-4 if dtype == np.float32 else 1e-10)


def test_every_case_runs_winograd(monkeypatch):
    winograd.warm("float32")  # compiled (and cached) before the transform is replaced by a probe
    calls = []
    monkeypatch.setattr(winograd, "input_transform", lambda *args: calls.append(args[0].shape))
    with np.errstate(all="ignore"):  # NOTE: the products then read scratch the probe never wrote
        for x_shape, out_channels, attrs in CASES:
            conv(*operands(x_shape, out_channels, np.float32), attrs)
    assert len(calls) == len(CASES)


@pytest.mark.parametrize(("x_shape", "out_channels", "attrs"), [
    ((1, 16, 40, 40), 64, {"pad_list": (1, 1, 1, 1)}),  # too few input channels
    ((1, 256, 14, 14), 256, {"pad_list": (1, 1, 1, 1)}),  # too small a plane
    ((1, 64, 40, 40), 64, {"pad_list": (1, 1, 1, 1), "stride": (2, 2)}),
    ((1, 64, 40, 40), 64, {"pad_list": (2, 2, 2, 2), "dilation": (2, 2)}),
])
def test_other_layers_stay_on_im2col(monkeypatch, x_shape, out_channels, attrs):
    monkeypatch.setattr(winograd, "input_transform", lambda *args: pytest.fail("Winograd ran"))
    conv(*operands(x_shape, out_channels, np.float32), attrs)


def planned(x_shape, out_channels):
    """The algorithm a 3x3 stride-1 convolution with one-pixel pads resizes to."""
    kernel = build("Conv2DFusion", {"group": 1, "pad_list": (1, 1, 1, 1)},
                   list(operands(x_shape, out_channels, np.float32)))
    kernel.prepare()
    kernel.resize()
    return kernel.algorithm


@pytest.mark.parametrize(("direct_first", "x_shape", "out_channels", "plan"), [
    (True, (1, 64, 56, 56), 64, "compiled_direct"),  # 512-bit registers: the direct kernel keeps it
    (False, (1, 64, 56, 56), 64, "winograd"),  # AVX2: Winograd first
    (True, (1, 256, 14, 14), 256, "blocked_direct"),  # too small a plane
    (False, (1, 256, 14, 14), 256, "winograd"),  # AVX2: 256 channels from 14 x 14
    (False, (1, 128, 14, 14), 128, "compiled_direct"),  # fewer: the transforms eat the gain
    (False, (1, 32, 28, 28), 128, "compiled_direct"),  # too few channels to share at two threads
    (True, (1, 32, 28, 28), 128, "compiled_direct"),
])
def test_the_registers_decide_between_winograd_and_the_direct_kernels(monkeypatch, direct_first, x_shape,
                                                                       out_channels, plan):
    monkeypatch.setattr("lite.kernels.fast.direct.MAX_TERMS", DIRECT_TERMS)
    monkeypatch.setattr(winograd, "DIRECT_FIRST", direct_first)
    monkeypatch.setattr(winograd, "MIN_CHANNELS", 32 if direct_first else 64)
    assert planned(x_shape, out_channels) == plan


def test_matches_onnxruntime_on_a_resnet_layer():
    x, w, b = operands((1, 64, 56, 56), 64, np.float32)
    got = conv(x, w, b, {"pad_list": (1, 1, 1, 1)})
    expected = onnx_reference("Conv", x, {"w": w, "b": b}, pads=[1, 1, 1, 1])
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)
    assert np.linalg.norm(got - expected) / np.linalg.norm(expected) < 1e-5


@pytest.mark.parametrize("with_bias", [True, False])
@pytest.mark.parametrize(("x_shape", "out_channels", "attrs"), CASES)
def test_transforms_on_the_crew_match_the_numpy_kernel(monkeypatch, crew_runs, x_shape, out_channels, attrs,
                                                       with_bias):
    threads, runs = crew_runs
    x, w, b = operands(x_shape, out_channels, np.float32, with_bias)
    monkeypatch.setenv("DELITE_FAST_KERNELS", "0")
    reference = conv(x, w, b, attrs)
    monkeypatch.setenv("DELITE_FAST_KERNELS", "1")
    got = run_kernel("Conv2DFusion", {"group": 1, **attrs}, [x, w] + ([] if b is None else [b]), threads=threads)[0]
    np.testing.assert_allclose(got, reference, rtol=1e-4, atol=1e-4)
    assert len({run.job for run in runs}) == 2  # the input and the output transform ran on the crew
