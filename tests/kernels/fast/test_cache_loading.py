"""Cached kernels load without numba's typing and lowering registries; a kernel that is not cached
still compiles, in the same process, after them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from lite.kernels import fast

REPO = Path(__file__).resolve().parents[3]

_FRESH = """
import json, sys
import numpy as np
from lite.kernels.fast import activation
x = np.linspace(-3, 3, 64, dtype=np.float32)
out = np.empty_like(x)
activation.gelu_float32(x, out, np.float32(0))
stats = activation.gelu_float32.stats
registries_after_the_hit = "numba.np.linalg" in sys.modules
import numba
@numba.njit(cache=False)
def fresh(values):
    return np.cumsum(values).max() + np.sort(values)[0]
norm = float(fresh(x.astype(np.float64)))
print(json.dumps({"hits": sum(stats.cache_hits.values()), "misses": sum(stats.cache_misses.values()),
                  "registries_after_the_hit": registries_after_the_hit, "gelu": out.tolist(), "fresh": norm}))
"""


def test_a_cached_kernel_loads_without_the_registries_and_a_new_one_compiles_after(tmp_path):
    if fast.numba_module() is None:
        pytest.skip("no numba")
    from lite.kernels.fast import activation

    x = np.linspace(-3, 3, 64, dtype=np.float32)
    expected = np.empty_like(x)
    environ = {**os.environ, "DELITE_NUMBA_CACHE": str(tmp_path / "cache"), "DELITE_KERNEL_BUNDLE": "off"}
    environ.pop("NUMBA_CACHE_DIR", None)
    runs = []
    for _ in range(2):  # the first fills the empty cache, the second loads from it
        fresh = subprocess.run([sys.executable, "-c", _FRESH], capture_output=True, text=True, env=environ, cwd=REPO,
                               timeout=600)
        assert fresh.returncode == 0, fresh.stderr
        runs.append(json.loads(fresh.stdout.splitlines()[-1]))
    compiled, loaded = runs
    assert compiled["misses"] == 1 and loaded["hits"] == 1 and loaded["misses"] == 0
    assert not loaded["registries_after_the_hit"]
    activation.gelu_float32(x, expected, np.float32(0))
    np.testing.assert_array_equal(np.float32(loaded["gelu"]), expected)
    values = x.astype(np.float64)
    assert loaded["fresh"] == pytest.approx(float(np.cumsum(values).max() + np.sort(values)[0]))
