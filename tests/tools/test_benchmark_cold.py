"""lite-benchmark --cold: real child processes on a one-convolution model; the kernels compile into a temporary
cache (never the user's), the warm child reuses it, onnxruntime's session creation beside them; child failures
and time-outs say which child and why."""

from __future__ import annotations

import io
import json
import tempfile

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from lite.kernels import fast
from lite.tools import cold_start
from lite.tools.benchmark import main

QUICK = ["--loop-count", "2", "--warmup", "0"]
COMPILED = fast.enabled()  # NOTE: asked here, before a test points the cache variables elsewhere


def conv_relu():
    w = numpy_helper.from_array(np.random.default_rng(5).standard_normal((4, 3, 3, 3)).astype(np.float32), "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1] * 4), helper.make_node("Relu", ["c"], ["y"])]
    graph = helper.make_graph(nodes, "conv_relu", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [w])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


@pytest.fixture
def model(tmp_path):
    path = tmp_path / "conv_relu.onnx"
    path.write_bytes(conv_relu().SerializeToString())
    return path


@pytest.fixture
def user_cache(tmp_path, monkeypatch):
    """The user's own cache folders, which --cold must leave alone; the temporary folders go to ``tmp``."""
    folder = tmp_path / "user_cache"
    folder.mkdir()
    monkeypatch.setenv("XDG_CACHE_HOME", str(folder))
    monkeypatch.setenv("DELITE_NUMBA_CACHE", str(folder / "numba"))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    return folder


@pytest.mark.slow  # NOTE: compiles the kernels into an empty cache every run: seconds to tens of seconds
def test_cold_warm_and_onnxruntime_each_in_a_fresh_process(model, user_cache, tmp_path, capsys):
    pytest.importorskip("onnxruntime")
    out = tmp_path / "cold.json"
    assert main([str(model), "--cold", "--compare", "onnxruntime", "--thread-num", "1", "--json", str(out),
                 *QUICK]) == 0
    text = capsys.readouterr().out
    for row in ("lite cold", "lite warm", "onnxruntime", "cold build / warm build",
                "warm build / onnxruntime session creation", "first predict / steady (lite warm)"):
        assert row in text, row
    report = json.loads(out.read_text())
    runs = report["runs"]
    assert list(runs) == ["lite cold", "lite warm", "onnxruntime"]
    assert report["ratios"]["cold build / warm build"] == runs["lite cold"]["build_s"] / runs["lite warm"]["build_s"]
    for run in runs.values():
        assert len(run["steady_samples_s"]) == 2 and run["steady_predict_s"] == np.median(run["steady_samples_s"])
        assert run["import_s"] > 0 and run["build_s"] > 0 and run["first_predict_s"] > 0
    assert {"convert", "parse", "prepare"} <= set(runs["lite cold"]["build_stages"])
    if COMPILED:
        assert runs["lite cold"]["cached_kernels"] > 0  # compiled into the empty cache...
        assert runs["lite warm"]["cached_kernels"] == runs["lite cold"]["cached_kernels"]  # ...and reused
    if str(model).endswith(".onnx"):  # NOTE: the warm run maps what the cold one converted
        assert runs["lite cold"]["converted_models"] == runs["lite warm"]["converted_models"] == 1
        assert "converted models in the cache" in text
    assert not {"numba", "delite"} & {p.name for p in user_cache.iterdir()}  # the user's Delite caches untouched
    assert not any((tmp_path / "tmp").iterdir())  # the temporary cache is removed


def test_without_onnxruntime_the_report_has_two_rows_and_no_session_ratio():
    runs = {"lite cold": cold_start.StartUp(0.1, 8.0, 0.4, 0.1, {"prepare": 7.9, "jit": 7.5}, [0.1], 12),
            "lite warm": cold_start.StartUp(0.1, 2.0, 0.3, 0.1, {"prepare": 1.9, "jit": 0.2}, [0.1], 12)}
    report = cold_start.ColdReport("m.onnx", ["native"], 1, 1, 0, runs, cold_start.ratios(runs))
    printed = io.StringIO()
    cold_start.print_report(report, printed)
    rows = [line.split()[:2] for line in printed.getvalue().splitlines()]
    assert ["lite", "cold"] in rows and ["lite", "warm"] in rows and ["onnxruntime"] not in [r[:1] for r in rows]
    assert "warm build / onnxruntime" not in printed.getvalue()
    assert "of which kernels compiled or loaded 7500.0 ms" in printed.getvalue()
    assert "kernels in the cache after the cold run: 12; after the warm run: 12" in printed.getvalue()
    assert "compiled kernels: off" in printed.getvalue()  # no target recorded: the numpy kernels ran


@pytest.mark.parametrize(("target", "files", "unbundled", "said"), [
    ("x86-64-v3", 40, "", "x86-64-v3: 40 cache files copied from the ahead-of-time bundle"),
    ("x86-64-v4", 0, "", "no ahead-of-time bundle copied (none installed (python -m lite.tools.kernel_bundle build))"),
    ("x86-64-v3", 0, "the installed one was made for numba 0.1", "no ahead-of-time bundle copied (the installed one "
                                                                  "was made for numba 0.1): every one compiled"),
    ("host", 0, "", "target this CPU model (no instruction-set level): every one compiled")])
def test_the_report_says_where_the_cold_run_found_its_kernels(target, files, unbundled, said):
    runs = {name: cold_start.StartUp(0.1, 1.0, 0.1, 0.1, {}, [0.1], 3, target, files, unbundled)
            for name in ("lite cold", "lite warm")}
    report = cold_start.ColdReport("m.onnx", ["native"], 1, 1, 0, runs, cold_start.ratios(runs))
    printed = io.StringIO()
    cold_start.print_report(report, printed)
    assert said in printed.getvalue()


def test_a_failing_child_says_which_and_why(model, user_cache, capsys):
    assert main([str(model), "--cold", "--delegate", "no_such_module:Delegate", *QUICK]) == 1
    err = capsys.readouterr().err
    assert "the lite child process failed (exit status 1)" in err and "no_such_module" in err


def test_a_child_past_its_time_is_stopped(model, user_cache, monkeypatch, capsys):
    monkeypatch.setattr(cold_start, "CHILD_TIMEOUT_S", 0.01)
    assert main([str(model), "--cold", *QUICK]) == 1
    assert "ran past 0.01 s and was stopped" in capsys.readouterr().err


def test_ratios_of_the_runs():
    def run(build, first, steady):
        return cold_start.StartUp(0.1, build, first, steady)

    runs = {"lite cold": run(8.0, 0.4, 0.1), "lite warm": run(2.0, 0.3, 0.1), "onnxruntime": run(0.5, 0.2, 0.1)}
    assert cold_start.ratios(runs) == pytest.approx({
        "cold build / warm build": 4.0, "warm build / onnxruntime session creation": 4.0,
        "first predict / steady (lite cold)": 4.0, "first predict / steady (lite warm)": 3.0,
        "first predict / steady (onnxruntime)": 2.0})
    assert runs["lite cold"].to_first_output_s == pytest.approx(8.5)


@pytest.mark.parametrize("argv, message", [
    (["--cold", "--generate"], "different runs"), (["--cold", "--suite"], "different runs"),
    (["--cold", "--compare", "native"], "not --compare native"), (["--generate", "--new-tokens", "0"], ">= 1"),
])
def test_modes_that_do_not_go_together_are_refused(model, argv, message, capsys):
    with pytest.raises(SystemExit):
        main([str(model), *argv])
    assert message in capsys.readouterr().err


def test_missing_in_data_is_refused_before_any_child(model, user_cache, tmp_path, capsys):
    assert main([str(model), "--cold", "--in-data", str(tmp_path / "none.npz"), *QUICK]) == 1
    assert "none.npz: no such file" in capsys.readouterr().err
