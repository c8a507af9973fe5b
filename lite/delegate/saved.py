"""Delegate partitions compiled ahead of time and stored in the ``.lite`` file (``lite-convert --delegate``).

At build, a delegate in the Context that finds its own partitions in the file loads them
(``Delegate.load_graph_kernel``) instead of building: no compiler runs. A partition whose blob
cannot be used (another target or library version, a corrupt blob, nodes another delegate took
first, no such delegate in the Context) leaves its nodes as they are: the delegate's own
``build()`` may take them, or they run natively. ``Model.partition_report()`` says, per node,
what happened to the blob covering it (the ``blob`` column).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable

from lite.delegate import Delegate, DelegateModel, read_from_outside, saves_graph_kernels
from lite.delegate.partition import Program
from lite.errors import DelegateError, NotSupportedError
from lite.kernel import Kernel
from lite.kernels.base import NativeKernel
from lite.scheduler import contiguous_order
from lite.schema.graph import PartitionDef


class Unusable(Exception):
    """A blob this build cannot use; the message says why."""


def load(engine: Program, delegate: Delegate, view: DelegateModel) -> bool:
    """Loads the file's partitions of ``delegate``; True when it had some and every one loaded."""
    mine = [p for p in engine.embedded if p.delegate == type(delegate).__name__]
    loaded = [_load_one(engine, delegate, view, p) for p in mine]
    return bool(mine) and all(loaded)


def note_unclaimed(engine: Program, reason_for: Callable[[PartitionDef], str]) -> None:
    """Marks the partitions no delegate looked at with ``reason_for(partition)``."""
    for partition in engine.embedded:
        covered = _covered(engine, partition)
        if not any(k in engine.log.blobs for k in covered):
            _note(engine, covered, f"not used: {reason_for(partition)}")


def describe(partition: PartitionDef) -> str:
    """``TVMDelegate tvm_0 (45.1 MB)``."""
    return f"{partition.delegate} {partition.name or 'partition'} ({len(memoryview(partition.blob)) / 1e6:.1f} MB)"


def _load_one(engine: Program, delegate: Delegate, view: DelegateModel, partition: PartitionDef) -> bool:
    covered = _covered(engine, partition)
    try:
        if not saves_graph_kernels(delegate):
            raise Unusable(f"{type(delegate).__name__} in this Context loads no saved graph kernels")
        kernels, start, end = _run(view, covered, partition)
        graph_kernel = _graph_kernel(engine, delegate, view, partition, kernels, start, end)
        view.replace(start, end, graph_kernel)
    except (Unusable, NotSupportedError) as exc:
        _note(engine, covered, f"not used: {exc}")
        return False
    except Exception as exc:
        if not engine.context.fallback:
            raise DelegateError(f"delegate {type(delegate).__name__}: the saved graph kernel {partition.name!r} "
                                f"failed to load: {type(exc).__name__}: {exc}") from exc
        _note(engine, covered, f"not used: the blob failed to load ({type(exc).__name__}: {exc})")
        return False
    _note(engine, covered, f"loaded: {describe(partition)}")
    return True


def _covered(engine: Program, partition: PartitionDef) -> list[NativeKernel | None]:
    by_node = engine.node_kernels
    return [by_node.get(i) for i in partition.nodes]


def _run(view: DelegateModel, covered: list[NativeKernel | None],
         partition: PartitionDef) -> tuple[list[Kernel], int, int]:
    """The covered kernels, contiguous in the kernel list (reordered if need be), and their range."""
    kernels = view.kernels
    if any(k is None or k not in kernels for k in covered):
        raise Unusable("some of its nodes are computed from shapes alone or already run elsewhere in this build")
    position = {k: i for i, k in enumerate(kernels)}
    ordered = sorted(covered, key=position.__getitem__)
    start = position[ordered[0]]
    if position[ordered[-1]] - start + 1 != len(ordered):
        order = contiguous_order(kernels, [ordered])
        if order is None:
            raise Unusable("its nodes cannot run as one contiguous partition in this build")
        kernels[:] = order
        start = kernels.index(ordered[0])
    return ordered, start, start + len(ordered)


def _graph_kernel(engine: Program, delegate: Delegate, view: DelegateModel, partition: PartitionDef,
                  kernels: list[Kernel], start: int, end: int) -> Kernel:
    inputs = [engine.tensors[i] for i in partition.inputs]
    outputs = [engine.tensors[i] for i in partition.outputs]
    if set(inputs) != set(view.subgraph_inputs(start, end)) or set(outputs) != set(view.subgraph_outputs(start, end)):
        raise Unusable("its boundary tensors differ from those of its nodes in this build")
    blob = memoryview(partition.blob)
    if hashlib.sha256(blob).hexdigest() != partition.digest:
        raise Unusable("the blob is corrupt (its sha256 differs from the one recorded)")
    graph_kernel = delegate.load_graph_kernel(blob, partition.target, kernels, inputs, outputs, view)
    if not isinstance(graph_kernel, Kernel):
        raise TypeError(f"load_graph_kernel returned {type(graph_kernel).__name__}, not a lite.Kernel")
    return graph_kernel


def _note(engine: Program, covered: list[NativeKernel | None], text: str) -> None:
    for kernel in covered:
        if kernel is not None:
            engine.log.blobs[kernel] = text


def save(engine: Program) -> tuple[list[PartitionDef], list[str]]:
    """The saved form of every graph kernel whose delegate saves them, and a line per kernel not saved."""
    index = {t: i for i, t in enumerate(engine.tensors)}
    saved, skipped = [], []
    for kernel in engine.graph_kernels():
        partition = engine.log.partitions[kernel]
        delegate = partition.delegate
        blob = delegate.save_graph_kernel(kernel) if saves_graph_kernels(delegate) else None
        if blob is None:
            why = ("its delegate saved nothing for it; one that compiles at its first resize needs static input "
                   "shapes: lite-convert --input-shapes" if saves_graph_kernels(delegate)
                   else "its delegate saves no graph kernels")
            skipped.append(f"{partition.delegate_name} {kernel.name}: not saved ({why})")
            continue
        blob = bytes(blob)
        saved.append(PartitionDef(
            partition.delegate_name, delegate.blob_target(), kernel.name, [k.node_index for k in partition.covered],
            [index[t] for t in read_from_outside(partition.covered)], [index[t] for t in kernel.outputs], blob,
            hashlib.sha256(blob).hexdigest()))
    return saved, skipped


