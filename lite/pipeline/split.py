"""Splitting a model: ``split_model`` cuts one model into stages balanced by profiled kernel costs.

The model is profiled whole, natively (``_profile``) and with each stage's Context
(``_cost_table``: one row of kernel costs per stage), cut by ``balance`` on those rows, then
the ``Cutter`` re-profiles the pieces, each built with its own stage's Context, predicting
together (``_profile_together``), and balances again; the pieces are written as ``.lite``
graphs, built and wired into a ``PipelineConfig`` that records each piece's bytes and Context
(so its stages may run in worker processes).

A delegate's graph kernel is timed as a whole; its time is shared among the nodes it runs in
proportion to their native costs (``_kernel_costs``), so every row costs the same kernels.
"""

from __future__ import annotations

import itertools
import logging
import os
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from lite.context import Context
from lite.conversion import load_lite_bytes
from lite.errors import InputError
from lite.loader import ModelSource, ModelType
from lite.model import Model
from lite.pipeline.config import PipelineConfig, check_positive
from lite.schema.graph import GraphDef, TensorDef
from lite.schema.reader import read_model
from lite.schema.writer import write_model
from lite.tensor import Tensor

logger = logging.getLogger("lite")


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

    Placement: each piece is costed on the Context it will run with. The whole model is
    profiled once per distinct stage Context (its delegates, its ``thread_num``), so a stage on
    onnxruntime or TVM gets the share of the model that takes it as long as the native stages
    take theirs; the pieces are then re-profiled, each built with its own Context.

    Args:
        model: a ``.lite`` or ``.onnx`` path, ``.lite`` bytes, or an ``onnx.ModelProto``.
        num_stages: pieces to cut (at least 1, at most the number of kernels that run).
        contexts: one Context per piece, the one it will run with (default:
            ``Context(thread_num=1)`` each).
        profile_runs: timed predicts after one warm-up.
        save_dir: when given, piece ``i`` is also written there as ``stage{i}.lite``.

    Returns:
        The built pieces, and a ``PipelineConfig`` wiring them (pipeline inputs and outputs
        carry the model's input and output names) that knows each piece's ``.lite`` bytes and
        Context (``config.source(i)``), so ``PipelineExecutor(config, processes=True)`` works.

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
    native, known = _profile(data, profile_runs)
    producers = _producers(graph)
    order = [producers[name] for name in native]
    if num_stages > len(order):
        raise InputError(f"cannot cut {len(order)} running kernel(s) into {num_stages} stages")
    table = _cost_table(data, contexts, native, profile_runs)
    cutter = Cutter(graph, order, known, profile_runs, contexts, native)
    cuts = cutter.refine(list(native), table, num_stages)
    graphs = _pieces(graph, _groups(order, cuts), known)
    datas = [_piece_bytes(graphs[i], i, save_dir) for i in range(num_stages)]
    pieces = [_built(data, context) for data, context in zip(datas, contexts, strict=True)]
    config = _wire(graph, graphs, pieces)
    for i, (data, context) in enumerate(zip(datas, contexts, strict=True)):
        config.set_source(i, data, context)
    return pieces, config


class Cutter:
    """Balances cut points on kernel costs measured inside the pieces the cuts make.

    Args:
        graph: the whole model.
        order: node indices of the running kernels, in run order (the items ``refine`` cuts).
        known: values computed from shapes alone, by tensor name (constants of the pieces).
        runs: profiled predicts per piece in each round.
        contexts: the Context of each piece (default: ``Context(thread_num=1)`` each).
        native: each running kernel's native cost (shares a graph kernel's time among its nodes).
    """

    ROUNDS = 3

    def __init__(self, graph: GraphDef, order: list[int], known: dict[str, np.ndarray], runs: int,
                 contexts: Sequence[Context] | None = None, native: dict[str, float] | None = None):
        self.graph, self.order, self.known, self.runs = graph, order, known, runs
        self.contexts, self.native = contexts, native or {}

    def refine(self, names: list[str], costs: Sequence[float] | np.ndarray, parts: int) -> list[int]:
        """The cuts, of those tried, whose slowest piece measured fastest.

        ``costs`` are the kernels' costs, the same for every part (a list) or one row per part
        (each part's Context). Starts from ``balance`` on them; each round profiles the pieces
        of the current cuts, takes each kernel's cost from its piece into the rows of every part
        with that piece's Context, and balances again, until the cuts repeat or ``ROUNDS``
        rounds have run.
        """
        table = _rows(costs, parts)
        cuts, slowest = balance(table, parts), {}
        for _ in range(self.ROUNDS if parts > 1 else 0):
            if tuple(cuts) in slowest:
                break
            self._update(table, names, cuts, self.piece_costs(cuts))
            stages = [table[k, a:b].sum() for k, (a, b) in enumerate(_spans(cuts, len(names)))]
            logger.info("split_model: cuts %s measure %s ms per stage", cuts, [round(s * 1e3, 3) for s in stages])
            slowest[tuple(cuts)] = max(stages)
            cuts = balance(table, parts)
        return list(min(slowest, key=slowest.get)) if slowest else cuts

    def _update(self, table: np.ndarray, names: list[str], cuts: list[int], measured: dict[str, float]) -> None:
        """Each kernel's measured cost goes to the rows of every part whose Context is its piece's."""
        keys = [_context_key(c) for c in self.contexts] if self.contexts else [None] * len(table)
        for k, (a, b) in enumerate(_spans(cuts, len(names))):
            rows = [m for m, key in enumerate(keys) if key == keys[k]]
            for i in range(a, b):
                table[rows, i] = measured.get(names[i], table[k, i])

    def piece_costs(self, cuts: list[int]) -> dict[str, float]:
        """Each running kernel's cost (by first output name) inside its piece, each piece built with its
        own Context, the pieces predicting together."""
        pieces = [write_model(p) for p in _pieces(self.graph, _groups(self.order, cuts), self.known)]
        contexts = self.contexts or [Context(thread_num=1) for _ in pieces]
        return _profile_together(pieces, contexts, self.native, _first_outputs(self.graph), self.runs)


def _spans(cuts: list[int], length: int) -> list[tuple[int, int]]:
    return list(itertools.pairwise([0, *cuts, length]))


def _groups(order: list[int], cuts: list[int]) -> list[list[int]]:
    return [order[a:b] for a, b in _spans(cuts, len(order))]


def _rows(costs: Sequence[float] | np.ndarray, parts: int) -> np.ndarray:
    """``costs`` as one row per part (a flat list is every part's row)."""
    table = np.array(costs, np.float64)
    return np.tile(table, (parts, 1)) if table.ndim == 1 else table


def balance(costs: Sequence[float] | np.ndarray, parts: int) -> list[int]:
    """Cut points (the start of every part after the first) that minimise the largest part's sum.

    ``costs`` are the items' costs, the same in every part, or one row per part (an item costs
    what it costs on that part's device). Every part gets at least one item. Linear partition
    by dynamic programming, vectorised over the position of the last cut.

    Example:
        >>> balance([4, 1, 1, 1, 1, 4], 2)
        [3]
        >>> balance([[4, 1, 1, 1, 1, 4], [2, 0.5, 0.5, 0.5, 0.5, 2]], 2)  # the second part runs 2x faster
        [2]
    """
    table = _rows(costs, parts)
    n = table.shape[1]
    prefix = np.concatenate([np.zeros((parts, 1)), np.cumsum(table, axis=1)], axis=1)
    best = prefix[0].copy()  # best[j]: the smallest max over j items in the parts so far
    choice = np.zeros((parts, n + 1), np.int64)
    for k in range(1, parts):
        new = np.full(n + 1, np.inf)
        for j in range(k + 1, n + 1):
            starts = np.arange(k, j)
            worst = np.maximum(best[starts], prefix[k, j] - prefix[k, starts])
            pick = int(np.argmin(worst))
            new[j], choice[k, j] = worst[pick], starts[pick]
        best = new
    cuts, end = [], n
    for k in range(parts - 1, 0, -1):
        end = int(choice[k, end])
        cuts.append(end)
    return cuts[::-1]


def _stage_contexts(num_stages: int, contexts: Sequence[Context] | None) -> list[Context]:
    check_positive("num_stages", num_stages)
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
    timings = _timings(model, feeds, runs)
    costs = {k.outputs[0].name: min(t[k] for t in timings) for k in timings[0]}
    read = [t for k in timings[0] for t in k.inputs if t is not None] + model.get_outputs()
    known = {t.name: np.array(t.data) for t in read if t.value_known and not t.is_const}
    return costs, known


def _context_key(context: Context) -> tuple:
    """Contexts with equal keys run a kernel equally fast: the same threads and delegate objects."""
    return context.thread_num, tuple(id(d) for d in context.delegates)


def _cost_table(data: bytes, contexts: list[Context], native: dict[str, float], runs: int) -> np.ndarray:
    """One row per stage: each running kernel's cost with that stage's Context (native one-thread
    rows reuse ``native``; every other distinct Context profiles the whole model once)."""
    plain, first_outputs = _context_key(Context(thread_num=1)), _first_outputs(read_model(data))
    rows: dict[tuple, list[float]] = {plain: list(native.values())}
    for context in contexts:
        key = _context_key(context)
        if key not in rows:
            measured = _profile_with(data, context, native, first_outputs, runs)
            rows[key] = [measured.get(name, seconds) for name, seconds in native.items()]
    return np.array([rows[_context_key(c)] for c in contexts])


def _profile_with(data: bytes, context: Context, native: dict[str, float], first_outputs: dict[str, str],
                  runs: int) -> dict[str, float]:
    """Per running kernel: its fastest time in the whole model built with ``context``."""
    model, feeds = _profiling_model(data, context)
    return _kernel_costs(model, _timings(model, feeds, runs), native, first_outputs, min)


def _timings(model: Model, feeds: list[np.ndarray], runs: int) -> list[dict]:
    """The kernel profiles of ``runs`` predicts, after one warm-up."""
    model.predict(feeds)
    timings = []
    for _ in range(runs):
        profile: dict = {}
        model.predict(feeds, profile=profile)
        timings.append(profile)
    return timings


def _kernel_costs(model: Model, timings: list[dict], native: dict[str, float], first_outputs: dict[str, str],
                  reduce: Callable[[list[float]], float]) -> dict[str, float]:
    """Per running kernel (by first output name): ``reduce`` of its profiled times; a graph kernel's
    time is shared among the nodes it runs in proportion to their ``native`` costs."""
    covered: dict[str, list[str]] = {}
    for row in model.partition_report():
        if row.graph_kernel and row.node in first_outputs:
            covered.setdefault(row.graph_kernel, []).append(first_outputs[row.node])
    graph_kernels = {id(k) for k in model.graph_kernels()}
    costs = {}
    for kernel in timings[0]:
        seconds = float(reduce([t[kernel] for t in timings]))
        names = covered.get(kernel.name, []) if id(kernel) in graph_kernels else [kernel.outputs[0].name]
        weights = np.array([native.get(name, 0.0) for name in names])
        shares = weights / weights.sum() if weights.sum() > 0 else np.full(len(names), 1 / max(len(names), 1))
        costs.update(zip(names, (seconds * shares).tolist(), strict=True))
    return costs


def _first_outputs(graph: GraphDef) -> dict[str, str]:
    """Node name -> the name of its first output (the key of a kernel's cost)."""
    return {node.name: graph.tensors[node.outputs[0]].name for node in graph.nodes if node.outputs}


def _profile_together(pieces: list[bytes], contexts: Sequence[Context], native: dict[str, float],
                      first_outputs: dict[str, str], runs: int) -> dict[str, float]:
    """Per running kernel (by first output name): its median time over ``runs`` profiled
    predicts while every piece, built with its Context, predicts at the same time in its own
    thread. A piece that finishes its runs first goes on predicting until all have, so all runs
    see contention."""
    models = [_profiling_model(data, context) for data, context in zip(pieces, contexts, strict=True)]
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
    costs: dict[str, float] = {}
    for (model, _), piece in zip(models, timings, strict=True):
        costs.update(_kernel_costs(model, piece, native, first_outputs, np.median))
    return costs


def _profiling_model(data: bytes, context: Context | None = None) -> tuple[Model, list[np.ndarray]]:
    """A model of ``data`` built with ``context`` (default: native, one thread) and random inputs for it."""
    model = Model()
    model.build(data, ModelType.LITE, context or Context(thread_num=1))
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


def _piece_bytes(graph: GraphDef, index: int, save_dir: str | os.PathLike | None) -> bytes:
    data = write_model(graph)
    if save_dir is not None:
        Path(save_dir).mkdir(parents=True, exist_ok=True)
        (Path(save_dir) / f"stage{index}.lite").write_bytes(data)
    return data


def _built(data: bytes, context: Context) -> Model:
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
