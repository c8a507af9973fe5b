"""The scheduler: one native kernel per node, dead nodes dropped, topologically sorted."""

from __future__ import annotations

import heapq
from collections.abc import Callable
from typing import Any

from lite.errors import ModelFormatError, UnsupportedOpError
from lite.kernel import Kernel
from lite.kernels.base import NativeKernel
from lite.kernels.registry import find_kernel, kernel_key, quantized_kernel, supported_dtypes
from lite.ops.quant import BOUNDARY_OPS
from lite.primitive import Primitive
from lite.schema.graph import GraphDef, NodeDef
from lite.tensor import Tensor


def schedule(graph: GraphDef, tensors: list[Tensor]) -> list[NativeKernel]:
    """Creates the native kernels of ``graph`` and returns the live ones in topological order.

    Raises:
        UnsupportedOpError: listing every node that has no kernel for its op/dtype.
        ModelFormatError: a cycle, or a tensor read before anything produces it.
    """
    order = topological_order(graph)
    live = _live_nodes(graph)
    kernels, missing = [], []
    for index in order:
        if index not in live:
            continue
        node = graph.nodes[index]
        kernel_class, reason = _kernel_class(graph, index)
        if kernel_class is None:
            missing.append((node.op_type, node.name, None, reason))
            continue
        inputs = [None if i < 0 else tensors[i] for i in node.inputs]
        outputs = [tensors[i] for i in node.outputs]
        kernel = kernel_class(inputs, outputs, Primitive(node.op_type, node.attrs), node.name)
        kernel.node_index = index
        kernels.append(kernel)
    if missing:
        raise UnsupportedOpError(missing, what="model (no native kernel)")
    return kernels


def _kernel_class(graph: GraphDef, index: int) -> tuple[type[NativeKernel] | None, str]:
    node = graph.nodes[index]
    present = [i for i in node.inputs if i >= 0]
    dtype = graph.tensors[present[0] if present else node.outputs[0]].dtype
    key = kernel_key(node.op_type, node.attrs)
    if _quantized(graph, node):
        kernel_class = quantized_kernel(key, dtype)
        if kernel_class is not None:
            return kernel_class, ""
        return None, f"no native kernel for quantized {node.op_type} on {dtype.name} (nor a float kernel to emulate)"
    kernel_class = find_kernel(key, dtype)
    if kernel_class is not None:
        return kernel_class, ""
    known = [d.name for d in supported_dtypes(key)]
    if not known:
        return None, _no_kernel_reason(node)
    return None, f"no native kernel for {dtype.name} inputs (supported: {', '.join(known)})"


def _quantized(graph: GraphDef, node: NodeDef) -> bool:
    """A quantized op: its first input and first output carry QuantParams (see Kernel.quantized)."""
    present = [i for i in node.inputs if i >= 0]
    return (node.op_type not in BOUNDARY_OPS and bool(present) and bool(node.outputs)
            and graph.tensors[present[0]].quant is not None and graph.tensors[node.outputs[0]].quant is not None)


def _no_kernel_reason(node: NodeDef) -> str:
    if node.op_type != "Custom":
        return "no native kernel for this op type"
    op, domain = node.attrs["type"], node.attrs["domain"]
    return (f"no kernel is registered for custom op {op!r} (domain {domain!r}); register a lite.NativeKernel "
            f"subclass with @lite.register_custom_kernel({op!r}) before building the model")


def topological_order(graph: GraphDef) -> list[int]:
    """Kahn's algorithm; ties go to the node that comes first in the file.

    Raises:
        ModelFormatError: a cycle, or a node or graph output reading a tensor nothing produces.
    """
    producer = {t: n for n, node in enumerate(graph.nodes) for t in node.outputs}
    available = set(graph.inputs) | {i for i, t in enumerate(graph.tensors) if t.is_const}
    deps = []
    for node in graph.nodes:
        _check_dangling(graph, node, producer, available)
        deps.append({producer[t] for t in node.inputs if t >= 0 and t not in available and t in producer})
    order = kahn_order(deps)
    if len(order) < len(graph.nodes):
        stuck = sorted(set(range(len(graph.nodes))) - set(order))
        names = ", ".join(repr(graph.nodes[n].name) for n in stuck[:10])
        raise ModelFormatError(f"the graph has a cycle through {len(stuck)} node(s): {names}")
    _check_outputs(graph, producer, available)
    return order


def kahn_order(deps: list[set[int]], rank: Callable[[int], Any] | None = None) -> list[int]:
    """A topological order of items ``0..n-1`` given each one's dependencies (Kahn's algorithm).

    Among ready items the one with the lowest ``rank(i)`` comes first (default: the index).
    Items on a cycle are left out, so a short result means a cycle.
    """
    rank = rank or (lambda i: i)
    waiting = [len(d) for d in deps]
    users: list[list[int]] = [[] for _ in deps]
    for i, d in enumerate(deps):
        for j in d:
            users[j].append(i)
    ready = [(rank(i), i) for i, count in enumerate(waiting) if count == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        _, i = heapq.heappop(ready)
        order.append(i)
        for user in users[i]:
            waiting[user] -= 1
            if waiting[user] == 0:
                heapq.heappush(ready, (rank(user), user))
    return order


def _check_dangling(graph: GraphDef, node, producer: dict[int, int], available: set[int]) -> None:
    for t in node.inputs:
        if t >= 0 and t not in available and t not in producer:
            raise ModelFormatError(
                f"node {node.name!r} ({node.op_type}) reads tensor {graph.tensors[t].name!r}, "
                "which is neither a graph input, a constant, nor produced by any node")


def _check_outputs(graph: GraphDef, producer: dict[int, int], available: set[int]) -> None:
    for t in graph.outputs:
        if t not in available and t not in producer:
            raise ModelFormatError(f"graph output {graph.tensors[t].name!r} is produced by no node")


def _live_nodes(graph: GraphDef) -> set[int]:
    """Nodes some graph output depends on (the rest is dead code and never runs)."""
    producer = {t: n for n, node in enumerate(graph.nodes) for t in node.outputs}
    live: set[int] = set()
    stack = [producer[t] for t in graph.outputs if t in producer]
    while stack:
        n = stack.pop()
        if n in live:
            continue
        live.add(n)
        stack.extend(producer[t] for t in graph.nodes[n].inputs if t in producer)
    return live


def contiguous_order(kernels: list[Kernel], groups: list[list[Kernel]]) -> list[Kernel] | None:
    """A topological order of ``kernels`` in which each group's kernels are contiguous (each
    group keeps its kernels' relative order); None when no such order exists (a cycle)."""
    position = {k: i for i, k in enumerate(kernels)}
    unit_of = {k: i for i, k in enumerate(kernels)}
    units: list[list[Kernel]] = [[k] for k in kernels]
    for group in groups:
        index = len(units)
        units.append(sorted(group, key=position.__getitem__))
        for kernel in group:
            units[unit_of[kernel]] = []
            unit_of[kernel] = index
    producer = {t: unit_of[k] for k in kernels for t in k.outputs}
    deps = [{producer[t] for k in unit for t in k.inputs if t in producer} - {u} for u, unit in enumerate(units)]
    first = [min((position[k] for k in unit), default=-1) for unit in units]
    order = kahn_order(deps, lambda u: first[u])
    if len(order) < len(units):
        return None
    return [k for u in order for k in units[u]]
