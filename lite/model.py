"""Model: build a .lite (or .onnx) model, then predict and resize."""

from __future__ import annotations

import contextlib
import hashlib
import os
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from lite.arguments import dims_of, model_bytes, sequence_of
from lite.context import Context
from lite.conversion import conversion_cache_directory, convert_file, discard, load_lite_buffer
from lite.delegate.placement import PlacementRow, node_placements, report_rows
from lite.delegate.saved import save
from lite.engine import Engine
from lite.errors import DelegateError, InputError, LiteError, MemoryLimitError, ModelFileError, ModelFormatError
from lite.files import MappedModelFile, map_lite_file
from lite.kernel import Kernel
from lite.kernels import fast
from lite.loader import ModelSource, ModelType, model_type_of, read_lite_file
from lite.schema.graph import PartitionDef
from lite.schema.reader import read_model
from lite.schema.writer import write_model
from lite.tensor import Tensor


@dataclass(frozen=True)
class PartitionRow:
    """Where one node runs: ``runs_on`` is "native", "folded" or a delegate's class name."""

    node: str
    op_type: str
    runs_on: str
    graph_kernel: str
    reason: str
    placement: str = ""  # measured placement: the times of the partitions covering the node, and the decision
    blob: str = ""  # the delegate partition saved in the file that covers the node: "loaded: ..." or "not used: why"
    quantized: str = ""  # a quantized op's output type ("int8", "uint8"); empty for other ops


def _read_lite(path: str | os.PathLike, size_limit: int, *, follow_links: bool = True):
    """(the mapped file or None, its bytes): a .lite file mapped privately, else read in."""
    mapped = map_lite_file(path, size_limit, follow_links=follow_links)
    if mapped is not None:
        return mapped, mapped.array
    return None, read_lite_file(path, size_limit, follow_links=follow_links)


def _read_entry(entry: Path, size_limit: int):
    """``_read_lite`` of a conversion cache entry (a link refused); None where it cannot be read (gone,
    not a regular file, larger than the limit: the model is converted again)."""
    try:
        return _read_lite(entry, size_limit, follow_links=False)
    except (ModelFileError, MemoryLimitError):
        return None


def checked_context(context: Context | None) -> Context:
    """``context``, or a default Context for None; anything else is refused."""
    if context is None:
        return Context()
    if not isinstance(context, Context):
        raise InputError(f"context must be a lite.Context, got {type(context).__name__}")
    return context


class Model:
    """A built model: its tensors, kernels (native and delegated) and memory plan.

    Example:
        >>> import lite, numpy as np
        >>> model = lite.Model()
        >>> model.build_from_file("model.lite", context=lite.Context(thread_num=2))  # doctest: +SKIP
        >>> outputs = model.predict([np.zeros((1, 3, 224, 224), np.float32)])       # doctest: +SKIP
        >>> outputs[0].get_data_to_numpy().shape                                      # doctest: +SKIP
        (1, 1000)

    ``predict`` and ``resize`` may be called from several threads; calls on one Model
    run one at a time (use ``lite.ModelParallelRunner`` for parallel serving).

    Attributes:
        build_timings: seconds spent per build stage ("convert" for ONNX input, "parse",
            "schedule", "delegate build" or, with measured placement, "placement" (proposals,
            the native run, timing the candidates), "prepare"); "jit": the part of "prepare" spent compiling
            fast kernels (or loading them from the cache), when any was.
    """

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._engine: Engine | None = None
        self.build_timings: dict[str, float] = {}

    # ---- building ---------------------------------------------------------------

    def build(self, model_data: bytes | bytearray | memoryview | np.ndarray, model_type: ModelType = ModelType.LITE,
              context: Context | None = None) -> None:
        """Builds the model from bytes.

        Args:
            model_data: the .lite bytes (or ONNX bytes with ``ModelType.ONNX``).
            model_type: ``ModelType.LITE`` or ``ModelType.ONNX`` (converted in memory; external
                data cannot resolve from bytes: use ``build_from_file`` for such models).
            context: threads, delegates and fallback; a default Context if None.

        Raises:
            ModelFormatError: the bytes are not a valid model.
            UnsupportedOpError: some ops cannot run (all are listed).
            DelegateError: a delegate failed (and fallback could not save the build).
            MemoryLimitError: the model needs more than ``context.memory_limit``.
        """
        self._build(model_data, model_type, context)

    def _build(self, model_data, model_type: ModelType, context: Context | None,
               mapped: MappedModelFile | None = None) -> None:
        """``build``; ``mapped``: the mapped file ``model_data`` views, whose repacked constants leave memory."""
        with self._lock:
            if self._engine is not None:
                raise InputError("this Model is already built; create a new lite.Model()")
            context = checked_context(context)
            model_bytes(model_data)
            timer = _StageTimer()
            if model_type_of(model_data, model_type) is ModelType.ONNX:
                with timer("convert"):
                    model_data = load_lite_buffer(model_data, ModelType.ONNX, size_limit=context.memory_limit)
            with timer("parse"):
                graph = read_model(model_data, context.memory_limit)
            self._engine = self._new_engine(graph, context, timer, model_data, mapped)
            self.build_timings = timer.seconds

    def build_from_file(self, model_path: ModelSource, model_type: ModelType | None = None,
                        context: Context | None = None) -> None:
        """Builds the model from a file; ``.onnx`` files are converted in memory.

        An ONNX model's external data resolves against the model file's folder, from any
        working directory (and never outside that folder). A ``.lite`` file is read into a
        private mapping of the file: the pages of weights that kernels repacked leave memory
        after the build and are read from the file again if needed (replace the file by renaming
        a new one over it while models built from it run; a file changed in place makes a later
        ``resize`` raise ModelFileError).

        Args:
            model_path: a ``.lite`` or ``.onnx`` file.
            model_type: overrides the type the file extension implies.
            context: as for ``build``.
        """
        context = checked_context(context)
        timer = _StageTimer()
        kind = model_type_of(model_path, model_type)
        is_path = isinstance(model_path, (str, os.PathLike))
        cache = conversion_cache_directory(context.conversion_cache) if kind is ModelType.ONNX and is_path else None
        if cache is not None:
            self._build_converted(model_path, cache, context, timer)
            return
        mapped = None
        with timer("convert" if kind is ModelType.ONNX else "read"):
            if kind is ModelType.LITE and is_path:
                mapped, data = _read_lite(model_path, context.memory_limit)
            else:
                data = load_lite_buffer(model_path, kind, size_limit=context.memory_limit)
        self._build(data, ModelType.LITE, context, mapped)
        self.build_timings = {**timer.seconds, **self.build_timings}

    def _build_converted(self, path: str | os.PathLike, cache: Path, context: Context, timer: _StageTimer) -> None:
        """``build_from_file`` of an ONNX file through the conversion cache in ``cache``: the cached
        .lite file mapped (as a .lite file is) where there is one; else converted now. An entry
        that cannot be read, or does not read as a model, is removed and the file converted again."""
        with timer("convert"):
            converted = convert_file(path, cache, context.memory_limit)
        if converted.cached is not None:
            with timer("convert"):
                read = _read_entry(converted.cached, context.memory_limit)
            if read is not None:
                try:
                    self._build(read[1], ModelType.LITE, context, read[0])
                    self.build_timings = {**timer.seconds, **self.build_timings}
                    return
                except ModelFormatError:
                    pass
            discard(converted.cached)
            with timer("convert"):
                converted = convert_file(path, cache, context.memory_limit, refresh=True)
        self._build(converted.data, ModelType.LITE, context)
        self.build_timings = {**timer.seconds, **self.build_timings}

    @staticmethod
    def _new_engine(graph, context: Context, timer: _StageTimer, model_data,
                    mapped: MappedModelFile | None = None) -> Engine:
        with timer("schedule"):
            engine = Engine(graph, context, mapped)
        if context.placement == "measured" and context.delegates:
            with timer("placement"):
                engine.place_measured(hashlib.sha256(memoryview(model_data)).hexdigest())
        else:
            with timer("delegate build"):
                for delegate in context.delegates:
                    engine.delegate(delegate)
        engine.note_unused_blobs()
        compiling = fast.compile_seconds()
        with timer("prepare"):
            engine.prepare()
        if fast.compile_seconds() > compiling:  # NOTE: part of "prepare": compiled kernels load or compile there
            timer.seconds["jit"] = fast.compile_seconds() - compiling
        return engine

    def partition_report(self) -> list[PartitionRow]:
        """One row per node: where it runs and, when a delegate said no, why.

        Rows are in topological order; ``runs_on`` is ``"native"``, ``"folded"`` (computed
        once from shapes) or the delegate's class name, with the graph kernel's name. For a
        file with delegate partitions saved ahead of time (``lite-convert --delegate``),
        ``blob`` says whether the one covering the node was loaded, or why not.
        """
        engine = self._checked_engine()
        owner = engine.owner()
        placed = node_placements(engine.placement)
        rows = []
        for kernel in engine.shape_kernels:
            partition = owner.get(kernel)
            if partition is not None:
                where, graph = partition.delegate_name, partition.kernel.name
            else:
                where, graph = ("folded" if kernel in engine.folded else "native"), ""
            reason = "; ".join(engine.log.reasons.get(kernel, [])) if partition is None else ""
            rows.append(PartitionRow(kernel.name, kernel.type, where, graph, reason, placed.get(kernel, ""),
                                     engine.log.blobs.get(kernel, ""),
                                     kernel.outputs[0].dtype.name if kernel.quantized else ""))
        return rows

    def placement_report(self) -> list[PlacementRow]:
        """Measured placement's candidates (``Context(placement="measured")``): per candidate
        partition, its delegate, nodes, measured time, the native time and the decision; empty
        with priority placement."""
        return report_rows(self._checked_engine().placement)

    def graph_kernels(self) -> list[Kernel]:
        """The delegates' graph kernels, in execution order (a partition that fell back is not one).

        This is the one list of what the delegates built for this model (a delegate object
        keeps none). Their names are the ``graph_kernel`` column of ``partition_report()``;
        tools use this to reach delegate-specific methods, e.g. ``lite-inspect
        --dump-partitions`` calls ``dump(directory)`` on those that have it.
        """
        return self._checked_engine().graph_kernels()

    # ---- running ----------------------------------------------------------------

    def get_inputs(self) -> list[Tensor]:
        """The graph input tensors, in the model's order."""
        return list(self._checked_engine().inputs)

    def get_outputs(self) -> list[Tensor]:
        """The graph output tensors, in the model's order (filled by ``predict``)."""
        return list(self._checked_engine().outputs)

    def predict(self, inputs: Sequence[Tensor | np.ndarray] | Mapping[str, Tensor | np.ndarray] | None = None,
                profile: dict[Kernel, float] | None = None,
                output_names: Sequence[str] | None = None) -> list[Tensor]:
        """Runs the model.

        Args:
            inputs: one entry per graph input: the Tensors from ``get_inputs()`` (already
                filled), other Tensors, or numpy arrays; or a dict of them by input name (as
                onnxruntime's ``run`` takes them). None: use the inputs as set. Arrays are copied
                in, except where only delegates' graph kernels read the input and the array is
                C-contiguous: then the input views it, read-only, until another is set.
            profile: when given, each kernel's execute time (seconds) is added to it,
                keyed by kernel (graph kernels are one entry each).
            output_names: the outputs to return, in this order (default: all, in the model's order).

        Returns:
            Tensors holding this call's outputs (copies: another thread's predict cannot
            change them; ``get_outputs()`` holds the latest results).

        Raises:
            InputError: wrong input count, names, dtype or shape, an input with no data, or an
                unknown output name; the model stays usable.
            KernelError, DelegateError: a kernel or graph kernel failed; the model stays usable.

        Example:
            >>> [y] = model.predict({"input": x}, output_names=["output"])  # doctest: +SKIP
        """
        if profile is not None and not isinstance(profile, dict):
            raise InputError(f"profile must be a dict (kernel -> seconds) or None, got {type(profile).__name__}")
        with self._lock:
            engine = self._checked_engine()
            wanted = self._wanted_outputs(engine, output_names)
            engine.wake_threads()
            if inputs is not None:
                self._feed(engine, inputs)
            missing = [t.name for t in engine.inputs if t.data is None]
            if missing:
                raise InputError(f"inputs {missing} have no data: set them before predict")
            if engine.shapes_dirty:
                self._apply_shapes(engine)
            try:
                engine.run(profile)
            except LiteError:
                engine.plan()  # a failed run may have left outputs rebound to foreign arrays
                raise
            return [t.snapshot() for t in wanted]

    @staticmethod
    def _wanted_outputs(engine: Engine, names: Sequence[str] | None) -> list[Tensor]:
        if names is None:
            return list(engine.outputs)
        by_name = {t.name: t for t in engine.outputs}
        names = sequence_of(names, "output_names", "predict")
        unknown = [n for n in names if n not in by_name]
        if unknown:
            raise InputError(f"output_names {unknown} are not outputs of the model; it has {list(by_name)}")
        return [by_name[n] for n in names]

    def resize(self, inputs: Sequence[Tensor], dims: Sequence[Sequence[int]]) -> None:
        """Gives the graph inputs new shapes; every kernel's ``resize()`` then runs.

        A graph kernel failing in ``resize()`` is replaced by the native kernels it covered
        when ``Context.fallback`` is on.

        Args:
            inputs: the model's input tensors (from ``get_inputs()``).
            dims: one new shape per input.

        Raises:
            InputError: a shape with a zero or negative dim, the wrong rank, or one the
                model cannot run with; the previous shapes stay in force.
            DelegateError: a graph kernel failed in ``resize()`` and fallback is off; the
                previous shapes stay in force.
        """
        with self._lock:
            engine = self._checked_engine()
            targets = self._resize_targets(engine, inputs, dims)
            previous = [(t.shape, t.declared_shape, t.data) for t in engine.inputs]
            for tensor, shape in targets:
                declared = tensor.declared_shape
                tensor.shape = shape
                tensor.declared_shape = tuple(-1 if d == -1 else s for d, s in zip(declared, shape, strict=True))
                tensor.data = None
            try:
                self._apply_shapes(engine)
            except (InputError, DelegateError):
                for tensor, (shape, declared, data) in zip(engine.inputs, previous, strict=True):
                    tensor.shape, tensor.declared_shape, tensor.data = shape, declared, data
                engine.shapes_dirty = True  # propagation got part way: redo it with the old shapes
                raise

    def _resize_targets(self, engine: Engine, inputs: Sequence[Tensor], dims: Sequence[Sequence[int]]):
        inputs = sequence_of(inputs, "the input tensors (from get_inputs())", "resize")
        dims = sequence_of(dims, "one shape per input", "resize")
        if len(inputs) != len(dims):
            raise InputError(f"resize got {len(inputs)} inputs but {len(dims)} shapes")
        targets = []
        for tensor, shape in zip(inputs, dims, strict=True):
            own = self._own_input(engine, tensor)
            shape = dims_of(shape, f"the shape for {own.name!r}")
            if len(shape) != len(own.declared_shape):
                raise InputError(f"resize: input {own.name!r} has rank {len(own.declared_shape)}, "
                                 f"got shape {list(shape)}")
            if any(d <= 0 for d in shape):
                raise InputError(f"resize: every dim must be positive, got {list(shape)} for {own.name!r}")
            targets.append((own, shape))
        return targets

    @staticmethod
    def _own_input(engine: Engine, tensor: Tensor) -> Tensor:
        if isinstance(tensor, Tensor):
            for own in engine.inputs:
                if own is tensor or own.name == tensor.name:
                    return own
        name = getattr(tensor, "name", tensor)
        raise InputError(f"{name!r} is not an input of this model; inputs are "
                         f"{[t.name for t in engine.inputs]}")

    @staticmethod
    def _feed(engine: Engine, inputs: Sequence[Tensor | np.ndarray] | Mapping[str, Tensor | np.ndarray]) -> None:
        if isinstance(inputs, Mapping):
            inputs = Model._by_name(engine, inputs)
        if isinstance(inputs, (np.ndarray, Tensor)):
            raise InputError(f"predict takes a list of inputs, one per graph input {[t.name for t in engine.inputs]}, "
                             f"got one {type(inputs).__name__}: wrap it in a list")
        inputs = sequence_of(inputs, "the inputs", "predict")
        if len(inputs) != len(engine.inputs):
            raise InputError(f"the model has {len(engine.inputs)} inputs "
                             f"{[t.name for t in engine.inputs]}, predict got {len(inputs)}")
        for own, given in zip(engine.inputs, inputs, strict=True):
            if given is own:
                continue
            array = given.data if isinstance(given, Tensor) else given
            if array is None:
                raise InputError(f"input tensor {getattr(given, 'name', own.name)!r} has no data")
            engine.feed(own, array)

    @staticmethod
    def _by_name(engine: Engine, inputs: Mapping) -> list:
        """The inputs of a dict keyed by input name, in the model's input order."""
        names = [t.name for t in engine.inputs]
        missing, unknown = [n for n in names if n not in inputs], [k for k in inputs if k not in names]
        if missing or unknown:
            wrong = (f", missing {missing}" if missing else "") + (f", unknown {unknown}" if unknown else "")
            raise InputError(f"the model's inputs are {names}; predict got names {list(inputs)}{wrong}")
        return [inputs[n] for n in names]

    @staticmethod
    def _apply_shapes(engine: Engine) -> None:
        try:
            engine.apply_shapes()
        except (ModelFormatError, MemoryLimitError) as exc:
            shapes = {t.name: t.shape for t in engine.inputs}
            raise InputError(f"the model cannot run with input shapes {shapes}: {exc}") from exc

    def _checked_engine(self) -> Engine:
        if self._engine is None:
            raise InputError("the Model is not built: call build() or build_from_file() first")
        return self._engine


class _StageTimer:
    """Accumulates wall time per named build stage."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    @contextlib.contextmanager
    def __call__(self, stage: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[stage] = self.seconds.get(stage, 0.0) + time.perf_counter() - start


def compile_into(data: bytes, context: Context) -> tuple[bytes, list[PartitionDef], list[str]]:
    """Builds the ``.lite`` ``data`` with ``context``'s delegates and returns the file with their graph
    kernels saved in it (replacing any it had), the partitions saved and a line per graph kernel not saved.

    Raises:
        LiteError: the model does not build with ``context``.
    """
    model = Model()
    model.build(data, context=context)
    partitions, skipped = save(model._checked_engine())
    graph = read_model(data, context.memory_limit)
    graph.partitions = partitions
    return write_model(graph), partitions, skipped
