"""Process stages: the parent's end of a stage that runs in a worker process.

A ``ProcessStage`` is called from the stage's thread in the parent, one request at a time:
it writes the stage's inputs into its input block, sends a small "run" message, waits for
the worker's answer and copies the outputs out of its output block. The worker is spawned
(never forked: the parent may hold BLAS, numba or TVM threads, which a fork would copy
mid-flight) with its end of a pipe only: its model and Context travel in a shared-memory block
(``worker.py`` says why). A worker that dies fails the request it was running with a
``WorkerError``; one found dead between requests is replaced before the next. Each
replacement counts against ``restarts``, after which every request gets a ``WorkerError``
saying the stage cannot serve any more.

Every wait for a worker polls: it ends when the worker answers, dies, runs past its deadline
(start-up) or is interrupted (``interrupt``, from ``PipelineExecutor.close``). Ownership: the
stage's thread starts, reaps and replaces its workers; another thread only ``interrupt`` s (a
signal and two flags) until the stage's thread is done, then ``stop`` s or ``kill`` s.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import pickle
import signal
import threading
import time
from collections.abc import Mapping
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess

import numpy as np

from lite.errors import WorkerError
from lite.pipeline.shared import Block, fitted, interrupt_deferred, layout_of, views, write
from lite.pipeline.worker import StageSource, serve

START_METHOD = "spawn"
STOP_SECONDS = 5.0  # a worker asked to stop (or killed) has this long to end
START_SECONDS = 300.0  # a worker has this long to build its stage
POLL_SECONDS = 0.1  # how often a wait for a worker checks that it lives and is still wanted
MAIN_GUARD = ('where a script creates the PipelineExecutor, it must do so under `if __name__ == "__main__":`, '
              'since every spawned worker imports the main module')


class ProcessStage:
    """Stage ``index`` of a pipeline, run by a worker process built from ``source``.

    Args:
        index: the stage's index (errors name it).
        source: the ``.lite`` bytes and Context the worker builds the stage from.
        keep: the outputs the pipeline needs from this stage.
        out_bytes: the bytes the kept outputs need (the first output block's size).
        restarts: how many times a worker that died is replaced.
    """

    def __init__(self, index: int, source: StageSource, keep: list[str], out_bytes: int, restarts: int):
        self.index, self.source, self.keep, self.restarts_left = index, source, list(keep), restarts
        self._out_bytes = out_bytes
        self._inputs: Block | None = None
        self._outputs: Block | None = None
        self._source: Block | None = None  # the pickled source, while a worker reads it
        self._process: BaseProcess | None = None
        self._conn: Connection | None = None
        self._lost: str = ""  # why the last worker is gone, once it is
        self._lock = threading.Lock()  # guards _process and _conn between the stage's thread and a closer
        self._closing = threading.Event()  # set: no worker starts any more
        self._abort = threading.Event()  # set: the wait for the worker ends, the worker is killed

    @property
    def pid(self) -> int | None:
        """The worker process's id (None before it starts and after it stops)."""
        process = self._process
        return process.pid if process is not None else None

    # ---- starting ---------------------------------------------------------------------------

    def launch(self) -> None:
        """Spawns the worker (it builds the stage while the caller goes on); ``wait_ready`` waits for it.

        Raises:
            WorkerError: the stage is closing.
        """
        data = pickle.dumps(self.source)
        with self._lock:
            self._refuse_when_closing()
            with interrupt_deferred():  # NOTE: a Ctrl-C inside would lose a block or a spawned worker
                self._spawn(data)
            with contextlib.suppress(OSError):  # NOTE: a worker that died already is found by wait_ready
                self._conn.send(("source", self._source.name, len(data)))

    def _spawn(self, data: bytes) -> None:
        """Puts ``data`` in a new block and spawns the worker; both are the stage's before this returns."""
        self._source = Block(len(data))
        self._source.buffer[:len(data)] = data
        context = multiprocessing.get_context(START_METHOD)
        ours, theirs = context.Pipe()
        process = context.Process(target=serve, args=(theirs,), daemon=True, name=f"lite-pipeline-stage-{self.index}")
        try:
            process.start()
            self._process, self._conn = process, ours
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()  # NOTE: else the parent would hold the worker's end and never see it die

    def wait_ready(self) -> None:
        """Waits until the worker has built the stage (at most ``START_SECONDS``).

        Raises:
            WorkerError: the worker died, did not answer in time, or its build failed (the original
                error is ``__cause__``).
        """
        try:
            reply = self._receive(time.monotonic() + START_SECONDS)
        finally:
            self._release_source()
        if reply[0] != "ready":
            self.kill_worker()
            raise WorkerError(f"the worker process of stage {self.index} could not build the stage: "
                              f"{type(reply[1]).__name__}: {reply[1]}\n{reply[2]}") from reply[1]

    def start(self) -> None:
        """``launch`` and ``wait_ready``."""
        self.launch()
        self.wait_ready()

    # ---- running ----------------------------------------------------------------------------

    def predict(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Runs the stage on ``feeds`` (by input name); returns the kept outputs by name (copies).

        Raises:
            WorkerError: the worker died on this request, could not be (re)started, or was stopped.
            Exception: what the stage raised in the worker (its traceback in a note).
        """
        self._ensure_worker()
        layout, nbytes = layout_of(feeds)
        self._inputs = fitted(self._inputs, nbytes)
        write(self._inputs.buffer, layout, feeds)
        self._outputs = fitted(self._outputs, self._out_bytes)
        reply = self._ask(layout)
        while reply[0] == "grow":
            self._outputs = fitted(self._outputs, reply[1])
            reply = self._ask(layout)
        if reply[0] == "error":
            reply[1].add_note(f"raised in the worker process of stage {self.index}:\n{reply[2]}")
            raise reply[1]
        return {name: np.array(view) for name, view in views(self._outputs.buffer, reply[1]).items()}

    def _ask(self, in_layout: list) -> tuple:
        self._send(("run", self._inputs.name, in_layout, self._outputs.name, self._outputs.size, self.keep))
        return self._receive()

    def _ensure_worker(self) -> None:
        """Replaces a worker that died since the last request, or starts one when the last died (while
        restarts are left)."""
        process = self._process
        if process is not None and not _alive(process):
            self._lost = f"its worker process (pid {process.pid}) {_ending(self._reap(0))} between requests"
        if self._process is not None:
            return
        self._refuse_when_closing()
        if self.restarts_left <= 0:
            raise WorkerError(f"stage {self.index} cannot serve any more: {self._lost}, and no restarts are left "
                              "(PipelineExecutor's worker_restarts); close() this executor")
        self.restarts_left -= 1
        self.start()

    def _refuse_when_closing(self) -> None:
        if self._closing.is_set():
            raise WorkerError(f"stage {self.index} runs no more requests: its PipelineExecutor is closing "
                              "(create a new one)")

    def _send(self, message: tuple) -> None:
        conn = self._conn
        try:
            conn.send(message)
        except (OSError, AttributeError):  # NOTE: AttributeError: a closer reaped the worker (conn is None)
            self._worker_died()

    def _receive(self, deadline: float | None = None) -> tuple:
        """The worker's next message, polling: raises WorkerError when the worker dies, is interrupted or
        runs past ``deadline`` (a ``time.monotonic()`` time; None: no deadline)."""
        conn, process = self._conn, self._process
        if conn is None or process is None:
            self._worker_died()
        while True:
            try:
                ready = wait([conn, process.sentinel], POLL_SECONDS)
                if conn in ready:
                    return conn.recv()
            except (EOFError, OSError, ValueError):  # NOTE: ValueError: a closer closed the process object
                ready = True
            if ready or self._abort.is_set():
                self._worker_died(starting=deadline is not None)
            if deadline is not None and time.monotonic() > deadline:
                self.kill_worker()
                raise WorkerError(f"the worker process of stage {self.index} did not build the stage within "
                                  f"{START_SECONDS:g} s; it was killed")

    def _worker_died(self, starting: bool = False) -> None:
        """Reaps the worker (killing it when interrupted) and raises the WorkerError naming the stage and
        how it ended."""
        interrupted = self._abort.is_set()
        process = self._process
        pid = process.pid if process is not None else None
        code = self.kill_worker() if interrupted else self._reap(STOP_SECONDS)
        if interrupted:
            self._lost = f"its worker process (pid {pid}) was killed by PipelineExecutor.close()"
            raise WorkerError(f"the worker process of stage {self.index} (pid {pid}) was killed: its "
                              "PipelineExecutor was closed (cancel=True, or an interrupt) while it ran this request")
        self._lost = f"its worker process (pid {pid}) {_ending(code)}"
        if starting:
            raise WorkerError(f"the worker process of stage {self.index} (pid {pid}) {_ending(code)} before it "
                              f"built the stage (its error output says why); {MAIN_GUARD}")
        raise WorkerError(f"the worker process of stage {self.index} (pid {pid}) {_ending(code)}")

    # ---- stopping ---------------------------------------------------------------------------

    def interrupt(self) -> None:
        """From any thread: no worker starts any more, the wait for the running one ends and it is killed
        (the stage's thread reaps it). Returns at once."""
        self._closing.set()
        self._abort.set()
        with self._lock:
            if self._process is not None:
                with contextlib.suppress(OSError, ValueError):
                    self._process.kill()

    def stop(self) -> None:
        """Asks the worker to finish, kills it if it does not within ``STOP_SECONDS``, frees the blocks;
        no worker starts after it."""
        self._closing.set()
        conn = self._conn
        if conn is not None:
            with contextlib.suppress(OSError, ValueError):  # NOTE: a worker that is gone already is reaped below
                conn.send(("stop",))
        self._reap(STOP_SECONDS)
        self._release_blocks()

    def kill(self) -> None:
        """Kills the worker at once and frees the blocks; no worker starts after it (idempotent)."""
        self._closing.set()
        self.kill_worker()
        self._release_blocks()

    def kill_worker(self) -> int | None:
        """Kills and reaps the worker; returns its exit code."""
        with self._lock:
            if self._process is not None:
                with contextlib.suppress(OSError, ValueError):
                    self._process.kill()
        return self._reap(STOP_SECONDS)

    def _reap(self, seconds: float) -> int | None:
        """Waits for the worker to end (killing it after ``seconds``); returns its exit code."""
        with self._lock:
            process, conn, self._process, self._conn = self._process, self._conn, None, None
        if process is None:
            return None
        process.join(seconds)
        if process.is_alive():
            process.kill()
            process.join(STOP_SECONDS)
        conn.close()
        code = process.exitcode
        if code is not None:  # NOTE: else it did not die even of SIGKILL (a stuck device): leave it be
            process.close()
        return code

    def _release_source(self) -> None:
        with self._lock:
            block, self._source = self._source, None
        if block is not None:
            block.release()

    def _release_blocks(self) -> None:
        self._release_source()
        for block in (self._inputs, self._outputs):
            if block is not None:
                block.release()
        self._inputs = self._outputs = None


def _alive(process: BaseProcess) -> bool:
    try:
        return process.is_alive()
    except ValueError:  # NOTE: a closer reaped and closed it meanwhile
        return False


def _ending(code: int | None) -> str:
    """How a process ended, in words."""
    if code is not None and code < 0:
        return f"was killed by {signal.Signals(-code).name}"
    return f"exited with code {code}"
