"""Pipeline execution: ``PipelineExecutor`` runs requests through the stages, one worker thread each.

Requests flow through bounded ``_Channel`` queues, one per stage plus one of finished
results; each stage follows a ``_StagePlan`` made once from the config's wiring (which
values it reads, keeps and drops), so a request carries only the values a later stage
or the pipeline's outputs still need. A stage's thread runs its Model itself (a thread
stage) or hands the request to a worker process (a ``ProcessStage``) and waits for it.
"""

from __future__ import annotations

import logging
import pickle
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from lite.arguments import sequence_of
from lite.errors import InputError, StageError
from lite.model import Model
from lite.pipeline.config import Endpoint, PipelineConfig, TensorSpec, check_positive
from lite.pipeline.process import POLL_SECONDS, STOP_SECONDS, ProcessStage
from lite.pipeline.shared import bytes_for
from lite.tensor import Tensor

# Runs one stage: its inputs by name -> the outputs the pipeline keeps, by name.
StageRunner = Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]]

CANCEL_GRACE_SECONDS = 5.0  # after close(cancel=True), a process stage's running request has this long

logger = logging.getLogger("lite")


@dataclass
class _Request:
    number: int
    values: dict[Endpoint, np.ndarray]  # pipeline inputs by name, stage outputs by (stage, name)
    error: StageError | None = None


@dataclass
class _StagePlan:
    """What one stage reads, what it keeps of its outputs and what no later stage needs."""

    feeds: dict[str, Endpoint]  # model input name -> its source, in the model's input order
    keep: list[str] = field(default_factory=list)
    drop: list[Endpoint] = field(default_factory=list)


class _Closed(Exception):
    """Raised by ``_Channel.put`` once the channel is closed."""


class _Channel:
    """A FIFO between threads, bounded by ``capacity`` (None: unbounded); close() wakes every waiter."""

    def __init__(self, capacity: int | None):
        self._items: deque[_Request] = deque()
        self._capacity = capacity
        self._closed = False
        self._changed = threading.Condition()

    def __len__(self) -> int:
        return len(self._items)

    def _has_room(self) -> bool:
        return self._capacity is None or len(self._items) < self._capacity

    def _wait(self, ready: Callable[[], bool], timeout: float | None) -> bool:
        """Waits (the lock held) until ``ready()``, for at most ``timeout`` seconds (None: no end),
        checking it again every ``POLL_SECONDS`` whatever wakes it; whether it became ready."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not ready():
            left = POLL_SECONDS if deadline is None else min(POLL_SECONDS, deadline - time.monotonic())
            if left <= 0:
                return False
            self._changed.wait(left)
        return True

    def put(self, item: _Request, timeout: float | None = None) -> bool:
        """Appends ``item``; False when no room came within ``timeout``; raises _Closed once closed."""
        with self._changed:
            if not self._wait(lambda: self._closed or self._has_room(), timeout):
                return False
            if self._closed:
                raise _Closed
            self._items.append(item)
            self._changed.notify_all()
            return True

    def get(self, timeout: float | None = None) -> _Request | None:
        """The oldest item; None when none came within ``timeout`` or the channel is closed and empty."""
        with self._changed:
            self._wait(lambda: bool(self._items) or self._closed, timeout)
            if not self._items:
                return None
            item = self._items.popleft()
            self._changed.notify_all()
            return item

    def close(self) -> None:
        with self._changed:
            self._closed = True
            self._changed.notify_all()

    def unbound(self) -> None:
        with self._changed:
            self._capacity = None
            self._changed.notify_all()


class PipelineExecutor:
    """Runs a stream of requests through the stages of a ``PipelineConfig``, one thread per stage.

    ``set_input`` and ``run`` queue a request and return at once (unless the pipeline is full,
    see below); each stage's worker thread takes requests in order, runs its Model, and passes
    them on through a bounded queue.
    ``get_output`` returns results in submission order. An error in a stage is delivered by
    that request's ``get_output`` as a ``StageError`` (a ``lite.LiteError`` naming the stage);
    the stages after it skip that request, and later requests run as usual.

    Backpressure: every stage queue holds at most ``queue_size`` requests, so at most
    ``len(stages) * (queue_size + 1)`` requests are in flight. When the first queue is full,
    ``run()`` blocks until there is room (``run(block=False)``, or a ``timeout`` that passes,
    raises ``InputError`` instead). Finished results wait for ``get_output``; with
    ``max_outputs`` set, the last stage also waits while that many are uncollected, so a
    producer that outruns its consumer is slowed down instead of filling memory (collect
    results from another thread then, or ``run()`` waits for ever).

    Threads: give every thread stage the same ``thread_num`` (see the ``lite.pipeline`` package
    docstring: the BLAS pool is process-wide). A stage whose graph kernels release the GIL for
    a whole call (onnxruntime, TVM, a GPU) runs alongside native stages in threads.

    Processes: ``processes`` puts stages in worker processes (spawned; each builds its stage
    from ``config.source(i)`` and has its own BLAS pool and GIL, so CPU-bound native stages run
    truly in parallel). Activations pass through shared memory; only small messages are pickled.
    A worker that dies fails the request it ran with a ``StageError`` naming the stage (its
    cause a ``WorkerError``); the next request starts a new worker, up to ``worker_restarts``
    times, after which that stage's requests fail with a ``StageError`` saying it cannot serve.
    A worker found dead between requests is replaced before the next one runs (a restart too).
    ``close()`` (or leaving the ``with`` block, also by an exception such as KeyboardInterrupt)
    stops the workers and frees the shared memory; so does the interpreter's exit. A worker still
    busy ``CANCEL_GRACE_SECONDS`` after ``close(cancel=True)`` (or after Ctrl-C in ``close()``) is
    killed and its request dropped.

    Args:
        config: the stages and their wiring; checked with ``config.validate()``.
        queue_size: requests each stage's input queue holds.
        max_outputs: the most finished results waiting for ``get_output``; the last stage waits
            while that many do (None: no bound).
        processes: True runs every stage in its own worker process; a sequence of stage indices
            runs those; False (default) runs every stage in a thread of this process.
        worker_restarts: how many times each process stage replaces a worker that died.

    Raises:
        InputError: incomplete wiring; a ``queue_size``, ``max_outputs`` or ``worker_restarts``
            out of range; a process stage without ``config.set_source`` or whose Context cannot
            be pickled.
        WorkerError: a worker process could not build its stage, died while it started (a script
            without an ``if __name__ == "__main__":`` guard) or did not start within
            ``lite.pipeline.process.START_SECONDS`` (the message says which).

    Example:
        >>> import numpy as np, lite
        >>> from lite.tools import converter, zoo
        >>> pieces, config = lite.split_model(converter.convert(zoo.add_chain(8)), num_stages=2)
        >>> frames = [np.full((1, 16), k, np.float32) for k in range(5)]
        >>> with lite.PipelineExecutor(config) as pipeline:
        ...     for frame in frames:
        ...         pipeline.set_input("x", frame)
        ...         _ = pipeline.run()
        ...     results = [pipeline.get_output(block=True) for _ in frames]
        >>> [sorted(r) for r in results[:2]]
        [['y'], ['y']]
        >>> expected = lite.Model()
        >>> expected.build(converter.convert(zoo.add_chain(8)), context=lite.Context(thread_num=1))
        >>> bool(np.array_equal(results[3]["y"], expected.predict([frames[3]])[0].get_data_to_numpy()))
        True
    """

    def __init__(self, config: PipelineConfig, queue_size: int = 2, max_outputs: int | None = None,
                 processes: bool | Sequence[int] = False, worker_restarts: int = 3):
        config.validate()
        check_positive("queue_size", queue_size)
        if max_outputs is not None:
            check_positive("max_outputs", max_outputs)
        self._stages = list(config.stages)
        self._input_specs = config.input_specs
        self._results = {target: source for source, target in config.connections if isinstance(target, str)}
        self._plans = _plan_stages(config)
        self._workers = _process_stages(config, self._plans, _process_indices(processes, len(self._stages)),
                                        worker_restarts)
        # NOTE: the finalizer stays attached until close() has stopped every worker: a Ctrl-C anywhere
        # before that leaves it to kill them when the executor is collected or the interpreter exits
        self._stop_workers = weakref.finalize(self, _kill, list(self._workers.values()))
        self._runners = [self._runner(i) for i in range(len(self._stages))]
        self._queue_size = queue_size
        self._queues = [_Channel(queue_size) for _ in self._stages]
        self._finished = _Channel(max_outputs)
        self._inputs: dict[str, np.ndarray] = {}
        self._submit = threading.Lock()
        self._submitted = 0
        self._closed = False
        self._cancel = threading.Event()
        self._close_lock = threading.Lock()  # held by the close() that does the work
        self._close_done = False
        self._threads = [threading.Thread(target=self._work, args=(i,), daemon=True,
                                          name=f"lite-pipeline-{id(self):x}-stage-{i}")
                         for i in range(len(self._stages))]
        try:
            _start(list(self._workers.values()))
            for thread in self._threads:
                thread.start()
        except BaseException:
            self._abandon_start()
            raise

    # ---- submitting -------------------------------------------------------------------------

    def set_input(self, name: str, array: np.ndarray) -> None:
        """Sets pipeline input ``name`` for the next ``run()``; the array is copied.

        Inputs stay set across runs (like a Model's input tensors) until set again.

        Raises:
            InputError: an unknown name, or an array whose dtype or shape does not fit.
        """
        array = self._checked(name, array)
        with self._submit:
            self._inputs[name] = array

    def _checked(self, name: str, array: np.ndarray) -> np.ndarray:
        """A copy of ``array`` once it fits pipeline input ``name``."""
        spec = self._input_specs.get(name)
        if spec is None:
            raise InputError(f"{name!r} is not a pipeline input; inputs are {list(self._input_specs)}")
        if not isinstance(array, np.ndarray):
            raise InputError(f"pipeline input {name!r}: expected a numpy array, got {type(array).__name__}")
        problem = TensorSpec(array.dtype, array.shape).mismatch(spec)
        if problem:
            raise InputError(f"pipeline input {name!r}: {problem}")
        return np.array(array, copy=True)

    def run(self, inputs: Mapping[str, np.ndarray] | Sequence[np.ndarray] | None = None, block: bool = True,
            timeout: float | None = None) -> int:
        """Queues a request with the inputs as set; returns its number (0, 1, ...).

        Args:
            inputs: arrays to ``set_input`` first (optional): ``{name: array}``, or one array per
                pipeline input in the config's order, as ``Model.predict`` takes them.
            block: wait while the pipeline is full; False raises at once instead.
            timeout: the most seconds to wait for room (None: no limit).

        Raises:
            InputError: an input was never set, the pipeline is full (with ``block=False``
                or after ``timeout``), or the executor is closed.
        """
        given = {name: self._checked(name, array) for name, array in self._named(inputs).items()}
        with self._submit:
            self._inputs.update(given)
            if self._closed:
                raise InputError("the PipelineExecutor is closed; create a new one")
            missing = [name for name in self._input_specs if name not in self._inputs]
            if missing:
                raise InputError(f"pipeline inputs {missing} are not set: call set_input first")
            request = _Request(self._submitted, dict(self._inputs))
            self._enqueue(request, timeout if block else 0)
            self._submitted += 1
            return request.number

    def _named(self, inputs: Mapping[str, np.ndarray] | Sequence[np.ndarray] | None) -> Mapping[str, np.ndarray]:
        """``inputs`` by name; a sequence gives one array per pipeline input, in order."""
        if inputs is None or isinstance(inputs, Mapping):
            return inputs or {}
        arrays = sequence_of(inputs, "one array per pipeline input", "PipelineExecutor.run")
        if len(arrays) != len(self._input_specs):
            raise InputError(f"PipelineExecutor.run: expected {len(self._input_specs)} input(s) "
                             f"{list(self._input_specs)}, got {len(arrays)}")
        return dict(zip(self._input_specs, arrays, strict=True))

    def _enqueue(self, request: _Request, timeout: float | None) -> None:
        try:
            queued = self._queues[0].put(request, timeout)
        except _Closed:
            raise InputError("the PipelineExecutor was closed while run() waited for room") from None
        if not queued:
            raise InputError(f"the pipeline is full ({len(self._stages)} stage(s), queue_size "
                             f"{self._queue_size}): collect results with get_output(), or let run() wait for room "
                             "(block=True, no timeout)")

    # ---- collecting -------------------------------------------------------------------------

    def has_next_output(self) -> bool:
        """True when the oldest unreturned request has finished (``get_output`` will not wait)."""
        return len(self._finished) > 0

    def get_output(self, block: bool = False, timeout: float | None = None,
                   output_names: Sequence[str] | None = None) -> list[Tensor] | None:
        """The outputs of the oldest finished request (requests finish in submission order), as
        ``Model.predict`` returns them: Tensors named after the pipeline's outputs.

        Args:
            block: wait for the next request to finish (False: return None at once if it has not).
            timeout: the most seconds to wait (None: no limit).
            output_names: the outputs to return, in this order (default: all, in the config's order).

        Returns:
            The outputs, or None when no request finished in time (or none is left after close).

        Raises:
            InputError: an unknown output name (checked before any request is taken).
            StageError: a ``lite.LiteError`` naming the stage that failed on this request.
        """
        names = self._wanted_outputs(output_names)
        request = self._finished.get(timeout if block else 0)
        if request is None:
            return None
        if request.error is not None:
            raise request.error
        return [Tensor.of(name, request.values[self._results[name]]) for name in names]

    def _wanted_outputs(self, names: Sequence[str] | None) -> list[str]:
        if names is None:
            return list(self._results)
        names = sequence_of(names, "output_names", "PipelineExecutor.get_output")
        unknown = [n for n in names if n not in self._results]
        if unknown:
            raise InputError(f"output_names {unknown} are not outputs of the pipeline; it has {list(self._results)}")
        return list(names)

    # ---- the workers ------------------------------------------------------------------------

    def _work(self, index: int) -> None:
        source = self._queues[index]
        sink = self._queues[index + 1] if index + 1 < len(self._queues) else self._finished
        try:
            while (request := source.get()) is not None:
                if self._cancel.is_set():
                    continue
                if request.error is None:
                    self._run_stage(index, request)
                sink.put(request)
        finally:
            sink.close()

    @property
    def worker_pids(self) -> dict[int, int]:
        """Stage index -> the process id of its worker, for the process stages whose worker runs now."""
        return {i: stage.pid for i, stage in self._workers.items() if stage.pid is not None}

    def _runner(self, index: int) -> StageRunner:
        if index in self._workers:
            return self._workers[index].predict
        return lambda feeds: _predict(self._stages[index], feeds, self._plans[index].keep)

    def _run_stage(self, index: int, request: _Request) -> None:
        plan, values = self._plans[index], request.values
        try:
            outputs = self._runners[index]({name: values[s] for name, s in plan.feeds.items()})
            for name in plan.keep:
                values[(index, name)] = outputs[name]
        except Exception as exc:
            request.error = StageError(index, request.number, exc)
            values.clear()
            return
        for key in plan.drop:
            del values[key]

    # ---- closing ----------------------------------------------------------------------------

    def close(self, cancel: bool = False) -> None:
        """Stops the worker threads and processes and waits for them; finished results stay available.

        Safe to call more than once and from several threads: a second call waits until the first
        is done (a second call with ``cancel=True`` makes the first cancel too).

        Args:
            cancel: False finishes every queued request first (nothing is lost). True lets
                each stage finish only the request it is running and drops the unfinished
                ones: ``get_output`` then returns the finished results, a prefix of the
                requests in submission order, and None after them. A process stage still on
                its request ``CANCEL_GRACE_SECONDS`` later has its worker killed.
        """
        self._closed = True
        if cancel:
            self._cancel.set()  # NOTE: before the lock, so a close() already waiting for the queues cancels
        while not self._close_lock.acquire(timeout=POLL_SECONDS):
            pass  # NOTE: another close() is at work; cancel above reaches it
        try:
            if not self._close_done:
                self._shut_down()
                self._close_done = True
        finally:
            self._close_lock.release()

    def _abandon_start(self) -> None:
        """After a failed (or interrupted) start: every queue closed, every worker killed."""
        self._closed = self._close_done = True
        for queue in self._queues:
            queue.close()
        _kill(list(self._workers.values()))
        self._stop_workers.detach()

    def _shut_down(self) -> None:
        """Ends the stage threads, then the workers; on an interrupt, kills the workers at once."""
        self._finished.unbound()  # NOTE: the last stage must never wait for a consumer while we join
        self._queues[0].close()
        stages = list(self._workers.values())
        try:
            self._join_threads()
            self._stop_stages()
        except BaseException:
            self._cancel.set()
            _kill(stages)
            raise
        self._stop_workers.detach()  # NOTE: only now: every worker is stopped and every block freed

    def _join_threads(self) -> None:
        """Waits for the stage threads; once cancelled, only ``CANCEL_GRACE_SECONDS`` (the caller kills the
        workers still busy)."""
        grace_end = None
        while alive := [t for t in self._threads if t.is_alive()]:
            if self._cancel.is_set():
                grace_end = grace_end or time.monotonic() + CANCEL_GRACE_SECONDS
                if time.monotonic() >= grace_end:
                    return
            alive[0].join(POLL_SECONDS)

    def _stop_stages(self) -> None:
        """Stops every worker: busy ones are killed first and their threads given ``STOP_SECONDS`` to end."""
        stages = list(self._workers.values())
        if any(t.is_alive() for t in self._threads):
            for stage in stages:
                stage.interrupt()
            deadline = time.monotonic() + STOP_SECONDS
            while (alive := [t for t in self._threads if t.is_alive()]) and time.monotonic() < deadline:
                alive[0].join(POLL_SECONDS)
            for thread in alive:
                logger.warning("PipelineExecutor.close: %s is still running its stage's request; it ends after it",
                               thread.name)
        for stage in stages:
            stage.stop()

    def __enter__(self) -> PipelineExecutor:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        """Closes; when the block raised, unfinished requests are cancelled rather than awaited."""
        self.close(cancel=exc_type is not None)


def _plan_stages(config: PipelineConfig) -> list[_StagePlan]:
    """Per stage: the sources of its inputs, the outputs to keep and the values to drop after it."""
    sources = {target: source for source, target in config.connections}
    plans = [_StagePlan({t.name: sources[(i, t.name)] for t in model.get_inputs()})
             for i, model in enumerate(config.stages)]
    read = set(sources.values())
    for i, model in enumerate(config.stages):
        plans[i].keep = [t.name for t in model.get_outputs() if (i, t.name) in read]
    last_use: dict[Endpoint, int] = {}
    for i, plan in enumerate(plans):
        for source in plan.feeds.values():
            last_use[source] = i
    results = {source for target, source in sources.items() if isinstance(target, str)}
    for source, i in last_use.items():
        if source not in results:
            plans[i].drop.append(source)
    return plans


def _predict(model: Model, feeds: dict[str, np.ndarray], keep: list[str]) -> dict[str, np.ndarray]:
    """A thread stage: runs ``model`` here; the kept outputs by name (``predict`` returns copies)."""
    return {t.name: t.data for t in model.predict(feeds, output_names=keep)}


def _process_indices(processes: bool | Sequence[int], count: int) -> list[int]:
    """The stages to run in worker processes."""
    if isinstance(processes, bool):
        return list(range(count)) if processes else []
    indices = sequence_of(processes, "processes", "PipelineExecutor")
    wrong = [i for i in indices if not isinstance(i, int) or isinstance(i, bool) or not 0 <= i < count]
    if wrong:
        raise InputError(f"processes: {wrong} are not stage indices; stages are 0..{count - 1}")
    return sorted(set(indices))


def _process_stages(config: PipelineConfig, plans: list[_StagePlan], indices: list[int],
                    restarts: int) -> dict[int, ProcessStage]:
    """A ``ProcessStage`` per index (not started), checked for a source that a worker can receive."""
    if not isinstance(restarts, int) or isinstance(restarts, bool) or restarts < 0:
        raise InputError(f"worker_restarts must be an int >= 0, got {restarts!r}")
    stages = {}
    for i in indices:
        source = config.source(i)
        if source is None:
            raise InputError(f"stage {i} cannot run in a process: the config has no source for it; call "
                             f"config.set_source({i}, lite_bytes, context) (split_model sets every stage's)")
        try:
            pickle.dumps(source.context)
        except Exception as exc:
            raise InputError(f"stage {i} cannot run in a process: its Context cannot be sent to a worker "
                             f"({type(exc).__name__}: {exc}); give its delegates plain options, or run it "
                             "in a thread") from exc
        outputs = {t.name: (t.dtype, t.shape) for t in config.stages[i].get_outputs() if t.name in plans[i].keep}
        stages[i] = ProcessStage(i, source, plans[i].keep, bytes_for(outputs), restarts)
    return stages


def _start(stages: list[ProcessStage]) -> None:
    """Spawns every worker, then waits for all to build; on any failure (or Ctrl-C) stops them all.

    Raises:
        WorkerError: a worker could not build its stage.
    """
    try:
        for stage in stages:
            stage.launch()
        for stage in stages:
            stage.wait_ready()
    except BaseException:
        _kill(stages)
        raise


def _kill(stages: list[ProcessStage]) -> None:
    """Kills every worker and frees the shared memory (a failed start, an interrupt, or the interpreter's
    exit); every worker is signalled before any is waited for."""
    for stage in stages:
        stage.interrupt()
    for stage in stages:
        stage.kill()
