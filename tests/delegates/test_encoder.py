"""A BERT-style encoder (tests/support/encoder.py) runs whole inside one ORT and one TVM partition, and
keeps matching onnxruntime after the batch and the sequence length change (no rebuild)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import lite
from lite.delegates.onnxruntime import ORTDelegate
from lite.tools.converter import convert
from tests.support.encoder import export_encoder
from tests.support.oracle import relative_l2, run_onnxruntime

torch = pytest.importorskip("torch")


@pytest.fixture(scope="module")
def encoder_onnx():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the TorchScript exporter's deprecation notices
        return export_encoder(torch)


def tvm_delegate():
    pytest.importorskip("tvm")
    from lite.delegates.tvm import TVMDelegate

    return TVMDelegate("llvm", cache_dir=None)


@pytest.mark.parametrize("make_delegate", [lambda: ORTDelegate(), tvm_delegate], ids=["ort", "tvm"])
def test_the_whole_encoder_is_one_partition_and_follows_new_shapes(encoder_onnx, make_delegate):
    model = lite.Model()
    model.build(convert(encoder_onnx), lite.ModelType.LITE, lite.Context(thread_num=2, delegates=[make_delegate()]))
    computed = [r for r in model.partition_report() if r.runs_on != "folded"]  # shape arithmetic is folded
    assert {(r.runs_on, r.graph_kernel) for r in computed} == {(computed[0].runs_on, computed[0].graph_kernel)}
    assert computed[0].runs_on != "native" and len(model.graph_kernels()) == 1
    assert {"LayerNormFusion", "Activation", "MatMulFusion", "Attention"} <= {r.op_type for r in computed}
    rng = np.random.default_rng(5)
    for shape in ([2, 32, 64], [1, 32, 64], [3, 32, 64], [3, 64, 64]):
        x = rng.standard_normal(shape).astype(np.float32)
        if list(model.get_inputs()[0].shape) != shape:
            model.resize(model.get_inputs(), [shape])
        [y] = model.predict([x])
        [expected] = run_onnxruntime(encoder_onnx, {"x": x})
        assert relative_l2(y.get_data_to_numpy(), expected) < 1e-4, shape
    assert len(model.graph_kernels()) == 1
