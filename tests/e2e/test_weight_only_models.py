"""The zoo's BERT-style encoder with 4-bit weights (onnxruntime's ``MatMulNBitsQuantizer``, block
size 32, symmetric and asymmetric), converted and run natively, against onnxruntime on the same
quantized file.

Both forms dequantize the very same 4-bit weights (MatMulNBits is expanded into a DequantizeLinear
of a uint4 constant before a float MatMul), and both sides then multiply in float32, so they
agree to float32 rounding: a relative maximum difference (largest |difference| over largest
|output|) of at most 1e-4 and cosine 0.99999 (measured about 3e-6 and 1 - 3e-12).

onnxruntime fuses the QDQ form's DequantizeLinear -> MatMul into its MatMulNBits kernel and by
default (``session.qdq_matmulnbits_accuracy_level`` 4) quantizes the activations to int8 there,
another computation (2% apart); the QDQ comparison sets that level to 1 (float32), the level the
MatMulNBits form's nodes carry.
"""

from __future__ import annotations

import numpy as np
import pytest

from lite.schema.reader import read_model
from lite.tools import converter
from tests.support.e2e import build_lite, predict
from tests.support.quantized import ZOO_SIZES, random_feeds, run_onnxruntime, weight_only

FLOAT32_CONFIG = {"session.qdq_matmulnbits_accuracy_level": "1"}
_CACHE: dict[tuple[str, bool], tuple[object, object]] = {}


def _encoder(form: str, symmetric: bool):
    from lite.tools import zoo

    if (form, symmetric) not in _CACHE:
        model = weight_only(zoo.MODELS["bert_encoder"](**ZOO_SIZES["bert_encoder"]), form, symmetric)
        _CACHE[form, symmetric] = model, build_lite(converter.convert(model), 1)
    return _CACHE[form, symmetric]


def _relative_difference(actual: np.ndarray, expected: np.ndarray) -> float:
    return float(np.abs(actual - expected).max() / np.abs(expected).max())


def _cosine(actual: np.ndarray, expected: np.ndarray) -> float:
    a, e = actual.astype(np.float64).ravel(), expected.astype(np.float64).ravel()
    return float(a @ e / (np.linalg.norm(a) * np.linalg.norm(e)))


@pytest.mark.parametrize(("form", "symmetric"), [  # NOTE: two of the four by default, all under -m slow
    pytest.param("matmulnbits", True, id="matmulnbits-symmetric"), pytest.param("qdq", False, id="qdq-asymmetric"),
    pytest.param("matmulnbits", False, id="matmulnbits-asymmetric", marks=pytest.mark.slow),
    pytest.param("qdq", True, id="qdq-symmetric", marks=pytest.mark.slow)])
def test_a_4_bit_encoder_agrees_with_onnxruntime(form, symmetric):
    model, lite_model = _encoder(form, symmetric)
    quantized = {n.op_type for n in model.graph.node} & {"MatMulNBits", "DequantizeLinear"}
    assert quantized == {"MatMulNBits" if form == "matmulnbits" else "DequantizeLinear"}
    rng = np.random.default_rng(7)
    for _ in range(3):
        feeds = random_feeds(model, rng)
        actual = predict(lite_model, feeds)[0]
        expected = run_onnxruntime(model, feeds, config=FLOAT32_CONFIG)[0]
        assert _relative_difference(actual, expected) <= 1e-4
        assert _cosine(actual, expected) >= 0.99999


def test_the_4_bit_weights_stay_4_bit_in_the_lite_file():
    model, _ = _encoder("matmulnbits", False)
    graph = read_model(converter.convert(model))
    weights = [graph.tensors[n.inputs[0]] for n in graph.nodes if n.op_type == "DequantizeLinear"]
    assert len(weights) == 8 and all(w.dtype.name == "uint4" and w.is_const for w in weights)
