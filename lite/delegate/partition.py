"""What the delegates did in one build, and the fallback the runtime owns.

A ``Partition`` records one graph kernel and the native kernels it replaced. When a graph
kernel fails in ``prepare()`` or ``resize()`` and ``Context.fallback`` is on, the runtime
runs those native kernels instead (``fall_back``); delegates never re-implement that.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from lite.context import Context
from lite.errors import DelegateError
from lite.kernel import Kernel
from lite.kernels.base import NativeKernel
from lite.tensor import Tensor

logger = logging.getLogger("lite")


@dataclass
class Partition:
    """One graph kernel a delegate made, and the native kernels it replaced.

    ``weights`` holds the covered kernels' constant arrays as they were before the graph
    kernel's ``prepare()``, so a fallback runs on the model's own weights even when the
    graph kernel replaced or converted a tensor's array.
    """

    delegate: object
    kernel: Kernel
    covered: list[NativeKernel]
    weights: dict[Tensor, np.ndarray | None] = field(default_factory=dict)

    @property
    def delegate_name(self) -> str:
        return type(self.delegate).__name__

    def constants(self) -> list[Tensor]:
        """The constant tensors the covered kernels read."""
        return list({t: None for k in self.covered for t in k.inputs if t is not None and t.is_const})

    def remember_weights(self) -> None:
        self.weights = {t: t.data for t in self.constants()}

    def forget_weights(self, kept: set[Tensor]) -> None:
        """Drops the remembered arrays of constants the model released (so their memory is freed)."""
        self.weights = {t: data for t, data in self.weights.items() if t in kept}

    def restore_weights(self) -> None:
        for tensor, data in self.weights.items():
            tensor.data = data

    def error(self, stage: str, exc: BaseException) -> DelegateError:
        return DelegateError(f"delegate {self.delegate_name}: graph kernel {self.kernel.name!r} failed in "
                             f"{stage}(): {type(exc).__name__}: {exc}")


@dataclass
class DelegationLog:
    """What the delegates did in one build: partitions, reasons for saying no, and what happened to
    the blobs saved in the file (``lite.delegate.saved``), per covered node."""

    partitions: dict[Kernel, Partition] = field(default_factory=dict)
    reasons: dict[NativeKernel, list[str]] = field(default_factory=dict)
    blobs: dict[NativeKernel, str] = field(default_factory=dict)

    def note(self, kernel: NativeKernel, delegate: object, reason: str) -> None:
        self.reasons.setdefault(kernel, []).append(f"{type(delegate).__name__}: {reason}")

    def fall_back(self, partition: Partition, stage: str, exc: BaseException, allowed: bool) -> None:
        """Gives up ``partition`` after its graph kernel failed in ``stage``.

        Raises:
            DelegateError: naming the delegate and kernel, when fallback is not ``allowed`` or
                the covered kernels' weights were released (the graph kernel did not keep them).
        """
        error = partition.error(stage, exc)
        if not allowed:
            raise error from exc
        partition.restore_weights()
        released = [t.name for t in partition.constants() if t.data is None]
        if released:
            raise DelegateError(f"{error}; cannot run its kernels natively: the weights {released[:5]} were "
                                "released (a graph kernel that may fail after prepare() keeps them: "
                                "lite.Kernel(..., constants=...))") from exc
        logger.warning("%s; running its %d kernels natively (fallback)", error, len(partition.covered))
        del self.partitions[partition.kernel]
        for native in partition.covered:
            self.note(native, partition.delegate, f"graph kernel failed in {stage}(): {exc}")
            if native in self.blobs:
                self.blobs[native] = f"not used: loaded, then its graph kernel failed in {stage}(): {exc}"


class Program(Protocol):
    """What the delegation build steps (priority and measured placement, loading and saving
    partitions: ``lite.delegate.placement``, ``lite.delegate.saved``) read and change of one build in progress.
    ``lite.engine.Engine`` is one; the steps see this interface, not the Engine.
    """

    context: Context
    kernels: list[Kernel]  # what runs, in order: native kernels and graph kernels
    shape_kernels: list[NativeKernel]  # one native kernel per node, in topological order
    node_kernels: dict[int, NativeKernel]  # the file's node index -> its native kernel
    tensors: list[Tensor]
    inputs: list[Tensor]
    outputs: list[Tensor]
    log: DelegationLog
    embedded: Sequence  # the delegate partitions saved in the file (PartitionDef)
    runtime_shaped: set[NativeKernel]  # kernels whose output shapes depend on input values
    shapes_dirty: bool

    def init_delegate(self, delegate: object) -> bool: ...

    def build_delegate(self, delegate: object, view: object) -> None: ...

    def prepare_native_once(self, kernel: NativeKernel) -> None: ...

    def choose_threads(self) -> None: ...

    def execute_graph_kernel(self, partition: Partition) -> None: ...

    def graph_kernels(self) -> list[Kernel]: ...
