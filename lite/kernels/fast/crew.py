"""One native thread pool (a crew) for the GEMMs and the compiled loops of every model.

At ``thread_num`` > 1 on idle cores, BLAS's own pool runs each product and, after it, its idle
threads spin for a while: a second pool beside it (numba's, or the runtime's Python threads)
waits for a core those threads hold, so the compiled loops (depthwise convolutions) stayed on
one thread. The crew removes the second pool instead: OpenBLAS (0.3.27+) hands the jobs of its
threaded products to a caller's callback, so while a model predicts, the products' jobs run on
the crew's threads, and so do the pieces of the compiled loops, one pool for both.

The crew is plain compiled code, with no Python between a job's posting and its end:

- every worker spins on one word (generation << 32 | next job index) for ``SPIN_TICKS`` ticks
  of the cycle counter (a few milliseconds) after its last job, then sleeps on a futex until
  a job is posted (onnxruntime's pool spins then sleeps too: a predict's products follow each
  other within microseconds, and an idle process burns no core); ``rest`` sends the spinning
  workers to sleep at once (before a delegate's graph kernel, whose own threads need the cores);
- a worker woken on the caller's CPU leaves it (``_leave``; the caller notes its CPU and yields
  once after the wake, so such a worker runs at once): a guest kernel may queue it there while
  the other core idles, and OpenBLAS's jobs wait for each other, so the first product after a
  pause waited for the kernel's next load balance (docs/performance.md, the crew);
- ``dispatch`` (the callback's C signature: ``void(int sync, void (*job)(int, void *, int), int
  count, size_t size, void *data, int extra)``) posts ``count`` jobs, takes jobs itself, and
  returns when all are done; job ``i`` is ``job(i, data + i * size, extra)``. A thread that
  claims an index does so by compare-and-swap on that word, so a worker late from an earlier
  job can never take one of the next; and a finished dispatch leaves no index to claim (the
  index bits all set), so a worker that read its ticket, then the next dispatch's job count,
  claims nothing either (it ran a job of the next dispatch twice: seen once in a test run of
  four concurrent callers). One dispatch at a time (a spin lock): jobs never dispatch again.

Linux on x86-64 only (futex, the cycle counter); elsewhere, or without the compiler or that
OpenBLAS entry point, ``crew()`` is None and the runtime keeps BLAS's own pool.
"""

from __future__ import annotations

import atexit
import ctypes
import functools
import os
import platform
import sys
import threading
from collections.abc import Callable

import numpy as np
from llvmlite import binding as llvm
from llvmlite import ir
from numba import cfunc, types
from numba.core import cgutils
from numba.extending import intrinsic

from lite.kernels.fast import compiled, enabled, jit
from lite.threads import start_thread

SLOTS = 8 * 15  # int64 words of shared state: each field on its own 64-byte cache line
(TICKET, COUNT, JOB, SIZE, DATA, EXTRA, DONE, LOCK, SLEEPERS, WAKE, STOP, REST, SPIN, CALLER,
 NAP) = (8 * i for i in range(15))
INDEX_BITS = 32
INDEX_MASK = (1 << INDEX_BITS) - 1
GENERATION_MASK = (1 << 31) - 1  # NOTE: generation << 32 stays a positive int64 when it wraps
SPIN_TICKS = 1 << 23  # cycle-counter ticks a worker spins after its last job before it sleeps (a few ms)
NAP_NANOSECONDS = 100_000_000  # the longest a worker sleeps before it looks for posted jobs again
REWAKE_TICKS = 1 << 18  # a caller waiting for workers to claim jobs wakes sleepers again this often
CLAIM_TICKS = 1 << 32  # ...and after this long takes its own job all the same
LOCK_SPINS = 1 << 10  # spins waiting for the lock or for the last job between yields of the core
SYMBOL = "delite_crew_state"
_FUTEX_WAIT_PRIVATE, _FUTEX_WAKE_PRIVATE = 128, 129
# NOTE: x86-64 only: elsewhere LLVM's cycle counter may be a register user code cannot read (ARM64's PMCCNTR)
_SYS_FUTEX = {"x86_64": 202}.get(platform.machine(), -1)
_SYS_SCHED_YIELD = {"x86_64": 24}.get(platform.machine(), -1)
_SYS_SCHED_SETAFFINITY, _SYS_SCHED_GETAFFINITY, _SYS_GETCPU = 203, 204, 309  # NOTE: x86-64's numbers
MASK_WORDS = 16  # int64 words of a CPU mask (1024 CPUs)

_i64, _i32 = ir.IntType(64), ir.IntType(32)
_STATE = np.zeros(SLOTS, np.int64)


def _reset_state() -> None:
    """The shared state as at start: nothing posted, no worker; the spin and the nap set."""
    _STATE[:] = 0
    # NOTE: generation 0 closed, as ``_finish`` closes one: left open at index 0, a worker spinning before the first
    # post could read that post's count before its ticket, claim index 0 of generation 0 and run job 0 twice
    _STATE[TICKET] = INDEX_MASK
    _STATE[SPIN] = SPIN_TICKS  # NOTE: a state word, not a constant: a test lengthens it
    _STATE[NAP:NAP + 2] = divmod(NAP_NANOSECONDS, 1_000_000_000)  # NOTE: a struct timespec (seconds, nanoseconds)


_reset_state()
llvm.add_symbol(SYMBOL, _STATE.ctypes.data)  # NOTE: before any function here is compiled or loaded


def _slot(builder: ir.IRBuilder, index: ir.Value) -> ir.Value:
    """A pointer to the state word ``index`` (the external global that ``add_symbol`` resolves)."""
    module = builder.module
    try:
        state = module.get_global(SYMBOL)
    except KeyError:
        state = ir.GlobalVariable(module, ir.ArrayType(_i64, SLOTS), name=SYMBOL)
        state.linkage = "external"
    return builder.gep(state, [_i64(0), index])


@intrinsic
def load(typingctx, index):
    """The state word ``index``, read with acquire ordering."""
    def codegen(context, builder, signature, args):
        return builder.load_atomic(_slot(builder, args[0]), "acquire", 8)
    return types.int64(types.int64), codegen


@intrinsic
def store(typingctx, index, value):
    """Writes the state word ``index`` with release ordering."""
    def codegen(context, builder, signature, args):
        builder.store_atomic(args[1], _slot(builder, args[0]), "release", 8)
        return context.get_dummy_value()
    return types.void(types.int64, types.int64), codegen


@intrinsic
def fetch_add(typingctx, index, value):
    """Adds ``value`` to the state word ``index`` (sequentially consistent); returns the old value."""
    def codegen(context, builder, signature, args):
        return builder.atomic_rmw("add", _slot(builder, args[0]), args[1], "seq_cst")
    return types.int64(types.int64, types.int64), codegen


@intrinsic
def swap_if(typingctx, index, expected, value):
    """Sets the state word ``index`` to ``value`` if it holds ``expected``; whether it did."""
    def codegen(context, builder, signature, args):
        pair = builder.cmpxchg(_slot(builder, args[0]), args[1], args[2], "seq_cst", "seq_cst")
        return builder.extract_value(pair, 1)
    return types.boolean(types.int64, types.int64, types.int64), codegen


@intrinsic
def relax(typingctx):
    """A spin-wait hint to the core (x86's pause)."""
    def codegen(context, builder, signature, args):
        pause = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.VoidType(), []),
                                               "llvm.x86.sse2.pause")
        builder.call(pause, [])
        return context.get_dummy_value()
    return types.void(), codegen


@intrinsic
def ticks(typingctx):
    """The processor's cycle counter (LLVM's readcyclecounter)."""
    def codegen(context, builder, signature, args):
        counter = cgutils.get_or_insert_function(builder.module, ir.FunctionType(_i64, []), "llvm.readcyclecounter")
        return builder.call(counter, [])
    return types.int64(), codegen


def _syscall_codegen(context, builder, signature, args):
    function = cgutils.get_or_insert_function(builder.module, ir.FunctionType(_i64, [_i64], var_arg=True), "syscall")
    return builder.call(function, [*args, *[_i64(0)] * (5 - len(args))])


@intrinsic
def syscall(typingctx, number, a, b, c):
    """libc's ``syscall(number, a, b, c, 0)`` (the crew's futex wakes, sched_yield, getcpu, affinity)."""
    return types.int64(types.int64, types.int64, types.int64, types.int64), _syscall_codegen


@intrinsic
def syscall4(typingctx, number, a, b, c, d):
    """libc's ``syscall(number, a, b, c, d)`` (the crew's futex wait, whose fourth argument is its timeout)."""
    return types.int64(types.int64, types.int64, types.int64, types.int64, types.int64), _syscall_codegen


@intrinsic
def address(typingctx, index):
    """The address of the state word ``index``."""
    def codegen(context, builder, signature, args):
        return builder.ptrtoint(_slot(builder, args[0]), _i64)
    return types.int64(types.int64), codegen


@intrinsic
def call_job(typingctx, job, index, data, extra):
    """Calls the C function at address ``job`` as ``job(index, (void *) data, extra)``."""
    def codegen(context, builder, signature, args):
        kind = ir.FunctionType(ir.VoidType(), [_i32, ir.IntType(8).as_pointer(), _i32])
        function = builder.inttoptr(args[0], kind.as_pointer())
        builder.call(function, [builder.trunc(args[1], _i32), builder.inttoptr(args[2], kind.args[1]),
                                builder.trunc(args[3], _i32)])
        return context.get_dummy_value()
    return types.void(types.int64, types.int64, types.int64, types.int64), codegen


@intrinsic
def as_int(typingctx, pointer):
    """A pointer's address as an int64."""
    def codegen(context, builder, signature, args):
        return builder.ptrtoint(args[0], _i64)
    return types.int64(pointer), codegen


@jit
def _work(generation):
    """Claims and runs the jobs of ``generation`` until none is left (or a later one is posted)."""
    while True:
        ticket = load(TICKET)
        index = ticket & INDEX_MASK
        if (ticket >> INDEX_BITS) != generation or index >= load(COUNT):
            return
        if swap_if(TICKET, ticket, ticket + 1):
            call_job(load(JOB), index, load(DATA) + index * load(SIZE), load(EXTRA))
            fetch_add(DONE, 1)


@jit
def _pending(seen):
    """Whether there is work for a worker that last looked at generation ``seen``: a later generation
    was posted, or the current one has jobs nobody claimed (whatever ``seen`` says)."""
    ticket = load(TICKET)
    return ticket >> INDEX_BITS != seen or (ticket & INDEX_MASK) < load(COUNT)


@jit
def serve():
    """A worker's life: spin for posted jobs, sleep on the futex when none comes; returns on stop.

    A worker looks for jobs nobody claimed, not only for a generation it has not seen: one that
    started while a dispatch was posted took that generation as seen, left OpenBLAS's job to
    nobody, and OpenBLAS's other jobs waited for it for ever."""
    seen, idle_since, rested = -1, ticks(), load(REST)
    while load(STOP) == 0:
        if _pending(seen):
            seen = load(TICKET) >> INDEX_BITS
            _work(seen)
            idle_since = ticks()
        elif ticks() - idle_since < load(SPIN) and load(REST) == rested:
            relax()
        else:
            woken, rested = _sleep(seen)
            if woken:
                idle_since = ticks()  # NOTE: spin for the next jobs; a nap that ran out sleeps again at once


@jit
def _sleep(seen):
    """Sleeps on the futex until a post wakes it or ``NAP_NANOSECONDS`` pass, unless work is
    pending already (or a stop asked). Returns whether a post (or a stop) came, and the rest
    count read while it still counted as asleep (a rest asked for then is done).

    The caller counts sleepers after posting its ticket and wakes them if any: a worker counted
    here reads the ticket after, so it sees the post or is woken. The timeout bounds what a lost
    wake-up could cost (the next look at the ticket), so no worker waits on the caller for ever."""
    wake = load(WAKE) & 0xFFFFFFFF
    fetch_add(SLEEPERS, 1)
    if not _pending(seen) and load(STOP) == 0:
        syscall4(_SYS_FUTEX, address(WAKE), _FUTEX_WAIT_PRIVATE, wake, address(NAP))
    woken = (load(WAKE) & 0xFFFFFFFF) != wake or _pending(seen)
    if woken:
        _leave(load(CALLER))
    rested = load(REST)
    fetch_add(SLEEPERS, -1)  # NOTE: after: a rest asked for once it counts as awake is seen
    return woken, rested


@jit
def _cpu():
    """The CPU this thread runs on (getcpu)."""
    cpu = np.zeros(1, np.int64)
    syscall(_SYS_GETCPU, cpu.ctypes.data, 0, 0)
    return cpu[0] & 0xFFFFFFFF


@jit
def _leave(cpu):
    """Moves this thread off ``cpu`` if it runs there, keeping its CPU mask otherwise.

    A worker the caller wakes should run on another core, but a guest kernel may see that idle
    core's virtual CPU as preempted (halted) and queue the worker on the caller's own CPU, busy
    with its jobs, until a load balance moves it (milliseconds): OpenBLAS's first job waits for
    its second all that time. The worker leaves by a mask without that CPU (the
    kernel migrates it at once), then takes its own mask back."""
    if cpu >= MASK_WORDS * 64 or _cpu() != cpu:
        return
    mask = np.zeros(MASK_WORDS, np.int64)
    if syscall(_SYS_SCHED_GETAFFINITY, 0, MASK_WORDS * 8, mask.ctypes.data) <= 0:
        return
    away = mask.copy()
    away[cpu >> 6] &= ~(np.int64(1) << (cpu & 63))
    if away.any():
        syscall(_SYS_SCHED_SETAFFINITY, 0, MASK_WORDS * 8, away.ctypes.data)
        syscall(_SYS_SCHED_SETAFFINITY, 0, MASK_WORDS * 8, mask.ctypes.data)


@jit
def _pause(tries):
    """One spin-wait step; every ``LOCK_SPINS`` tries the core goes to another thread (more
    threads than cores: the one being waited for may need this core)."""
    relax()
    if tries % LOCK_SPINS == 0:
        syscall(_SYS_SCHED_YIELD, 0, 0, 0)


@jit
def _lock():
    tries = 0
    while not swap_if(LOCK, 0, 1):
        tries += 1
        _pause(tries)


@jit
def _wake_sleepers():
    """Wakes the sleeping workers, if any (after a post: a worker counted asleep reads the ticket after)."""
    if fetch_add(SLEEPERS, 0) > 0:
        store(CALLER, _cpu())
        fetch_add(WAKE, 1)
        syscall(_SYS_FUTEX, address(WAKE), _FUTEX_WAKE_PRIVATE, 1 << 30)
        syscall(_SYS_SCHED_YIELD, 0, 0, 0)  # NOTE: a worker queued on this CPU runs now, and leaves it


@jit
def _post(job, count, size, data, extra):
    """Posts ``count`` jobs as the next generation (the lock held) and wakes sleepers; the generation."""
    store(JOB, job)
    store(SIZE, size)
    store(DATA, data)
    store(EXTRA, extra)
    store(COUNT, count)
    store(DONE, 0)
    generation = ((load(TICKET) >> INDEX_BITS) + 1) & GENERATION_MASK
    fetch_add(TICKET, 0)  # NOTE: a full fence: the fields above are seen before the new ticket
    store(TICKET, generation << INDEX_BITS)
    _wake_sleepers()
    return generation


@jit
def _await_claims(generation, claims):
    """Waits until ``claims`` jobs of ``generation`` are claimed, waking sleepers again every
    ``REWAKE_TICKS`` (should a wake-up be lost), for at most ``CLAIM_TICKS``."""
    start = last = ticks()
    tries = 0
    while (load(TICKET) & INDEX_MASK) < claims and load(TICKET) >> INDEX_BITS == generation:
        now = ticks()
        if now - start > CLAIM_TICKS:
            return
        if now - last > REWAKE_TICKS:
            _wake_sleepers()
            last = now
        tries += 1
        _pause(tries)


@jit
def _finish(generation, count):
    """Waits for the jobs claimed by workers, closes the generation and releases the lock."""
    tries = 0
    while load(DONE) < count:
        tries += 1
        _pause(tries)
    # NOTE: no index left to claim, whatever the next dispatch's count: a worker late from this
    # generation that read the next count before the next ticket would run one of its jobs twice
    store(TICKET, (generation << INDEX_BITS) | INDEX_MASK)
    store(LOCK, 0)


@jit
def run(job, count, size, data, extra):
    """Runs ``job(i, data + i * size, extra)`` for i below ``count`` on this thread and the workers
    (jobs that do not wait for each other: the caller takes any no worker claimed)."""
    _lock()
    generation = _post(job, count, size, data, extra)
    _work(generation)
    _finish(generation, count)


@jit
def run_together(job, count, size, data, extra):
    """``run`` for jobs that wait for each other (OpenBLAS's: each job packs a panel the others
    read), which need ``count`` threads at once: the caller takes its job only once the workers
    claimed the others, waking them again meanwhile, so a lost wake-up costs microseconds, not
    a caller spinning for ever inside its job."""
    _lock()
    generation = _post(job, count, size, data, extra)
    _await_claims(generation, count - 1)
    _work(generation)
    _finish(generation, count)


_DISPATCH_SIGNATURE = types.void(types.int32, types.voidptr, types.int32, types.uintp, types.voidptr, types.int32)


def _dispatch(sync, job, count, size, data, extra):
    """OpenBLAS's threads callback: runs its ``count`` jobs, which wait for each other, on the crew."""
    run_together(as_int(job), count, size, as_int(data), extra)


@functools.cache
def dispatch_address() -> int:
    """The address of ``_dispatch`` compiled as a C function (compiled, or loaded from the cache, once)."""
    return cfunc(_DISPATCH_SIGNATURE, nopython=True, cache=True)(_dispatch).address


@jit
def rest_workers():
    """Sends the spinning workers to sleep now (the next posted job wakes them)."""
    fetch_add(REST, 1)


@jit
def store_state(index, value):
    """Writes a state word (release ordering), from Python."""
    store(index, value)


@jit
def stop_workers():
    """Tells the workers to return, and wakes the sleeping ones."""
    store(STOP, 1)
    fetch_add(WAKE, 1)
    syscall(_SYS_FUTEX, address(WAKE), _FUTEX_WAKE_PRIVATE, 1 << 30)


class Crew:
    """The process's crew: its workers, and OpenBLAS's callback while models predict.

    ``callback`` is OpenBLAS's callback pointer as a one-element int64 array over it
    (``_callback_slot``): lending and reclaiming write it in place, once per predict.
    """

    def __init__(self, callback: np.ndarray, blas_threads: Callable[[], int]):
        self.state = _STATE
        self._callback = callback
        self._blas_threads = blas_threads
        self._lock = threading.Lock()
        self._workers: list[threading.Thread] = []
        self._lent = 0
        os.register_at_fork(after_in_child=self._forget)

    @property
    def workers(self) -> int:
        """How many worker threads run (the caller of ``run`` is one more)."""
        return len(self._workers)

    @property
    def generation(self) -> int:
        """The generation last posted (jobs, a wake-up or OpenBLAS's), wrapping past 2 ** 31."""
        return int(self.state[TICKET]) >> INDEX_BITS

    def ensure(self, workers: int) -> None:
        """Starts workers until there are at least ``workers`` (compiling the crew first: a worker
        still compiling its loop would leave every job to the caller)."""
        _warm_crew()
        with self._lock:
            while len(self._workers) < workers:
                self._workers.append(start_thread(serve, "lite-crew"))

    def run(self, job: int, count: int, data: int, size: int = 0, extra: int = 0) -> None:
        """``job(i, data + i * size, extra)`` for every i below ``count``, on this thread and the
        workers (``job``: the address of a C function ``void(int, void *, int)``)."""
        run(job, count, size, data, extra)

    def wake(self) -> None:
        """Posts an empty generation: sleeping workers wake and spin, so the next jobs do not wait
        for them to be scheduled (a no-op, bar the lock, when they spin already)."""
        run(0, 0, 0, 0, 0)

    def rest(self) -> None:
        """Sends the spinning workers to sleep now instead of after ``SPIN_TICKS``: another pool
        (a delegate's) is about to run and needs the cores; the next ``run`` wakes them."""
        rest_workers()

    def lend_to_blas(self) -> None:
        """OpenBLAS's threaded products run their jobs on the crew until ``reclaim``. The crew first
        gets a worker for each of OpenBLAS's threads beyond the caller's: its jobs wait for each
        other, so they need that many threads at once (the runtime sets OpenBLAS's threads, but so
        may any library in the process)."""
        needed = self._blas_threads() - 1
        if needed > len(self._workers):
            self.ensure(needed)
        with self._lock:
            if self._lent == 0:
                self._callback[0] = dispatch_address()
            self._lent += 1

    def reclaim(self) -> None:
        """Ends one ``lend_to_blas``; after the last, OpenBLAS's own pool runs its products again."""
        with self._lock:
            self._lent -= 1
            if self._lent == 0:
                self._callback[0] = 0

    def stop(self) -> None:
        """Stops the workers (at exit)."""
        stop_workers()

    def retire(self, timeout: float = 10.0) -> bool:
        """Stops the workers and waits for them (at most ``timeout`` seconds each); the next
        ``ensure`` starts new ones. Whether all returned (those that did not stay counted)."""
        with self._lock:
            stop_workers()
            for thread in self._workers:
                thread.join(timeout)
            self._workers = [t for t in self._workers if t.is_alive()]
            if not self._workers:
                store_state(STOP, 0)
            return not self._workers

    def _forget(self) -> None:
        """In a forked child: no worker was copied, so none is counted and OpenBLAS keeps its pool."""
        self._lock = threading.Lock()
        self._workers, self._lent, self._callback[0] = [], 0, 0
        _reset_state()


def _callback_slot(path: str) -> np.ndarray | None:
    """OpenBLAS's threads callback pointer, ``openblas_threads_callback_``, as a one-element int64
    array over it; None unless the library has the callback (0.3.27+: it exports
    ``openblas_set_threads_callback_function``, under numpy's or the plain name, which sets that
    pointer and nothing else; writing it directly costs no foreign call per predict)."""
    library = ctypes.CDLL(path)
    if not any(hasattr(library, name) for name in _SETTERS):
        return None
    try:
        pointer = ctypes.c_int64.in_dll(library, "openblas_threads_callback_")
    except ValueError:
        return None
    return np.ctypeslib.as_array(ctypes.pointer(pointer), (1,))


_SETTERS = ("scipy_openblas_set_threads_callback_function64_", "openblas_set_threads_callback_function")
_THREAD_COUNTS = ("scipy_openblas_get_num_threads64_", "openblas_get_num_threads64_", "openblas_get_num_threads")


def _thread_count(path: str) -> Callable[[], int] | None:
    """OpenBLAS's ``openblas_get_num_threads`` (under numpy's or a plain name) as a function; None
    where the library has none."""
    library = ctypes.CDLL(path)
    function = next((getattr(library, name) for name in _THREAD_COUNTS if hasattr(library, name)), None)
    if function is not None:
        function.restype, function.argtypes = ctypes.c_int, []
    return function


def _numpy_openblas() -> str | None:
    """The path of the OpenBLAS library numpy's products run on, if that is what they run on."""
    from threadpoolctl import ThreadpoolController

    for library in ThreadpoolController().select(internal_api="openblas").lib_controllers:
        if library.threading_layer == "pthreads" and "numpy" in str(library.filepath):
            return library.filepath
    return None


@functools.cache
def crew() -> Crew | None:
    """The process's crew, or None where it cannot run (not Linux on x86-64, no compiler,
    or numpy's BLAS is not a pthreads OpenBLAS with the threads callback) or ``DELITE_CREW=0``
    keeps BLAS's own pool (read once, at the first call)."""
    if sys.platform != "linux" or _SYS_FUTEX < 0 or not enabled() or os.environ.get("DELITE_CREW", "1") == "0":
        return None
    path = _numpy_openblas()
    callback = None if path is None else _callback_slot(path)
    blas_threads = None if path is None else _thread_count(path)
    if callback is None or blas_threads is None:
        return None
    team = Crew(callback, blas_threads)
    atexit.register(team.stop)
    return team


@intrinsic
def as_pointer(typingctx, value):
    """An int64 address as a ``void *`` (for ``numba.carray``)."""
    def codegen(context, builder, signature, args):
        return builder.inttoptr(args[0], ir.IntType(8).as_pointer())
    return types.voidptr(types.int64), codegen


JOB_SIGNATURE = types.void(types.int32, types.voidptr, types.int32)
"""A job's C signature: ``void job(int index, void *data, int extra)``."""


def job_address(function) -> int:
    """The address of ``function(index, data, extra)`` compiled as a C function for the crew
    (compiled, or loaded from the cache, on first use; ``function`` must be module-level)."""
    return _compiled_job(function).address


@functools.cache
def _compiled_job(function):
    _JOBS.append(function)
    return cfunc(JOB_SIGNATURE, nopython=True, cache=True)(function)


_JOBS: list = []


def compiled_jobs() -> list:
    """The job functions compiled (or loaded from the cache) in this process, in that order."""
    return list(_JOBS)


def warm(*jobs) -> None:
    """Compiles the crew (its workers' loop, ``run``, OpenBLAS's callback) and these job functions
    now, at build, counted as compile time, not in the first predict; nothing without a crew."""
    if crew() is None:
        return
    _warm_crew()
    for job in jobs:
        compiled(job_address, job)


@functools.cache
def _warm_crew() -> None:
    compiled(serve.compile, ())
    compiled(run, 0, 0, 0, 0, 0)  # NOTE: no job: takes the lock, posts an empty generation
    compiled(rest_workers)
    compiled(dispatch_address)


class Jobs:
    """A step running ``count`` jobs of ``function`` (module-level, ``function(index, data, extra)``)
    on the crew, ``data`` being the address of ``block``: the int64 words that describe the work
    (array addresses, shapes, each piece's bounds; floats as float64 bits). It holds ``arrays``,
    whose addresses the block holds, for as long as it lives."""

    def __init__(self, function, block: np.ndarray, count: int, arrays: tuple[np.ndarray, ...]) -> None:
        self.team, self.job, self.block, self.count, self.arrays = crew(), job_address(function), block, count, arrays
        self.address = block.ctypes.data  # NOTE: read once: ``.ctypes`` builds Python objects on every read

    def __call__(self) -> None:
        self.team.run(self.job, self.count, self.address)


def pieces_block(header: int, bounds: list[tuple[int, int]], scratch: list[list[np.ndarray]] | None = None
                 ) -> np.ndarray:
    """A block of ``header`` words (left zero) and, for each piece, its (first, last) and the
    addresses of its scratch arrays: the first ``len(bounds)`` of ``scratch`` (it may hold more,
    made for the loop's pieces, of which the crew's jobs are fewer)."""
    scratch = scratch or [[] for _ in bounds]
    per = 2 + len(scratch[0])
    block = np.zeros(header + per * len(bounds), np.int64)
    for i, ((first, last), arrays) in enumerate(zip(bounds, scratch[:len(bounds)], strict=True)):
        block[header + per * i:header + per * (i + 1)] = [first, last, *(a.ctypes.data for a in arrays)]
    return block
