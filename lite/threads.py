"""Bounds the threads BLAS uses (threadpoolctl)."""

from __future__ import annotations

import threading

from threadpoolctl import ThreadpoolController

_lock = threading.Lock()
_controller: ThreadpoolController | None = None
_current: int | None = None


def limit_blas_threads(thread_num: int) -> None:
    """Sets the BLAS thread pool to ``thread_num`` threads, process-wide.

    # NOTE: creating a ThreadpoolController scans the loaded libraries (milliseconds),
    # so one is kept, and the limit is only set when it changes: a predict pays nothing.
    """
    global _controller, _current
    if _current == thread_num:
        return
    with _lock:
        if _controller is None:
            _controller = ThreadpoolController()
        _controller.limit(limits=thread_num, user_api="blas")
        _current = thread_num
