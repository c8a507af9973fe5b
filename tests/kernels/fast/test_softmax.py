"""The compiled attention softmax (one pass per row, on the crew or not) against numpy's passes."""

from __future__ import annotations

import numpy as np
import pytest

from lite.kernels import fast

pytestmark = pytest.mark.skipif(fast.numba_module() is None, reason="numba is not importable here")

SHAPES = [  # (scores, mask): masks that broadcast along every dim
    ((1, 12, 128, 128), (1, 1, 1, 128)),
    ((2, 4, 7, 9), (2, 1, 1, 9)),
    ((2, 4, 7, 9), (7, 9)),
    ((3, 5, 33), None),
    ((6, 40), (6, 40)),
    ((2, 3, 5, 300), (1, 3, 5, 1)),
]


def reference(scores, mask, scale):
    total = scores.astype(np.float64) * scale + (0 if mask is None else mask)
    total = np.exp(total - total.max(axis=-1, keepdims=True))
    return total / total.sum(axis=-1, keepdims=True)


def compiled(scores, mask, scale, threads=None, nan_to_zero=False):
    from lite.kernels.fast import softmax

    shape4 = (1,) * (4 - scores.ndim) + scores.shape
    flat_mask, strides = softmax.mask_layout(mask, shape4)
    shape, rows = np.array(shape4, np.int64), scores.size // scores.shape[-1]
    if threads is None:
        softmax.softmax_rows(scores.reshape(-1), shape, np.float32(scale), flat_mask, strides, 0, rows, nan_to_zero)
        return
    with threads.lent():
        softmax.crew_jobs(scores.reshape(-1), shape, np.float32(scale), flat_mask, strides,
                          threads.loop_bounds(rows), nan_to_zero)()


@pytest.mark.parametrize("on_crew", [False, True])
@pytest.mark.parametrize(("shape", "mask_shape"), SHAPES)
def test_matches_numpy(shape, mask_shape, on_crew):
    from lite.kernels.parallel import KernelThreads

    threads = KernelThreads(2) if on_crew else None
    if on_crew and threads.crew() is None:
        pytest.skip("no crew here")
    rng = np.random.default_rng([len(shape), *shape])
    scores = (rng.standard_normal(shape) * 8).astype(np.float32)
    mask = None if mask_shape is None else (rng.standard_normal(mask_shape) * 4).astype(np.float32)
    want = reference(scores, mask, 0.125)
    compiled(scores, mask, 0.125, threads)
    np.testing.assert_allclose(scores, want, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("scale", [0.05, 1.0, -0.05])
def test_scores_far_from_zero_stay_finite_at_any_scale(scale):
    """Without a mask the scaling joins the exponentials' pass for a positive scale: the greatest
    scaled score must be subtracted there, or every exponential of these scores underflows."""
    scores = (np.random.default_rng(9).standard_normal((2, 3, 4, 50)) * 40 + 2000).astype(np.float32)
    want = reference(scores, None, scale)
    compiled(scores, None, scale)
    np.testing.assert_allclose(scores, want, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("masked_value", [-np.inf, np.finfo(np.float32).min, -1e9])
def test_masked_positions_get_nothing(masked_value):
    rng = np.random.default_rng(4)
    scores = rng.standard_normal((1, 2, 6, 8)).astype(np.float32)
    mask = np.triu(np.full((6, 8), masked_value, np.float32), k=1)  # a causal mask
    want = reference(scores, mask, 1.0)
    compiled(scores, mask, 1.0)
    np.testing.assert_allclose(scores, want, rtol=1e-5, atol=1e-30)
    assert np.all(scores[..., np.triu(np.ones((6, 8), bool), k=1)] < 1e-30)


def test_the_attention_kernel_runs_it(monkeypatch):
    from lite.kernels.fast import softmax
    from tests.support.kernel_harness import run_kernel

    rng = np.random.default_rng(9)
    q, k, v = (rng.standard_normal(s).astype(np.float32) for s in ((1, 2, 5, 8), (1, 2, 8, 5), (1, 2, 5, 8)))
    expected = run_kernel("Attention", {"scale": 0.5}, [q, k, v])[0]
    calls = []
    rows = softmax.softmax_rows
    monkeypatch.setattr(softmax, "softmax_rows", lambda *args: calls.append(args[-2]) or rows(*args))
    np.testing.assert_array_equal(run_kernel("Attention", {"scale": 0.5}, [q, k, v])[0], expected)
    assert calls == [10]
    monkeypatch.setenv("DELITE_FAST_KERNELS", "0")
    np.testing.assert_allclose(run_kernel("Attention", {"scale": 0.5}, [q, k, v])[0], expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(("enough", "made_by"), [(False, "softmax_jobs"), (True, "heads_step")])
def test_the_attention_kernel_on_the_crew_keeps_its_jobs_while_the_arrays_stay(enough, made_by):
    """Compiled heads from ``MIN_ROWS`` queries (the tile's rows), the softmax's jobs below."""
    from lite.kernels.fast.gemm import MIN_ROWS
    from lite.kernels.parallel import KernelThreads
    from lite.kernels.registry import find_kernel
    from lite.primitive import Primitive
    from lite.schema.primitives import default_attrs
    from lite.tensor import Tensor
    from tests.support.kernel_harness import run_kernel

    threads = KernelThreads(2)
    if threads.crew() is None:
        pytest.skip("no crew here")
    queries = 2 * MIN_ROWS if enough else MIN_ROWS - 1
    rng = np.random.default_rng(12)
    arrays = [rng.standard_normal(s).astype(np.float32) for s in ((1, 4, queries, 8), (1, 4, 8, 16), (1, 4, 16, 8))]
    mask = (rng.standard_normal((1, 1, 1, 16)) * 3).astype(np.float32)
    inputs = [Tensor(f"in{i}", a.dtype, a.shape, data=a) for i, a in enumerate([*arrays, mask])]
    out = Tensor("out", np.float32, (1, 4, queries, 8), data=np.empty((1, 4, queries, 8), np.float32))
    kernel = find_kernel("Attention", np.dtype(np.float32))(
        inputs, [out], Primitive("Attention", {**default_attrs("Attention"), "scale": 0.5}), name="attention")
    kernel.threads = threads
    assert kernel.infer_shapes() == [out.shape]
    kernel.prepare()
    kernel.resize()
    made = []
    for new_mask in (mask, mask, mask * 2):  # the same mask twice, then another array
        inputs[3].data = new_mask
        with threads.lent():
            kernel.execute()
        made.append(getattr(kernel, made_by)[1])
        expected = run_kernel("Attention", {"scale": 0.5}, [*arrays, new_mask])[0]
        np.testing.assert_allclose(out.data, expected, rtol=1e-5, atol=1e-6)
    assert made[0] is made[1] and made[2] is not made[1]


@pytest.mark.parametrize("width", [1, 5, 16, 17, 128, 131])
def test_row_max_of_any_signs_reads_only_the_row(width):
    from lite.kernels.fast import softmax

    rng = np.random.default_rng(width)
    for signs in ("mixed", "negative", "positive"):
        values = rng.standard_normal(width + 7).astype(np.float32)
        values = -np.abs(values) if signs == "negative" else np.abs(values) if signs == "positive" else values
        for at in (values[3:3 + width].argmax() + 3, 3, width + 2):  # the largest inside, first, past the row
            row = values.copy()
            row[min(at, width + 6)] = 50.0 if signs != "negative" else -0.01
            expected = row[3:3 + width].max()
            assert softmax.row_max(row, 3, width) == expected
    assert softmax.row_max(np.array([-0.0, -np.inf, -3.0], np.float32), 0, 3) == 0.0


def nan_rows(scale):
    """Scores (3, 2, 4, 6) whose rows the softmax makes NaN, by row: a NaN, a -NaN (sign bit set), +inf,
    every value -inf (or masked so), with -inf entries beside finite ones (a number), plain."""
    scores = np.random.default_rng(7).standard_normal((3, 2, 4, 6)).astype(np.float32) * 3
    rows = scores.reshape(-1, 6)
    rows[0, 2] = np.nan
    rows[1, 5] = -np.float32(np.nan)
    rows[2, 0] = np.inf
    rows[3] = -np.inf
    rows[4, :3] = -np.inf
    return scores


@pytest.mark.parametrize("on_crew", [False, True])
@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("scale", [0.5, -0.5])
def test_nan_to_zero_zeroes_exactly_the_weights_numpy_makes_nan(scale, masked, on_crew):
    """The dynamo exporter's Where(IsNaN(p), 0, p) after the softmax, against numpy's passes."""
    from lite.kernels.parallel import KernelThreads

    threads = KernelThreads(2) if on_crew else None
    if on_crew and threads.crew() is None:
        pytest.skip("no crew here")
    scores = nan_rows(scale)
    mask = None
    if masked:  # the last row masked whole, beside finite scores
        mask = np.zeros((2, 4, 6), np.float32)
        mask[1, 3] = -np.inf
    with np.errstate(invalid="ignore"):
        want = reference(scores, mask, scale)
        want = np.where(np.isnan(want), 0, want)
        plain = scores.copy()
        compiled(plain, mask, scale, threads)
    compiled(scores, mask, scale, threads, nan_to_zero=True)
    np.testing.assert_allclose(scores, want, rtol=1e-5, atol=1e-7)
    zeroed = np.all(want == 0, axis=-1)
    assert zeroed.sum() == (7 if masked else 4) and not np.isnan(scores).any()  # masked: a row of each batch
    np.testing.assert_array_equal(scores[~zeroed], plain[~zeroed])  # the flag changes nothing else
    assert np.isnan(plain[zeroed]).all()  # without it, NaN as numpy's passes give


@pytest.mark.parametrize("scale", [1.0, 4.0])
def test_a_row_whose_scaled_scores_overflow_is_nan_as_in_numpy(scale):
    scores = np.full((1, 1, 2, 5), 1.0, np.float32)
    scores[0, 0, 1, 2] = np.finfo(np.float32).max  # times 4: +inf in numpy
    with np.errstate(invalid="ignore", over="ignore"):
        want = reference(scores.astype(np.float32) * np.float32(scale), None, 1.0)
    compiled(scores, None, scale)
    np.testing.assert_allclose(scores, want, rtol=1e-5, atol=1e-7)
    assert bool(np.isnan(scores[0, 0, 1]).all()) == (scale == 4.0)


@pytest.mark.parametrize(("shape", "axis"), [((3, 7, 300), [-1]), ((2, 5), [1]), ((4, 1), [-1]), ((2, 3, 4), [1])])
def test_the_softmax_kernel_over_the_last_axis_matches_numpys(monkeypatch, shape, axis):
    """Rows of NaN, +inf and -inf included: NaN rows where numpy's passes give them."""
    from lite.kernels.fast import softmax
    from tests.support.kernel_harness import run_kernel

    x = (np.random.default_rng(len(shape)).standard_normal(shape) * 5).astype(np.float32)
    flat = x.reshape(-1, shape[-1])
    flat[0, 0], flat[-1, -1] = np.nan, np.inf
    monkeypatch.setenv("DELITE_FAST_KERNELS", "0")
    with np.errstate(invalid="ignore"):
        [want] = run_kernel("Softmax", {"axis": axis}, [x])
    monkeypatch.setenv("DELITE_FAST_KERNELS", "1")
    softmax.warm()
    calls, rows = [], softmax.softmax_rows
    monkeypatch.setattr(softmax, "softmax_rows", lambda *args: calls.append(args[-2]) or rows(*args))
    [got] = run_kernel("Softmax", {"axis": axis}, [x])
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)
    assert calls == ([flat.shape[0]] if axis[0] % len(shape) == len(shape) - 1 else [])
