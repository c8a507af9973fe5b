"""Builds and checks shared by the TVM delegate tests (tests/delegates/test_tvm*.py); import it after
``pytest.importorskip("tvm")``."""

from __future__ import annotations

import functools

import numpy as np
import onnx

import lite
from lite.delegates.tvm import TVMDelegate
from tests.support import delegate_graphs
from tests.support.delegate_graphs import feeds_for
from tests.support.oracle import relative_l2, run_onnxruntime

TVM = "TVMDelegate"
RTOL = 1e-4

build = functools.partial(delegate_graphs.build, thread_num=2)


def tvm_delegate(**options) -> TVMDelegate:
    options.setdefault("cache_dir", None)
    return TVMDelegate("llvm", **options)


def assert_matches(model: lite.Model, onnx_model: onnx.ModelProto, feeds: dict[str, np.ndarray],
                   rtol: float = RTOL) -> list[float]:
    """Predicts and compares every output with onnxruntime; returns the relative L2 errors."""
    outputs = model.predict([feeds[t.name] for t in model.get_inputs()])
    expected = run_onnxruntime(onnx_model, feeds)
    errors = []
    for got, want in zip(outputs, expected, strict=True):
        got = got.get_data_to_numpy()
        assert got.shape == want.shape and got.dtype == want.dtype
        errors.append(relative_l2(got, want))
        assert errors[-1] < rtol, f"{got.shape}: relative L2 {errors[-1]}"
    return errors


def rows(model: lite.Model) -> dict[str, lite.PartitionRow]:
    return {row.node: row for row in model.partition_report()}


def op_types(model: lite.Model) -> list[str]:
    return [r.op_type for r in model.partition_report()]


def check_on_tvm(onnx_model: onnx.ModelProto, partitions: int = 1, **convert_args) -> lite.Model:
    """Builds with TVM, checks every node runs in TVM graph kernels, compares with onnxruntime."""
    model = build(onnx_model, tvm_delegate(), **convert_args)
    report = model.partition_report()
    assert {(r.runs_on, r.reason) for r in report} == {(TVM, "")}, report
    assert len({r.graph_kernel for r in report}) == partitions
    assert_matches(model, onnx_model, feeds_for(onnx_model))
    return model


def check_lowering(onnx_model: onnx.ModelProto, lite_ops: list[str] | None) -> lite.Model:
    """``check_on_tvm``, then the .lite op types that ran (when ``lite_ops`` names them)."""
    model = check_on_tvm(onnx_model)
    if lite_ops is not None:
        assert op_types(model) == lite_ops
    return model
