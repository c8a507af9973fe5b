"""The BLAS thread limit follows the model that runs, whichever thread runs it."""

import threading

from threadpoolctl import threadpool_info

from lite.threads import limit_blas_threads


def blas_threads() -> list[int]:
    return [info["num_threads"] for info in threadpool_info() if info["user_api"] == "blas"]


def test_a_worker_thread_can_change_the_limit_the_main_thread_set():
    limit_blas_threads(2)
    assert blas_threads() and set(blas_threads()) == {2}
    seen = []

    def worker():
        limit_blas_threads(1)
        seen.extend(blas_threads())

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join()
    assert set(seen) == {1}
    limit_blas_threads(2)  # and back from the main thread while the worker is gone
    assert set(blas_threads()) == {2}
