"""The Delegate API: delegates replace runs of native kernels with graph kernels."""

from __future__ import annotations

import inspect
import json
from collections.abc import Iterator, Sequence

from lite.arguments import DELEGATE_TYPES
from lite.context import Context
from lite.delegate.partition import DelegationLog, Partition
from lite.errors import DelegateError, NotSupportedError
from lite.kernel import Kernel
from lite.kernels.base import NativeKernel
from lite.primitive import Primitive
from lite.scheduler import kahn_order
from lite.tensor import Tensor

RUNTIME_SHAPES_REASON = "its output shapes are computed from input data at every predict; it runs natively"


class Delegate:
    """Base class of delegates (MindSpore Lite's ``Delegate``).

    ``init()`` checks the device and takes resources; raise ``lite.NotSupportedError``
    to decline, and the model runs without this delegate. ``build(model)`` walks the
    topologically sorted kernels of a ``DelegateModel`` and calls ``model.replace`` for
    each run it takes over.

    A delegate is a factory: it holds options, and one instance may build many models, even
    at once (``ModelParallelRunner`` shares it between its copies). What a build makes, its
    graph kernels, belongs to that model (``Model.graph_kernels()``); keep nothing of a build
    on the delegate. ``init()`` runs before every build, so it must be idempotent.

    Weights: after every kernel's ``prepare()``, the model releases the constant data no
    kernel reads any more. A graph kernel takes (copies, converts, uploads) the weights it
    needs in ``prepare()``, or names the constants it reads later in ``lite.Kernel``'s
    ``constants`` argument.

    Ahead of time (optional, like ExecuTorch's ``preprocess``): a delegate that overrides
    ``save_graph_kernel`` and ``load_graph_kernel`` can have its graph kernels compiled on a host
    (``lite-convert model.onnx -o model.lite --delegate NAME``) and stored in the ``.lite`` file;
    a build on the device then loads them without compiling. See ``save_graph_kernel``.
    """

    def init(self) -> None:
        """Checks the device; raises NotSupportedError to decline."""

    def build(self, model: DelegateModel) -> None:
        """Replaces runs of supported kernels with graph kernels."""
        raise NotImplementedError(f"{type(self).__name__}.build")

    def fingerprint(self) -> str:
        """A text that changes whenever this delegate's options would change what it builds or how
        fast that runs; measured placement keys its cache of timings on it.

        The default: the class and its public attributes that are plain data (text, numbers,
        booleans, None, and lists, tuples and dicts of them). Override it to add what those miss
        (a tuning database's contents, a driver version).
        """
        options = {name: value for name, value in sorted(vars(self).items())
                   if not name.startswith("_") and _plain(value)}
        return f"{type(self).__module__}.{type(self).__qualname__}{json.dumps(options, sort_keys=True, default=str)}"

    # ---- ahead of time (optional) ----------------------------------------------------------------

    def blob_target(self) -> str:
        """What this delegate's saved graph kernels are built for: its target, the library versions
        and whatever else a blob depends on. Stored beside each blob and handed back to
        ``load_graph_kernel``, which decides whether the blob can run here. Default: ``fingerprint()``.
        """
        return self.fingerprint()

    def save_graph_kernel(self, kernel: Kernel) -> bytes | None:
        """Ahead of time: the bytes from which ``load_graph_kernel`` re-creates ``kernel`` without
        compiling (a compiled library, a serialized graph, converted weights), or None when this
        kernel cannot be saved. Called after the kernel's ``prepare()``, by ``lite-convert
        --delegate``. The default saves nothing: the delegate compiles at every build, as before.
        """
        return None

    def load_graph_kernel(self, blob: memoryview, target: str, kernels: list[Kernel], inputs: list[Tensor],
                          outputs: list[Tensor], model: DelegateModel) -> Kernel:
        """Re-creates a saved graph kernel for the native ``kernels`` it covers, without compiling.

        ``blob`` is what ``save_graph_kernel`` returned (read-only; its sha256 was checked, but the
        file is untrusted: parse it defensively) and ``target`` what ``blob_target()`` said then;
        ``inputs``/``outputs`` are the partition's boundary tensors, as ``create_graph_kernel``
        gets them. The runtime puts the kernel in place and calls its ``prepare()`` as usual.

        Raises:
            lite.NotSupportedError: the blob cannot run here (another target, another library
                version); the partition's nodes then build as if there were no blob (this
                delegate's ``build()`` may compile them, or they run natively), with the reason
                in ``Model.partition_report()``. Any other error is treated as a corrupt blob:
                the same fallback, or a DelegateError with ``Context(fallback=False)``.
        """
        raise NotSupportedError(f"{type(self).__name__} loads no saved graph kernels")


DELEGATE_TYPES.append(Delegate)  # what lite.arguments checks delegates against


class DelegateModel(Sequence):
    """The sorted kernels a delegate may take over (native ones, and earlier graph kernels).

    Indexing, ``len`` and iteration see the current kernel list; ``replace`` changes it.
    """

    def __init__(self, kernels: list[Kernel], inputs: list[Tensor], outputs: list[Tensor],
                 delegate: Delegate, log: DelegationLog, context: Context):
        self._kernels = kernels
        self._delegate = delegate
        self._log = log
        self.inputs = list(inputs)
        self.outputs = list(outputs)
        self.context = context  # the model's Context (e.g. thread_num for the graph kernels)
        self._names_given = 0

    def __len__(self) -> int:
        return len(self._kernels)

    def __getitem__(self, index):
        return self._kernels[index]

    def __iter__(self) -> Iterator[Kernel]:
        return iter(list(self._kernels))

    @property
    def kernels(self) -> list[Kernel]:
        return self._kernels

    def kernel_name(self, prefix: str) -> str:
        """``prefix_0``, ``prefix_1``, ...: a fresh graph kernel name for each call in this build."""
        name = f"{prefix}_{self._names_given}"
        self._names_given += 1
        return name

    def get_primitive(self, kernel: Kernel) -> Primitive | None:
        """The primitive of a native kernel (None for a graph kernel)."""
        return kernel.primitive if isinstance(kernel, NativeKernel) else None

    def subgraph_inputs(self, start: int, end: int) -> list[Tensor]:
        """Non-const tensors read in ``[start, end)`` but produced outside it, in first-read order."""
        return read_from_outside(self._run(start, end))

    def subgraph_outputs(self, start: int, end: int) -> list[Tensor]:
        """Tensors produced in ``[start, end)`` that a later kernel reads or that are model outputs."""
        run = self._run(start, end)
        later = {t for k in self._kernels[end:] for t in k.inputs if t is not None}
        model_outputs = set(self.outputs)
        return [t for k in run for t in k.outputs if t in later or t in model_outputs]

    def replace(self, start: int, end: int, graph_kernel: Kernel) -> int:
        """Replaces ``kernels[start:end]`` with ``graph_kernel``; returns its index.

        Raises:
            DelegateError: bad indices, a run that is empty or holds a graph kernel, or a
                graph kernel that does not produce the run's outputs, lists an output the run
                does not produce, or reads tensors not available before ``start``.
        """
        run = self._run(start, end)
        if not isinstance(graph_kernel, Kernel):
            self._fail(f"replace() needs a lite.Kernel, got {type(graph_kernel).__name__}")
        foreign = [k.name for k in run if not isinstance(k, NativeKernel)]
        if foreign:
            self._fail(f"replace({start}, {end}) covers graph kernels {foreign}, which belong to another delegate")
        runtime_shaped = [k.name for k in run if k.runtime_shapes]
        if runtime_shaped:
            self._fail(f"replace({start}, {end}) covers {runtime_shaped}, whose output shapes are computed from "
                       "input data at every predict; they run natively")
        missing = [t.name for t in self.subgraph_outputs(start, end) if t not in set(graph_kernel.outputs)]
        if missing:
            self._fail(f"graph kernel {graph_kernel.name!r} does not produce {missing}, which are read later")
        produced = {t for k in run for t in k.outputs}
        foreign = [t.name for t in graph_kernel.outputs if t is None or t not in produced]
        if foreign:
            self._fail(f"graph kernel {graph_kernel.name!r} lists {foreign} among its outputs, which kernels "
                       f"{start}..{end - 1} do not produce (model inputs, constants or other kernels' outputs)")
        self._check_available(start, graph_kernel)
        self._kernels[start:end] = [graph_kernel]
        self._log.partitions[graph_kernel] = Partition(self._delegate, graph_kernel, list(run))
        return start

    def reject(self, kernel: Kernel, reason: str) -> None:
        """Records why this delegate does not take ``kernel`` (shown by ``partition_report``)."""
        if isinstance(kernel, NativeKernel):
            self._log.note(kernel, self._delegate, reason)

    def _run(self, start: int, end: int) -> list[Kernel]:
        if not (isinstance(start, int) and isinstance(end, int) and 0 <= start < end <= len(self._kernels)):
            self._fail(f"run [{start}, {end}) is not a non-empty range of the {len(self._kernels)} kernels")
        return self._kernels[start:end]

    def _check_available(self, start: int, graph_kernel: Kernel) -> None:
        available = set(self.inputs) | {t for k in self._kernels[:start] for t in k.outputs}
        for tensor in graph_kernel.inputs:
            if tensor is None or tensor.is_const or tensor.value_known or tensor in available:
                continue
            self._fail(f"graph kernel {graph_kernel.name!r} reads {tensor.name!r}, "
                       f"which is not available before kernel {start}")

    def _fail(self, message: str):
        raise DelegateError(f"delegate {type(self._delegate).__name__}: {message}")

    def _reorder(self, order: list[int]) -> None:
        self._kernels[:] = [self._kernels[i] for i in order]


class SimpleDelegate(Delegate):
    """A delegate written as two methods (TFLite's SimpleDelegateInterface).

    Subclasses implement ``is_supported`` and ``create_graph_kernel``; ``build`` finds
    the partitions: runs of supported kernels, after re-sorting the kernels (still
    topologically) so supported kernels on parallel branches share a partition when
    that gives fewer partitions.

    Graph kernels are created in execution order. ``create_graph_kernel`` may take a fourth
    argument, the build's ``DelegateModel``: its ``context`` (the model's ``lite.Context``) and
    ``kernel_name(prefix)`` serve that build only.

    Attributes:
        min_nodes_per_partition: smaller runs stay native.
        max_partitions: keep only the largest this many partitions (0 = unlimited).
    """

    min_nodes_per_partition: int = 1
    max_partitions: int = 0

    def is_supported(self, kernel: Kernel, primitive: Primitive) -> bool | str:
        """True to take ``kernel``; False or a reason string to leave it native."""
        raise NotImplementedError(f"{type(self).__name__}.is_supported")

    def create_graph_kernel(self, kernels: list[Kernel], inputs: list[Tensor],
                            outputs: list[Tensor]) -> Kernel:
        """Returns one kernel computing ``outputs`` from ``inputs`` as ``kernels`` would.

        An override may add a fourth parameter to receive the build's ``DelegateModel``.
        """
        raise NotImplementedError(f"{type(self).__name__}.create_graph_kernel")

    def build(self, model: DelegateModel) -> None:
        supported = self._supported_kernels(model)
        runs = _runs(model, supported)
        grouped = grouped_order(model, supported)
        if len(_runs_in(grouped, model, supported)) < len(runs):
            model._reorder(grouped)
            runs = _runs(model, supported)
        chosen = sorted(self._chosen(model, runs))
        made = [self._create(model, start, end) for start, end in chosen]
        for (start, end), graph_kernel in reversed(list(zip(chosen, made, strict=True))):
            model.replace(start, end, graph_kernel)  # last first, so earlier indices stay valid

    def _create(self, model: DelegateModel, start: int, end: int) -> Kernel:
        arguments = [list(model[start:end]), model.subgraph_inputs(start, end), model.subgraph_outputs(start, end)]
        if takes_build_argument(self.create_graph_kernel):
            arguments.append(model)
        return self.create_graph_kernel(*arguments)

    def _supported_kernels(self, model: DelegateModel) -> set[Kernel]:
        supported = set()
        for kernel in model:
            primitive = model.get_primitive(kernel)
            if primitive is None:
                continue
            if kernel.runtime_shapes:
                model.reject(kernel, RUNTIME_SHAPES_REASON)
                continue
            verdict = self.is_supported(kernel, primitive)
            if verdict is True:
                supported.add(kernel)
            else:
                model.reject(kernel, verdict if isinstance(verdict, str) and verdict else "not supported")
        return supported

    def _chosen(self, model: DelegateModel, runs: list[tuple[int, int]]) -> list[tuple[int, int]]:
        chosen = []
        for start, end in sorted(runs, key=lambda r: (r[0] - r[1], r[0])):
            if end - start < self.min_nodes_per_partition:
                reason = f"in a run of {end - start} node(s), below min_nodes_per_partition"
            elif self.max_partitions and len(chosen) >= self.max_partitions:
                reason = f"partition beyond max_partitions={self.max_partitions}"
            else:
                chosen.append((start, end))
                continue
            for kernel in model[start:end]:
                model.reject(kernel, reason)
        return chosen


def _runs(model: DelegateModel, supported: set[Kernel]) -> list[tuple[int, int]]:
    return _runs_in(range(len(model)), model, supported)


def _runs_in(order, model: DelegateModel, supported: set[Kernel]) -> list[tuple[int, int]]:
    runs, start = [], None
    flags = [model[i] in supported for i in order] + [False]
    for position, flag in enumerate(flags):
        if flag and start is None:
            start = position
        elif not flag and start is not None:
            runs.append((start, position))
            start = None
    return runs


def read_from_outside(kernels: list[Kernel]) -> list[Tensor]:
    """Non-const tensors ``kernels`` read but do not produce, in first-read order."""
    produced = {t for k in kernels for t in k.outputs}
    seen: dict[Tensor, None] = {}
    for kernel in kernels:
        for tensor in kernel.inputs:
            if tensor is not None and not tensor.is_const and tensor not in produced:
                seen.setdefault(tensor, None)
    return list(seen)


def saves_graph_kernels(delegate: Delegate) -> bool:
    """True when ``delegate`` has the ahead-of-time half (overrides both save and load)."""
    kind = type(delegate)
    return (kind.save_graph_kernel is not Delegate.save_graph_kernel
            and kind.load_graph_kernel is not Delegate.load_graph_kernel)


def _plain(value: object) -> bool:
    if value is None or isinstance(value, (str, int, float, bool)):
        return True
    if isinstance(value, (list, tuple)):
        return all(_plain(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _plain(v) for k, v in value.items())
    return False


def takes_build_argument(method) -> bool:
    """Whether ``create_graph_kernel`` takes the build's DelegateModel as a fourth argument."""
    parameters = inspect.signature(method).parameters.values()
    kinds = [p.kind for p in parameters]
    return inspect.Parameter.VAR_POSITIONAL in kinds or len(kinds) >= 4


def grouped_order(model: DelegateModel, supported: set[Kernel]) -> list[int]:
    """A topological order of ``model`` that keeps supported kernels together.

    Kahn's algorithm picking, among ready kernels: unsupported ones first, then
    supported ones that an unsupported kernel waits on, then the rest (file order
    breaks ties). Unsupported work thus runs as early as it can, and the supported
    kernels after it are not split by it.
    """
    kernels = list(model)
    producer = {t: i for i, k in enumerate(kernels) for t in k.outputs}
    deps = [{producer[t] for t in k.inputs if t in producer} for k in kernels]
    feeds_unsupported = _ancestors(deps, [i for i, k in enumerate(kernels) if k not in supported])

    def rank(i: int) -> tuple[int, int]:
        return (0 if kernels[i] not in supported else 1 if i in feeds_unsupported else 2, i)

    return kahn_order(deps, rank)


def _ancestors(deps: list[set[int]], roots: list[int]) -> set[int]:
    seen: set[int] = set()
    stack = [d for r in roots for d in deps[r]]
    while stack:
        i = stack.pop()
        if i not in seen:
            seen.add(i)
            stack.extend(deps[i])
    return seen
