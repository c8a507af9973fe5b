"""Activation memory: one arena, offsets planned by tensor lifetime (greedy by size).

A Concat's inputs that only it reads are laid out inside its output where the output's slice
for each is one contiguous run (every axis before the concatenated one has size 1: one image),
so the kernels that produce them write there and the Concat copies nothing (SqueezeNet's and
Inception's branches). The output of a kernel that may view its input (``may_view``: Reshape,
Flatten, Squeeze, Unsqueeze, Identity) views the input's memory where both are planned, and the
kernel copies nothing (``viewing``): a decoder's step has dozens of them.
"""

from __future__ import annotations

import bisect
import math
from collections import Counter, OrderedDict

import numpy as np

from lite.aligned import ALIGNMENT, aligned_array, aligned_empty
from lite.errors import MemoryLimitError
from lite.kernel import Kernel
from lite.tensor import Tensor


def _aligned(n: int) -> int:
    return (n + ALIGNMENT - 1) // ALIGNMENT * ALIGNMENT


def lifetimes(kernels: list[Kernel], keep: set[Tensor],
              unplanned: frozenset[Tensor] = frozenset()) -> dict[Tensor, tuple[int, int]]:
    """First and last kernel index of each planned tensor (outputs not in ``keep`` or ``unplanned``)."""
    spans: dict[Tensor, tuple[int, int]] = {}
    for i, kernel in enumerate(kernels):
        for tensor in kernel.outputs:
            if tensor not in keep and tensor not in unplanned and not tensor.value_known:
                spans[tensor] = (i, i)
    for i, kernel in enumerate(kernels):
        for tensor in kernel.inputs:
            if tensor in spans:
                spans[tensor] = (spans[tensor][0], i)
    return spans


def concat_slots(kernels: list[Kernel], spans: dict[Tensor, tuple[int, int]],
                 keep: set[Tensor]) -> dict[Tensor, tuple[Tensor, tuple[slice, ...]]]:
    """Concat inputs that can live in their output: {input: (output, its index there)}, for
    planned inputs that only the Concat reads (once) and no Concat writes, into a planned or kept
    output whose slice for the input is contiguous and starts ``ALIGNMENT``-aligned."""
    readers = Counter(t for k in kernels for t in k.inputs if t is not None)
    concats = [k for k in kernels if k.type == "Concat" and len(k.outputs) == 1]
    joined = {k.outputs[0] for k in concats}
    slots: dict[Tensor, tuple[Tensor, tuple[slice, ...]]] = {}
    for kernel in concats:
        out = kernel.outputs[0]
        axis = int(kernel.primitive.attrs["axis"]) % max(len(out.shape), 1)
        if (out not in spans and out not in keep) or math.prod(out.shape[:axis]) != 1:
            continue
        step, start = math.prod(out.shape[axis + 1:]) * out.dtype.itemsize, 0
        for tensor in kernel.inputs:
            if (tensor in spans and readers[tensor] == 1 and tensor not in joined and tensor.dtype == out.dtype
                    and start * step % ALIGNMENT == 0):
                slots[tensor] = out, (slice(None),) * axis + (slice(start, start + tensor.shape[axis]),)
            start += tensor.shape[axis]
    return slots


def view_aliases(kernels: list[Kernel], spans: dict[Tensor, tuple[int, int]],
                 slots: dict[Tensor, tuple[Tensor, tuple[slice, ...]]]) -> dict[Tensor, tuple[Tensor, Kernel]]:
    """{output: (the planned tensor whose memory it views, the kernel making it)} for the kernels that may
    view their input (``may_view``), where input and output are planned, of one dtype, and neither lies in
    a Concat's output; each such output leaves ``spans``, its lifetime added to the tensor it views. Every
    such kernel's ``viewing`` is cleared here; ``MemoryPlan.apply`` sets it once the arrays are given."""
    aliases: dict[Tensor, tuple[Tensor, Kernel]] = {}
    for kernel in kernels:
        if not getattr(kernel, "may_view", False):
            continue
        kernel.viewing = None
        x, y = kernel.inputs[0], kernel.outputs[0]
        root = aliases[x][0] if x in aliases else x
        if (root in spans and y in spans and x not in slots and y not in slots and x.dtype == y.dtype
                and _nbytes(x) == _nbytes(y)):
            first, last = spans.pop(y)
            spans[root] = (min(spans[root][0], first), max(spans[root][1], last))
            aliases[y] = root, kernel
    return aliases


def plan_offsets(spans: dict[Tensor, tuple[int, int]]) -> tuple[dict[Tensor, int], int]:
    """Offsets so tensors alive at the same time never overlap; returns (offsets, arena size).

    Largest tensors are placed first, each at the lowest gap that fits between the
    tensors already placed whose lifetimes overlap its own (TFLite's greedy-by-size).
    """
    placed: list[tuple[int, int, int, int]] = []  # offset, end, first, last; kept sorted
    offsets: dict[Tensor, int] = {}
    for tensor in sorted(spans, key=lambda t: -_nbytes(t)):
        first, last = spans[tensor]
        size = _aligned(_nbytes(tensor))
        offset = 0
        for start, end, f, lst in placed:
            if f > last or first > lst:
                continue
            if offset + size <= start:
                break
            offset = max(offset, end)
        bisect.insort(placed, (offset, offset + size, first, last))
        offsets[tensor] = offset
    return offsets, max((end for _, end, _, _ in placed), default=0)


def _nbytes(tensor: Tensor) -> int:
    return math.prod(tensor.shape) * tensor.dtype.itemsize


PLANS_KEPT = 4
"""How many placements a MemoryPlan remembers (the last ones used): a model that alternates between
input shapes (a generator's prefill and decode steps) places each set's tensors once."""


class MemoryPlan:
    """Gives every non-constant tensor of a kernel list its data array.

    Intermediate tensors are views into one arena whose slots are reused once a tensor
    is dead; ``keep`` tensors (the model outputs) get arrays of their own; ``unplanned`` tensors
    (the outputs of runtime-shaped kernels, which get arrays when they run) get none. The
    placement of the last ``PLANS_KEPT`` sets of lifetimes and sizes is remembered.
    """

    def __init__(self) -> None:
        self.arena = np.empty(0, dtype=np.uint8)
        self.placements: OrderedDict[tuple, tuple[dict[Tensor, int], int]] = OrderedDict()
        self.views: dict[tuple, dict[Tensor, np.ndarray]] = {}  # a placement's arrays in the current arena

    @staticmethod
    def _key(spans: dict[Tensor, tuple[int, int]]) -> tuple:
        return tuple((tensor, first, last, tensor.shape, tensor.dtype) for tensor, (first, last) in spans.items())

    def _placed(self, key: tuple, spans: dict[Tensor, tuple[int, int]]) -> tuple[dict[Tensor, int], int]:
        """``plan_offsets(spans)``, remembered for the same tensors, lifetimes, shapes and dtypes (``key``)."""
        placed = self.placements.get(key)
        if placed is None:
            placed = self.placements[key] = plan_offsets(spans)
            while len(self.placements) > PLANS_KEPT:
                self.views.pop(self.placements.popitem(last=False)[0], None)
        self.placements.move_to_end(key)
        return placed

    def apply(self, kernels: list[Kernel], keep: set[Tensor], limit: int,
              unplanned: frozenset[Tensor] = frozenset()) -> None:
        """Plans and assigns the arrays.

        Raises:
            MemoryLimitError: the plan would need more than ``limit`` bytes (nothing is allocated).
        """
        spans = lifetimes(kernels, keep, unplanned)
        slots = concat_slots(kernels, spans, keep)
        for tensor, (out, _) in slots.items():  # NOTE: the output lives from the first input's producer on
            first, last = spans.pop(tensor)
            if out in spans:
                spans[out] = (min(first, spans[out][0]), max(last, spans[out][1]))
        aliases = view_aliases(kernels, spans, slots)
        key = self._key(spans)
        offsets, size = self._placed(key, spans)
        total = size + sum(_nbytes(t) for t in keep)
        if total > limit:
            raise MemoryLimitError(f"the model's activations would need {total} bytes, more than the memory "
                                   f"limit of {limit} bytes (Context.memory_limit)")
        if self.arena.size < size:
            self.arena = aligned_empty(size)
            self.views.clear()
        views = self.views.get(key)
        if views is None:
            views = self.views[key] = {tensor: self.arena[offset : offset + _nbytes(tensor)].view(tensor.dtype)
                                       .reshape(tensor.shape) for tensor, offset in offsets.items()}
        for tensor, view in views.items():
            tensor.data = view
        for tensor in keep:
            data = tensor.data
            if data is None or data.shape != tensor.shape or data.dtype != tensor.dtype or not data.flags.writeable:
                tensor.data = aligned_array(tensor.shape, tensor.dtype)
        for tensor, (out, index) in slots.items():
            tensor.data = out.data[index]
        for tensor, (root, kernel) in aliases.items():
            tensor.data = root.data.reshape(tensor.shape)
            kernel.viewing = kernel.inputs[0].data, tensor.data

    @property
    def nbytes(self) -> int:
        return int(self.arena.size)
