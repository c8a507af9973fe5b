"""The native crew: jobs run once each on several threads, OpenBLAS's products run on it while
lent, it survives concurrent callers and a fork, and no hand-off can be lost: a worker that starts
while jobs are posted takes them, a lost wake-up costs a nap, and the stress run finishes."""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
from numba import carray
from threadpoolctl import threadpool_limits

from lite.kernels import fast
from tests.support.crew_jobs import post_without_waking, together

pytestmark = pytest.mark.skipif(fast.numba_module() is None, reason="numba is not importable here")
crew_module = pytest.importorskip("lite.kernels.fast.crew") if fast.numba_module() is not None else None

RNG = np.random.default_rng(5)
JOBS = 64
_SYS_GETTID = 186


def record(index, data, extra):
    """Job: adds ``extra`` to slot ``index`` and notes the thread that ran it (after some work)."""
    slots = carray(data, (2 * JOBS,), np.int64)
    total = 0
    for i in range(20_000):
        total += i ^ index
    slots[index] += extra + (total & 0)
    slots[JOBS + index] = crew_module.syscall(_SYS_GETTID, 0, 0, 0)


@pytest.fixture(scope="module")
def team():
    found = crew_module.crew()
    if found is None:
        pytest.skip("no crew here (not Linux, or numpy's BLAS has no threads callback)")
    found.ensure(1)
    return found


def test_every_job_runs_once_and_the_workers_take_part(team):
    slots = np.zeros(2 * JOBS, np.int64)
    job = crew_module.job_address(record)
    threads, round_, deadline = set(), 0, time.monotonic() + 30
    # NOTE: at least 20 rounds, and more until a worker took a job: on a machine busy with other
    # processes the caller can finish a round's jobs before the worker gets its core
    while round_ < 20 or (len(threads) < 2 and time.monotonic() < deadline):
        round_ += 1
        team.run(job, JOBS, slots.ctypes.data, extra=3)
        np.testing.assert_array_equal(slots[:JOBS], 3 * round_)
        threads |= set(slots[JOBS:].tolist())
    assert len(threads) >= 2  # the caller and at least one worker ran jobs


def test_a_worker_late_from_a_finished_dispatch_claims_nothing_of_the_next(team):
    """A worker that read the ticket of a dispatch whose jobs are all taken, and reads the next
    dispatch's larger job count before that dispatch posts its ticket, must not claim an index:
    it would run one of the next jobs twice (and count it done once too often)."""
    slots = np.zeros(2 * JOBS, np.int64)
    job = crew_module.job_address(record)
    team.run(job, 2, slots.ctypes.data, extra=1)
    late = generation(team)
    state = team.state
    state[crew_module.COUNT] = JOBS  # NOTE: the next dispatch's fields stored, its ticket not yet posted
    try:
        crew_module._work(late)
    finally:
        state[crew_module.COUNT] = 0
    np.testing.assert_array_equal(slots[:JOBS], [1, 1] + [0] * (JOBS - 2))


def generation(team) -> int:
    return int(team.state[crew_module.TICKET]) >> crew_module.INDEX_BITS


@pytest.mark.parametrize("shape", [(512, 512, 512), (64, 576, 3136), (512, 4608, 49), (300, 70, 2000)])
def test_lent_products_run_on_the_crew(team, shape):
    m, k, n = shape
    a, b = RNG.standard_normal((m, k), np.float32), RNG.standard_normal((k, n), np.float32)
    expected = a.astype(np.float64) @ b
    with threadpool_limits(2, user_api="blas"):
        before = generation(team)
        team.lend_to_blas()
        try:
            got = a @ b
        finally:
            team.reclaim()
        assert generation(team) > before  # OpenBLAS handed its jobs to the crew
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-3)
        after = generation(team)
        np.testing.assert_allclose(a @ b, expected, rtol=1e-4, atol=1e-3)  # reclaimed: BLAS's own pool
        assert generation(team) == after


def test_concurrent_callers_take_turns(team):
    a, b = RNG.standard_normal((256, 384), np.float32), RNG.standard_normal((384, 320), np.float32)
    expected = a.astype(np.float64) @ b
    job, errors = crew_module.job_address(record), []

    def caller(seed: int) -> None:
        slots = np.zeros(2 * JOBS, np.int64)
        try:
            for i in range(30):
                team.lend_to_blas()
                try:
                    np.testing.assert_allclose(a @ b, expected, rtol=1e-4, atol=1e-3)
                finally:
                    team.reclaim()
                team.run(job, JOBS, slots.ctypes.data, extra=seed)
                np.testing.assert_array_equal(slots[:JOBS], seed * (i + 1))
        except BaseException as exc:  # noqa: BLE001  (handed to the test)
            errors.append(exc)

    with threadpool_limits(2, user_api="blas"):
        callers = [threading.Thread(target=caller, args=(seed,)) for seed in (1, 2, 3, 4)]
        for thread in callers:
            thread.start()
        for thread in callers:
            thread.join(timeout=120)
    assert not any(thread.is_alive() for thread in callers), "a caller hung"
    assert not errors, errors[0]


def _product_in_child(queue) -> None:
    team = crew_module.crew()
    team.ensure(1)
    a = np.arange(256 * 256, dtype=np.float32).reshape(256, 256) % 7
    with threadpool_limits(2, user_api="blas"):
        team.lend_to_blas()
        try:
            queue.put(float((a @ a).sum()))
        finally:
            team.reclaim()


def test_a_forked_child_gets_workers_of_its_own(team):
    team.lend_to_blas()  # lent when the fork happens: the child must not hand jobs to workers it lacks
    try:
        context = multiprocessing.get_context("fork")
        queue = context.Queue()
        child = context.Process(target=_product_in_child, args=(queue,))
        child.start()
        child.join(timeout=60)
        alive = child.is_alive()
        if alive:
            child.kill()
    finally:
        team.reclaim()
    assert not alive, "the child hung"
    a = np.arange(256 * 256, dtype=np.float32).reshape(256, 256) % 7
    assert child.exitcode == 0 and queue.get(timeout=5) == pytest.approx(float((a.astype(np.float64) @ a).sum()))


def test_the_generation_wraps(team):
    slots = np.zeros(2 * JOBS, np.int64)
    job = crew_module.job_address(record)
    team.state[crew_module.COUNT] = 0  # NOTE: no job for the workers in the generation set next
    # NOTE: the last generation, closed as ``_finish`` closes one (no index left to claim): left open at index 0, a
    # worker still spinning from an earlier test could claim index 0 with the next post's count before its ticket
    team.state[crew_module.TICKET] = (crew_module.GENERATION_MASK << crew_module.INDEX_BITS) | crew_module.INDEX_MASK
    for round_ in range(1, 4):
        team.run(job, JOBS, slots.ctypes.data, extra=1)
        np.testing.assert_array_equal(slots[:JOBS], round_)
    assert generation(team) == 2


def test_a_new_crew_has_no_index_to_claim_before_its_first_post():
    """A worker spinning before the first post must find nothing to claim, whatever count it reads then."""
    code = ("from lite.kernels.fast import crew as c; t = int(c._STATE[c.TICKET]); "
            "print(t >> c.INDEX_BITS, t & c.INDEX_MASK == c.INDEX_MASK)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert done.stdout.split() == ["0", "True"]


def test_delite_crew_0_keeps_blas_own_pool(monkeypatch):
    monkeypatch.setenv("DELITE_CREW", "0")
    assert crew_module.crew.__wrapped__() is None


OVERSUBSCRIBED = """
import numpy as np
from threadpoolctl import threadpool_limits
from lite.kernels.fast.crew import crew
team = crew()
team.ensure(3)  # NOTE: OpenBLAS may then post four jobs that must run at once, on fewer cores
rng = np.random.default_rng(0)
a, b = rng.standard_normal((700, 600), np.float32), rng.standard_normal((600, 500), np.float32)
with threadpool_limits(4, user_api="blas"):
    team.lend_to_blas()
    for _ in range(5):
        np.testing.assert_allclose(a @ b, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-3)
    team.reclaim()
print("ok")
"""


def test_more_threads_than_cores(team):
    """In a child process, so that this one keeps a crew of the size the other tests expect."""
    result = subprocess.run([sys.executable, "-c", OVERSUBSCRIBED], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr[-2000:]



RESTED = """
import time
from lite.kernels.fast import crew

team = crew.crew()
team.state[crew.SPIN] = 1 << 62  # the workers spin until told otherwise
team.ensure(1)


def within(condition, seconds):
    deadline = time.perf_counter() + seconds
    while not condition():
        if time.perf_counter() > deadline:
            return False
    return True


assert within(lambda: team.state[crew.SLEEPERS] == 0, 5.0)  # the new worker spins
spun = within(lambda: team.state[crew.SLEEPERS] > 0, 0.5)
team.rest()
rested = within(lambda: team.state[crew.SLEEPERS] > 0, 5.0)
team.run(0, 0, 0)  # the next generation wakes it
woken = within(lambda: team.state[crew.SLEEPERS] == 0, 5.0)
print(spun, rested, woken)
"""


def test_rest_sends_the_spinning_workers_to_sleep_at_once(team):
    """A worker spins (SPIN ticks of the cycle counter) after its last job, then sleeps; ``rest``
    sends it to sleep at once. In a child process whose workers spin without end until rested."""
    result = subprocess.run([sys.executable, "-c", RESTED], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split() == ["False", "True", "True"]  # spinning; asleep once rested; woken by a job
    slots = np.zeros(2 * JOBS, np.int64)
    team.rest()
    team.run(crew_module.job_address(record), JOBS, slots.ctypes.data, extra=1)  # the next jobs wake them
    np.testing.assert_array_equal(slots[:JOBS], 1)


def _processor() -> int:
    """The CPU this thread last ran on, as the kernel reports it (field 39 of its stat)."""
    with open("/proc/thread-self/stat") as stat:
        return int(stat.read().rsplit(")", 1)[1].split()[36])


def _in_thread(function):
    """``function()``'s result, called in a new thread (whose CPU mask the test may change)."""
    result = []
    thread = threading.Thread(target=lambda: result.append(function()))
    thread.start()
    thread.join()
    return result[0]


def test_the_crew_reads_the_cpu_it_runs_on(team):
    def on(cpu):
        os.sched_setaffinity(0, {cpu})
        return crew_module._cpu(), _processor()

    for cpu in sorted(os.sched_getaffinity(0))[:2]:
        assert _in_thread(lambda cpu=cpu: on(cpu)) == (cpu, cpu)


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="one CPU: nowhere to move to")
def test_a_worker_woken_on_the_callers_cpu_leaves_it_and_keeps_its_mask(team):
    """The guest-kernel case: a woken worker queued on the caller's busy CPU moves off it."""
    allowed = os.sched_getaffinity(0)

    def leave():
        here = crew_module._cpu()
        crew_module._leave(here)
        return here, crew_module._cpu(), os.sched_getaffinity(0)

    def stay():
        only = min(allowed)
        os.sched_setaffinity(0, {only})
        crew_module._leave(only)  # a thread allowed one CPU has nowhere to go
        return crew_module._cpu(), os.sched_getaffinity(0)

    before, after, mask = _in_thread(leave)
    assert after != before and mask == allowed
    assert _in_thread(stay) == (min(allowed), {min(allowed)})


def test_waking_sleeping_workers_tells_them_the_callers_cpu(team):
    team.rest()
    deadline = time.monotonic() + 30
    while team.state[crew_module.SLEEPERS] < team.workers and time.monotonic() < deadline:
        time.sleep(0.01)
    team.state[crew_module.CALLER] = -1
    slots = np.zeros(2 * JOBS, np.int64)
    team.run(crew_module.job_address(record), JOBS, slots.ctypes.data, extra=1)
    np.testing.assert_array_equal(slots[:JOBS], 1)
    assert team.state[crew_module.CALLER] in os.sched_getaffinity(0)


def test_a_worker_started_while_jobs_are_posted_takes_them():
    """A new worker used to take the generation posted as it started as seen: OpenBLAS's second job
    went to nobody and its first waited for ever (predict hung inside the product)."""
    result = subprocess.run([sys.executable, "-c", STARTED_LATE], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and result.stdout.split() == ["arrived", "2", "missed", "0"], result.stderr[-2000:]


STARTED_LATE = """
import threading, time
import numpy as np
from lite.kernels.fast import crew as C
from tests.support.crew_jobs import together
team, block = C.crew(), np.zeros(2, np.int64)
job = C.job_address(together)
C._warm_crew()
caller = threading.Thread(target=team.run, args=(job, 2, block.ctypes.data, 0, 2))
caller.start()
while block[0] == 0:
    time.sleep(0.001)  # NOTE: the caller took job 0 and waits for job 1
team.ensure(1)  # a worker starts with the jobs posted
caller.join(timeout=60)
print("arrived", block[0], "missed", block[1])
"""


def test_a_lost_wake_up_costs_a_nap_not_a_hang(team):
    """A worker asleep that nobody wakes looks at the ticket again after ``NAP_NANOSECONDS``."""
    block = np.zeros(2, np.int64)
    quietly = fast.jit(post_without_waking)
    job = crew_module.job_address(together)
    quietly(0, 0, 0, 0, 0)  # NOTE: compiled before the workers are sent to sleep
    team.state[crew_module.SPIN] = 0
    try:
        deadline = time.monotonic() + 30
        while team.state[crew_module.SLEEPERS] < team.workers and time.monotonic() < deadline:
            time.sleep(0.01)
        assert team.state[crew_module.SLEEPERS] == team.workers, "the workers did not go to sleep"
        quietly(job, 2, 0, block.ctypes.data, 2)
    finally:
        team.state[crew_module.SPIN] = crew_module.SPIN_TICKS
    assert block.tolist() == [2, 0]  # the worker came for job 1 while job 0 waited (no miss)


def test_products_find_a_worker_for_each_blas_thread():
    """OpenBLAS's jobs wait for each other: with its threads raised behind the runtime's back,
    lending to the crew first starts the workers they need (in a child: the crew grows)."""
    result = subprocess.run([sys.executable, "-c", BLAS_RAISED], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and result.stdout.split() == ["workers", "2", "ok"], result.stderr[-2000:]


BLAS_RAISED = """
import faulthandler
import numpy as np
from threadpoolctl import threadpool_limits
from lite.kernels.fast.crew import crew
faulthandler.dump_traceback_later(60, exit=True)
team = crew()
team.ensure(1)
rng = np.random.default_rng(0)
a, b = rng.standard_normal((600, 500), np.float32), rng.standard_normal((500, 400), np.float32)
with threadpool_limits(3, user_api="blas"):
    team.lend_to_blas()
    try:
        np.testing.assert_allclose(a @ b, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-3)
    finally:
        team.reclaim()
print("workers", team.workers, "ok")
"""


@pytest.mark.parametrize("predicts, pause", [pytest.param(150, 0.02, id="short"),
                                             pytest.param(1500, 0.3, id="long", marks=pytest.mark.slow)])
def test_the_stress_run_finishes_with_every_result_right(predicts, pause):
    """Thousands of hand-offs while the monitor flips between the crew and the dynamic chunks, a
    delegate parks the crew, fresh workers start as products are posted, a second thread predicts,
    and a busy-loop process holds each core (``tests.support.crew_stress``); a predict stalled for
    60 s dumps the stacks and fails it. With the fix for the late worker reverted it hung."""
    command = [sys.executable, "-m", "tests.support.crew_stress", "--predicts", str(predicts),
               "--pause", str(pause), "--busy", "--stall", "60"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300 + predicts * (pause + 0.5))
    assert result.returncode == 0, result.stderr[-4000:]
    handoffs = int(result.stdout.split()[1])
    assert handoffs >= 5 * predicts, result.stdout
