"""The model's threads for native kernels: large matrix products split across them.

Each piece runs single-threaded BLAS in its own thread (numpy releases the GIL), so
``Context.thread_num`` threads work without OpenBLAS's spin-waiting barrier, which
stalls every GEMM of a multi-threaded pool when another process holds a core.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np

MIN_FLOPS_PER_THREAD = 2_000_000  # below this a hand-off costs more than it saves


class KernelThreads:
    """``thread_num`` threads (the caller's plus ``thread_num - 1`` pool threads)."""

    def __init__(self, thread_num: int = 1):
        self.thread_num = thread_num
        self._pool = ThreadPoolExecutor(thread_num - 1, thread_name_prefix="lite-kernel") if thread_num > 1 else None

    def matmul(self, a: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
        """``np.matmul(a, b, out=out)``, split along the rows of ``a`` (and ``out``) when large."""
        pieces = self._pieces(a, b)
        if pieces == 1:
            np.matmul(a, b, out=out)
            return
        rows = a.shape[-2]
        bounds = [rows * i // pieces for i in range(pieces + 1)]
        futures = [self._pool.submit(np.matmul, a[..., lo:hi, :], b, out=out[..., lo:hi, :])
                   for lo, hi in zip(bounds[1:-1], bounds[2:], strict=True)]
        np.matmul(a[..., : bounds[1], :], b, out=out[..., : bounds[1], :])
        for future in futures:
            future.result()

    def _pieces(self, a: np.ndarray, b: np.ndarray) -> int:
        if self._pool is None or a.ndim < 2 or b.ndim < 2:
            return 1
        flops = 2 * a.shape[-2] * a.shape[-1] * b.shape[-1] * max(np.prod(b.shape[:-2], dtype=np.int64), 1)
        return int(max(1, min(self.thread_num, a.shape[-2], flops // MIN_FLOPS_PER_THREAD)))


SINGLE_THREAD = KernelThreads(1)
