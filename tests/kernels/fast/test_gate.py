"""The compiled squeeze-and-excitation gate (lite.kernels.fast.gate) against the same gate in
float64 numpy: the mean of each plane, two products, their clips and activations."""

from __future__ import annotations

import numpy as np
import pytest

from lite.kernels import fast

pytestmark = pytest.mark.skipif(fast.numba_module() is None, reason="numba is not importable here")

RNG = np.random.default_rng(5)


def sigmoid(v: np.ndarray) -> np.ndarray:
    return 1 / (1 + np.exp(-v))


EXACT = {  # code name: (alpha, beta, the formula in float64)
    "IDENTITY": (1.0, 0.0, lambda v, a, b: v),
    "SIGMOID": (1.0, 0.0, lambda v, a, b: sigmoid(v)),
    "HARD_SIGMOID": (0.2, 0.5, lambda v, a, b: np.clip(a * v + b, 0, 1)),
    "SWISH": (1.5, 0.0, lambda v, a, b: v * sigmoid(a * v)),
    "HARD_SWISH": (1.0, 0.0, lambda v, a, b: v * np.clip(v / 6 + 0.5, 0, 1)),
}


def code(name: str) -> int:
    from lite.kernels.fast import gate

    return gate.IDENTITY if name == "IDENTITY" else gate.GATE_CODES[name]


def reference(x, w1, b1, bounds1, first, w2, b2, bounds2, second) -> np.ndarray:
    alpha1, beta1, f1 = EXACT[first]
    alpha2, beta2, f2 = EXACT[second]
    hidden = f1(np.clip(x.astype(np.float64).mean(axis=2) @ w1.T + b1, *bounds1), alpha1, beta1)
    return f2(np.clip(hidden @ w2.T + b2, *bounds2), alpha2, beta2)


@pytest.mark.parametrize("images, channels, length, hidden", [
    (1, 32, 12544, 8), (1, 1152, 49, 48), (3, 24, 7, 6), (2, 5, 1, 3), (1, 240, 196, 10)])
@pytest.mark.parametrize("first, second", [
    ("SWISH", "SIGMOID"), ("IDENTITY", "HARD_SIGMOID"), ("HARD_SWISH", "IDENTITY"), ("SIGMOID", "SWISH")])
@pytest.mark.parametrize("bounds1", [(-np.inf, np.inf), (0.0, 6.0)])
def test_the_gate_matches_float64_numpy(images, channels, length, hidden, first, second, bounds1):
    from lite.kernels.fast import gate

    x = (RNG.standard_normal((images, channels, length)) + 0.3).astype(np.float32)
    w1 = (RNG.standard_normal((hidden, channels)) / np.sqrt(channels)).astype(np.float32)
    w2 = (RNG.standard_normal((channels, hidden)) * 2 / np.sqrt(hidden)).astype(np.float32)
    b1, b2 = (RNG.standard_normal(n).astype(np.float32) for n in (hidden, channels))
    bounds2 = (-np.inf, np.inf)
    out = np.full((images, channels), np.nan, np.float32)
    terms = [(np.float32(lo), np.float32(hi)) for lo, hi in (bounds1, bounds2)]
    (alpha1, beta1, _), (alpha2, beta2, _) = EXACT[first], EXACT[second]
    gate.gate(x, w1, b1, *terms[0], code(first), np.float32(alpha1), np.float32(beta1), np.ascontiguousarray(w2.T),
              b2, *terms[1], code(second), np.float32(alpha2), np.float32(beta2), np.empty(channels, np.float32),
              np.empty(hidden, np.float32), out)
    want = reference(x, w1, b1, bounds1, first, w2, b2, bounds2, second)
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-6)


def test_each_image_gets_its_own_gate():
    """A scalar of one image's work must not leak into the next (the planes' means differ)."""
    from lite.kernels.fast import gate

    x = np.stack([np.full((4, 9), 1.0), np.full((4, 9), -2.0)]).astype(np.float32)
    w1, w2 = np.eye(4, dtype=np.float32), np.eye(4, dtype=np.float32)
    zeros, bound = np.zeros(4, np.float32), np.float32(np.inf)
    out = np.empty((2, 4), np.float32)
    gate.gate(x, w1, zeros, -bound, bound, gate.IDENTITY, np.float32(1), np.float32(0), w2, zeros, -bound, bound,
              gate.IDENTITY, np.float32(1), np.float32(0), np.empty(4, np.float32), np.empty(4, np.float32), out)
    np.testing.assert_array_equal(out, [[1.0] * 4, [-2.0] * 4])


@pytest.mark.parametrize("channels, hidden", [(960, 240), (40, 10), (5, 3)])
def test_the_products_in_pieces_and_on_the_crew_give_the_whole_gate(crew_runs, channels, hidden):
    """``hidden_rows`` and ``gated_run`` over pieces of their outputs, directly and as crew jobs
    (``product_jobs``), give exactly what ``excite`` gives in one call."""
    from lite.kernels.fast import gate

    threads, runs = crew_runs
    pooled = RNG.standard_normal(channels).astype(np.float32)
    w1 = (RNG.standard_normal((hidden, channels)) / np.sqrt(channels)).astype(np.float32)
    w2 = (RNG.standard_normal((hidden, channels)) / np.sqrt(hidden)).astype(np.float32)
    b1, b2 = (RNG.standard_normal(n).astype(np.float32) for n in (hidden, channels))
    first = (w1, b1, np.float32(0), np.float32(6), code("HARD_SWISH"), np.float32(1), np.float32(0))
    second = (w2, b2, np.float32(-np.inf), np.float32(np.inf), code("HARD_SIGMOID"), np.float32(0.2), np.float32(0.5))
    want = np.empty(channels, np.float32)
    gate.excite(pooled, *first, *second, np.empty(hidden, np.float32), want)
    inner, got = np.full(hidden, np.nan, np.float32), np.full(channels, np.nan, np.float32)
    for a, b in threads.crew_bounds(hidden, 3):
        gate.hidden_rows(pooled, *first, inner, a, b)
    for a, b in threads.crew_bounds(channels, 3)[::-1]:
        gate.gated_run(inner, *second, got, a, b)
    np.testing.assert_array_equal(got, want)
    inner[:], got[:] = np.nan, np.nan
    jobs = [gate.product_jobs(False, *first, pooled, inner, threads.crew_bounds(hidden, 2)),
            gate.product_jobs(True, *second, inner, got, threads.crew_bounds(channels, 2))]
    for job in jobs:
        job()
    assert runs == jobs
    np.testing.assert_array_equal(got, want)
