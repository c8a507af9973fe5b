"""lite-benchmark: every flag, accuracy failures, profiling, JSON, and the suite."""

import io
import json
import sys

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import lite
from lite.tools.benchmark import (
    Latency,
    Report,
    build_lines,
    cached_kernels,
    main,
    parse_input_shapes,
    print_report,
    record_latencies,
)
from lite.tools.converter import convert


def cnn(op_after="Relu", kernel=3):
    rng = np.random.default_rng(3)
    w = numpy_helper.from_array(rng.standard_normal((4, 3, kernel, kernel)).astype(np.float32), "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[kernel // 2] * 4),
             helper.make_node(op_after, ["c"], ["y"], name="after"),
             helper.make_node("Concat", ["y", "c"], ["z"], name="concat", axis=1)]
    graph = helper.make_graph(nodes, "cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 8, 8])],
                              [helper.make_tensor_value_info("z", TensorProto.FLOAT, None)], [w])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("bench")
    (folder / "cnn.onnx").write_bytes(cnn().SerializeToString())
    convert(cnn(), folder / "cnn.lite")
    convert(cnn(), folder / "cnn_static.lite", input_shapes={"x": [2, 3, 8, 8]})
    return folder


FAST = ["--loop-count", "2", "--warmup", "1", "--pause-ms", "0", "--input-shapes", "x:2,3,8,8", "--no-memory"]


def test_compare_with_onnxruntime_profile_and_json(files, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # NOTE: where onnxruntime would write its trace without a prefix
    out = files / "r.json"
    assert main(["--model", str(files / "cnn.onnx"), "--compare", "onnxruntime", "--time-profiling",
                 "--json", str(out), "--thread-num", "1", *FAST]) == 0
    text = capsys.readouterr().out
    assert "ratio of medians" in text and "per op type" in text and "Conv2DFusion" in text
    report = json.loads(out.read_text())
    assert report["input_shapes"] == {"x": [2, 3, 8, 8]}
    assert report["accuracy"][0]["cosine_similarity"] > 0.999999
    assert report["onnxruntime_latency"]["median"] > 0 and report["ratio_of_medians"] > 0
    assert {"parse", "schedule", "delegate build", "prepare", "convert"} <= set(report["build_seconds"])
    assert abs(sum(r["percent"] for r in report["profile"]) - 100) < 1e-6
    assert report["profile_run_ms"] > 0
    theirs = report["onnxruntime_profile"]  # NOTE: its own profiler's trace, per op type after its optimizations
    assert "onnxruntime's own profile" in text and theirs["runs"] == 2 and theirs["run_ms"] > 0
    assert {r["op_type"] for r in theirs["rows"]} >= {"Conv", "Concat"}
    assert all(r["count"] >= 1 and r["avg_ms"] > 0 for r in theirs["rows"])
    assert abs(sum(r["percent"] for r in theirs["rows"]) - 100) < 1e-6
    assert not list(tmp_path.iterdir())  # NOTE: its trace went to a temporary folder, gone now



def test_gemm_floor_times_each_native_matmul(files, capsys):
    """A 1x1 convolution: one matmul (a 3x3 one on 3 channels runs the direct kernel, no matmul)."""
    out, model = files / "floor.json", files / "pointwise.onnx"
    model.write_bytes(cnn(kernel=1).SerializeToString())
    assert main(["--model", str(model), "--compare", "onnxruntime", "--gemm-floor",
                 "--json", str(out), *FAST]) == 0
    assert "matmul floor: the native kernels' 1 matmuls alone (warm)" in capsys.readouterr().out
    report = json.loads(out.read_text())
    assert report["matmul_count"] == 1 and 0 < report["matmul_floor_ms"] < 1e3

def test_lite_file_with_onnx_for_comparison_and_a_delegate(files, capsys):
    argv = ["--model", str(files / "cnn.lite"), "--onnx", str(files / "cnn.onnx"), "--compare", "onnxruntime",
            "--delegate", "tests.support.delegates:ConvAndConcat", "--delegate-option", "label=acc",
            "--time-profiling", *FAST]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "delegated in" in text and "[ConvAndConcat]" in text


def test_reference_file_pass_and_miss(files, tmp_path, capsys):
    x = np.random.default_rng(5).standard_normal((2, 3, 8, 8)).astype(np.float32)
    np.savez(tmp_path / "in.npz", x=x)
    from tests.support.oracle import run_onnxruntime

    (expected,) = run_onnxruntime(cnn(), {"x": x})
    np.savez(tmp_path / "good.npz", z=expected)
    np.savez(tmp_path / "bad.npz", z=expected * 1.5)
    base = ["--model", str(files / "cnn.lite"), "--in-data", str(tmp_path / "in.npz"), *FAST[:6]]
    assert main([*base, "--benchmark-data", str(tmp_path / "good.npz"), "--accuracy-threshold", "1e-5"]) == 0
    assert main([*base, "--benchmark-data", str(tmp_path / "bad.npz"), "--accuracy-threshold", "1e-3"]) == 1
    assert "accuracy check failed for output 'z'" in capsys.readouterr().err


def test_nan_output_always_fails(tmp_path, capsys):
    onnx_model = cnn(op_after="Log")  # log of negative conv outputs -> NaN
    path = tmp_path / "log.onnx"
    path.write_bytes(onnx_model.SerializeToString())
    assert main(["--model", str(path), *FAST]) == 1
    assert "NaN/Inf" in capsys.readouterr().err


def test_zoo_model_and_bad_arguments(files, capsys):
    assert main(["--model", "zoo:add_chain", "--loop-count", "2", "--warmup", "0", "--pause-ms", "0"]) == 0
    assert "500 nodes" in capsys.readouterr().out
    assert main(["--model", str(files / "cnn.lite"), "--input-shapes", "nope:1,2"]) == 1
    assert "--input-shapes names ['nope']" in capsys.readouterr().err
    assert main(["--model", str(files / "cnn.lite")]) == 1  # dynamic batch, no shapes given
    assert "give --input-shapes" in capsys.readouterr().err
    assert main(["--model", str(files / "cnn.lite"), "--compare", "onnxruntime", *FAST]) == 1
    assert "needs the ONNX model" in capsys.readouterr().err


def test_parse_input_shapes():
    assert parse_input_shapes("a:1,2;b:3") == {"a": [1, 2], "b": [3]}
    with pytest.raises(Exception, match="name:1,3,224,224"):
        parse_input_shapes("a=1,2")


def test_help_shows_examples(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    assert "lite-benchmark zoo:resnet18 --compare onnxruntime" in capsys.readouterr().out


@pytest.mark.slow  # NOTE: the suite's table and runs are tested in test_bench_suite.py by default
def test_suite_writes_table(tmp_path, capsys):
    assert main(["--suite", "--suite-models", "add_chain", "--suite-dir", str(tmp_path), "--loop-count", "2",
                 "--warmup", "0"]) == 0
    table = (tmp_path / "suite.md").read_text()
    assert "| add_chain | native |" in table and "us per kernel" in table
    assert "running add_chain / native ..." in capsys.readouterr().err  # each row says it started


def test_without_a_reference_it_says_so_and_checks_for_nan_only(files, capsys):
    out = files / "alone.json"
    assert main(["--model", str(files / "cnn.lite"), "--json", str(out), *FAST]) == 0
    text = capsys.readouterr().out
    assert "no reference" in text and "checked for NaN/Inf only" in text and "z: finite" in text
    assert "cosine similarity" not in text
    [acc] = json.loads(out.read_text())["accuracy"]
    assert acc["mean_relative_error"] is None and acc["finite"] is True
    assert main(["--model", str(files / "cnn.lite"), "--accuracy-threshold", "1e-4", *FAST]) == 1
    assert "no reference to compare with" in capsys.readouterr().err


def test_a_delegate_compared_with_the_native_kernels(files, capsys):
    assert main(["--model", str(files / "cnn.lite"), "--compare", "native", "--delegate",
                 "tests.support.delegates:ConvAndConcat", "--accuracy-threshold", "1e-6", *FAST]) == 0
    text = capsys.readouterr().out
    assert "accuracy against native (Delite's own kernels)" in text and "onnxruntime" not in text
    assert "latency (native):" in text and "ratio of medians (lite / native):" in text


def test_measured_placement_shows_its_table_and_json(files, capsys, tmp_path):
    out = tmp_path / "report.json"
    assert main(["--model", str(files / "cnn_static.lite"), "--delegate", "tests.support.delegates:ConvAndConcat",
                 "--placement", "measured", "--placement-cache", "off", "--json", str(out), *FAST]) == 0
    text = capsys.readouterr().out
    assert "measured placement:" in text and "ConvAndConcat" in text and "placement " in text.split("build:")[1]
    rows = json.loads(out.read_text())["placement"]
    assert rows and {r["role"] for r in rows} >= {"proposed"} and all(r["native_seconds"] > 0 for r in rows)


def test_profile_tables_say_they_are_per_predict(files, capsys):
    assert main(["--model", str(files / "cnn.lite"), "--time-profiling", *FAST]) == 0
    text = capsys.readouterr().out
    assert "per op type (ms per predict, mean of 2 profiled predicts" in text
    assert "per kernel (ms per predict, mean of 2 profiled predicts" in text


def test_a_delegate_that_runs_nothing_is_reported_and_can_fail_the_run(files, capsys):
    argv = ["--model", str(files / "cnn.lite"), "--delegate", "tests.support.delegates:AbsentDevice", *FAST]
    assert main(argv) == 0
    assert "AbsentDevice declined: no accelerator on this machine" in capsys.readouterr().out
    assert main([*argv, "--require-delegate"]) == 3
    assert "AbsentDevice ran no node" in capsys.readouterr().err


@pytest.mark.parametrize("name", ["resnet19", "np", "_export"])
def test_an_unknown_zoo_name_lists_the_zoo(name, capsys):
    assert main(["--model", f"zoo:{name}"]) == 1
    err = capsys.readouterr().err
    assert f"unknown zoo model {name!r}; the zoo has" in err and "resnet18" in err


def test_missing_packages_name_what_to_install(files, monkeypatch, capsys):
    import builtins

    real_import = builtins.__import__

    def without(blocked):
        def fake_import(name, *args, **kwargs):
            if name.split(".")[0] in blocked:
                raise ModuleNotFoundError(f"No module named {name!r}")
            return real_import(name, *args, **kwargs)
        return fake_import

    monkeypatch.setattr(builtins, "__import__", without({"onnxruntime"}))
    assert main(["--model", str(files / "cnn.onnx"), "--compare", "onnxruntime", *FAST]) == 1
    assert 'pip install "delite[ort]"' in capsys.readouterr().err


def test_zoo_models_need_no_torch(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch now raises ImportError
    assert main(["--model", "zoo:inception_block", "--loop-count", "1", "--warmup", "0", "--pause-ms", "0"]) == 0
    assert "zoo:inception_block" in capsys.readouterr().out


def test_the_pause_is_only_taken_when_interleaving_and_said(files, capsys):
    out = files / "pause.json"
    assert main(["--model", str(files / "cnn.lite"), "--loop-count", "2", "--warmup", "0", "--input-shapes",
                 "x:2,3,8,8", "--json", str(out)]) == 0
    assert json.loads(out.read_text())["pause_ms"] == 0.0
    assert main(["--model", str(files / "cnn.onnx"), "--compare", "onnxruntime", "--pause-ms", "5", "--json",
                 str(out), *FAST[:4], "--input-shapes", "x:2,3,8,8"]) == 0
    assert "5 ms pause before each" in capsys.readouterr().out and json.loads(out.read_text())["pause_ms"] == 5.0


def test_the_model_is_positional_as_in_the_other_tools(files, capsys):
    assert main([str(files / "cnn.lite"), *FAST]) == 0
    assert "nodes:" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main([str(files / "cnn.lite"), "--model", str(files / "cnn.lite")])
    assert "give the model once" in capsys.readouterr().err


def test_loops_warmup_and_each_engines_memory_alone(files, capsys):
    out = files / "memory.json"
    argv = ["--model", str(files / "cnn.onnx"), "--compare", "onnxruntime", "--json", str(out), *FAST[:-1]]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert ("loops: 2 timed predicts per engine after 1 warmup, interleaved run by run with a 0 ms pause before "
            "each") in text
    assert "peak memory, each engine alone in a child process (build and 3 predicts): lite " in text
    assert "peak RSS" not in text
    report = json.loads(out.read_text())
    assert report["loop_count"] == 2 and report["warmup"] == 1
    assert set(report["peak_memory_mib"]) == {"lite", "onnxruntime"}
    assert all(10 < mib < 4096 for mib in report["peak_memory_mib"].values())
    assert {"p10", "spread"} <= set(report["latency"]) and isinstance(report["noisy"], list)


def report_with(**fields) -> Report:
    base = {"model": "m", "delegates": ["native"], "thread_num": 1, "input_shapes": {}, "loop_count": 20,
            "warmup": 3, "kernel_cache": "/cache/jit-x",
            "build_seconds": {"convert": 0.1, "parse": 0.01, "prepare": 23.0, "jit": 22.5}}
    return Report(**{**base, **fields})


def test_first_build_compile_is_apart_from_the_build():
    text = build_lines(report_with(kernel_compile_seconds=22.5))
    assert "prepare 500.0 ms" in text and "jit " not in text
    assert ("first build: compiling kernels 22500.0 ms more, once per machine and version (cached in /cache/jit-x; "
            "later builds load them)") in text
    loaded = build_lines(report_with(build_seconds={"parse": 0.01, "prepare": 0.7, "jit": 0.3}))
    assert "prepare 700.0 ms" in loaded and "loaded from /cache/jit-x (within prepare)" in loaded
    assert "kernels" not in build_lines(report_with(build_seconds={"prepare": 0.1}))


def test_compiled_kernels_are_counted_in_the_cache(tmp_path):
    assert cached_kernels(None) == cached_kernels(tmp_path / "absent") == 0
    (tmp_path / "sub").mkdir()
    for name in ("a.nbi", "a-1.nbc", "sub/b-2.nbc"):
        (tmp_path / name).write_bytes(b"")
    assert cached_kernels(tmp_path) == 2


def test_a_spread_over_ten_percent_warns_that_the_ratio_is_noisy():
    report = report_with()
    record_latencies(report, [0.010, 0.0101, 0.0102, 0.0100, 0.0101], [0.010, 0.012, 0.016, 0.011, 0.010],
                     "onnxruntime")
    assert report.noisy == ["onnxruntime"] and report.latency.spread < 0.1 < report.onnxruntime_latency.spread
    out = io.StringIO()
    print_report(report, out)
    text = out.getvalue()
    assert "warning: times spread more than 10% of their median ((p90 - p10) / median: onnxruntime " in text
    assert "the ratio are noisy: rerun with more loops (--loop-count 100) on an idle machine" in text
    record_latencies(report, [0.010] * 5, [0.020] * 5, "native")
    assert report.noisy == [] and report.ratio_to_native == 0.5
    assert Latency.of([0.001, 0.002]).p10 == pytest.approx(1.1)


def test_a_zoo_model_says_its_weights_are_random(capsys):
    assert main(["zoo:add_chain", "--loop-count", "2", "--warmup", "0", "--pause-ms", "0", "--no-memory"]) == 0
    assert "weights: random (the zoo builds its models with random weights" in capsys.readouterr().out


def test_compare_onnxruntime_without_onnxruntime_says_so_before_building(monkeypatch, capsys):
    from lite.tools import benchmark

    def missing(package, feature):
        raise lite.MissingPackageError(f"{feature} needs {package}: pip install \"delite[ort]\"")

    def no_build(*_):
        raise AssertionError("built before it said onnxruntime is missing")

    monkeypatch.setattr(benchmark, "require", missing)
    monkeypatch.setattr(benchmark, "load_source", no_build)
    assert main(["zoo:add_chain", "--compare", "onnxruntime"]) == 1
    assert 'pip install "delite[ort]"' in capsys.readouterr().err
