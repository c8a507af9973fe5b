"""The compiled kernels of quantized elementwise ops as AVX2 code, on any x86-64 machine."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from lite.kernels import fast

REPO = Path(__file__).resolve().parents[3]

# Softmax and layer norm rows store int8 results through uint8 views (the crew's blocks carry
# bytes of either signedness). A float converted straight to uint8 is undefined below zero: AVX-512
# code kept the bits, AVX2 code stored 0, so every negative int8 output read 0 there.
AVX2_SCRIPT = """
import numpy as np
from lite.kernels import fast
from lite.kernels.fast import int8_elementwise as e
from lite.ops.quantized_softmax import SUM_LANES, exponent_table, output_multiplier, quantized_softmax

assert fast.target_level() == "x86-64-v3", fast.target_level()
f32 = np.float32
rng = np.random.default_rng(0)
width, rows = 16, 12
x = rng.integers(-128, 128, (rows, width)).astype(np.int8)
x_scale, y_scale = 0.0629, 1 / 256
out = np.zeros(rows * width, np.uint8)
e.softmax_rows(x.view(np.uint8).reshape(-1), width, np.uint8(0x80), exponent_table(x_scale, width),
               output_multiplier(y_scale), f32(-128), f32(-128), f32(127), out, np.zeros(width + SUM_LANES, f32),
               0, rows)
np.testing.assert_array_equal(out.view(np.int8).reshape(rows, width),
                              quantized_softmax(x, x_scale, y_scale, -128, np.int8, width))

table = (np.arange(-128, 128) * f32(0.05)).astype(f32)
values = table[x.view(np.uint8).astype(np.intp) ^ 0x80]
normal = (values - values.mean(1, keepdims=True)) / np.sqrt(values.var(1, keepdims=True) + f32(1e-5))
expected = np.clip(np.rint(normal / f32(0.02)), -128, 127).astype(np.int8)
table = np.roll(table, -128)  # indexed by the unsigned byte
normed = np.zeros((rows, width), np.uint8)
e.layer_norm_rows(x.view(np.uint8), table, np.ones(width, f32), np.zeros(width, f32), f32(1e-5), f32(0.02), f32(0),
                  f32(-128), f32(127), normed, np.zeros(width, f32), 0, rows)
assert (np.abs(normed.view(np.int8).astype(int) - expected) <= 1).all()
assert (normed.view(np.int8) < -100).any()
print("ok")
"""


def test_quantized_rows_keep_negative_int8_outputs_in_avx2_code(tmp_path):
    """Softmax and layer norm rows compiled for x86-64-v3 (AVX2) in a child process: int8 outputs
    below zero keep their bytes (they read 0 there before)."""
    if not fast.enabled() or fast.target_level() not in ("x86-64-v3", "x86-64-v3-vnni", "x86-64-v4",
                                                        "x86-64-v4-vnni"):
        pytest.skip("compiled kernels for x86-64 levels are off here")
    # NOTE: a cache folder of its own: a new folder in the shared one would prune the others' older folders
    environ = {**os.environ, "DELITE_KERNEL_TARGET": "x86-64-v3", "DELITE_NUMBA_CACHE": str(tmp_path / "cache")}
    environ.pop("NUMBA_CACHE_DIR", None)
    result = subprocess.run([sys.executable, "-c", AVX2_SCRIPT], capture_output=True, text=True, env=environ,
                            cwd=REPO, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip() == "ok"
