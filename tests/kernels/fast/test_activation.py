"""The compiled GELU against the numpy kernel it stands in for, and the oracle."""

from __future__ import annotations

import math

import numpy as np
import pytest

from lite.kernels import fast
from lite.kernels.fast import activation
from tests.kernels.harness import run_kernel

pytestmark = pytest.mark.skipif(fast.numba_module() is None, reason="numba is not importable here")


def gelu(x):
    return run_kernel("Activation", {"activation_type": "GELU"}, [x])[0]


@pytest.mark.parametrize("shape", [(1,), (7,), (3, 129), (2, 16, 3072)])
def test_compiled_matches_the_numpy_kernel_and_the_exact_formula(monkeypatch, shape):
    rng = np.random.default_rng(list(shape))
    x = (rng.standard_normal(shape) * 4).astype(np.float32)
    x.reshape(-1)[:3] = [0.0, -30.0, 1e-30][:x.size]
    monkeypatch.setenv("DELITE_FAST_KERNELS", "0")
    reference = gelu(x)
    monkeypatch.setenv("DELITE_FAST_KERNELS", "1")
    got = gelu(x)
    # NOTE: below x = -5, 1 + erf cancels in float32 (both kernels): outputs near 1e-7 are off by ~1e-6
    np.testing.assert_allclose(got, reference, rtol=1e-4, atol=1e-5)
    exact = np.array([v * (1 + math.erf(v / math.sqrt(2))) / 2 for v in x.astype(np.float64).reshape(-1)])
    np.testing.assert_allclose(got.reshape(-1), exact, rtol=1e-4, atol=1e-5)


def test_the_compiled_kernel_runs_for_float32_only(monkeypatch):
    calls = []
    monkeypatch.setattr(activation, "gelu_float32", lambda x, out: calls.append(x.shape))
    gelu(np.ones((2, 3), np.float32))
    gelu(np.ones((2, 3), np.float64))
    assert calls == [(6,)]
