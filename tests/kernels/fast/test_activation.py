"""The compiled activations (GELU, GELU_TANH, SIGMOID, SWISH, HARD_SWISH) against the numpy kernel they stand
in for, and against the exact formula in float64."""

from __future__ import annotations

import math

import numpy as np
import pytest

from lite.kernels import fast
from lite.kernels.fast import activation
from tests.support.kernel_harness import run_kernel

pytestmark = pytest.mark.skipif(fast.numba_module() is None, reason="numba is not importable here")


def sigmoid(v: float) -> float:
    return 1 / (1 + math.exp(-v)) if v >= 0 else math.exp(v) / (1 + math.exp(v))


EXACT = {  # activation type: (attributes, the formula on one float64)
    "GELU": ({}, lambda v: v * (1 + math.erf(v / math.sqrt(2))) / 2),
    "GELU_TANH": ({}, lambda v: v * (1 + math.tanh(math.sqrt(2 / math.pi) * (v + 0.044715 * v ** 3))) / 2),
    "SIGMOID": ({}, sigmoid),
    "SWISH": ({"alpha": 1.0}, lambda v: v * sigmoid(v)),
    "HARD_SWISH": ({}, lambda v: v * min(max(v / 6 + 0.5, 0.0), 1.0)),
}


def activate(kind, x):
    return run_kernel("Activation", {"activation_type": kind, **EXACT[kind][0]}, [x])[0]


@pytest.mark.parametrize("kind", list(EXACT))
@pytest.mark.parametrize("shape", [(1,), (7,), (3, 129), (2, 16, 3072)])
def test_compiled_matches_the_numpy_kernel_and_the_exact_formula(monkeypatch, kind, shape):
    rng = np.random.default_rng(list(shape))
    x = (rng.standard_normal(shape) * 4).astype(np.float32)
    x.reshape(-1)[:6] = [0.0, -30.0, 1e-30, 95.0, -95.0, 3.0][:x.size]  # tails past exp's range too
    monkeypatch.setenv("DELITE_FAST_KERNELS", "0")
    reference = activate(kind, x)
    monkeypatch.setenv("DELITE_FAST_KERNELS", "1")
    got = activate(kind, x)
    # NOTE: below x = -5, 1 + erf cancels in float32 (both kernels): GELU outputs near 1e-7 are off by ~1e-6
    np.testing.assert_allclose(got, reference, rtol=1e-4, atol=1e-5)
    exact = np.array([EXACT[kind][1](v) for v in x.astype(np.float64).reshape(-1)])
    np.testing.assert_allclose(got.reshape(-1), exact, rtol=1e-4, atol=1e-5)


def test_swish_takes_alpha():
    x = np.linspace(-6, 6, 25, dtype=np.float32)
    got = run_kernel("Activation", {"activation_type": "SWISH", "alpha": 0.75}, [x])[0]
    np.testing.assert_allclose(got, [v * sigmoid(0.75 * v) for v in x.astype(np.float64)], rtol=1e-5, atol=1e-6)


def test_swish_of_a_very_negative_input_is_zero_not_subnormal():
    """x * sigmoid(x) below -88 is under 1e-36: 0, which the next layers multiply at full speed."""
    x = np.array([-88.5, -95.0, -1e4, -3e38, -87.0], np.float32)
    got = run_kernel("Activation", {"activation_type": "SWISH", "alpha": 1.0}, [x])[0]
    assert (got[:4] == 0).all()
    assert abs(got[4]) >= np.finfo(np.float32).tiny  # -87 * e^-87: still a normal float


@pytest.mark.parametrize("exponent", [-87.0, -20.5, -1.0, 0.0, 1e-3, 2.5, 40.25, 88.0])
def test_exp32_within_four_ulp(exponent):
    got, want = activation.exp32(np.float32(exponent)), math.exp(float(np.float32(exponent)))
    assert abs(got - want) <= 4 * np.spacing(np.float32(want))


@pytest.mark.parametrize("kind", list(EXACT))
def test_the_compiled_kernel_runs_for_float32_only(monkeypatch, kind):
    calls = []
    monkeypatch.setitem(activation.COMPILED, kind, lambda x, out, alpha: calls.append(x.shape))
    activate(kind, np.ones((2, 3), np.float32))
    activate(kind, np.ones((2, 3), np.float64))
    assert calls == [(6,)]
