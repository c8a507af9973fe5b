"""KernelThreads: a matmul split across threads equals numpy's."""

import threading

import numpy as np
import pytest

from lite.kernels.parallel import KernelThreads


@pytest.mark.parametrize("a_shape, b_shape", [
    ((64, 576), (576, 3136)),          # a conv as one GEMM
    ((4, 16, 288), (2, 4, 288, 196)),  # grouped conv: (G, O/G, K) @ (N, G, K, P)
    ((3, 500), (500, 700)),            # fewer rows than threads... still split into rows
    ((8, 8), (8, 8)),                  # too small to split
    ((2, 300, 400), (400, 500)),       # batched a
])
@pytest.mark.parametrize("threads", [1, 2, 3])
def test_split_matmul_matches_numpy(a_shape, b_shape, threads):
    rng = np.random.default_rng(0)
    a = rng.standard_normal(a_shape).astype(np.float32)
    b = rng.standard_normal(b_shape).astype(np.float32)
    want = np.matmul(a, b)
    out = np.full(want.shape, np.nan, np.float32)
    KernelThreads(threads).matmul(a, b, out)
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-4)


def test_large_products_use_the_pool_threads():
    seen = set()
    original = np.matmul

    def spy(*args, **kwargs):
        seen.add(threading.current_thread().name.split("_")[0])
        return original(*args, **kwargs)

    threads = KernelThreads(2)
    a, b = np.ones((256, 256), np.float32), np.ones((256, 256), np.float32)
    np.matmul = spy
    try:
        threads.matmul(a, b, np.empty((256, 256), np.float32))
    finally:
        np.matmul = original
    assert seen == {"MainThread", "lite-kernel"}
