"""Starts threads, bounds the threads BLAS uses (threadpoolctl) and tells when other processes keep
the cores busy."""

from __future__ import annotations

import os
import threading
import time
import warnings
from collections.abc import Callable

from threadpoolctl import ThreadpoolController

from lite.errors import ThreadStartError

_lock = threading.Lock()
_capped_warned = False
_controller: ThreadpoolController | None = None
_current: int | None = None


def start_thread(target: Callable[[], object], name: str) -> threading.Thread:
    """Starts a daemon thread running ``target``; a ThreadStartError when the system refuses it."""
    thread = threading.Thread(target=target, name=name, daemon=True)
    try:
        thread.start()
    except RuntimeError as exc:  # NOTE: "can't start new thread": a thread or address-space limit
        raise ThreadStartError(f"could not start thread {name!r}: {exc} (the process reached a limit on threads "
                               "or memory: lower Context.thread_num or raise the limit)") from exc
    return thread


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity mask, else the machine's count)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def capped_threads(thread_num: int) -> int:
    """``thread_num``, at most the usable CPUs: threads beyond the cores help nobody and each
    costs a stack. Says so once per process in a RuntimeWarning when it caps."""
    global _capped_warned
    cpus = usable_cpus()
    if thread_num <= cpus:
        return thread_num
    if not _capped_warned:
        _capped_warned = True
        warnings.warn(f"thread_num={thread_num} is more than the {cpus} CPUs this process may use: "
                      f"using {cpus} threads", RuntimeWarning, stacklevel=3)
    return cpus


AVX2_BLAS_KERNELS = frozenset({"haswell", "zen"})
"""OpenBLAS's names (threadpoolctl's "architecture") for its AVX2 kernels."""


def blas_architectures() -> frozenset[str]:
    """The kernel sets (lowercase) the loaded BLAS libraries run: OpenBLAS picks one when it loads, from its
    table of CPUs or ``OPENBLAS_CORETYPE``. Scans the libraries once (milliseconds), like
    ``limit_blas_threads``."""
    global _controller
    with _lock:
        if _controller is None:
            _controller = ThreadpoolController()
        return frozenset(str(library.info().get("architecture") or "").lower()
                         for library in _controller.select(user_api="blas").lib_controllers) - {""}


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


class LoadMonitor:
    """Whether other processes keep this machine's cores busy, sampled from /proc/stat.

    ``contended()`` compares the cores' busy time since the last sample with this process's
    own CPU time: the difference is what other processes used. It samples at most every
    ``interval`` seconds (the answer in between is the last one) and answers False where
    /proc/stat cannot be read (then ``available`` is False).

    A predict asks ``latest()`` (the last answer, no sample) and then ``sample_later()``: a sample
    that is due is taken on a helper thread, after the predict, not in it. After an idle spell,
    the first read of /proc/stat took about 0.2 ms (its open, cold), 5% of a 4 ms predict.
    """

    def __init__(self, interval: float = 0.1, threshold: float = 0.5):
        self.interval, self.threshold = interval, threshold
        self._busy = False
        self._lock = threading.Lock()
        self._due = threading.Event()
        self._sampler: threading.Thread | None = None
        self._last = self._sample()
        self.available = self._last is not None

    def contended(self) -> bool:
        """Whether other processes used at least ``threshold`` of a core since the last sample."""
        with self._lock:
            if not self.available or time.perf_counter() - self._last[0] < self.interval:
                return self._busy
            now = self._sample()
            if now is None or self._last is None:
                self.available = False
                return False
            wall, ticks, own = (b - a for a, b in zip(self._last, now, strict=True))
            self._last = now
            others = ticks / _TICKS_PER_SECOND - own
            self._busy = others / wall >= self.threshold
            return self._busy

    def latest(self) -> bool:
        """The last answer of ``contended()``, without sampling."""
        return self._busy

    def sample_later(self) -> None:
        """Has the helper thread call ``contended()`` when a sample is due (else nothing)."""
        if not self.available or time.perf_counter() - self._last[0] < self.interval:
            return
        with self._lock:
            if self._sampler is None:
                self._sampler = start_thread(self._serve, "lite-load-monitor")
        self._due.set()

    def _serve(self) -> None:
        while self.available:
            if self._due.wait(timeout=1.0):  # NOTE: a timeout and a re-check, as every wait here
                self._due.clear()
                self.contended()

    def _sample(self) -> tuple[float, float, float] | None:
        """(wall clock, busy ticks of all cores, this process's CPU seconds), or None."""
        try:
            with open(_PROC_STAT, "rb") as stat:
                fields = stat.readline().split()[1:]
        except OSError:
            return None
        ticks = [int(f) for f in fields[:8]]
        busy = sum(ticks) - ticks[3] - ticks[4]  # NOTE: all but idle and iowait
        return time.perf_counter(), busy, time.process_time()


_PROC_STAT = "/proc/stat"
_TICKS_PER_SECOND = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


_monitor: LoadMonitor | None = None


def load_monitor() -> LoadMonitor:
    """The process's LoadMonitor (created on first use)."""
    global _monitor
    if _monitor is None:
        _monitor = LoadMonitor()
    return _monitor
