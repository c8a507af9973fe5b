"""The activation arena: tensors alive together never overlap; dead slots are reused."""

import subprocess
import sys

import numpy as np
import pytest

from lite.errors import MemoryLimitError
from lite.kernel import Kernel
from lite.memory import MemoryPlan, lifetimes, plan_offsets
from lite.tensor import Tensor


def chain(sizes: list[int]) -> tuple[list[Kernel], list[Tensor]]:
    tensors = [Tensor(f"t{i}", np.float32, (n,)) for i, n in enumerate(sizes)]
    kernels = [Kernel([tensors[i]], [tensors[i + 1]], name=f"k{i}") for i in range(len(sizes) - 1)]
    return kernels, tensors


def overlaps(a: tuple[int, int], b: tuple[int, int]) -> bool:
    return a[0] <= b[1] and b[0] <= a[1]


def test_live_tensors_never_share_bytes():
    rng = np.random.default_rng(0)
    kernels, tensors = chain(list(rng.integers(1, 5000, 40)))
    # a skip connection keeps t3 alive until the end
    kernels[-1].inputs.append(tensors[3])
    spans = lifetimes(kernels, keep=set())
    offsets, size = plan_offsets(spans)
    for a in spans:
        assert offsets[a] % 64 == 0
        assert offsets[a] + a.size * 4 <= size
        for b in spans:
            if a is not b and overlaps(spans[a], spans[b]):
                assert offsets[a] + a.size * 4 <= offsets[b] or offsets[b] + b.size * 4 <= offsets[a]


def test_chain_reuses_memory():
    kernels, tensors = chain([1024] * 20)
    _, size = plan_offsets(lifetimes(kernels, keep=set()))
    assert size == 2 * 1024 * 4  # a chain needs two live buffers at a time


def test_kept_tensors_get_their_own_arrays():
    kernels, tensors = chain([16, 16, 16])
    plan = MemoryPlan()
    plan.apply(kernels, keep={tensors[-1]}, limit=1 << 20)
    assert tensors[-1].data.shape == (16,)
    assert not np.shares_memory(tensors[-1].data, plan.arena)
    assert np.shares_memory(tensors[1].data, plan.arena)


def test_plan_over_the_limit_allocates_nothing():
    kernels, tensors = chain([1024] * 4)
    plan = MemoryPlan()
    with pytest.raises(MemoryLimitError, match="memory limit of 4096"):
        plan.apply(kernels, keep={tensors[-1]}, limit=4096)
    assert plan.nbytes == 0 and tensors[1].data is None


BOMB = """
import resource, numpy as np, lite
from lite.schema.graph import GraphDef, NodeDef, TensorDef
from lite.schema.writer import write_model
resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))
f32 = np.dtype(np.float32)
tensors = [TensorDef("x", f32, (1, 1)), TensorDef("s", np.dtype(np.int64), (2,), data=np.array([30000, 30000])),
           TensorDef("y", f32, (30000, 30000))]
data = write_model(GraphDef(tensors, [NodeDef("bomb", "BroadcastTo", {}, [0, 1], [2])], [0], [2]))
try:
    lite.Model().build(data, lite.ModelType.LITE, lite.Context())
except lite.OutOfMemoryError as exc:
    print("refused:", exc)
"""


def test_an_allocation_the_system_refuses_is_a_lite_error():
    """3.6 GB is under the default memory limit, but not under this child's 2 GiB address space."""
    result = subprocess.run([sys.executable, "-c", BOMB], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("refused: could not allocate 3600000000 bytes")
