"""Crew jobs for the crew's tests: jobs that wait for each other as OpenBLAS's do, and a post whose
wake-up is lost (module-level, as compiled jobs must be)."""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.extending import intrinsic

from lite.kernels.fast import crew as crew_module

_i64 = ir.IntType(64)


@intrinsic
def add_at(typingctx, address, value):
    """Adds ``value`` to the int64 at ``address`` (sequentially consistent); the old value."""
    def codegen(context, builder, signature, args):
        return builder.atomic_rmw("add", builder.inttoptr(args[0], _i64.as_pointer()), args[1], "seq_cst")
    return types.int64(types.int64, types.int64), codegen


@intrinsic
def load_at(typingctx, address):
    """The int64 at ``address`` (acquire)."""
    def codegen(context, builder, signature, args):
        return builder.load_atomic(builder.inttoptr(args[0], _i64.as_pointer()), "acquire", 8)
    return types.int64(types.int64), codegen


TOGETHER_TICKS = 1 << 32  # how long a job waits for the others (over a second) before it counts a miss


def together(index, data, extra):
    """Job that waits for each other, as OpenBLAS's do: arrives (word 0), then waits until ``extra``
    jobs arrived; after ``TOGETHER_TICKS`` it gives up and counts a miss (word 1) instead of hanging."""
    base = crew_module.as_int(data)
    add_at(base, 1)
    start = crew_module.ticks()
    while load_at(base) < extra:
        if crew_module.ticks() - start > TOGETHER_TICKS:
            add_at(base + 8, 1)
            return
        crew_module.relax()


def post_without_waking(job, count, size, data, extra):
    """``crew.run`` with the wake-up lost: the jobs posted, no sleeping worker told."""
    crew_module._lock()
    crew_module.store(crew_module.JOB, job)
    crew_module.store(crew_module.SIZE, size)
    crew_module.store(crew_module.DATA, data)
    crew_module.store(crew_module.EXTRA, extra)
    crew_module.store(crew_module.COUNT, count)
    crew_module.store(crew_module.DONE, 0)
    generation = ((crew_module.load(crew_module.TICKET) >> crew_module.INDEX_BITS) + 1) & crew_module.GENERATION_MASK
    crew_module.fetch_add(crew_module.TICKET, 0)  # NOTE: a full fence, as in crew._post
    crew_module.store(crew_module.TICKET, generation << crew_module.INDEX_BITS)
    crew_module._work(generation)
    crew_module._finish(generation, count)
