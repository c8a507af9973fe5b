"""Pipeline execution: a model cut into stages that run concurrently, one worker thread each.

On a stream of requests (camera frames, audio chunks) a model split into stages keeps several
compute units busy at once, like an assembly line: while stage 1 works on request k+1,
stage 0 already works on request k+2. Each stage is a built ``lite.Model`` with its own
Context, so one stage can run native kernels on one core while another runs on a delegate.

- ``PipelineConfig`` wires stages together by tensor name (``connect``).
- ``PipelineExecutor`` runs the requests: ``set_input``/``run`` queue one, ``get_output``
  returns results in submission order.
- ``split_model`` cuts one model into balanced stages and returns a ready config.

Threads and BLAS: numpy releases the GIL inside BLAS calls and most large array operations,
so stages in different threads really do run at the same time; the Python code between
those calls (kernel dispatch, small ops) still takes turns on the GIL. The BLAS thread pool
is process-wide (``lite.threads.limit_blas_threads``): every ``Model.predict`` sets it to its
own Context's ``thread_num``. Stages that all use the same ``thread_num`` (``split_model``
gives every default stage ``thread_num=1``) agree, and the pool stays as it is; stages with
different values switch the pool on every predict, and a stage's GEMMs then run with
whichever value another stage set last. Give every stage the same ``thread_num``, and keep
the sum of the stages' threads within the cores you have.
"""

from __future__ import annotations

import itertools
import logging
import os
import threading
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from lite.context import Context
from lite.errors import InputError, StageError
from lite.loader import ModelSource, ModelType, load_lite_bytes
from lite.model import Model
from lite.schema.graph import GraphDef, TensorDef
from lite.schema.reader import read_model
from lite.schema.writer import write_model
from lite.tensor import Tensor

if TYPE_CHECKING:
    pass

logger = logging.getLogger("lite")

# A pipeline input or output name ("input"), or a tensor of a stage ((stage, "name")).
Endpoint = str | tuple[int, str]


# ---- wiring ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class _Spec:
    """The dtype and shape (-1: free dim) a connection end carries."""

    dtype: np.dtype
    shape: tuple[int, ...]

    @classmethod
    def of_input(cls, tensor: Tensor) -> _Spec:
        return cls(tensor.dtype, tensor.declared_shape)

    @classmethod
    def of_output(cls, tensor: Tensor) -> _Spec:
        return cls(tensor.dtype, tensor.shape)

    def __str__(self) -> str:
        return f"{self.dtype.name}{list(self.shape)}"

    def mismatch(self, other: _Spec) -> str | None:
        """Why a value of this spec cannot feed ``other`` (None when it can)."""
        if self.dtype != other.dtype:
            return f"dtype {self.dtype.name} cannot feed dtype {other.dtype.name}"
        if len(self.shape) != len(other.shape) or any(
                a != b and -1 not in (a, b) for a, b in zip(self.shape, other.shape, strict=True)):
            return f"shape {list(self.shape)} cannot feed shape {list(other.shape)} (-1 marks a free dim)"
        return None


def _describe(endpoint: Endpoint) -> str:
    return f"pipeline {endpoint!r}" if isinstance(endpoint, str) else f"stage {endpoint[0]} {endpoint[1]!r}"


class PipelineConfig:
    """The stages of a pipeline and how tensors flow between them.

    Stages run in list order; a connection goes from a pipeline input or a stage's output to
    a stage's input or a pipeline output. Endpoints are named by tensor name: a plain string
    is a pipeline input (as a source) or output (as a target); ``(i, name)`` is tensor
    ``name`` of stage ``i`` (an output of the model as a source, an input as a target).
    A source may feed several targets; every target is fed exactly once.

    Args:
        stages: built models, one per stage, in the order they run (each with its own Context).

    Raises:
        InputError: no stages, a model that is not built, or the same Model given twice.

    Example::

        config = lite.PipelineConfig([first, second])  # two built lite.Models
        config.connect("input", (0, "input"))           # pipeline input -> stage 0 input
        config.connect((0, "t17"), (1, "t17"))          # stage 0 output -> stage 1 input
        config.connect((1, "output"), "output")         # stage 1 output -> pipeline output
        print(config)                                   # the wiring, for debugging
    """

    def __init__(self, stages: Sequence[Model]):
        if not stages:
            raise InputError("a pipeline needs at least one stage")
        if len({id(m) for m in stages}) != len(stages):
            raise InputError("the same Model appears twice among the stages; build one Model per stage")
        self.stages = tuple(stages)
        self._stage_inputs = [{t.name: _Spec.of_input(t) for t in m.get_inputs()} for m in self.stages]
        self._stage_outputs = [{t.name: _Spec.of_output(t) for t in m.get_outputs()} for m in self.stages]
        self._input_specs: dict[str, _Spec] = {}
        self._output_specs: dict[str, _Spec] = {}
        self._sources: dict[Endpoint, Endpoint] = {}  # target -> source, in connect order

    @property
    def inputs(self) -> list[str]:
        """Pipeline input names, in the order they were first connected."""
        return list(self._input_specs)

    @property
    def outputs(self) -> list[str]:
        """Pipeline output names, in the order they were connected."""
        return list(self._output_specs)

    @property
    def connections(self) -> list[tuple[Endpoint, Endpoint]]:
        """Every ``(source, target)`` pair, in connect order."""
        return [(source, target) for target, source in self._sources.items()]

    def connect(self, source: Endpoint, target: Endpoint) -> PipelineConfig:
        """Wires ``source`` to ``target``; returns the config, so calls can be chained.

        Args:
            source: a pipeline input name (created on first use) or ``(stage, output_name)``.
            target: ``(stage, input_name)`` of a later stage, or a pipeline output name.

        Raises:
            InputError: naming the connection: an unknown stage or tensor name, a target fed
                twice, an edge to the same or an earlier stage (a cycle), a pipeline input wired
                straight to a pipeline output, or a dtype or static-shape mismatch.
        """
        where = f"connect({source!r}, {target!r})"
        source, target = self._endpoint(source, where), self._endpoint(target, where)
        if target in self._sources:
            raise InputError(f"{where}: {_describe(target)} is already fed by {_describe(self._sources[target])}")
        self._check_direction(source, target, where)
        source_spec, target_spec = self._source_spec(source, where), self._target_spec(target, where)
        problem = source_spec and target_spec and source_spec.mismatch(target_spec)
        if problem:
            raise InputError(f"{where}: {problem}")
        if isinstance(source, str):
            self._input_specs.setdefault(source, target_spec)
        elif isinstance(target, str):
            self._output_specs[target] = source_spec
        self._sources[target] = source
        return self

    def _endpoint(self, endpoint: Endpoint, where: str) -> Endpoint:
        if isinstance(endpoint, str):
            return endpoint
        if (isinstance(endpoint, tuple) and len(endpoint) == 2 and isinstance(endpoint[0], int)
                and isinstance(endpoint[1], str)):
            if not 0 <= endpoint[0] < len(self.stages):
                raise InputError(f"{where}: there is no stage {endpoint[0]}; stages are 0..{len(self.stages) - 1}")
            return endpoint
        raise InputError(f"{where}: an endpoint is a pipeline name (str) or (stage index, tensor name), "
                         f"got {endpoint!r}")

    def _check_direction(self, source: Endpoint, target: Endpoint, where: str) -> None:
        if isinstance(source, str) and isinstance(target, str):
            raise InputError(f"{where}: a pipeline input cannot feed a pipeline output directly; "
                             "connect it to a stage input")
        if isinstance(source, tuple) and isinstance(target, tuple) and target[0] <= source[0]:
            raise InputError(f"{where}: a stage output can only feed a later stage, and stage {target[0]} "
                             f"does not run after stage {source[0]} (this edge would make a cycle)")

    def _source_spec(self, source: Endpoint, where: str) -> _Spec | None:
        if isinstance(source, str):
            return self._input_specs.get(source)
        return self._lookup(self._stage_outputs, source, "output", where)

    def _target_spec(self, target: Endpoint, where: str) -> _Spec | None:
        if isinstance(target, str):
            return None
        return self._lookup(self._stage_inputs, target, "input", where)

    def _lookup(self, table: list[dict[str, _Spec]], endpoint: tuple[int, str], kind: str, where: str) -> _Spec:
        stage, name = endpoint
        if name not in table[stage]:
            raise InputError(f"{where}: stage {stage} has no {kind} {name!r}; its {kind}s are {list(table[stage])}")
        return table[stage][name]

    def validate(self) -> None:
        """Checks that the wiring is complete (``PipelineExecutor`` calls this).

        Raises:
            InputError: a stage input is fed by nothing, or the pipeline has no output.
        """
        unfed = [(i, name) for i, specs in enumerate(self._stage_inputs) for name in specs
                 if (i, name) not in self._sources]
        if unfed:
            hint = "; ".join(f"connect(<source>, {endpoint!r})" for endpoint in unfed)
            raise InputError(f"stage inputs {unfed} are fed by nothing: {hint}")
        if not self._output_specs:
            raise InputError("the pipeline has no outputs: connect((stage, name), 'output_name')")

    def __str__(self) -> str:
        lines = [f"PipelineConfig: {len(self.stages)} stage(s)"]
        lines += [f"  input  {name!r}: {spec}" for name, spec in self._input_specs.items()]
        lines += [f"  output {name!r}: {spec}" for name, spec in self._output_specs.items()]
        for i, (ins, outs) in enumerate(zip(self._stage_inputs, self._stage_outputs, strict=True)):
            lines.append(f"  stage {i}: inputs {list(ins)} -> outputs {list(outs)}")
        lines += [f"  {_describe(source)} -> {_describe(target)}" for source, target in self.connections]
        return "\n".join(lines)


# ---- execution ------------------------------------------------------------------------------

@dataclass
class _Request:
    number: int
    values: dict[Endpoint, np.ndarray]  # pipeline inputs by name, stage outputs by (stage, name)
    error: StageError | None = None


@dataclass
class _StagePlan:
    """What one stage reads, what it keeps of its outputs and what no later stage needs."""

    feeds: list[Endpoint]  # the source of each model input, in the model's input order
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

    def put(self, item: _Request, timeout: float | None = None) -> bool:
        """Appends ``item``; False when no room came within ``timeout``; raises _Closed once closed."""
        with self._changed:
            if not self._changed.wait_for(lambda: self._closed or self._has_room(), timeout):
                return False
            if self._closed:
                raise _Closed
            self._items.append(item)
            self._changed.notify_all()
            return True

    def get(self, timeout: float | None = None) -> _Request | None:
        """The oldest item; None when none came within ``timeout`` or the channel is closed and empty."""
        with self._changed:
            self._changed.wait_for(lambda: self._items or self._closed, timeout)
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

    Threads: give every stage the same ``thread_num`` (see the module docstring: the BLAS
    pool is process-wide).

    Args:
        config: the stages and their wiring; checked with ``config.validate()``.
        queue_size: requests each stage's input queue holds.
        max_outputs: the most finished results waiting for ``get_output``; the last stage waits
            while that many do (None: no bound).

    Raises:
        InputError: incomplete wiring, or a ``queue_size`` or ``max_outputs`` that is not a
            positive int.

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

    def __init__(self, config: PipelineConfig, queue_size: int = 2, max_outputs: int | None = None):
        config.validate()
        _check_positive("queue_size", queue_size)
        if max_outputs is not None:
            _check_positive("max_outputs", max_outputs)
        self._stages = list(config.stages)
        self._input_specs = dict(config._input_specs)
        self._results = {target: source for source, target in config.connections if isinstance(target, str)}
        self._plans = _plan_stages(config)
        self._queue_size = queue_size
        self._queues = [_Channel(queue_size) for _ in self._stages]
        self._finished = _Channel(max_outputs)
        self._inputs: dict[str, np.ndarray] = {}
        self._submit = threading.Lock()
        self._submitted = 0
        self._closed = False
        self._cancel = threading.Event()
        self._threads = [threading.Thread(target=self._work, args=(i,), daemon=True,
                                          name=f"lite-pipeline-{id(self):x}-stage-{i}")
                         for i in range(len(self._stages))]
        for thread in self._threads:
            thread.start()

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
        problem = _Spec(array.dtype, array.shape).mismatch(spec)
        if problem:
            raise InputError(f"pipeline input {name!r}: {problem}")
        return np.array(array, copy=True)

    def run(self, inputs: Mapping[str, np.ndarray] | None = None, block: bool = True,
            timeout: float | None = None) -> int:
        """Queues a request with the inputs as set; returns its number (0, 1, ...).

        Args:
            inputs: ``{name: array}`` to ``set_input`` first (optional).
            block: wait while the pipeline is full; False raises at once instead.
            timeout: the most seconds to wait for room (None: no limit).

        Raises:
            InputError: an input was never set, the pipeline is full (with ``block=False``
                or after ``timeout``), or the executor is closed.
        """
        given = {name: self._checked(name, array) for name, array in (inputs or {}).items()}
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

    def get_output(self, block: bool = False, timeout: float | None = None) -> dict[str, np.ndarray] | None:
        """The outputs of the oldest finished request, ``{output name: array}``, in submission order.

        Args:
            block: wait for the next request to finish (False: return None at once if it has not).
            timeout: the most seconds to wait (None: no limit).

        Returns:
            The outputs, or None when no request finished in time (or none is left after close).

        Raises:
            StageError: a ``lite.LiteError`` naming the stage that failed on this request.
        """
        request = self._finished.get(timeout if block else 0)
        if request is None:
            return None
        if request.error is not None:
            raise request.error
        return {name: request.values[source] for name, source in self._results.items()}

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

    def _run_stage(self, index: int, request: _Request) -> None:
        plan, values = self._plans[index], request.values
        try:
            outputs = {t.name: t for t in self._stages[index].predict([values[s] for s in plan.feeds])}
            for name in plan.keep:
                values[(index, name)] = outputs[name].get_data_to_numpy()  # the Model reuses its arrays
        except Exception as exc:
            request.error = StageError(index, request.number, exc)
            values.clear()
            return
        for key in plan.drop:
            del values[key]

    # ---- closing ----------------------------------------------------------------------------

    def close(self, cancel: bool = False) -> None:
        """Stops the worker threads and waits for them; finished results stay available.

        Args:
            cancel: False finishes every queued request first (nothing is lost). True lets
                each stage finish only the request it is running and drops the unfinished
                ones: ``get_output`` then returns the finished results, a prefix of the
                requests in submission order, and None after them.
        """
        self._closed = True
        if cancel:
            self._cancel.set()
        self._finished.unbound()  # NOTE: the last stage must never wait for a consumer while we join
        self._queues[0].close()
        for thread in self._threads:
            thread.join()

    def __enter__(self) -> PipelineExecutor:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        """Closes; when the block raised, unfinished requests are cancelled rather than awaited."""
        self.close(cancel=exc_type is not None)


def _check_positive(what: str, value: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise InputError(f"{what} must be a positive int, got {value!r}")


def _plan_stages(config: PipelineConfig) -> list[_StagePlan]:
    """Per stage: the sources of its inputs, the outputs to keep and the values to drop after it."""
    sources = config._sources
    plans = [_StagePlan([sources[(i, t.name)] for t in model.get_inputs()]) for i, model in enumerate(config.stages)]
    read = set(sources.values())
    for i, model in enumerate(config.stages):
        plans[i].keep = [t.name for t in model.get_outputs() if (i, t.name) in read]
    last_use: dict[Endpoint, int] = {}
    for i, plan in enumerate(plans):
        for source in plan.feeds:
            last_use[source] = i
    results = {source for target, source in sources.items() if isinstance(target, str)}
    for source, i in last_use.items():
        if source not in results:
            plans[i].drop.append(source)
    return plans


# ---- splitting a model ----------------------------------------------------------------------

def split_model(model: ModelSource, num_stages: int,
                contexts: Sequence[Context] | None = None, *, profile_runs: int = 5,
                save_dir: str | os.PathLike | None = None) -> tuple[list[Model], PipelineConfig]:
    """Cuts a model into ``num_stages`` consecutive pieces of its topological order, balanced by cost.

    The model is built once natively (one thread) and run ``profile_runs`` times on random
    inputs; each kernel's cost is its fastest time. The cut points minimise the most expensive
    stage. Then the pieces are profiled predicting all at once, each in its own thread, as
    the pipeline runs them (sharing the cores, the caches and the GIL slows some kernels more
    than others), and the cuts are re-balanced on those costs a few times, keeping the cuts
    whose slowest piece measured fastest.

    Every tensor crossing a cut becomes an output of the piece that makes it and an input of
    each later piece that reads it; constants go with the nodes that read them; values the
    runtime computes from shapes alone become constants of the pieces that read them. Graph
    outputs made early are wired from their piece straight to the pipeline outputs. Tensor
    names stay as they are, so the wiring reads ``connect((0, "t"), (1, "t"))``.

    Costs are those of the native kernels: a piece whose Context has a delegate may run
    faster or slower than its share.

    Args:
        model: a ``.lite`` or ``.onnx`` path, ``.lite`` bytes, or an ``onnx.ModelProto``.
        num_stages: pieces to cut (at least 1, at most the number of kernels that run).
        contexts: one Context per piece (default: ``Context(thread_num=1)`` each).
        profile_runs: timed predicts after one warm-up.
        save_dir: when given, piece ``i`` is also written there as ``stage{i}.lite``.

    Returns:
        The built pieces, and a ``PipelineConfig`` wiring them (pipeline inputs and outputs
        carry the model's input and output names).

    Raises:
        InputError: a bad argument, a model with free (-1) input dims (convert it with
            ``input_shapes=...``), or tensor names that are not unique.
        ModelFormatError, UnsupportedOpError: as ``Model.build``.

    Example:
        >>> import lite
        >>> from lite.tools import zoo
        >>> pieces, config = lite.split_model(zoo.add_chain(12), num_stages=3)
        >>> len(pieces), config.inputs, config.outputs
        (3, ['x'], ['y'])
    """
    contexts = _stage_contexts(num_stages, contexts)
    data = load_lite_bytes(model)
    graph = read_model(data)
    _check_splittable(graph)
    costs, known = _profile(data, profile_runs)
    producers = _producers(graph)
    order = [producers[name] for name in costs]
    if num_stages > len(order):
        raise InputError(f"cannot cut {len(order)} running kernel(s) into {num_stages} stages")
    cuts = _Cutter(graph, order, known, profile_runs).refine(list(costs), list(costs.values()), num_stages)
    graphs = _pieces(graph, _groups(order, cuts), known)
    pieces = [_build_piece(graphs[i], i, contexts[i], save_dir) for i in range(num_stages)]
    return pieces, _wire(graph, graphs, pieces)


class _Cutter:
    """Balances cut points on kernel costs measured inside the pieces the cuts make."""

    ROUNDS = 3

    def __init__(self, graph: GraphDef, order: list[int], known: dict[str, np.ndarray], runs: int):
        self.graph, self.order, self.known, self.runs = graph, order, known, runs

    def refine(self, names: list[str], seconds: list[float], parts: int) -> list[int]:
        """The cuts, of those tried, whose slowest piece measured fastest.

        Starts from ``balance`` on the whole-model costs; each round profiles the pieces of the
        current cuts, takes each kernel's cost from its piece, and balances again, until the
        cuts repeat or ``ROUNDS`` rounds have run.
        """
        cuts, slowest = balance(seconds, parts), {}
        for _ in range(self.ROUNDS if parts > 1 else 0):
            if tuple(cuts) in slowest:
                break
            measured = self.piece_costs(cuts)
            seconds = [measured.get(name, old) for name, old in zip(names, seconds, strict=True)]
            stages = [sum(seconds[a:b]) for a, b in _spans(cuts, len(seconds))]
            logger.info("split_model: cuts %s measure %s ms per stage", cuts, [round(s * 1e3, 3) for s in stages])
            slowest[tuple(cuts)] = max(stages)
            cuts = balance(seconds, parts)
        return list(min(slowest, key=slowest.get)) if slowest else cuts

    def piece_costs(self, cuts: list[int]) -> dict[str, float]:
        """Each running kernel's cost (by first output name) inside its piece, the pieces predicting together."""
        return _profile_together([write_model(p) for p in _pieces(self.graph, _groups(self.order, cuts), self.known)],
                                 self.runs)


def _spans(cuts: list[int], length: int) -> list[tuple[int, int]]:
    return list(itertools.pairwise([0, *cuts, length]))


def _groups(order: list[int], cuts: list[int]) -> list[list[int]]:
    return [order[a:b] for a, b in _spans(cuts, len(order))]


def balance(costs: Sequence[float], parts: int) -> list[int]:
    """Cut points (the start of every part after the first) that minimise the largest part's sum.

    Every part gets at least one item. Linear partition by dynamic programming, vectorised
    over the position of the last cut.

    Example:
        >>> balance([4, 1, 1, 1, 1, 4], 2)
        [3]
    """
    n = len(costs)
    prefix = np.concatenate([[0.0], np.cumsum(np.asarray(costs, np.float64))])
    best = prefix.copy()  # best[j]: the smallest max over j items in the parts so far
    choice = np.zeros((parts, n + 1), np.int64)
    for k in range(1, parts):
        new = np.full(n + 1, np.inf)
        for j in range(k + 1, n + 1):
            starts = np.arange(k, j)
            worst = np.maximum(best[starts], prefix[j] - prefix[starts])
            pick = int(np.argmin(worst))
            new[j], choice[k, j] = worst[pick], starts[pick]
        best = new
    cuts, end = [], n
    for k in range(parts - 1, 0, -1):
        end = int(choice[k, end])
        cuts.append(end)
    return cuts[::-1]


def _stage_contexts(num_stages: int, contexts: Sequence[Context] | None) -> list[Context]:
    if not isinstance(num_stages, int) or isinstance(num_stages, bool) or num_stages < 1:
        raise InputError(f"num_stages must be a positive int, got {num_stages!r}")
    if contexts is None:
        return [Context(thread_num=1) for _ in range(num_stages)]
    if len(contexts) != num_stages:
        raise InputError(f"split_model got {len(contexts)} contexts for {num_stages} stages; give one per stage")
    return list(contexts)


def _check_splittable(graph: GraphDef) -> None:
    names = [t.name for t in graph.tensors]
    if len(set(names)) != len(names):
        raise InputError("split_model wires pieces by tensor name, and this model has duplicate tensor names")
    passed = [graph.tensors[t].name for t in graph.outputs if t in graph.inputs]
    if passed:
        raise InputError(f"graph outputs {passed} are graph inputs; a pipeline cannot pass an input through")
    free = {graph.tensors[i].name: list(graph.tensors[i].shape) for i in graph.inputs if -1 in graph.tensors[i].shape}
    if free:
        raise InputError(f"split_model needs static input shapes, got {free}; convert the model with "
                         "input_shapes={name: dims} to fix them")


def _profile(data: bytes, runs: int) -> tuple[dict[str, float], dict[str, np.ndarray]]:
    """Per running kernel (by its first output's name, in run order): its fastest time; and
    the values computed from shapes alone that running kernels read (by tensor name)."""
    if not isinstance(runs, int) or runs < 1:
        raise InputError(f"profile_runs must be a positive int, got {runs!r}")
    model, feeds = _profiling_model(data)
    model.predict(feeds)
    timings = []
    for _ in range(runs):
        profile: dict = {}
        model.predict(feeds, profile=profile)
        timings.append(profile)
    costs = {k.outputs[0].name: min(t[k] for t in timings) for k in timings[0]}
    read = [t for k in timings[0] for t in k.inputs if t is not None] + model.get_outputs()
    known = {t.name: np.array(t.data) for t in read if t.value_known and not t.is_const}
    return costs, known


def _profile_together(pieces: list[bytes], runs: int) -> dict[str, float]:
    """Per running kernel (by first output name): its median time over ``runs`` profiled
    predicts while every piece predicts at the same time in its own thread. A piece that
    finishes its runs first goes on predicting until all have, so all runs see contention."""
    models = [_profiling_model(data) for data in pieces]
    timings: list[list[dict]] = [[] for _ in models]
    errors: list[BaseException] = []
    start = threading.Barrier(len(models))

    def work(index: int) -> None:
        model, feeds = models[index]
        try:
            model.predict(feeds)
            start.wait()
            while not errors and any(len(t) < runs for t in timings):
                profile: dict = {}
                model.predict(feeds, profile=profile)
                if len(timings[index]) < runs:
                    timings[index].append(profile)
        except BaseException as exc:  # NOTE: re-raised below, in the caller's thread
            errors.append(exc)
            start.abort()

    threads = [threading.Thread(target=work, args=(i,), name=f"lite-split-profile-{i}") for i in range(len(models))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    return {k.outputs[0].name: float(np.median([t[k] for t in piece])) for piece in timings for k in piece[0]}


def _profiling_model(data: bytes) -> tuple[Model, list[np.ndarray]]:
    """A native one-thread model of ``data`` and random inputs for it."""
    model = Model()
    model.build(data, ModelType.LITE, Context(thread_num=1))
    rng = np.random.default_rng(0)
    return model, [_random_input(t, rng) for t in model.get_inputs()]


def _random_input(tensor: Tensor, rng: np.random.Generator) -> np.ndarray:
    if np.issubdtype(tensor.dtype, np.floating):
        return rng.standard_normal(tensor.shape).astype(tensor.dtype)
    return np.zeros(tensor.shape, tensor.dtype)  # NOTE: indices and masks: zero is always in range


def _producers(graph: GraphDef) -> dict[str, int]:
    """Tensor name -> index of the node that produces it."""
    return {graph.tensors[t].name: n for n, node in enumerate(graph.nodes) for t in node.outputs}


def _pieces(graph: GraphDef, groups: list[list[int]], known: dict[str, np.ndarray]) -> list[GraphDef]:
    """One GraphDef per group of nodes; crossing tensors become outputs, then inputs."""
    read_by = [{t for n in group for t in graph.nodes[n].inputs if t >= 0} for group in groups]
    made_by = [[t for n in group for t in graph.nodes[n].outputs] for group in groups]
    produced = {t for made in made_by for t in made}
    pieces = []
    for i, group in enumerate(groups):
        later = set().union(*read_by[i + 1:]) | set(graph.outputs)
        outputs = [t for t in made_by[i] if t in later]
        if i == len(groups) - 1:  # graph outputs no running kernel makes: constants of the last piece
            outputs += [t for t in graph.outputs if t not in produced and t not in outputs]
        pieces.append(_piece(graph, group, outputs, known, f"{graph.name}.stage{i}"))
    return pieces


def _piece(graph: GraphDef, group: list[int], outputs: list[int], known: dict[str, np.ndarray],
           name: str) -> GraphDef:
    made = {t for n in group for t in graph.nodes[n].outputs}
    used = list(dict.fromkeys([t for n in group for t in graph.nodes[n].inputs if t >= 0] + sorted(made) + outputs))
    index = {t: i for i, t in enumerate(used)}
    tensors = [_piece_tensor(graph.tensors[t], known) for t in used]
    piece = GraphDef(tensors=tensors, name=name, description=graph.description)
    piece.inputs = [index[t] for t in used if t not in made and not tensors[index[t]].is_const]
    piece.outputs = [index[t] for t in outputs]
    for n in group:
        node = graph.nodes[n]
        piece.nodes.append(type(node)(node.name, node.op_type, dict(node.attrs),
                                      [index[t] if t >= 0 else -1 for t in node.inputs],
                                      [index[t] for t in node.outputs]))
    return piece


def _piece_tensor(tensor: TensorDef, known: dict[str, np.ndarray]) -> TensorDef:
    value = known.get(tensor.name)
    if value is None:
        return TensorDef(tensor.name, tensor.dtype, tensor.shape, tensor.format, tensor.data)
    return TensorDef(tensor.name, value.dtype, value.shape, tensor.format, np.ascontiguousarray(value))


def _build_piece(graph: GraphDef, index: int, context: Context, save_dir: str | os.PathLike | None) -> Model:
    data = write_model(graph)
    if save_dir is not None:
        Path(save_dir).mkdir(parents=True, exist_ok=True)
        (Path(save_dir) / f"stage{index}.lite").write_bytes(data)
    model = Model()
    model.build(data, ModelType.LITE, context)
    return model


def _wire(graph: GraphDef, pieces: list[GraphDef], models: list[Model]) -> PipelineConfig:
    """Graph inputs -> the pieces that read them; crossing tensors -> their readers; outputs -> pipeline."""
    config = PipelineConfig(models)
    made_in = {piece.tensors[t].name: i for i, piece in enumerate(pieces) for t in piece.outputs}
    for i, piece in enumerate(pieces):
        for t in piece.inputs:
            name = piece.tensors[t].name
            config.connect(name if name not in made_in else (made_in[name], name), (i, name))
    for t in graph.outputs:
        name = graph.tensors[t].name
        config.connect((made_in[name], name), name)
    return config
