"""onnxruntime's own warnings stay quiet in every session Delite makes, unless DELITE_LOG asks for them."""

import os
import subprocess
import sys

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

ort = pytest.importorskip("onnxruntime")

from lite.extras import ORT_ERRORS_ONLY, ort_session_options  # noqa: E402


def old_style_model():
    """Initializers also listed as graph inputs (older exporters): onnxruntime warns about each."""
    weights = [numpy_helper.from_array(np.full((4, 4), i + 1, np.float32), f"w{i}") for i in range(3)]
    nodes = [helper.make_node("MatMul", ["x", "w0"], ["h"]), helper.make_node("MatMul", ["h", "w1"], ["y"])]
    inputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, 4] if n == "x" else [4, 4])
              for n in ["x", "w0", "w1", "w2"]]
    graph = helper.make_graph(nodes, "old", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
                              weights)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


def benchmark(path, log: str | None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "DELITE_LOG"}
    env.update({"DELITE_LOG": log} if log else {})
    return subprocess.run([sys.executable, "-m", "lite.tools.benchmark", str(path), "--compare", "onnxruntime",
                           "--loop-count", "1", "--warmup", "0", "--pause-ms", "0", "--no-memory"],
                          capture_output=True, text=True, env=env, timeout=300)


def test_lite_benchmark_prints_no_onnxruntime_warning_unless_asked(tmp_path):
    path = tmp_path / "old.onnx"
    path.write_bytes(old_style_model().SerializeToString())
    quiet = benchmark(path, None)
    assert quiet.returncode == 0, quiet.stderr
    assert "[W:onnxruntime" not in quiet.stdout + quiet.stderr
    assert "ratio of medians" in quiet.stdout
    loud = benchmark(path, "debug")
    assert loud.returncode == 0 and "[W:onnxruntime" in loud.stderr


def test_session_options_log_errors_only_unless_asked_or_set(monkeypatch):
    monkeypatch.delenv("DELITE_LOG", raising=False)
    assert ort_session_options().log_severity_level == ORT_ERRORS_ONLY
    assert ort_session_options(verbose=True).log_severity_level == -1  # onnxruntime's own default
    mine = ort.SessionOptions()
    mine.log_severity_level = 1
    assert ort_session_options(mine).log_severity_level == 1
    monkeypatch.setenv("DELITE_LOG", "debug")
    assert ort_session_options().log_severity_level == -1


def test_the_ort_delegate_sessions_log_errors_only(monkeypatch):
    from lite.delegates.onnxruntime import ORTDelegate

    monkeypatch.delenv("DELITE_LOG", raising=False)
    assert ORTDelegate()._options(2).log_severity_level == ORT_ERRORS_ONLY
    monkeypatch.setenv("DELITE_LOG", "warning")
    assert ORTDelegate()._options(2).log_severity_level == -1
