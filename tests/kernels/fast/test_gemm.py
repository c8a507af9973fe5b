"""The packed-weight product (``lite.kernels.fast.gemm``) against float64 numpy, the numpy
MatMulFusion it stands in for, and onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest

from lite.kernels import fast
from lite.kernels.fast import gemm
from lite.kernels.fast.activation import CLIP_CODE
from lite.kernels.fast.tile import ROWS, WIDTH
from lite.kernels.matmul import ALGORITHMS
from lite.kernels.plans import first_fit
from lite.kernels.registry import find_kernel
from lite.primitive import Primitive
from lite.schema.primitives import default_attrs
from lite.tensor import Tensor
from tests.support.kernel_harness import run_kernel
from tests.support.matmul import onnx_reference

pytestmark = pytest.mark.skipif(fast.numba_module() is None, reason="numba is not importable here")

LOWEST, HIGHEST, ONE = np.float32(-np.inf), np.float32(np.inf), np.float32(1)


def operands(m: int, k: int, n: int, seed: int = 0):
    rng = np.random.default_rng([seed, m, k, n])
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = (rng.standard_normal((k, n)) / np.sqrt(k)).astype(np.float32)
    return a, b, rng.standard_normal(n).astype(np.float32)


# (M, K, N): rows a multiple of the tile's and not (the last block overlaps), one term, columns
# below, at, past and across panels, a transformer's shapes; fewer rows than a tile (a decode
# step's one row per sequence, row by row on each panel)
SHAPES = [(8, 1, 1), (8, 5, 3), (13, 7, 47), (9, 33, WIDTH), (17, 64, WIDTH + 1), (40, 300, 130),
          (128, 768, 96), (200, 64, 2 * WIDTH), (1, 1, 1), (1, 768, 2 * WIDTH + 9), (3, 40, WIDTH),
          (ROWS - 1, 17, 3 * WIDTH - 1)]


@pytest.mark.parametrize(("m", "k", "n"), SHAPES)
def test_product_matches_float64(m, k, n):
    a, b, bias = operands(m, k, n)
    out = np.full((m, n), np.nan, np.float32)
    gemm.product(a, gemm.pack(b), bias, np.float32(-0.5), np.float32(1.5), out, 0, gemm.panel_count(n), CLIP_CODE, ONE)
    expected = np.clip(a.astype(np.float64) @ b + bias, -0.5, 1.5)
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-5)


def test_a_range_of_panels_writes_only_its_columns():
    m, k, n = 16, 20, 3 * WIDTH + 5
    a, b, bias = operands(m, k, n)
    out = np.full((m, n), np.nan, np.float32)
    gemm.product(a, gemm.pack(b), bias, LOWEST, HIGHEST, out, 1, 3, CLIP_CODE, ONE)
    expected = a.astype(np.float64) @ b + bias
    written = slice(WIDTH, 3 * WIDTH)
    np.testing.assert_allclose(out[:, written], expected[:, written], rtol=1e-4, atol=1e-5)
    assert np.isnan(out[:, :WIDTH]).all() and np.isnan(out[:, 3 * WIDTH:]).all()


def test_pack_pads_the_last_panel_with_zeros():
    b = np.arange(2 * (WIDTH + 2), dtype=np.float32).reshape(2, WIDTH + 2)
    packed = gemm.pack(b)
    assert packed.shape == (2, 2, WIDTH) and packed.flags.c_contiguous
    np.testing.assert_array_equal(packed[1, :, :2], b[:, WIDTH:])
    assert not packed[1, :, 2:].any()


def matmul(a, b, bias=None, threads=None, **attrs):
    return run_kernel("MatMulFusion", attrs, [a, b] if bias is None else [a, b, bias], threads=threads)[0]


# (a shape, b shape, bias shape or None, MatMulFusion attrs): batch axes, transposed b, the
# bias shapes that vary along the last axis only, the clip activations
CASES = [
    ((8, 5), (5, 3), None, {}),
    ((2, 13, 7), (7, 50), (50,), {"activation_type": "RELU"}),
    ((1, 128, 64), (96, 64), (1, 96), {"transpose_b": True}),
    ((3, 4, 9), (9, 49), (1, 1, 49), {"activation_type": "RELU6"}),
    ((20, 30), (30, 17), (1,), {}),
]


@pytest.mark.parametrize(("a_shape", "b_shape", "bias_shape", "attrs"), CASES)
def test_matmul_fusion_matches_its_numpy_kernel(monkeypatch, a_shape, b_shape, bias_shape, attrs):
    rng = np.random.default_rng([len(a_shape), *b_shape])
    a, b = rng.standard_normal(a_shape).astype(np.float32), rng.standard_normal(b_shape).astype(np.float32)
    bias = None if bias_shape is None else rng.standard_normal(bias_shape).astype(np.float32)
    monkeypatch.setenv("DELITE_FAST_KERNELS", "0")
    reference = matmul(a, b, bias, **attrs)
    monkeypatch.setenv("DELITE_FAST_KERNELS", "1")
    runs, product = [], gemm.product
    monkeypatch.setattr(gemm, "product", lambda *args: runs.append(args) or product(*args))
    got = matmul(a, b, bias, **attrs)
    assert runs and got.shape == reference.shape
    np.testing.assert_allclose(got, reference, rtol=1e-4, atol=1e-5)


def test_a_strided_left_operand_is_copied_first():
    a, b, bias = operands(24, 10, 30)
    wide = np.repeat(a, 2, axis=1)[:, ::2]  # a view with a column stride of two floats
    assert not wide.flags.c_contiguous
    np.testing.assert_allclose(matmul(wide, b, bias), a.astype(np.float64) @ b + bias, rtol=1e-4, atol=1e-5)


def test_a_linear_layer_matches_onnxruntime():
    a, b, bias = operands(128, 256, 3 * WIDTH - 7, seed=5)
    expected = onnx_reference("Gemm", {"a": a, "b": b, "c": bias})
    np.testing.assert_allclose(matmul(a, b, bias), expected, rtol=1e-4, atol=1e-5)


def kernel(a_shape, b_shape, const_b=True, dtype=np.float32, **attrs):
    arrays = [np.zeros(a_shape, dtype), np.zeros(b_shape, dtype)]
    tensors = [Tensor(f"in{i}", dtype, x.shape, data=x, is_const=i == 1 and const_b) for i, x in enumerate(arrays)]
    built = find_kernel("MatMulFusion", dtype)(tensors, [Tensor("y", dtype, ())], Primitive(
        "MatMulFusion", {**default_attrs("MatMulFusion"), **attrs}), "node")
    built.outputs[0].shape = built.infer_shapes()[0]
    return built


@pytest.mark.parametrize(("built", "packs"), [
    (kernel((ROWS, 4), (4, 5)), True),
    (kernel((2, 4, 4), (4, 5)), True),  # batch axes make the rows
    (kernel((ROWS - 1, 4), (4, 5)), True),  # fewer rows than a tile: row by row
    (kernel((1, 1, 4), (4, 5)), True),  # a decode step's one row
    (kernel((ROWS, 4), (4, 5), const_b=False), False),  # b computed at run time
    (kernel((ROWS, 4), (2, 4, 5)), False),  # batched b
    (kernel((4, ROWS), (4, 5), transpose_a=True), False),
    (kernel((ROWS, 4), (4, 5), dtype=np.float64), False),
    (kernel((4,), (4, 5)), False),  # a vector
])
def test_which_products_it_takes(built, packs):
    assert (first_fit(ALGORITHMS, built.layer()).name == "packed_gemm") is packs


@pytest.mark.parametrize("rows", [64, 1])
def test_panels_on_the_crew_match(monkeypatch, crew_runs, rows):
    threads, runs = crew_runs
    a, b, bias = operands(rows, 96, 5 * WIDTH, seed=2)
    got = matmul(a, b, bias, threads=threads, activation_type="RELU")
    np.testing.assert_allclose(got, np.maximum(a.astype(np.float64) @ b + bias, 0), rtol=1e-4, atol=1e-5)
    assert len(runs) == 1  # the panels ran as crew jobs
