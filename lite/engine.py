"""Engine: what one build of a model made, and the policies that run it.

``Model`` is the facade users call; the Engine holds its tensors and kernels and carries
out the build steps (schedule, delegation, prepare with fallback, weight release, memory
planning), shape changes (propagation, kernel ``resize()`` with fallback) and runs.
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Callable
from functools import partial

import numpy as np

from lite.aligned import aligned_array
from lite.blocking import member
from lite.context import Context
from lite.delegate import Delegate, DelegateModel
from lite.delegate.partition import DelegationLog, Partition, logger
from lite.errors import DelegateError, KernelError, LiteError, NotSupportedError
from lite.files import MappedModelFile
from lite.fusion import FusionPlan, fuse
from lite.kernel import Kernel, charge, execute_charged
from lite.kernels.base import NativeKernel, Workspace
from lite.kernels.parallel import KernelThreads
from lite.memory import MemoryPlan
from lite.scheduler import schedule
from lite.schema.graph import GraphDef
from lite.shapes import FoldedValues, blame, classify, constant_folded, infer_at_run, propagate
from lite.tensor import Tensor
from lite.threads import limit_blas_threads, load_monitor
from lite.weight_pages import ConstantPages, packed_by_all


class WrongGraphOutput(DelegateError):
    """A graph kernel wrote an output of the wrong shape or dtype (or none), or wrote into an input."""


class Engine:
    """The tensors, kernels (native and delegated) and memory plan of one built model.

    Attributes:
        inputs, outputs: the graph's input and output tensors.
        kernels: what runs, in order (graph kernels and native kernels).
        shape_kernels: every native kernel in topological order (shape inference runs on them).
        folded: native kernels computed from shapes alone (never in ``kernels``).
        runtime_shaped: native kernels whose output shapes depend on values computed from the
            input data; they infer their shapes, and get their output arrays, at every predict.
        log: the delegates' partitions and reasons.
        shapes_dirty: input shapes changed since the last propagation.
    """

    def __init__(self, graph: GraphDef, context: Context, mapped: MappedModelFile | None = None) -> None:
        self.context = context
        self.tensors = [Tensor.from_def(t) for t in graph.tensors]
        # the file's pages of constants the kernels packed leave memory (``lite.weight_pages``)
        self.pages = ConstantPages(mapped, self.tensors) if mapped is not None else None
        self.inputs = [self.tensors[i] for i in graph.inputs]
        self.outputs = [self.tensors[i] for i in graph.outputs]
        self.shape_kernels = schedule(graph, self.tensors)
        self.node_kernels = {k.node_index: k for k in self.shape_kernels}
        self.embedded = graph.partitions  # delegate partitions compiled ahead of time (lite.delegate.saved)
        workspace = Workspace(context.memory_limit)  # kernels run one at a time: one scratch pool
        self.threads = KernelThreads(context.thread_num)
        self.crew_worked = True  # NOTE: whether the last run gave the crew jobs (then the next wakes it first)
        for kernel in self.shape_kernels:
            kernel.workspace, kernel.threads = workspace, self.threads
        folded, runtime_shaped = classify(self.shape_kernels)
        self.folded, self.runtime_shaped = set(folded), set(runtime_shaped)
        self.constant_folded = constant_folded(self.shape_kernels, self.folded)
        self._note_weight_sources()
        self.deferred = self._read_as_codes()
        self.kernels: list[Kernel] = [k for k in self.shape_kernels if k not in self.folded]
        self.log = DelegationLog()
        self.placement: list = []  # measured placement's candidates (lite.delegate.placement.Candidate)
        self.fusion: FusionPlan | None = None  # what CPU fusion did (lite.fusion), to revert before fusing again
        self.readers_memo: tuple = (None, {}, set())  # (what it was made for, _constant_readers' answer)
        self.measured = False  # measured placement ran (it builds delegates itself: saved partitions are not loaded)
        self.ready: set[Kernel] = set()  # native kernels prepared before the build's prepare
        self.memory = MemoryPlan()
        self.borrowing: frozenset[Tensor] = frozenset()  # inputs only graph kernels read (``feed``)
        for tensor in self.inputs:
            tensor._on_reshape = _weak_callback(self._input_reshaped)  # NOTE: inputs must not keep the model alive
        self.shapes_dirty = any(-1 in t.shape for t in self.inputs)
        self.folded_values = FoldedValues(context.memory_limit)
        if not self.shapes_dirty:
            self._propagate()

    # ---- build --------------------------------------------------------------------------

    def delegate(self, delegate: Delegate) -> None:
        """Lets ``delegate`` replace runs of kernels: its ``init()``, then its partitions saved in the
        file (``lite.delegate.saved``) or, when it has none or one could not be used, its ``build()``."""
        from lite.delegate import saved as embedded

        if self.init_delegate(delegate):
            view = DelegateModel(self.kernels, self.inputs, self.outputs, delegate, self.log, self.context)
            if not (self.embedded and embedded.load(self, delegate, view)):
                self.build_delegate(delegate, view)

    def note_unused_blobs(self) -> None:
        """Gives every saved partition no delegate loaded its reason (after all delegates built)."""
        from lite.delegate import saved as embedded

        names = {type(d).__name__ for d in self.context.delegates}

        def reason(partition) -> str:
            if self.measured:
                return "measured placement times the delegates' own builds (saved partitions load with " \
                       "placement='priority')"
            if partition.delegate not in names:
                return f"no {partition.delegate} in the Context"
            return f"{partition.delegate} declined in init()"

        embedded.note_unclaimed(self, reason)

    def place_measured(self, model_digest: str) -> None:
        """Measured placement (``lite.delegate.placement``): each claimed partition runs where it timed fastest."""
        from lite.delegate.placement import Placer, check_measurable

        why_not = check_measurable(self)
        if why_not:
            logger.warning("%s", why_not)
            for delegate in self.context.delegates:
                self.delegate(delegate)
            return
        self.placement = Placer(self, model_digest).run()
        self.measured = True

    def init_delegate(self, delegate: Delegate) -> bool:
        """Runs ``delegate.init()``; False (and a note on every kernel) when it declined."""
        try:
            delegate.init()
            return True
        except NotSupportedError as exc:
            logger.warning("delegate %s declined: %s; its kernels run natively", type(delegate).__name__, exc)
            for kernel in self.kernels:
                if kernel not in self.log.partitions:
                    self.log.note(kernel, delegate, f"declined in init(): {exc}")
            return False
        except Exception as exc:
            raise DelegateError(f"delegate {type(delegate).__name__} failed in init(): {type(exc).__name__}: "
                                f"{exc}") from exc

    @staticmethod
    def build_delegate(delegate: Delegate, view: DelegateModel) -> None:
        """Runs ``delegate.build(view)``; any failure becomes a DelegateError naming the delegate."""
        name = type(delegate).__name__
        try:
            delegate.build(view)
        except DelegateError as exc:
            if name in str(exc):
                raise
            raise DelegateError(f"delegate {name} failed in build(): {exc}") from exc
        except Exception as exc:
            raise DelegateError(f"delegate {name} failed in build(): {type(exc).__name__}: {exc}") from exc

    def prepare(self) -> None:
        """Prepares every kernel (a failing graph kernel falls back), releases dead weights, plans."""
        prepared: list[Kernel] = []
        readers, held = self._constant_readers()
        unplanned = set()  # NOTE: convolutions a blocked chain may run: the chain packs their weights itself
        for kernel in self.kernels:
            partition = self.log.partitions.get(kernel)
            if partition is None:
                chained = kernel.type == "Conv2DFusion" and kernel not in self.ready and member(kernel) is not None
                self._prepare_native(kernel, plan=not chained)
                if chained:
                    unplanned.add(kernel)
                prepared.append(kernel)
                self._release_packed(kernel, readers, held)
            elif self._prepare_graph_kernel(partition):
                prepared.append(kernel)
            else:
                prepared.extend(partition.covered)
        self.kernels = prepared
        self._fuse()
        for kernel in self.kernels:  # NOTE: those left running alone (a fused kernel resized its own parts)
            if kernel in unplanned and not self.shapes_dirty and kernel not in self.runtime_shaped:
                kernel.resize()
        self._release_unused_constants()
        self._release_pages()
        if not self.shapes_dirty:
            self.plan()
        limit_blas_threads(self.context.thread_num)  # NOTE: the first call scans the libraries (ms): not in a predict

    def _constant_readers(self) -> tuple[dict[Tensor, list[Kernel]], set[Tensor]]:
        """({constant: the kernels reading it}, the constants whose pages stay: what partitions
        (their fallback), shape inference and folding read, and model outputs). Kept while the
        running kernels and partitions stay the same (every resize asks again)."""
        if self.pages is None:
            return {}, set()
        key = (id(self.kernels), len(self.kernels), len(self.log.partitions), id(self.fusion))
        if self.readers_memo[0] != key:
            readers: dict[Tensor, list[Kernel]] = {}
            for kernel in self.kernels:
                for tensor in {*kernel.inputs, *kernel.constants} - {None}:
                    readers.setdefault(tensor, []).append(kernel)
            self.readers_memo = key, readers, self._held_constants()
        return self.readers_memo[1], self.readers_memo[2]

    def _held_constants(self) -> set[Tensor]:
        held = {t for p in self.log.partitions.values() for t in p.constants()} | set(self.outputs)
        for kernel in self.shape_kernels:  # NOTE: a deferred weight's codes are read again only to compute it
            if kernel not in self.deferred:
                held.update(kernel.inputs if kernel in self.folded else kernel.shape_inputs())
        return held

    def _release_packed(self, kernel: Kernel, readers: dict[Tensor, list[Kernel]], held: set[Tensor]) -> None:
        """Releases the pages of the constants ``kernel`` packed that every reader has packed (a reader
        not prepared yet has no plan, so it has packed nothing)."""
        if self.pages is not None:
            self.pages.release(t for t in kernel.packed_constants()
                               if t not in held and packed_by_all(t, readers.get(t, [])))

    def _release_repacked(self, readers: dict[Tensor, list[Kernel]], held: set[Tensor], tensor: Tensor) -> None:
        """Releases the pages of ``tensor`` once more when every reader (``readers``, ``held`` as
        ``_constant_readers`` gives them) has packed it: a fused kernel packing it again faulted them in."""
        if tensor not in held and packed_by_all(tensor, readers.get(tensor, [])):
            self.pages.release_again([tensor])

    def _release_pages(self) -> None:
        """Releases the pages of every constant no running kernel reads in its original layout."""
        if self.pages is not None:
            self.pages.release_unread(self.kernels, self._constant_readers()[1])

    def _fuse(self) -> None:
        """Fuses native kernels that only native kernels read (``lite.fusion``), resized when shapes are known."""
        native = {k for k in self.kernels if k not in self.log.partitions and k not in self.runtime_shaped}
        before = set(self.kernels)
        if self.fusion is not None:
            self.fusion.revert()
        self.fusion = fuse(self.kernels, self.shape_kernels, self.outputs, native)
        self.kernels = self.fusion.running
        if not self.shapes_dirty:
            hook = None if self.pages is None else partial(self._release_repacked, *self._constant_readers())
            for kernel in self.kernels:
                if kernel not in before:
                    if hook is not None and hasattr(kernel, "packed_hook"):
                        kernel.packed_hook = hook
                    kernel.resize()

    def prepare_native_once(self, kernel: Kernel) -> None:
        """``_prepare_native``, which the build's own prepare then skips (measured placement's native run)."""
        self._prepare_native(kernel)
        self.ready.add(kernel)

    def _prepare_native(self, kernel: Kernel, plan: bool = True) -> None:
        """prepare(), then (``plan``) resize() when shapes are known: native kernels plan for shapes there."""
        if kernel in self.ready:
            return
        with blame(kernel, "prepare failed"):
            kernel.prepare()
            if plan and not self.shapes_dirty and kernel not in self.runtime_shaped:
                kernel.resize()

    def _prepare_graph_kernel(self, partition: Partition) -> bool:
        """Prepares a graph kernel; False when it failed and its native kernels run instead."""
        partition.remember_weights()
        try:
            partition.kernel.prepare()
            return True
        except Exception as exc:
            self.log.fall_back(partition, "prepare", exc, self.context.fallback)
        for native in partition.covered:
            self._prepare_native(native)
        return False

    def _release_unused_constants(self) -> None:
        """Drops const data no kernel can read any more (replaced or dead kernels' weights)."""
        needed = {t for k in self.kernels for t in [*k.inputs, *k.constants]}
        for kernel in self.shape_kernels:  # what shape inference and folding read on resize
            needed.update(kernel.inputs if kernel in self.folded else kernel.shape_inputs())
        needed.update(self.outputs)
        for tensor in self.tensors:
            if tensor.is_const and tensor not in needed:
                tensor.data = None
        for partition in self.log.partitions.values():
            partition.forget_weights(needed)

    # ---- shapes and memory ---------------------------------------------------------------

    def _input_reshaped(self) -> None:
        self.shapes_dirty = True

    def plan(self) -> None:
        """Gives every activation its array (outputs get arrays of their own)."""
        # NOTE: runtime-shaped kernels' outputs get arrays when they run, but what they read stays alive
        unplanned = frozenset(t for k in self.runtime_shaped for t in k.outputs)
        keep = {t for t in self.outputs if not t.value_known and t not in self.inputs and t not in unplanned}
        self.memory.apply(self.kernels, keep, self.context.memory_limit, unplanned)
        self.borrowing = self._read_by_graph_kernels_only()
        for tensor in self.inputs:  # NOTE: a view borrowed while a graph kernel read it, now read natively
            data = tensor.data
            if tensor not in self.borrowing and data is not None and not data.flags.writeable \
                    and data.shape == tensor.shape:
                tensor.data = aligned_array(tensor.shape, tensor.dtype)
                np.copyto(tensor.data, data)

    def _read_by_graph_kernels_only(self) -> frozenset[Tensor]:
        """The graph inputs that only graph kernels read (and that are not graph outputs)."""
        native_readers = {t for k in self.kernels if k not in self.log.partitions for t in k.inputs}
        read = {t for k in self.kernels for t in k.inputs}
        return frozenset(t for t in self.inputs if t in read and t not in native_readers and t not in self.outputs)

    def feed(self, tensor: Tensor, array: np.ndarray) -> None:
        """Gives the input ``tensor`` the data of ``array``: a read-only view of it (no copy) where only
        graph kernels read the input and ``array`` fits it exactly, else a copy (``set_data_from_numpy``).

        Graph kernels read their inputs read-only (``execute_graph_kernel``), so onnxruntime or a
        device reads the caller's array as onnxruntime's own ``run`` does. Native kernels get a copy:
        the compiled kernels are specialized for writable arrays.
        """
        if tensor not in self.borrowing or not tensor.borrow(array):
            tensor.set_data_from_numpy(array)

    def apply_shapes(self) -> None:
        """Propagates the input shapes, re-plans memory and resizes every kernel.

        A graph kernel failing in ``resize()`` falls back to its native kernels (or raises
        DelegateError when ``Context.fallback`` is off).
        """
        if self.pages is not None:
            self.pages.check_unchanged()
            self.pages.forget_released()  # NOTE: a resize may read released constants, faulting their pages in
        self.crew_worked = True  # NOTE: new shapes may give the crew jobs: the next run wakes it
        self._propagate()
        self.plan()
        readers, held = self._constant_readers()
        fallen = []
        for kernel in list(self.kernels):
            partition = self._resize(kernel)
            if partition is not None:
                fallen.append(partition)
            else:
                self._release_packed(kernel, readers, held)  # NOTE: as it goes: the peak holds one copy
        if fallen:
            self._swap_in_natives(fallen)
        self.shapes_dirty = False
        self._release_pages()

    def _note_weight_sources(self) -> None:
        """Tells each MatMulFusion whose constant b is a folded DequantizeLinear (a weight-only model's weight)
        which one: its plans may read the codes instead (``lite.kernels.matmul.weight_codes``)."""
        sources = {k.outputs[0]: k for k in self.constant_folded if k.type == "DequantizeLinear"}
        for kernel in self.shape_kernels:
            if kernel.type == "MatMulFusion" and kernel.inputs[1] in sources:
                kernel.weight_source = sources[kernel.inputs[1]]

    def _read_as_codes(self) -> frozenset[NativeKernel]:
        """The folded DequantizeLinear kernels of 4-bit weights that only native products read, as their
        codes (``weight_codes``): their float32 weights are not computed (four to eight times the codes'
        bytes), unless a product that cannot read the codes asks (``MatMulFusion.materialize_weight``).
        Only without delegates, which read the float32 weight when they build."""
        from lite.kernels import fast
        from lite.kernels.matmul import weight_codes

        if self.context.delegates or not fast.enabled():
            return frozenset()
        readers: dict[Tensor, list[NativeKernel]] = {}
        for kernel in self.shape_kernels:
            for tensor in kernel.inputs:
                readers.setdefault(tensor, []).append(kernel)
        outputs = set(self.outputs)
        return frozenset(
            source for source in self.constant_folded
            if source.type == "DequantizeLinear" and source.outputs[0] not in outputs
            and all(r.type == "MatMulFusion" and r.weight_source is source and r.inputs[0] is not source.outputs[0]
                    for r in readers.get(source.outputs[0], [None]))
            and weight_codes(source) is not None)

    def _propagate(self) -> None:
        """Shapes through every kernel; the folded values of input shapes seen before come back from
        ``folded_values``."""
        propagate(self.shape_kernels, self.folded, self.context.memory_limit, self.folded_values,
                  tuple(t.shape for t in self.inputs), self.constant_folded, self.deferred)

    def _resize(self, kernel: Kernel) -> Partition | None:
        """Resizes one kernel; the partition it gave up, if a graph kernel failed."""
        partition = self.log.partitions.get(kernel)
        if partition is None:
            if kernel not in self.runtime_shaped:
                kernel.resize()
            return None
        try:
            kernel.resize()
        except Exception as exc:
            self.log.fall_back(partition, "resize", exc, self.context.fallback)
            return partition
        return None

    def _swap_in_natives(self, partitions: list[Partition]) -> None:
        for partition in partitions:
            at = self.kernels.index(partition.kernel)
            self.kernels[at : at + 1] = partition.covered
            for native in partition.covered:
                self._prepare_native(native)  # NOTE: shapes are dirty here, so only prepare() runs
        self.plan()
        for partition in partitions:
            for native in partition.covered:
                native.resize()

    # ---- running -----------------------------------------------------------------------

    def choose_threads(self) -> None:
        """The crew (or BLAS's own pool) on idle cores; the kernels' dynamic chunks when other processes
        kept them busy at the last sample (``LoadMonitor.sample_later`` after each run)."""
        dynamic = self.context.thread_num > 1 and load_monitor().latest()
        self.threads.dynamic = dynamic
        self.threads.staff()  # NOTE: before BLAS may split a product into more jobs than the crew has threads
        limit_blas_threads(1 if dynamic else self.context.thread_num)

    def wake_threads(self) -> None:
        """Wakes the crew's sleeping workers where this run will give them work (more than one
        thread, idle cores at the last sample), so they are up by the first kernel.

        After an idle spell the workers sleep; a predict's first job then waited for one to be
        scheduled. Waking them as the predict starts (before the inputs are copied in) overlaps
        their start with that copy (measured: docs/performance.md, the crew). Not where the run
        starts with a delegate's graph kernel: the woken workers would spin beside the delegate's
        own threads.
        """
        if self.context.thread_num > 1 and self.kernels and self.kernels[0] not in self.log.partitions \
                and self.crew_worked and not load_monitor().latest():
            self.threads.wake()

    def run(self, profile: dict[Kernel, float] | None) -> None:
        """Executes every kernel; any failure becomes a LiteError naming the kernel."""
        self.choose_threads()
        posted = self.threads.posted()
        kernel = None
        runtime_shaped, limit, partitions = self.runtime_shaped, self.context.memory_limit, self.log.partitions
        try:
            # NOTE: IEEE results (NaN, inf) as onnxruntime gives them, no warnings
            with np.errstate(all="ignore"), self.threads.lent():
                if profile is None and not runtime_shaped and not partitions:
                    for kernel in self.kernels:  # NOTE: nothing to check per kernel (a loop of small ops)
                        kernel.execute()
                    return
                for kernel in self.kernels:
                    start = time.perf_counter() if profile is not None else 0.0
                    if kernel in runtime_shaped:
                        infer_at_run(kernel, limit)
                    if kernel in partitions:
                        self.threads.rest()  # NOTE: the delegate's own threads need the cores
                        self.execute_graph_kernel(partitions[kernel])
                        if profile is not None:
                            charge(profile, kernel, time.perf_counter() - start)
                    elif profile is None:
                        kernel.execute()
                    else:
                        execute_charged(kernel, profile, start)
        except WrongGraphOutput:
            raise
        except Exception as exc:
            raise self._execute_error(kernel, exc) from exc
        finally:
            if self.context.thread_num > 1:
                # NOTE: a run that posted the crew nothing (small ops only) wakes no worker next time: after
                # an idle spell that wake cost such a model more than its run saved (docs/performance.md)
                self.crew_worked = self.threads.posted() != posted
                load_monitor().sample_later()  # NOTE: for the next run, on a helper thread: not in this one

    def _execute_error(self, kernel: Kernel, exc: Exception) -> LiteError:
        partition = self.log.partitions.get(kernel)
        if partition is not None:
            return partition.error("execute", exc)
        if isinstance(exc, LiteError):
            return exc
        return KernelError(f"kernel {kernel.name!r} ({kernel.type}) failed: {type(exc).__name__}: {exc}")

    def execute_graph_kernel(self, partition: Partition) -> None:
        """Runs a graph kernel on read-only inputs, then checks what it wrote.

        A delegate's code must not change the tensors it reads: native kernels after it read
        them too, and a model input's array holds the user's data. A write into an input array
        therefore raises, and an input whose array was replaced gets its array back.
        """
        kernel = partition.kernel
        arrays = [None if t is None else t.data for t in kernel.inputs]
        locked = list({id(a): a for a in arrays if a is not None and a.flags.writeable}.values())
        for array in locked:
            array.flags.writeable = False
        try:
            kernel.execute()
        except ValueError as exc:
            if "read-only" in str(exc):
                raise self._misbehaved(partition, f"wrote into an input ({exc}); graph kernels write only "
                                                  "their outputs") from exc
            raise
        finally:
            for array in locked:
                array.flags.writeable = True
        rebound = [t.name for t, a in zip(kernel.inputs, arrays, strict=True) if t is not None and t.data is not a]
        for tensor, array in zip(kernel.inputs, arrays, strict=True):
            if tensor is not None:
                tensor.data = array
        if rebound:
            raise self._misbehaved(partition, f"replaced the arrays of its inputs {rebound}; graph kernels write "
                                              "only their outputs")
        self._check_graph_outputs(partition)  # NOTE: before a later kernel reads a wrong output

    @staticmethod
    def _misbehaved(partition: Partition, what: str) -> WrongGraphOutput:
        return WrongGraphOutput(f"delegate {partition.delegate_name}: graph kernel {partition.kernel.name!r} {what}")

    def _check_graph_outputs(self, partition: Partition) -> None:
        for tensor in partition.kernel.outputs:
            data = tensor.data
            if data is None or data.shape != tensor.shape or data.dtype != tensor.dtype:
                got = "nothing" if data is None else f"{data.dtype.name}{list(data.shape)}"
                raise self._misbehaved(partition, f"wrote {got} to {tensor.name!r}, "
                                                  f"expected {tensor.dtype.name}{list(tensor.shape)}")

    # ---- reports -----------------------------------------------------------------------

    def owner(self) -> dict[NativeKernel, Partition]:
        """The partition each delegated native kernel belongs to."""
        return {k: p for p in self.log.partitions.values() for k in p.covered}

    def graph_kernels(self) -> list[Kernel]:
        return [k for k in self.kernels if k in self.log.partitions]


def _weak_callback(method) -> Callable[[Tensor], None]:
    """A reshape callback calling ``method`` while its object lives, and nothing after."""
    reference = weakref.WeakMethod(method)

    def call(_tensor: Tensor) -> None:
        bound = reference()
        if bound is not None:
            bound()

    return call
