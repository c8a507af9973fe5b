"""The compiled attention heads (``lite.kernels.fast.attention``) against the ONNX reference
evaluator, and the Attention kernel running them on the crew against its numpy path."""

from __future__ import annotations

import numpy as np
import pytest

from lite.kernels import fast
from lite.kernels.fast import attention, crew, softmax
from tests.support.kernel_harness import run_kernel
from tests.support.matmul import attention_reference

pytestmark = pytest.mark.skipif(fast.numba_module() is None, reason="numba is not importable here")

# (q, k (transposed: D x Sk), v, mask or None): a BERT layer's heads; keys and widths below, at and
# past one panel; masks broadcast over batch, heads and queries, or given whole; 3-D operands
CASES = [
    ((1, 12, 128, 64), (1, 12, 64, 128), (1, 12, 128, 64), (1, 1, 1, 128)),
    ((2, 3, 9, 5), (2, 3, 5, 7), (2, 3, 7, 50), None),
    ((2, 2, 16, 8), (2, 2, 8, 49), (2, 2, 49, 48), (2, 1, 16, 49)),
    ((3, 8, 4), (3, 4, 20), (3, 20, 6), (20,)),
    ((1, 1, 30, 3), (1, 1, 3, 1), (1, 1, 1, 2), None),  # one key
]


def operands(q, k, v, mask, seed=0):
    rng = np.random.default_rng([seed, *q, *k])
    arrays = [(rng.standard_normal(s) * 2).astype(np.float32) for s in (q, k, v)]
    return arrays, None if mask is None else (rng.standard_normal(mask) * 3).astype(np.float32)


@pytest.mark.parametrize(("q", "k", "v", "mask"), CASES)
def test_heads_match_the_reference(q, k, v, mask):
    arrays, mask_array = operands(q, k, v, mask)
    scores_shape = (*q[:-1], k[-1])
    scores, out = np.empty(scores_shape, np.float32), np.full((*q[:-1], v[-1]), np.nan, np.float32)
    shape4 = (1,) * (4 - len(scores_shape)) + scores_shape
    flat = attention.layout(*arrays, scores, out)
    attention.heads(*flat, np.array(shape4, np.int64), np.float32(0.125),
                    *softmax.mask_layout(mask_array, shape4), 0, flat[0].shape[0], False)
    expected = attention_reference(*arrays, np.zeros((), np.float32) if mask_array is None else mask_array, 0.125)
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(("q", "k", "v", "mask"), CASES)
def test_the_kernel_runs_them_on_the_crew(monkeypatch, crew_runs, q, k, v, mask):
    threads, runs = crew_runs
    arrays, mask_array = operands(q, k, v, mask, seed=3)
    monkeypatch.setenv("DELITE_FAST_KERNELS", "0")
    [reference] = run_kernel("Attention", {"scale": 0.25}, [*arrays, mask_array])
    monkeypatch.setenv("DELITE_FAST_KERNELS", "1")
    [got] = run_kernel("Attention", {"scale": 0.25}, [*arrays, mask_array], threads=threads)
    np.testing.assert_allclose(got, reference, rtol=1e-4, atol=1e-5)
    heads = int(np.prod(q[:-2]))  # one head is one piece: not shared out, so BLAS runs it
    assert (crew.job_address(attention.heads_job) in [job.job for job in runs]) is (heads > 1)


def test_one_thread_stays_with_blas(monkeypatch):
    arrays, _ = operands(*CASES[0][:3], None)
    attention.warm()  # NOTE: before the patch, which the warm-up would call
    monkeypatch.setattr(attention, "heads", lambda *args: pytest.fail("the compiled heads ran"))
    run_kernel("Attention", {"scale": 1.0}, arrays)


@pytest.mark.parametrize(("q", "k", "v", "dtype"), [
    ((2, 1, 9, 4), (1, 3, 4, 9), (2, 3, 9, 4), np.float32),  # batch dims that broadcast
    ((2, 7, 4), (2, 4, 9), (2, 9, 4), np.float32),  # fewer queries than a tile's rows
    ((2, 9, 4), (2, 4, 9), (2, 9, 4), np.float64),
])
def test_other_attentions_stay_on_numpy(monkeypatch, crew_runs, q, k, v, dtype):
    arrays = [np.ones(s, dtype) for s in (q, k, v)]
    attention.warm()
    monkeypatch.setattr(attention, "heads", lambda *args: pytest.fail("the compiled heads ran"))
    [got] = run_kernel("Attention", {"scale": 1.0}, arrays, threads=crew_runs[0])
    np.testing.assert_allclose(got, np.ones_like(got), rtol=1e-6)  # weights summing to one, over rows of ones
