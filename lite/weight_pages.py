"""The memory of constants that kernels repacked, where the model's file is mapped
(``lite.files.MappedModelFile``, ``Model.build_from_file``).

A kernel that packs or transforms a weight at prepare (``Kernel.packed_constants``) never reads
the original again at those shapes. Once every kernel that reads a constant has packed it, and
no delegate's partition, shape inference or model output may read it, the pages of its bytes in
the file's mapping leave memory; anything that still reads them faults them back in from the
file (a fallback, a resize that packs again).
"""

from __future__ import annotations

from collections.abc import Iterable

from lite.files import MappedModelFile
from lite.kernel import Kernel
from lite.tensor import Tensor


class ConstantPages:
    """Where each constant's bytes lie in a mapped model file, and which have been released."""

    def __init__(self, mapped: MappedModelFile, tensors: Iterable[Tensor]) -> None:
        self.mapped = mapped
        base, size = mapped.base(), mapped.array.size
        self.spans: dict[Tensor, tuple[int, int]] = {}
        for tensor in tensors:
            data = tensor.data
            if tensor.is_const and data is not None and data.nbytes and 0 <= data.ctypes.data - base < size:
                self.spans[tensor] = (data.ctypes.data - base, data.nbytes)
        self.released: set[Tensor] = set()

    def release(self, tensors: Iterable[Tensor]) -> None:
        """Releases the pages of ``tensors`` (those in the file and not released yet)."""
        for tensor in tensors:
            span = self.spans.get(tensor)
            if span is not None and tensor not in self.released:
                self.mapped.release(*span)
                self.released.add(tensor)

    def release_again(self, tensors: Iterable[Tensor]) -> None:
        """Releases the pages of ``tensors`` even where released before: a kernel that packed them
        again read them, faulting their pages back in."""
        tensors = list(tensors)
        self.released.difference_update(tensors)
        self.release(tensors)

    def forget_released(self) -> None:
        """Counts every constant as resident again (before a resize, which may read released ones:
        the int8 plans check their weights' range again); each is released again once packed."""
        self.released.clear()

    def release_unread(self, kernels: Iterable[Kernel], held: set[Tensor]) -> None:
        """Releases every constant that none of ``kernels`` reads in its original layout and that is
        not ``held``; a released one that a kernel reads again counts as resident again."""
        read = held | read_unpacked(kernels)
        self.released -= read
        self.release(t for t in self.spans if t not in read)

    def check_unchanged(self) -> None:
        """``MappedModelFile.check_unchanged``: before anything may read released pages again."""
        self.mapped.check_unchanged()


def read_unpacked(kernels: Iterable[Kernel]) -> set[Tensor]:
    """The constants some of ``kernels`` read in their original layout (all they read but what they packed)."""
    read: set[Tensor] = set()
    for kernel in kernels:
        packed = set(kernel.packed_constants())
        read.update(t for t in [*kernel.inputs, *kernel.constants] if t is not None and t.is_const and t not in packed)
    return read


def packed_by_all(tensor: Tensor, readers: list[Kernel]) -> bool:
    """Whether every one of ``readers`` (of ``tensor``) has packed it."""
    return all(tensor in r.packed_constants() for r in readers)
