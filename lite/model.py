"""Model: build a .lite (or .onnx) model, then predict and resize."""

from __future__ import annotations

import contextlib
import enum
import logging
import os
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from lite.context import Context
from lite.delegate import Delegate, DelegateModel, DelegationLog, Partition
from lite.errors import DelegateError, InputError, LiteError, ModelFormatError, NotSupportedError
from lite.kernel import Kernel
from lite.kernels.base import NativeKernel, Workspace
from lite.memory import MemoryPlan
from lite.scheduler import schedule
from lite.schema.graph import GraphDef
from lite.schema.reader import read_model
from lite.shapes import blame, foldable_kernels, propagate
from lite.tensor import Tensor
from lite.threads import limit_blas_threads

logger = logging.getLogger("lite")


@dataclass(frozen=True)
class PartitionRow:
    """Where one node runs: ``runs_on`` is "native", "folded" or a delegate's class name."""

    node: str
    op_type: str
    runs_on: str
    graph_kernel: str
    reason: str


class ModelType(enum.Enum):
    """The kind of bytes given to ``Model.build``."""

    LITE = "lite"
    ONNX = "onnx"


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
            "schedule", "delegate build", "prepare").
    """

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._built = False
        self._context = Context()
        self._inputs: list[Tensor] = []
        self._outputs: list[Tensor] = []
        self._shape_kernels: list[NativeKernel] = []
        self._folded: set[NativeKernel] = set()
        self._kernels: list[Kernel] = []
        self._memory = MemoryPlan()
        self._shapes_dirty = False
        self._memory_limit = 0
        self._log = DelegationLog()
        self.build_timings: dict[str, float] = {}

    # ---- building ---------------------------------------------------------------

    def build(self, model_data: bytes | bytearray | memoryview, model_type: ModelType = ModelType.LITE,
              context: Context | None = None) -> None:
        """Builds the model from bytes.

        Args:
            model_data: the .lite bytes (or ONNX bytes with ``ModelType.ONNX``).
            model_type: ``ModelType.LITE`` or ``ModelType.ONNX`` (converted in memory).
            context: threads, delegates and fallback; a default Context if None.

        Raises:
            ModelFormatError: the bytes are not a valid model.
            UnsupportedOpError: some ops cannot run (all are listed).
            DelegateError: a delegate failed (and fallback could not save the build).
        """
        with self._lock:
            if self._built:
                raise InputError("this Model is already built; create a new lite.Model()")
            context = context or Context()
            timer = _StageTimer()
            if model_type == ModelType.ONNX:
                with timer("convert"):
                    model_data = _convert_onnx(model_data)
            elif model_type != ModelType.LITE:
                raise InputError(f"model_type must be a lite.ModelType, got {model_type!r}")
            with timer("parse"):
                graph = read_model(model_data, context.memory_limit)
            self._build_graph(graph, context, timer)
            self.build_timings = timer.seconds

    def build_from_file(self, model_path: str | os.PathLike, model_type: ModelType | None = None,
                        context: Context | None = None) -> None:
        """Builds the model from a file; ``.onnx`` files are converted in memory.

        Args:
            model_path: a ``.lite`` or ``.onnx`` file.
            model_type: overrides the type the file extension implies.
            context: as for ``build``.
        """
        path = Path(model_path)
        if model_type is None:
            model_type = ModelType.ONNX if path.suffix.lower() == ".onnx" else ModelType.LITE
        self.build(_read_file(path), model_type, context)

    def _build_graph(self, graph: GraphDef, context: Context, timer: _StageTimer) -> None:
        with timer("schedule"):
            tensors = [Tensor.from_def(t) for t in graph.tensors]
            self._inputs = [tensors[i] for i in graph.inputs]
            self._outputs = [tensors[i] for i in graph.outputs]
            self._context = context
            self._memory_limit = context.memory_limit
            self._shape_kernels = schedule(graph, tensors)
            workspace = Workspace(context.memory_limit)  # kernels run one at a time: one scratch pool
            for kernel in self._shape_kernels:
                kernel.workspace = workspace
            self._folded = set(foldable_kernels(self._shape_kernels))
            self._kernels = [k for k in self._shape_kernels if k not in self._folded]
            for tensor in self._inputs:
                tensor._on_reshape = self._input_reshaped
            self._shapes_dirty = any(-1 in t.shape for t in self._inputs)
            if not self._shapes_dirty:
                propagate(self._shape_kernels, self._folded, self._memory_limit)
        with timer("delegate build"):
            for delegate in context.delegates:
                self._apply_delegate(delegate)
        with timer("prepare"):
            self._prepare_all()
            self._release_unused_constants(tensors)
            if not self._shapes_dirty:
                self._plan()
        self._built = True

    def _apply_delegate(self, delegate: Delegate) -> None:
        name = type(delegate).__name__
        try:
            delegate.init()
        except NotSupportedError as exc:
            logger.info("delegate %s declined: %s", name, exc)
            return
        except Exception as exc:
            raise DelegateError(f"delegate {name} failed in init(): {type(exc).__name__}: {exc}") from exc
        view = DelegateModel(self._kernels, self._inputs, self._outputs, delegate, self._log, self._context)
        try:
            delegate.build(view)
        except DelegateError:
            raise
        except Exception as exc:
            raise DelegateError(f"delegate {name} failed in build(): {type(exc).__name__}: {exc}") from exc

    def _prepare_all(self) -> None:
        prepared: list[Kernel] = []
        for kernel in self._kernels:
            partition = self._log.partitions.get(kernel)
            if partition is None:
                self._prepare_native(kernel)
                prepared.append(kernel)
            elif self._prepare_graph_kernel(partition):
                prepared.append(kernel)
            else:
                for native in partition.covered:
                    self._prepare_native(native)
                prepared.extend(partition.covered)
        self._kernels = prepared

    def _prepare_native(self, kernel: Kernel) -> None:
        """prepare(), then resize() when shapes are known: native kernels plan for shapes there."""
        with blame(kernel, "prepare failed"):
            kernel.prepare()
            if not self._shapes_dirty:
                kernel.resize()

    def _prepare_graph_kernel(self, partition: Partition) -> bool:
        """Prepares a graph kernel; False when it failed and fallback restores its native kernels."""
        try:
            partition.kernel.prepare()
            return True
        except Exception as exc:
            error = DelegateError(
                f"delegate {type(partition.delegate).__name__}: graph kernel {partition.kernel.name!r} "
                f"failed in prepare(): {type(exc).__name__}: {exc}")
            if not self._context.fallback:
                raise error from exc
            logger.warning("%s; running its %d kernels natively (fallback)", error, len(partition.covered))
            del self._log.partitions[partition.kernel]
            for native in partition.covered:
                self._log.note(native, partition.delegate, f"graph kernel failed in prepare(): {exc}")
            return False

    def _release_unused_constants(self, tensors: list[Tensor]) -> None:
        """Drops const data no kernel can read any more (replaced or dead kernels' weights)."""
        needed = {t for k in self._kernels for t in k.inputs}
        for kernel in self._shape_kernels:  # what shape inference and folding read on resize
            needed.update(kernel.inputs if kernel in self._folded else kernel.shape_inputs())
        needed.update(self._outputs)
        for tensor in tensors:
            if tensor.is_const and tensor not in needed:
                tensor.data = None

    def partition_report(self) -> list[PartitionRow]:
        """One row per node: where it runs and, when a delegate said no, why.

        Rows are in topological order; ``runs_on`` is ``"native"``, ``"folded"`` (computed
        once from shapes) or the delegate's class name, with the graph kernel's name.
        """
        self._check_built()
        owner = {k: p for p in self._log.partitions.values() for k in p.covered}
        rows = []
        for kernel in self._shape_kernels:
            partition = owner.get(kernel)
            if partition is not None:
                where, graph = type(partition.delegate).__name__, partition.kernel.name
            else:
                where, graph = ("folded" if kernel in self._folded else "native"), ""
            reason = "; ".join(self._log.reasons.get(kernel, [])) if partition is None else ""
            rows.append(PartitionRow(kernel.name, kernel.type, where, graph, reason))
        return rows

    def graph_kernels(self) -> list[Kernel]:
        """The delegates' graph kernels, in execution order (a partition that fell back is not one).

        Their names are the ``graph_kernel`` column of ``partition_report()``; tools use this to
        reach delegate-specific methods, e.g. ``lite-inspect --dump-partitions`` calls ``dump``.
        """
        self._check_built()
        return [k for k in self._kernels if k in self._log.partitions]

    # ---- running ----------------------------------------------------------------

    def get_inputs(self) -> list[Tensor]:
        """The graph input tensors, in the model's order."""
        self._check_built()
        return list(self._inputs)

    def get_outputs(self) -> list[Tensor]:
        """The graph output tensors, in the model's order (filled by ``predict``)."""
        self._check_built()
        return list(self._outputs)

    def predict(self, inputs: Sequence[Tensor | np.ndarray] | None = None,
                profile: dict[Kernel, float] | None = None) -> list[Tensor]:
        """Runs the model.

        Args:
            inputs: one entry per graph input: the Tensors from ``get_inputs()`` (already
                filled), other Tensors, or numpy arrays. None: use the inputs as set.
            profile: when given, each kernel's execute time (seconds) is added to it,
                keyed by kernel (graph kernels are one entry each).

        Returns:
            Tensors holding this call's outputs (copies: another thread's predict cannot
            change them; ``get_outputs()`` holds the latest results).

        Raises:
            InputError: wrong input count, dtype or shape, or an input with no data; the
                model stays usable.
        """
        with self._lock:
            self._check_built()
            if inputs is not None:
                self._feed(inputs)
            missing = [t.name for t in self._inputs if t.data is None]
            if missing:
                raise InputError(f"inputs {missing} have no data: set them before predict")
            if self._shapes_dirty:
                self._apply_shapes()
            try:
                self._run(profile)
            except LiteError:
                self._plan()  # a failed run may have left outputs rebound to foreign arrays
                raise
            return [t.snapshot() for t in self._outputs]

    def resize(self, inputs: Sequence[Tensor], dims: Sequence[Sequence[int]]) -> None:
        """Gives the graph inputs new shapes; every kernel's ``resize()`` then runs.

        Args:
            inputs: the model's input tensors (from ``get_inputs()``).
            dims: one new shape per input.

        Raises:
            InputError: a shape with a zero or negative dim, the wrong rank, or one the
                model cannot run with; the previous shapes stay in force.
        """
        with self._lock:
            self._check_built()
            targets = self._resize_targets(inputs, dims)
            previous = [(t.shape, t.declared_shape, t.data) for t in self._inputs]
            for tensor, shape in targets:
                declared = tensor.declared_shape
                tensor.shape = shape
                tensor.declared_shape = tuple(-1 if d == -1 else s for d, s in zip(declared, shape, strict=True))
                tensor.data = None
            try:
                self._apply_shapes()
            except InputError:
                for tensor, (shape, declared, data) in zip(self._inputs, previous, strict=True):
                    tensor.shape, tensor.declared_shape, tensor.data = shape, declared, data
                self._shapes_dirty = True  # propagation got part way: redo it with the old shapes
                raise

    def _resize_targets(self, inputs: Sequence[Tensor], dims: Sequence[Sequence[int]]):
        if len(inputs) != len(dims):
            raise InputError(f"resize got {len(inputs)} inputs but {len(dims)} shapes")
        targets = []
        for tensor, shape in zip(inputs, dims, strict=True):
            own = self._own_input(tensor)
            try:
                shape = tuple(int(d) for d in shape)
            except (TypeError, ValueError) as exc:
                raise InputError(f"resize: shape for {own.name!r} must be a list of ints, got {shape!r}") from exc
            if len(shape) != len(own.declared_shape):
                raise InputError(f"resize: input {own.name!r} has rank {len(own.declared_shape)}, "
                                 f"got shape {list(shape)}")
            if any(d <= 0 for d in shape):
                raise InputError(f"resize: every dim must be positive, got {list(shape)} for {own.name!r}")
            targets.append((own, shape))
        return targets

    def _own_input(self, tensor: Tensor) -> Tensor:
        if isinstance(tensor, Tensor):
            for own in self._inputs:
                if own is tensor or own.name == tensor.name:
                    return own
        name = getattr(tensor, "name", tensor)
        raise InputError(f"{name!r} is not an input of this model; inputs are "
                         f"{[t.name for t in self._inputs]}")

    def _feed(self, inputs: Sequence[Tensor | np.ndarray]) -> None:
        if isinstance(inputs, (np.ndarray, Tensor)) or len(inputs) != len(self._inputs):
            count = 1 if isinstance(inputs, (np.ndarray, Tensor)) else len(inputs)
            raise InputError(f"the model has {len(self._inputs)} inputs "
                             f"{[t.name for t in self._inputs]}, predict got {count}")
        for own, given in zip(self._inputs, inputs, strict=True):
            if given is own:
                continue
            array = given.data if isinstance(given, Tensor) else given
            if array is None:
                raise InputError(f"input tensor {getattr(given, 'name', own.name)!r} has no data")
            own.set_data_from_numpy(array)

    def _input_reshaped(self, tensor: Tensor) -> None:
        self._shapes_dirty = True

    def _apply_shapes(self) -> None:
        try:
            propagate(self._shape_kernels, self._folded, self._memory_limit)
            self._plan()
        except ModelFormatError as exc:
            shapes = {t.name: t.shape for t in self._inputs}
            raise InputError(f"the model cannot run with input shapes {shapes}: {exc}") from exc
        for kernel in self._kernels:
            kernel.resize()
        self._shapes_dirty = False

    def _plan(self) -> None:
        keep = {t for t in self._outputs if not t.value_known and t not in self._inputs}
        self._memory.apply(self._kernels, keep, self._memory_limit)

    def _run(self, profile: dict[Kernel, float] | None) -> None:
        limit_blas_threads(self._context.thread_num)
        kernel = None
        try:
            with np.errstate(all="ignore"):  # IEEE results (NaN, inf) as onnxruntime gives them, no warnings
                if profile is None:
                    for kernel in self._kernels:
                        kernel.execute()
                else:
                    for kernel in self._kernels:
                        start = time.perf_counter()
                        kernel.execute()
                        profile[kernel] = profile.get(kernel, 0.0) + time.perf_counter() - start
        except Exception as exc:
            raise self._execute_error(kernel, exc) from exc
        for partition in self._log.partitions.values():
            self._check_graph_outputs(partition)

    def _execute_error(self, kernel: Kernel, exc: Exception) -> LiteError:
        partition = self._log.partitions.get(kernel)
        if partition is not None:
            return DelegateError(f"delegate {type(partition.delegate).__name__}: graph kernel "
                                 f"{kernel.name!r} failed in execute(): {type(exc).__name__}: {exc}")
        if isinstance(exc, LiteError):
            return exc
        return ModelFormatError(f"kernel {kernel.name!r} ({kernel.type}) failed: {type(exc).__name__}: {exc}")

    def _check_graph_outputs(self, partition: Partition) -> None:
        for tensor in partition.kernel.outputs:
            data = tensor.data
            if data is None or data.shape != tensor.shape or data.dtype != tensor.dtype:
                got = "nothing" if data is None else f"{data.dtype.name}{list(data.shape)}"
                raise DelegateError(
                    f"delegate {type(partition.delegate).__name__}: graph kernel {partition.kernel.name!r} "
                    f"wrote {got} to {tensor.name!r}, expected {tensor.dtype.name}{list(tensor.shape)}")

    def _check_built(self) -> None:
        if not self._built:
            raise InputError("the Model is not built: call build() or build_from_file() first")


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


def lite_bytes_from_file(model_path: str | os.PathLike) -> bytes:
    """The .lite bytes of a ``.lite`` file, or of an ``.onnx`` file converted in memory.

    Raises:
        InputError: the file cannot be read.
        ModelFormatError, UnsupportedOpError: the ONNX model does not convert.
    """
    path = Path(model_path)
    if path.suffix.lower() != ".onnx":
        return _read_file(path)
    from lite.tools.converter import convert

    return convert(str(path))  # from the path, so external data beside the model resolves


def _read_file(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise InputError(f"cannot read model file {str(path)!r}: {exc.strerror or exc}") from exc


def _convert_onnx(model_data: bytes | bytearray | memoryview) -> bytes:
    from lite.tools.converter import convert  # the converter (and onnx) load only when needed

    return convert(bytes(model_data))
