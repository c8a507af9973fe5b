"""Bounds the threads BLAS uses (threadpoolctl)."""

from __future__ import annotations

import threading

from threadpoolctl import ThreadpoolController

_lock = threading.Lock()
_controller: ThreadpoolController | None = None
_current: int | None = None


def limit_blas_threads(thread_num: int) -> None:
    """Sets the BLAS thread pool to ``thread_num`` threads, process-wide, from any thread.

    OpenBLAS (pthreads build) has one pool for the whole process, so the last model to
    predict sets it; give models that run at the same time the same ``thread_num``.

    # NOTE: creating a ThreadpoolController scans the loaded libraries (milliseconds),
    # so one is kept, and the limit is only set when it changes: a predict pays nothing.
    # threadpoolctl lets only the first thread that set an OpenBLAS limit change it and
    # silently ignores the others; we own the limit, so we hand control to the caller.
    """
    global _controller, _current
    if _current == thread_num:
        return
    with _lock:
        if _controller is None:
            _controller = ThreadpoolController()
        for library in _controller.select(user_api="blas").lib_controllers:
            release = getattr(library, "clear_controlling_thread", None)
            if release is not None:
                release(force=True)
        _controller.limit(limits=thread_num, user_api="blas")
        _current = thread_num
