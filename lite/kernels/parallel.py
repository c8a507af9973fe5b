"""The threads of one model's native kernels: large matrix products split into chunks taken dynamically.

On idle cores BLAS runs each product whole (it shares packed panels between its threads and
scales best), on the native crew (``lite.kernels.fast.crew``) where the process has one, whose
threads also run the compiled loops (``crew_step``); else on BLAS's own pool, the compiled loops
then on the caller's thread. When other processes keep the cores busy (``lite.threads.LoadMonitor``)
that pool stalls: it splits each product statically and waits for its slowest thread, in
scheduler-slice steps (docs/performance.md, busy cores). Then the runtime sets ``KernelThreads.dynamic``:
BLAS runs single-threaded and ``Context.thread_num`` threads (the caller's and
``thread_num - 1`` helpers) each take the next chunk of a product until none is left, so a
thread whose core is busy simply takes fewer. Products too small to pay for a hand-off are
never split. Loops of compiled kernels (``loop_step``: the depthwise convolution's planes) are
shared out the same way.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

from lite.kernels import fast
from lite.threads import start_thread

PARALLEL_FLOPS = 8_000_000  # products below this run on one thread (a hand-off costs ~10-30 us)
CHUNK_FLOPS = 2_000_000  # the least work of one chunk
CHUNKS_PER_THREAD = 2  # more chunks than threads, so a slowed thread holds up the others little
SPIN_SECONDS = 0.002  # how long an idle helper polls for the next product before it sleeps
ALIGN = 16  # chunk bounds on multiples of this many rows/columns (a SIMD tile of BLAS kernels)


@dataclass(frozen=True)
class Chunk:
    """One piece of a product: ``np.matmul(a, b, out=out)`` on views of the whole one."""

    a: np.ndarray
    b: np.ndarray
    out: np.ndarray

    def __call__(self) -> None:
        np.matmul(self.a, self.b, out=self.out)


class ParallelMatmul:
    """A product split into chunks, run by the threads of a KernelThreads (a Step)."""

    def __init__(self, threads: KernelThreads, whole: Chunk, chunks: list[Chunk]):
        self.threads, self.whole, self.chunks = threads, whole, chunks

    def __call__(self) -> None:
        if self.threads.dynamic:
            self.threads.run(self.chunks)
        else:
            self.whole()


class SplitLoop:
    """A loop cut into pieces that the threads of a KernelThreads take in turn when it is dynamic,
    and that run one after the other in the caller's thread otherwise (a Step)."""

    def __init__(self, threads: KernelThreads, pieces: list[Callable[[], None]]):
        self.threads, self.pieces = threads, pieces

    def __call__(self) -> None:
        if self.threads.dynamic:
            self.threads.run(self.pieces)
        else:
            for piece in self.pieces:
                piece()


_UNKNOWN = object()


def _even_bounds(count: int, pieces: int) -> list[tuple[int, int]]:
    return list(itertools.pairwise(round(count * i / pieces) for i in range(pieces + 1)))


class CrewStep:
    """Work for the crew on idle cores, the same work for the Python threads on busy ones (a Step)."""

    def __init__(self, threads: KernelThreads, native: Callable[[], None], dynamic: Callable[[], None]):
        self.threads, self.native, self.dynamic = threads, native, dynamic

    def __call__(self) -> None:
        if self.threads.dynamic:
            self.dynamic()
        else:
            self.native()


class KernelThreads:
    """``thread_num`` threads for one model's kernels: the caller's and ``thread_num - 1`` helpers.

    The helpers start with the first parallel product and stop when this object is collected.
    """

    def __init__(self, thread_num: int = 1):
        self.thread_num = thread_num
        self.dynamic = False  # split products into chunks (else BLAS's own threads run them whole)
        self._crew: Crew | None = None
        self._team = _UNKNOWN

    def matmul_step(self, a: np.ndarray, b: np.ndarray, out: np.ndarray) -> Callable[[], None]:
        """A call computing ``np.matmul(a, b, out=out)``, split across the threads when large enough.

        ``a`` and ``b`` have at least two dims (batch dims broadcast, as in np.matmul); the
        chunks are views, bound now: the step stays valid while these arrays do.
        """
        whole = Chunk(a, b, out)
        pieces = self.pieces(a.shape, b.shape)
        if pieces == 1:
            return whole
        rows, cols = a.shape[-2], b.shape[-1]
        split_rows = rows >= cols
        bounds = _bounds(rows if split_rows else cols, pieces)
        if split_rows:
            chunks = [Chunk(a[..., lo:hi, :], b, out[..., lo:hi, :]) for lo, hi in bounds]
        else:
            chunks = [Chunk(a, b[..., lo:hi], out[..., lo:hi]) for lo, hi in bounds]
        return ParallelMatmul(self, whole, chunks)

    def matmul(self, a: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
        """``np.matmul(a, b, out=out)`` for operands of two or more dims, split when large."""
        self.matmul_step(a, b, out)()

    def loop_pieces(self, count: int) -> int:
        """How many pieces ``loop_step`` cuts a loop of ``count`` iterations into (1: not cut)."""
        return 1 if self.thread_num == 1 else max(1, min(count, self.thread_num * CHUNKS_PER_THREAD))

    def loop_step(self, count: int, piece: Callable[[int, int, int], Callable[[], None]]) -> Callable[[], None]:
        """A step running a loop of ``count`` iterations on the model's threads when they are
        dynamic (compiled kernels release the GIL, so the pieces run at once); on idle cores the
        caller's thread runs them all: beside BLAS's own pool, which spins between products, a
        second pool measured slower (docs/performance.md, the crew).

        ``piece(index, first, last)`` makes the call for iterations ``first`` to ``last - 1``;
        ``index`` (below ``loop_pieces(count)``) picks that piece's own scratch.
        """
        bounds = self.loop_bounds(count)
        if len(bounds) == 1:
            return piece(0, 0, count)
        return SplitLoop(self, [piece(i, first, last) for i, (first, last) in enumerate(bounds)])

    def loop_bounds(self, count: int) -> list[tuple[int, int]]:
        """The iterations (first, last) of each piece ``loop_step`` cuts a loop of ``count`` into."""
        return _even_bounds(count, self.loop_pieces(count))

    def crew_bounds(self, count: int, per_thread: int = CHUNKS_PER_THREAD) -> list[tuple[int, int]]:
        """The iterations (first, last) of each crew job of a loop of ``count``: ``per_thread`` jobs
        a thread, at most ``loop_pieces(count)`` (so the pieces' scratch serves the jobs too)."""
        return _even_bounds(count, min(self.loop_pieces(count), self.thread_num * per_thread))

    def crew(self):
        """The native crew (``lite.kernels.fast.crew``) these threads run on when the cores are
        idle, or None (one thread, or no crew in this process); looked up once."""
        if self._team is _UNKNOWN:
            self._team = None
            if self.thread_num > 1 and fast.enabled():
                from lite.kernels.fast.crew import crew

                self._team = crew()
        return self._team

    def crew_loop(self, count: int, piece: Callable[[int, int, int], Callable[[], None]],
                  jobs: Callable[[list[tuple[int, int]]], Callable[[], None]] | None = None,
                  per_thread: int = CHUNKS_PER_THREAD) -> Callable[[], None]:
        """``loop_step(count, piece)``; where the loop has several pieces and the crew runs, a
        ``crew_step`` running ``jobs(bounds)`` on idle cores instead: ``per_thread`` jobs a thread
        (``crew_bounds``), the first pieces' scratch theirs. ``jobs`` None: the loop has no crew
        form (a dtype without one)."""
        loop, bounds = self.loop_step(count, piece), self.crew_bounds(count, per_thread)
        if jobs is None or len(bounds) < 2 or self.crew() is None:
            return loop
        return self.crew_step(jobs(bounds), loop)

    def crew_step(self, native: Callable[[], None], dynamic: Callable[[], None]) -> Callable[[], None]:
        """A step running ``native`` (jobs for the crew) on idle cores and ``dynamic`` (the same
        work in pieces for these Python threads) when other processes keep the cores busy."""
        return CrewStep(self, native, dynamic)

    def staff(self) -> None:
        """Gives the crew (if any) a thread for each of ``thread_num`` beyond the caller's."""
        team = self.crew()
        if team is not None and team.workers < self.thread_num - 1:
            team.ensure(self.thread_num - 1)

    def posted(self) -> int:
        """The crew's last posted generation (-1 without a crew): unchanged across a run, that run
        gave the crew no job."""
        team = self.crew()
        return -1 if team is None else team.generation

    def wake(self) -> None:
        """Wakes the crew's sleeping workers (if the model's threads have a crew and it has workers)."""
        team = self.crew()
        if team is not None:
            team.wake()

    def rest(self) -> None:
        """Sends the crew's spinning workers (if any) to sleep now, as a delegate's graph kernel,
        which runs its own threads, starts; the next crew job wakes them."""
        team = self.crew()
        if team is not None:
            team.rest()

    @contextlib.contextmanager
    def lent(self) -> Iterator[None]:
        """While inside, BLAS's threaded products run on the crew, as the compiled loops do (on
        idle cores, with a crew: else BLAS's own pool, or one thread when dynamic)."""
        team = None if self.dynamic else self.crew()
        if team is None:
            yield
            return
        self.staff()
        team.lend_to_blas()
        try:
            yield
        finally:
            team.reclaim()

    def pieces(self, a: tuple[int, ...], b: tuple[int, ...]) -> int:
        """How many chunks a product of these operand shapes is split into (1: not split)."""
        if self.thread_num == 1 or len(a) < 2 or len(b) < 2:
            return 1
        batch = math.prod(np.broadcast_shapes(a[:-2], b[:-2]))
        flops = 2 * batch * a[-2] * a[-1] * b[-1]
        if flops < PARALLEL_FLOPS:
            return 1
        longest = max(a[-2], b[-1])
        return max(1, min(self.thread_num * CHUNKS_PER_THREAD, flops // CHUNK_FLOPS, longest // ALIGN))

    def run(self, chunks: list[Callable[[], None]]) -> None:
        """Runs every chunk: this thread and the helpers take them in turn; returns when all are done."""
        if self._crew is None:
            self._crew = Crew(self.thread_num - 1)
            weakref.finalize(self, self._crew.stop)
        self._crew.run(chunks)


class Job:
    """Chunks being taken: ``next(taken)`` hands out their indices, ``finished`` gets one item per chunk run."""

    def __init__(self, chunks: list[Callable[[], None]]):
        self.chunks = chunks
        self.taken = itertools.count()  # NOTE: next() on a count is atomic under the GIL
        self.finished: list[None] = []  # NOTE: list.append is atomic under the GIL
        self.error: BaseException | None = None

    def work(self) -> bool:
        """Takes and runs chunks until none is left; whether this call finished the last one."""
        last = False
        while (index := next(self.taken)) < len(self.chunks):
            try:
                self.chunks[index]()
            except BaseException as exc:  # NOTE: handed to the caller of Crew.run
                self.error = exc
            self.finished.append(None)
            last = self.done()
        return last

    def done(self) -> bool:
        return len(self.finished) == len(self.chunks)


class Crew:
    """Helper threads that spin briefly between jobs (a blocked thread wakes on a cold core) and then sleep."""

    def __init__(self, helpers: int):
        self.job: Job | None = None
        self.generation = 0
        self.stopped = False
        self.wake = threading.Condition()
        for _ in range(helpers):
            start_thread(self.serve, "lite-kernel")

    def run(self, chunks: list[Callable[[], None]]) -> None:
        job = Job(chunks)
        with self.wake:
            self.job, self.generation = job, self.generation + 1
            self.wake.notify_all()
        if not job.work():
            while not job.done():
                time.sleep(0)  # NOTE: hands the GIL to a helper finishing its last chunk
        self.job = None
        if job.error is not None:
            raise job.error

    def serve(self) -> None:
        seen, idle_since = 0, time.perf_counter()
        while not self.stopped:
            if self.generation != seen:
                seen = self.generation
                job = self.job
                if job is not None:
                    job.work()
                idle_since = time.perf_counter()
            elif time.perf_counter() - idle_since < SPIN_SECONDS:
                time.sleep(0)
            else:
                with self.wake:  # NOTE: a timeout and a re-check, as every wait of the runtime's threads
                    self.wake.wait_for(lambda seen=seen: self.generation != seen or self.stopped, timeout=1.0)

    def stop(self) -> None:
        with self.wake:
            self.stopped = True
            self.wake.notify_all()


def product_shapes(step: Callable) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    """The operand shapes of the matrix product a step computes: [] when it computes none."""
    if isinstance(step, ParallelMatmul):
        step = step.whole
    if isinstance(step, Chunk):
        return [(step.a.shape, step.b.shape)]
    if getattr(step, "func", None) is np.matmul:  # a functools.partial of np.matmul
        return [(step.args[0].shape, step.args[1].shape)]
    return []


def _bounds(length: int, pieces: int) -> list[tuple[int, int]]:
    """``pieces`` ranges covering ``range(length)``, their inner bounds on multiples of ALIGN."""
    cuts = sorted({min(length, round(length * i / pieces / ALIGN) * ALIGN) for i in range(1, pieces)} - {0, length})
    edges = [0, *cuts, length]
    return list(itertools.pairwise(edges))


SINGLE_THREAD = KernelThreads(1)
