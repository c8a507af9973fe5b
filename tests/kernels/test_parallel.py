"""Products split into chunks that several threads take: the same numbers as one np.matmul."""

import gc
import threading

import numpy as np
import pytest

from lite.kernels import parallel
from lite.kernels.parallel import ALIGN, KernelThreads, product_shapes

RNG = np.random.default_rng(11)

SUMS = {"rtol": 1e-4, "atol": 1e-4}
"""Products split in chunks sum in BLAS's order for each chunk's shape: sums of 300 unit terms
(values to ~60) differed from one whole product's by up to 1.7e-5 on a Zen 3 core."""


def dynamic(thread_num: int) -> KernelThreads:
    threads = KernelThreads(thread_num)
    threads.dynamic = True
    return threads


@pytest.mark.parametrize("thread_num", [2, 3, 4])
@pytest.mark.parametrize("a_shape, b_shape", [
    ((512, 300), (300, 96)),  # rows split
    ((64, 576), (576, 3136)),  # columns split
    ((2, 3, 200, 64), (2, 3, 64, 200)),  # batch dims
    ((4, 1, 256, 128), (1, 5, 128, 160)),  # broadcast batch dims
    ((1000, 1000), (1000, 17)),  # an odd width
])
def test_split_products_match_one_matmul(thread_num, a_shape, b_shape):
    a, b = RNG.standard_normal(a_shape, np.float32), RNG.standard_normal(b_shape, np.float32)
    out = np.empty(np.broadcast_shapes(a_shape[:-2], b_shape[:-2]) + (a_shape[-2], b_shape[-1]), np.float32)
    threads = dynamic(thread_num)
    step = threads.matmul_step(a, b, out)
    assert isinstance(step, parallel.ParallelMatmul) and len(step.chunks) > 1
    for _ in range(3):  # the helpers take chunks of later products too
        out.fill(np.nan)
        step()
        np.testing.assert_allclose(out, np.matmul(a, b), **SUMS)
    assert product_shapes(step) == [(a_shape, b_shape)]


def test_transposed_views_split_too():
    a = RNG.standard_normal((300, 512), np.float32).T
    b = RNG.standard_normal((96, 300), np.float64).astype(np.float32).T
    out = np.empty((512, 96), np.float32)
    dynamic(2).matmul(a, b, out)
    np.testing.assert_allclose(out, a @ b, **SUMS)


def test_idle_products_run_whole():
    threads = KernelThreads(2)  # dynamic is off: BLAS's own threads run the product
    a, b = RNG.standard_normal((512, 300), np.float32), RNG.standard_normal((300, 96), np.float32)
    out = np.empty((512, 96), np.float32)
    threads.matmul(a, b, out)
    np.testing.assert_allclose(out, a @ b, **SUMS)
    assert threads._crew is None


@pytest.mark.parametrize("a_shape, b_shape", [((8, 8), (8, 8)), ((64, 64), (64, 64)), ((3, 64, 2000), (2000,))])
def test_small_or_vector_products_are_not_split(a_shape, b_shape):
    assert dynamic(2).pieces(a_shape, b_shape) == 1


def test_one_thread_never_splits():
    assert KernelThreads(1).pieces((4096, 4096), (4096, 4096)) == 1


def test_chunks_are_aligned_and_cover_the_product():
    threads = dynamic(2)
    pieces = threads.pieces((64, 576), (576, 3136))
    assert pieces == 2 * parallel.CHUNKS_PER_THREAD
    bounds = parallel._bounds(3136, pieces)
    assert bounds[0][0] == 0 and bounds[-1][1] == 3136
    assert all(hi == lo for (_, hi), (lo, _) in zip(bounds, bounds[1:], strict=False))
    assert all(lo % ALIGN == 0 for lo, _ in bounds)


def test_an_error_in_a_chunk_reaches_the_caller():
    a, b = RNG.standard_normal((512, 300), np.float32), RNG.standard_normal((300, 96), np.float32)
    step = dynamic(2).matmul_step(a, b, np.empty((512, 96), np.float32))
    step.chunks[-1] = parallel.Chunk(a, b, np.empty((3, 3), np.float32))  # a chunk numpy refuses
    with pytest.raises(ValueError):
        step()
    good = dynamic(2).matmul_step(a, b, out := np.empty((512, 96), np.float32))
    good()
    np.testing.assert_allclose(out, a @ b, **SUMS)


def test_helpers_stop_when_their_threads_object_is_gone():
    """Counted by identity: an earlier test's helpers may still be stopping while this one starts."""
    before = set(threading.enumerate())
    threads = dynamic(3)
    a, b = RNG.standard_normal((512, 300), np.float32), RNG.standard_normal((300, 96), np.float32)
    threads.matmul(a, b, np.empty((512, 96), np.float32))
    helpers = set(threading.enumerate()) - before
    assert len(helpers) == 2
    del threads
    gc.collect()
    for _ in range(200):
        if not any(helper.is_alive() for helper in helpers):
            break
        threading.Event().wait(0.01)
    assert not any(helper.is_alive() for helper in helpers)


@pytest.mark.parametrize("thread_num, count, pieces", [(1, 100, 1), (2, 100, 4), (3, 5, 5), (2, 1, 1)])
def test_a_loop_is_cut_into_pieces_that_cover_it(thread_num, count, pieces):
    threads = dynamic(thread_num)
    assert threads.loop_pieces(count) == pieces
    ranges, names = [], set()

    def piece(index, first, last):
        return lambda: (ranges.append((index, first, last)), names.add(threading.current_thread().name))

    threads.loop_step(count, piece)()
    assert sorted(ranges) == [(i, round(count * i / pieces), round(count * (i + 1) / pieces)) for i in range(pieces)]


def test_idle_threads_run_the_pieces_in_the_callers_thread():
    threads = KernelThreads(2)  # not dynamic: BLAS's pool owns the other core
    seen = []
    threads.loop_step(10, lambda index, first, last: lambda: seen.append(threading.current_thread()))()
    assert seen == [threading.current_thread()] * threads.loop_pieces(10) and threads._crew is None


def test_dynamic_threads_share_the_pieces_out():
    threads, seen, barrier = dynamic(2), set(), threading.Barrier(2, timeout=5)

    def piece(index, first, last):
        def run():
            seen.add(threading.current_thread().name)
            if index < 2:
                barrier.wait()  # the first two pieces can only finish together, on two threads
        return run

    threads.loop_step(8, piece)()
    assert len(seen) == 2


@pytest.mark.parametrize("thread_num, crew, with_jobs, on_crew", [
    (2, True, True, True), (2, True, False, False), (2, False, True, False), (1, True, True, False)])
def test_a_crew_loop_runs_its_jobs_only_with_a_crew_and_several_pieces(monkeypatch, thread_num, crew, with_jobs,
                                                                       on_crew):
    threads, made, ran = KernelThreads(thread_num), [], []
    monkeypatch.setattr(threads, "crew", lambda: object() if crew else None)

    def jobs(bounds):
        made.append(bounds)
        return lambda: ran.append("crew")

    step = threads.crew_loop(10, lambda index, first, last: lambda: ran.append((first, last)),
                             jobs if with_jobs else None)
    step()
    assert made == ([threads.loop_bounds(10)] if on_crew else [])
    assert ran == (["crew"] if on_crew else threads.loop_bounds(10))


@pytest.mark.parametrize("per_thread", [1, 2, 8])
def test_a_crew_loop_makes_per_thread_jobs_a_thread_and_keeps_its_pieces(monkeypatch, per_thread):
    """The crew's jobs as ``per_thread`` asks (at most the loop's pieces, whose scratch they use);
    the dynamic form keeps its pieces."""
    threads, made, ran = KernelThreads(2), [], []
    monkeypatch.setattr(threads, "crew", lambda: object())
    step = threads.crew_loop(10, lambda index, first, last: lambda: ran.append((index, first, last)),
                             made.append, per_thread)
    jobs = min(2 * per_thread, len(threads.loop_bounds(10)))
    assert made == [[(round(10 * i / jobs), round(10 * (i + 1) / jobs)) for i in range(jobs)]]
    threads.dynamic = True
    step()
    assert sorted(ran) == [(i, *b) for i, b in enumerate(threads.loop_bounds(10))]
