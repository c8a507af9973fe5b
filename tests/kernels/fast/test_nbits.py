"""``lite.kernels.fast.nbits``: products on 4-bit weight codes in blocks along K, against float64 on the
dequantized weight; and MatMulFusion's choice of it for a weight-only model's decode-sized products."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from lite.kernels import fast
from lite.kernels.fast.activation import CLIP_CODE
from lite.kernels.fast.gemm import ONE
from lite.kernels.fast.tile import ROWS, WIDTH
from lite.tools.converter import convert
from tests.support.e2e import build_lite, predict
from tests.support.quantized import run_onnxruntime, weight_only

pytestmark = pytest.mark.skipif(fast.numba_module() is None, reason="numba is not importable here")
nbits = pytest.importorskip("lite.kernels.fast.nbits")
RNG = np.random.default_rng(3)
LOWEST, HIGHEST = np.float32(-np.inf), np.float32(np.inf)


def operands(m: int, k: int, n: int, block: int, signed: bool, zero_points: bool):
    q = RNG.integers(-8, 8, (k, n)) if signed else RNG.integers(0, 16, (k, n))
    blocks = -(-k // block)
    z = None
    if zero_points:
        z = (RNG.integers(-8, 8, (blocks, n)) if signed else RNG.integers(0, 16, (blocks, n))).astype(q.dtype)
    s = RNG.uniform(0.01, 0.1, (blocks, n)).astype(np.float32)
    w = (q - (0 if z is None else np.repeat(z, block, axis=0)[:k])) * np.repeat(s, block, axis=0)[:k].astype(np.float64)
    kind = np.int8 if signed else np.uint8
    return (RNG.standard_normal((m, k)).astype(np.float32), q.astype(kind), s, None if z is None else z.astype(kind),
            w, RNG.standard_normal(n).astype(np.float32))


# (M, K, N, block): one row (a decode step), a few rows, a tile's rows and more (row by row as well), a block
# that does not divide K, columns below, at and past a panel
SHAPES = [(1, 64, 50, 32), (1, 768, 2 * WIDTH + 9, 32), (3, 96, WIDTH, 16), (ROWS - 1, 70, 9, 32),
          (ROWS, 64, 17, 16), (2 * ROWS + 3, 128, WIDTH + 1, 32)]


@pytest.mark.parametrize(("m", "k", "n", "block"), SHAPES)
@pytest.mark.parametrize(("signed", "zero_points"), [(False, True), (True, False), (True, True)])
def test_product_matches_float64_on_the_dequantized_weight(m, k, n, block, signed, zero_points):
    a, q, s, z, w, bias = operands(m, k, n, block, signed, zero_points)
    codes, scales = nbits.pack(q, s, z, block)
    out = np.full((m, n), np.nan, np.float32)
    nbits.product(a, codes, scales, block, bias, np.float32(-0.5), np.float32(1.5), out, 0, codes.shape[0],
                  CLIP_CODE, ONE)
    np.testing.assert_allclose(out, np.clip(a.astype(np.float64) @ w + bias, -0.5, 1.5), rtol=1e-4, atol=1e-5)


def test_a_range_of_panels_writes_only_its_columns():
    a, q, s, z, w, bias = operands(1, 64, 3 * WIDTH + 5, 32, False, True)
    codes, scales = nbits.pack(q, s, z, 32)
    out = np.full((1, q.shape[1]), np.nan, np.float32)
    nbits.product(a, codes, scales, 32, bias, LOWEST, HIGHEST, out, 1, 3, CLIP_CODE, ONE)
    written = slice(WIDTH, 3 * WIDTH)
    np.testing.assert_allclose(out[:, written], (a.astype(np.float64) @ w + bias)[:, written], rtol=1e-4, atol=1e-5)
    assert np.isnan(out[:, :WIDTH]).all() and np.isnan(out[:, 3 * WIDTH:]).all()


def test_panels_on_the_crew_match(crew_runs):
    threads, runs = crew_runs
    a, q, s, z, w, bias = operands(1, 256, 5 * WIDTH, 32, False, True)
    codes, scales = nbits.pack(q, s, z, 32)
    out = np.zeros((1, q.shape[1]), np.float32)
    step = threads.crew_loop(codes.shape[0], lambda *_: None, lambda bounds: nbits.crew_jobs(
        a, codes, scales, 32, bias, LOWEST, HIGHEST, out, bounds, CLIP_CODE, ONE))
    step()
    np.testing.assert_allclose(out, a.astype(np.float64) @ w + bias, rtol=1e-4, atol=1e-5)
    assert len(runs) == 1


def mlp(k: int = 64, hidden: int = 96, n: int = 40) -> onnx.ModelProto:
    """x (rows, k) -> MatMul -> Relu -> MatMul -> y: two linear layers."""
    inits = [numpy_helper.from_array((RNG.standard_normal(shape) / np.sqrt(shape[0])).astype(np.float32), name)
             for name, shape in (("w1", (k, hidden)), ("w2", (hidden, n)))]
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"]), helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("MatMul", ["r", "w2"], ["y"])]
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["rows", k])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["rows", n])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)


@pytest.mark.parametrize("form", ["matmulnbits", "qdq"])
@pytest.mark.parametrize("symmetric", [True, False])
def test_a_weight_only_models_products_read_the_codes_and_no_float_weight_is_kept(form, symmetric):
    """A decode step's row, a few rows and a prompt's many rows all run on the codes, packed once; the
    float32 weights the DequantizeLinear kernels would give are never computed."""
    model = weight_only(mlp(), form, symmetric)
    lite_model = build_lite(convert(model), 1)
    engine = lite_model._engine
    products = [k for k in engine.kernels if k.type == "MatMulFusion"]
    assert len(engine.deferred) == 2 and {k.weight_source for k in products} == set(engine.deferred)
    config = {"session.qdq_matmulnbits_accuracy_level": "1"}
    packed = None
    for rows in (1, 3, 2 * ROWS + 1):
        [tensor] = lite_model.get_inputs()
        lite_model.resize([tensor], [[rows, 64]])
        x = RNG.standard_normal((rows, 64)).astype(np.float32)
        [got] = predict(lite_model, {"x": x})
        assert [k.algorithm for k in products] == ["codes_gemm"] * 2
        [want] = run_onnxruntime(model, {"x": x}, config=config)
        assert np.abs(got - want).max() <= 1e-4 * np.abs(want).max()
        packed = packed or [k.derived.made["codes"][1] for k in products]
        assert all(k.derived.made["codes"][1] is p for k, p in zip(products, packed, strict=True))  # packed once
        assert all(source.outputs[0].data is None for source in engine.deferred)


def test_a_product_that_cannot_read_the_codes_computes_the_float_weight(monkeypatch):
    """Where no plan on the codes fits (here: the table without them), the product computes its float32
    weight from its DequantizeLinear at resize, and agrees with onnxruntime."""
    from lite.kernels import matmul

    model = weight_only(mlp(), "qdq", True)
    lite_model = build_lite(convert(model), 1)
    monkeypatch.setattr(matmul, "ALGORITHMS", matmul.ALGORITHMS[1:])
    [tensor] = lite_model.get_inputs()
    lite_model.resize([tensor], [[2, 64]])
    x = RNG.standard_normal((2, 64)).astype(np.float32)
    [got] = predict(lite_model, {"x": x})
    [want] = run_onnxruntime(model, {"x": x}, config={"session.qdq_matmulnbits_accuracy_level": "1"})
    assert np.abs(got - want).max() <= 1e-4 * np.abs(want).max()
    assert {k.algorithm for k in lite_model._engine.kernels if k.type == "MatMulFusion"} == {"numpy"}
    assert all(source.outputs[0].data is not None for source in lite_model._engine.deferred)


def test_with_a_delegate_the_float_weights_are_computed():
    """Delegates read the float32 weight when they build: nothing is left uncomputed for them."""
    import lite
    from tests.support.delegates import CountingDelegate

    model = weight_only(mlp(), "qdq", True)
    lite_model = lite.Model()
    lite_model.build(convert(model), lite.ModelType.LITE,
                     lite.Context(thread_num=1, delegates=[CountingDelegate({"MatMulFusion"})]))
    assert lite_model._engine.deferred == frozenset()
    assert sum(row.runs_on != "native" and row.runs_on != "folded" for row in lite_model.partition_report()) == 2
    x = RNG.standard_normal((1, 64)).astype(np.float32)
    [got] = predict(lite_model, {"x": x})
    [want] = run_onnxruntime(model, {"x": x}, config={"session.qdq_matmulnbits_accuracy_level": "1"})
    assert np.abs(got - want).max() <= 1e-4 * np.abs(want).max()


def test_codes_beyond_four_bits_are_refused():
    with pytest.raises(ValueError, match="beyond 15"):
        nbits.pack(np.full((2, 3), 200, np.uint8), np.ones((1, 3), np.float32), np.zeros((1, 3), np.uint8), 2)
