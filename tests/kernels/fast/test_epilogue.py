"""The compiled convolution epilogue (bias, residual, clip in one pass) against numpy's passes."""

from __future__ import annotations

import numpy as np
import pytest

from lite.kernels import fast
from lite.kernels.fused import activation_epilogue_step, epilogue_steps
from lite.ops.activation import FUSED_CLIPS

pytestmark = pytest.mark.skipif(fast.numba_module() is None, reason="numba is not importable here")


def expected(out, bias, residual, activation):
    total = out + (0 if bias is None else bias.reshape(1, -1, *[1] * (out.ndim - 2)))
    total = total + (0 if residual is None else residual)
    bounds = FUSED_CLIPS.get(activation)
    return total if bounds is None else np.clip(total, *bounds)


def run(steps) -> None:
    for step in steps:
        step()


# NOTE: float64 compiles kernels of its own: the slow suite
@pytest.mark.parametrize("dtype", [np.float32, pytest.param(np.float64, marks=pytest.mark.slow)])
@pytest.mark.parametrize("shape", [(2, 6, 5, 7), (1, 3, 11), (3, 4, 2, 2, 2), (1, 5)])
@pytest.mark.parametrize("with_bias", [True, False])
@pytest.mark.parametrize("with_residual", [True, False])
@pytest.mark.parametrize("activation", ["NO_ACTIVATION", "RELU", "RELU6"])
def test_compiled_matches_numpy(monkeypatch, dtype, shape, with_bias, with_residual, activation):
    rng = np.random.default_rng([len(shape), *shape])
    out = (rng.standard_normal(shape) * 4).astype(dtype)
    bias = rng.standard_normal(shape[1]).astype(dtype) if with_bias else None
    residual = (rng.standard_normal(shape) * 4).astype(dtype) if with_residual else None
    want = expected(out, bias, residual, activation)
    results = []
    for enabled in ("0", "1"):
        monkeypatch.setenv("DELITE_FAST_KERNELS", enabled)
        got = out.copy()
        run(epilogue_steps(got, bias, residual, activation))
        results.append(got)
    for got in results:
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_compiled_pass_is_one_call_where_it_pays():
    out, bias, residual = np.ones((1, 2, 3), np.float32), np.ones(2, np.float32), np.ones((1, 2, 3), np.float32)
    assert len(epilogue_steps(out, bias, residual, "RELU")) == 1
    assert len(epilogue_steps(out, bias, None, "RELU6")) == 1
    assert len(epilogue_steps(out, None, residual, "NO_ACTIVATION")) == 1


@pytest.mark.parametrize("residual", [
    np.arange(24, dtype=np.float32).reshape(1, 4, 6)[:, ::2],  # strided
    np.arange(12, dtype=np.float64).reshape(1, 2, 6),  # another dtype
    np.arange(6, dtype=np.float32).reshape(1, 1, 6),  # broadcast
])
def test_arrays_the_compiled_code_does_not_take_go_through_numpy(residual):
    out = np.linspace(-3, 3, 12, dtype=np.float32).reshape(1, 2, 6)
    bias = np.array([0.5, -0.25], np.float32)
    want = expected(out, bias, residual, "RELU")
    steps = epilogue_steps(out, bias, residual, "RELU")
    assert len(steps) == 3
    run(steps)
    np.testing.assert_allclose(out, want, rtol=1e-6)


def test_a_read_only_bias_is_copied_for_the_compiled_code():
    out, bias = np.full((1, 2, 4), -1.0, np.float32), np.array([2.0, 9.0], np.float32)
    bias.flags.writeable = False
    run(epilogue_steps(out, bias, None, "RELU6"))
    np.testing.assert_array_equal(out, np.array([[[1.0] * 4, [6.0] * 4]], np.float32))


def swish(x, alpha):
    return x / (1 + np.exp(-alpha * x.astype(np.float64)))


def hard_swish(x, _alpha):
    return x * np.clip(x.astype(np.float64) / 6 + 0.5, 0, 1)


@pytest.mark.parametrize(("activation", "function"), [("SWISH", swish), ("HARD_SWISH", hard_swish)])
@pytest.mark.parametrize("shape", [(2, 6, 5, 7), (1, 3, 11), (1, 40, 1)])
@pytest.mark.parametrize("alpha", [1.0, 1.702])
@pytest.mark.parametrize("with_bias", [True, False])
def test_bias_and_an_activation_in_one_pass(activation, function, shape, alpha, with_bias):
    rng = np.random.default_rng([len(shape), *shape, int(alpha * 1000)])
    out = (rng.standard_normal(shape) * 6).astype(np.float32)
    out.flat[:6] = [-100, -30, -1e-30, 0, 30, 100]  # the exponential's clamps, and tiny values
    bias = rng.standard_normal(shape[1]).astype(np.float32) if with_bias else None
    want = function(out + (0 if bias is None else bias.reshape(1, -1, *[1] * (out.ndim - 2))), alpha)
    run([activation_epilogue_step(out, bias, activation, alpha)])
    np.testing.assert_allclose(out, want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("shape", [(1, 96, 56, 56), (2, 37, 30, 31), (3, 5, 4096)])
@pytest.mark.parametrize("kind", ["clip", "residual", "SWISH", "HARD_SWISH"])
def test_epilogues_on_the_crew_match_numpy(shape, kind):
    from lite.kernels.fast import epilogue
    from lite.kernels.parallel import KernelThreads

    threads = KernelThreads(2)
    if threads.crew() is None:
        pytest.skip("no crew here")
    rng = np.random.default_rng([len(kind), *shape])
    out = (rng.standard_normal(shape) * 4).astype(np.float32)
    bias = rng.standard_normal(shape[1]).astype(np.float32)
    residual = (rng.standard_normal(shape) * 4).astype(np.float32) if kind == "residual" else None
    if kind in ("SWISH", "HARD_SWISH"):
        want = (swish if kind == "SWISH" else hard_swish)(out + bias.reshape(1, -1, *[1] * (out.ndim - 2)), 1.25)
        steps = [activation_epilogue_step(out, bias, kind, 1.25)]
    else:
        want = expected(out, bias, residual, "RELU6")
        steps = epilogue_steps(out, bias, residual, "RELU6")
    crewed = [epilogue.on_crew(threads, step) for step in steps]
    assert [type(step.native).__name__ for step in crewed] == ["Jobs"]
    with threads.lent():
        run(crewed)
    np.testing.assert_allclose(out, want, rtol=1e-6, atol=1e-6)


def test_small_epilogues_stay_whole():
    from lite.kernels.fast import epilogue
    from lite.kernels.parallel import KernelThreads

    out, bias = np.ones((1, 8, 7, 7), np.float32), np.ones(8, np.float32)
    step = epilogue_steps(out, bias, None, "RELU")[0]
    assert epilogue.on_crew(KernelThreads(2), step) is step
