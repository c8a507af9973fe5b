"""The worker process of a process stage: builds the stage's Model, then serves requests.

The worker is spawned with its end of the pipe only. Its first message, ``("source", block,
nbytes)``, names a shared-memory block holding its pickled ``StageSource``: a model bigger than
a pipe buffer sent through the spawn bootstrap would block the parent for ever if the worker
died before reading it, and a worker that gets no message (its parent was interrupted while
spawning it) ends. Messages on the pipe are small tuples; the arrays themselves lie in the
parent's shared-memory blocks (``lite.pipeline.shared``). The parent then sends ``("run",
in_block, in_layout, out_block, out_size, keep)`` or ``("stop",)``; the worker answers
``("ready",)`` once built, then per run
``("done", out_layout)``, ``("grow", nbytes)`` (the outputs need a bigger block: the parent
sends the run again with one) or ``("error", exception, traceback_text)``. It ends on "stop",
when the parent closes its end, or when the parent process is gone.
"""

from __future__ import annotations

import multiprocessing
import pickle
import signal
import traceback
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from multiprocessing.shared_memory import SharedMemory

from lite.context import Context
from lite.errors import WorkerError
from lite.loader import ModelType
from lite.model import Model
from lite.pipeline.shared import Attachments, Layout, layout_of, views, write

POLL_SECONDS = 1.0  # how often a waiting worker checks that its parent is still there


@dataclass(frozen=True)
class StageSource:
    """What a worker process builds a stage from: the ``.lite`` bytes and the stage's Context.

    The Context is pickled to the worker, delegates with it: a delegate holds options, not
    the results of a build, so it travels (an option that cannot be pickled, such as an
    ``onnxruntime.SessionOptions``, keeps that stage in a thread).
    """

    model_data: bytes
    context: Context


def serve(conn: Connection) -> None:
    """The worker's main loop: read the source, build, say ready, run requests until "stop" or the
    parent is gone."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # NOTE: Ctrl-C reaches the whole group; the parent decides
    if (message := _next(conn)) is None:
        return
    try:
        source = _read_source(*message[1:])
        model = Model()
        model.build(source.model_data, ModelType.LITE, source.context)
    except Exception as exc:
        conn.send(("error", *_portable(exc)))
        return
    conn.send(("ready",))
    blocks = Attachments()
    try:
        while (message := _next(conn)) is not None:
            conn.send(_run(model, blocks, *message[1:]))
    finally:
        blocks.close()


def _read_source(name: str, nbytes: int) -> StageSource:
    """The ``StageSource`` pickled in the parent's block ``name`` (the parent unlinks it)."""
    memory = SharedMemory(name)
    try:
        data = bytes(memory.buf[:nbytes])
    finally:
        memory.close()
    return pickle.loads(data)


def _next(conn: Connection) -> tuple | None:
    """The next message ("source" or "run"); None on "stop", when the parent's end is closed or the parent
    is gone."""
    parent = multiprocessing.parent_process()
    watched = [conn] if parent is None else [conn, parent.sentinel]
    while not (ready := wait(watched, POLL_SECONDS)):
        pass
    if conn not in ready:
        return None
    try:
        message = conn.recv()
    except (EOFError, OSError):
        return None
    return None if message[0] == "stop" else message


def _run(model: Model, blocks: Attachments, in_block: str, in_layout: Layout, out_block: str, out_size: int,
         keep: list[str]) -> tuple:
    """One request: predict on the input block's arrays, write the kept outputs to the output block."""
    try:
        outputs = model.predict(views(blocks.buffer("in", in_block), in_layout), output_names=keep)
        arrays = {t.name: t.data for t in outputs}
        layout, nbytes = layout_of(arrays)
        if nbytes > out_size:
            return ("grow", nbytes)
        write(blocks.buffer("out", out_block), layout, arrays)
        return ("done", layout)
    except Exception as exc:
        return ("error", *_portable(exc))


def _portable(exc: Exception) -> tuple[Exception, str]:
    """``exc`` if it survives pickling (else a WorkerError with its type and message), and its traceback."""
    text = "".join(traceback.format_exception(exc))
    try:
        return pickle.loads(pickle.dumps(exc)), text
    except Exception:
        return WorkerError(f"{type(exc).__name__}: {exc}"), text
