"""Process stages: the parent's end of a stage that runs in a worker process.

A ``ProcessStage`` is called from the stage's thread in the parent, one request at a time:
it writes the stage's inputs into its input block, sends a small "run" message, waits for
the worker's answer and copies the outputs out of its output block. The worker is spawned
(never forked: the parent may hold BLAS, numba or TVM threads, which a fork would copy
mid-flight). A worker that dies fails the request it was running with a ``WorkerError``; the
next request starts a new worker, up to ``restarts`` times, after which every request
gets a ``WorkerError`` saying the stage cannot serve any more.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import signal
from collections.abc import Mapping
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess

import numpy as np

from lite.errors import WorkerError
from lite.pipeline.shared import Block, fitted, layout_of, views, write
from lite.pipeline.worker import StageSource, serve

START_METHOD = "spawn"
STOP_SECONDS = 5.0


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
        self._process: BaseProcess | None = None
        self._conn: Connection | None = None
        self._lost: str = ""  # why the last worker is gone, once it is

    @property
    def pid(self) -> int | None:
        """The worker process's id (None before it starts and after it stops)."""
        return self._process.pid if self._process is not None else None

    # ---- starting ---------------------------------------------------------------------------

    def launch(self) -> None:
        """Spawns the worker (it builds the stage while the caller goes on); ``wait_ready`` waits for it."""
        context = multiprocessing.get_context(START_METHOD)
        ours, theirs = context.Pipe()
        process = context.Process(target=serve, args=(theirs, self.source), daemon=True,
                                  name=f"lite-pipeline-stage-{self.index}")
        try:
            process.start()
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()  # NOTE: else the parent would hold the worker's end and never see it die
        self._process, self._conn = process, ours

    def wait_ready(self) -> None:
        """Waits until the worker has built the stage.

        Raises:
            WorkerError: the worker died or its build failed (the original error is ``__cause__``).
        """
        reply = self._receive()
        if reply[0] != "ready":
            self.kill()
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
            WorkerError: the worker died on this request, or could not be (re)started.
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
        """Starts a new worker when the last one died (while restarts are left)."""
        if self._process is not None:
            return
        if self.restarts_left <= 0:
            raise WorkerError(f"stage {self.index} cannot serve any more: {self._lost}, and no restarts are left "
                              "(PipelineExecutor's worker_restarts); close() this executor")
        self.restarts_left -= 1
        self.start()

    def _send(self, message: tuple) -> None:
        try:
            self._conn.send(message)
        except OSError:
            self._worker_died()

    def _receive(self) -> tuple:
        try:
            return self._conn.recv()
        except (EOFError, OSError):
            self._worker_died()

    def _worker_died(self) -> None:
        """Reaps the dead worker and raises the WorkerError naming the stage and how it ended."""
        pid, code = self._process.pid, self._reap(STOP_SECONDS)
        self._lost = f"its worker process (pid {pid}) {_ending(code)}"
        raise WorkerError(f"the worker process of stage {self.index} (pid {pid}) {_ending(code)}")

    # ---- stopping ---------------------------------------------------------------------------

    def stop(self) -> None:
        """Asks the worker to finish, kills it if it does not within a few seconds, frees the blocks."""
        if self._process is not None:
            with contextlib.suppress(OSError):  # NOTE: a worker that is gone already is collected by _reap
                self._conn.send(("stop",))
            self._reap(STOP_SECONDS)
        self._release_blocks()

    def kill(self) -> None:
        """Kills the worker at once and frees the blocks (for the interpreter's exit)."""
        if self._process is not None:
            self._process.kill()
            self._reap(STOP_SECONDS)
        self._release_blocks()

    def _reap(self, seconds: float) -> int | None:
        """Waits for the worker to end (killing it after ``seconds``); returns its exit code."""
        process, self._process = self._process, None
        process.join(seconds)
        if process.is_alive():
            process.kill()
            process.join()
        self._conn.close()
        code = process.exitcode
        process.close()
        return code

    def _release_blocks(self) -> None:
        for block in (self._inputs, self._outputs):
            if block is not None:
                block.release()
        self._inputs = self._outputs = None


def _ending(code: int | None) -> str:
    """How a process ended, in words."""
    if code is not None and code < 0:
        return f"was killed by {signal.Signals(-code).name}"
    return f"exited with code {code}"
