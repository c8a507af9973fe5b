"""Topological sort, dangling tensors, cycles and dead nodes."""

import numpy as np
import pytest

from lite.errors import ModelFormatError
from lite.scheduler import _live_nodes, topological_order
from lite.schema.graph import GraphDef, NodeDef, TensorDef

F32 = np.dtype(np.float32)


def graph(nodes: list[tuple[list[int], list[int]]], n_tensors: int, inputs=(0,), outputs=None) -> GraphDef:
    tensors = [TensorDef(f"t{i}", F32, (1,)) for i in range(n_tensors)]
    defs = [NodeDef(f"n{i}", "AddFusion", {}, list(ins), list(outs)) for i, (ins, outs) in enumerate(nodes)]
    return GraphDef(tensors, defs, list(inputs), list(outputs or [n_tensors - 1]))


def test_order_is_topological_with_file_order_tie_break():
    # n0: t2 <- t1 (waits for n2), n1: t3 <- t0, n2: t1 <- t0, n3: t4 <- t2, t3
    g = graph([([1], [2]), ([0], [3]), ([0], [1]), ([2, 3], [4])], 5)
    assert topological_order(g) == [1, 2, 0, 3]


def test_cycle_is_named():
    g = graph([([0, 2], [1]), ([1], [2]), ([2], [3])], 4)
    with pytest.raises(ModelFormatError, match="cycle.*'n0'.*'n1'"):
        topological_order(g)


def test_dangling_tensor_is_named():
    g = graph([([0, 5], [1])], 6, outputs=[1])
    with pytest.raises(ModelFormatError, match="node 'n0'.*'t5'.*neither"):
        topological_order(g)


def test_unproduced_output_is_refused():
    g = graph([([0], [1])], 3, outputs=[2])
    with pytest.raises(ModelFormatError, match="graph output 't2'"):
        topological_order(g)


def test_dead_nodes_are_not_live():
    g = graph([([0], [1]), ([0], [2]), ([1], [3])], 4, outputs=[3])
    assert _live_nodes(g) == {0, 2}
