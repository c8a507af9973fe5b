"""lite-delegate-test: the bundled delegates pass it, a broken delegate lands in exactly the categories of its
faults, expected failures keep the exit status 0, workers are time-bounded, and the pytest plugin reports the same."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from lite.tools import delegate_test
from lite.tools.delegate_test import Case, Result, Runner, Settings
from tests.support.broken_delegate import EXPECTED

ROOT = Path(__file__).resolve().parents[2]
BROKEN = "tests.support.broken_delegate:BrokenDelegate"
BROKEN_OPS = ",".join(EXPECTED)
EXPECTED_LISTS = ROOT / "tests" / "support" / "delegate_expected"


def run_kit(tmp_path: Path, *argv: str) -> tuple[int, dict]:
    """``lite-delegate-test argv --json``: its exit status and report."""
    report = tmp_path / "report.json"
    status = delegate_test.main([*argv, "--json", str(report)])
    return status, json.loads(report.read_text())


def categories_by_op(report: dict) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for case in report["cases"]:
        found.setdefault(case["op"], set()).add(case["category"])
    return found


# ---- the broken delegate ----------------------------------------------------------------------------------


def test_a_broken_delegate_lands_in_the_category_of_each_fault_and_fails_the_run(tmp_path, capsys):
    status, report = run_kit(tmp_path, "--delegate", BROKEN, "--ops", BROKEN_OPS, "--markdown", str(tmp_path / "r.md"))
    assert status == 1
    assert categories_by_op(report) == {op: {category} for op, category in EXPECTED.items()}
    cases = {c["case_id"]: c for c in report["cases"]}
    assert cases["op:test_sigmoid"]["message"] == "BrokenDelegate: activation SIGMOID: the broken NPU has no unit " \
                                                  "for it"
    assert "the device compiler rejected Neg" in cases["op:test_neg"]["message"]
    assert "expected float32[3, 4, 5]" in cases["op:test_exp"]["message"]
    relu = cases["op:test_relu"]
    assert relu["nodes_delegated"] == relu["nodes_total"] == 1 and relu["max_abs_error"] == pytest.approx(1.0)
    assert relu["sqnr_db"] < 0 and relu["unexpected"]
    assert cases["op:test_add"]["sqnr_db"] is None and cases["op:test_add"]["max_abs_error"] == 0
    markdown = (tmp_path / "r.md").read_text()
    command = f"lite-delegate-test --delegate {BROKEN} --ops {BROKEN_OPS} --markdown {tmp_path / 'r.md'} --json"
    assert report["command"].startswith(command) and f"\nCommand: `{command}" in markdown
    assert markdown.index("## Failures") < markdown.index("## By op")
    table = markdown.split("## By op")[1]
    assert table.index("| Add |") > max(table.index(f"| {op} |") for op in ("Relu", "Neg", "Abs", "Exp"))
    assert "op:test_relu | OUTPUT_MISMATCH | no |" in capsys.readouterr().out


def test_listed_failures_do_not_fail_the_run_and_a_listed_pass_is_reported(tmp_path, capsys):
    listed = tmp_path / "expected.txt"
    listed.write_text("# the broken delegate's known faults\n"
                      "op:test_relu  adds one\nop:test_neg*  prepare raises\nop:test_abs  noise\n"
                      "op:test_exp*  wrong shape\nop:test_add  listed, yet it passes\n")
    status, report = run_kit(tmp_path, "--delegate", BROKEN, "--ops", BROKEN_OPS, "--expected-failures", str(listed),
                             "--markdown", str(tmp_path / "r.md"))
    assert status == 0 and report["unexpected"] == 0 and report["fixed"] == 1
    assert {c["expected"] for c in report["cases"] if c["case_id"].startswith("op:test_neg")} == {"prepare raises"}
    assert "| op:test_add | SUCCESS | PASSED (remove it from the list) |" in (tmp_path / "r.md").read_text()


def test_the_expected_failures_file_reads_ids_patterns_and_reasons(tmp_path):
    path = tmp_path / "x.txt"
    path.write_text("# comment\n\nop:test_a   why a\nmodel:*_int8:resize  int8 resize\nop:test_b\n")
    listed = delegate_test.read_expected_failures(path)
    assert listed == {"op:test_a": "why a", "model:*_int8:resize": "int8 resize", "op:test_b": "(no reason given)"}
    results = [Result("model:resnet18_int8:resize", "m", "RESIZE_FAIL"), Result("model:resnet18:resize", "m",
                                                                                 "RESIZE_FAIL")]
    delegate_test.mark_expected(results, listed)
    assert [r.unexpected for r in results] == [False, True] and delegate_test.exit_status(results) == 1


# ---- comparisons and progress -----------------------------------------------------------------------------


def test_outputs_compare_by_relative_l2_exact_integers_and_matching_nan():
    x = np.linspace(-1, 1, 100, dtype=np.float32)
    assert delegate_test.mismatch(x * (1 + 5e-5), x, 1e-4) is None
    assert "relative L2" in delegate_test.mismatch(x * 1.01, x, 1e-4)
    assert delegate_test.mismatch(x * 1.005, x, 1e-2) is None
    assert delegate_test.mismatch(np.array([1, 2]), np.array([1, 3]), 1e-2) == "1 of 2 values differ"
    assert "NaN" in delegate_test.mismatch(np.array([1.0, 0.0]), np.array([1.0, np.nan]), 1e-4)
    assert delegate_test.mismatch(np.array([1.0, np.nan]), np.array([1.0, np.nan]), 1e-4) is None
    assert "float32[2, 50]" in delegate_test.mismatch(x.reshape(2, 50), x, 1e-4)


def test_ml_dtypes_floats_compare_by_value_and_narrow_ints_exactly():
    f8 = np.array([np.nan, 1.0, -2.0], ml_dtypes.float8_e4m3fn)
    assert delegate_test.mismatch(f8, f8.copy(), 1e-4) is None  # NaN matches NaN, as for float32
    assert "relative L2" in delegate_test.mismatch(np.array([np.nan, 1.0, -4.0], f8.dtype), f8, 1e-4)
    i4 = np.array([1, -2], ml_dtypes.int4)
    assert delegate_test.mismatch(np.array([1, -3], ml_dtypes.int4), i4, 1e-2) == "1 of 2 values differ"


def test_progress_gives_an_eta_on_stderr():
    stream = io.StringIO()
    progress = delegate_test.Progress(2, stream, every=0)
    progress(Result("op:a", "A", "SUCCESS"))
    progress(Result("op:b", "B", "RUN_FAIL", "boom"))
    lines = stream.getvalue().splitlines()
    assert lines[0].startswith("[1/2] 50% ETA ") and lines[1].endswith("op:b RUN_FAIL: boom")


# ---- time bounds and crashes ------------------------------------------------------------------------------


@pytest.mark.parametrize("mode, words", [("hang", "timed out after 2 s in run"),
                                         ("crash", "the worker process died (exit code 3) in run")])
def test_a_hanging_or_crashing_case_fails_alone_and_the_next_runs(mode, words):
    settings = Settings("tests.support.broken_delegate:StuckDelegate", (("mode", mode),), timeout=2)
    with Runner(settings, 1) as runner:
        stuck, after = runner.run([Case("op", "test_add", "Add"), Case("op", "test_sigmoid", "Sigmoid")])
    assert (stuck.category, stuck.message) == ("RUN_FAIL", words)
    assert after.category == "SUCCESS_UNDELEGATED"


# ---- the bundled delegates ----------------------------------------------------------------------------------


PACKAGES = {"ort": "onnxruntime", "tvm": "tvm"}
OPTIONS = {"tvm": ("trust_saved_code=true", "cache_dir=off")}  # as its report ran: saved partitions load, no disk cache


def _bundled(name: str) -> list[str]:
    """``--delegate NAME`` with the options its committed report used; skips when the delegate's package is missing."""
    if name in PACKAGES:
        pytest.importorskip(PACKAGES[name])
    return ["--delegate", name, *(arg for option in OPTIONS.get(name, ()) for arg in ("--delegate-option", option))]


@pytest.mark.parametrize("name, ops", [("ort", "Relu,Add,Conv"), ("example_npu", "MaxPool,GlobalAveragePool,Relu"),
                                       ("tvm", "Relu,Add,Conv")])
def test_a_bundled_delegate_passes_a_few_ops(name, ops, tmp_path):
    status, report = run_kit(tmp_path, *_bundled(name), "--ops", ops, "-j", "2")
    assert status == 0, [c for c in report["cases"] if c["unexpected"]]
    assert report["counts"]["SUCCESS"] >= 5
    assert report["precision"] == ("float16" if name == "example_npu" else "float32")


@pytest.mark.parametrize("name", ["ort", "example_npu", pytest.param("tvm", marks=pytest.mark.slow)])
def test_a_bundled_delegate_passes_every_check_of_a_small_model(name, tmp_path):
    status, report = run_kit(tmp_path, *_bundled(name), "--models", "inception_block")
    assert status == 0, [c for c in report["cases"] if c["unexpected"]]
    checks = {c["case_id"]: c for c in report["cases"]}
    assert set(checks) == {f"model:inception_block{s}" for s in ("", ":resize", ":save_load", ":fallback")}
    assert checks["model:inception_block"]["category"] == "SUCCESS"
    assert checks["model:inception_block:save_load"]["category"] == "SUCCESS"
    assert checks["model:inception_block:fallback"]["message"].endswith("nodes fell back to native")


MIN_SUCCESS = {"ort": 500, "tvm": 250, "example_npu": 20}  # node cases each delegate took and matched, at least


@pytest.mark.slow
@pytest.mark.parametrize("name", ["ort", "example_npu", "tvm"])
def test_a_bundled_delegate_passes_every_node_case_but_its_listed_gaps(name, tmp_path):
    listed = EXPECTED_LISTS / f"{name}.txt"
    status, report = run_kit(tmp_path, *_bundled(name), "--suite", "ops", "-j", "2", "--expected-failures", str(listed))
    assert status == 0, [c for c in report["cases"] if c["unexpected"]]
    assert report["fixed"] == 0, "remove the cases that pass from " + str(listed)
    assert report["counts"]["SUCCESS"] >= MIN_SUCCESS[name]


@pytest.mark.slow
@pytest.mark.parametrize("name", ["ort", "example_npu", "tvm"])
def test_a_bundled_delegate_passes_the_model_suite_quantized_too(name, tmp_path):
    listed = EXPECTED_LISTS / f"{name}.txt"
    status, report = run_kit(tmp_path, *_bundled(name), "--suite", "models", "--quantized", "-j", "2",
                             "--expected-failures", str(listed))
    assert status == 0, [c for c in report["cases"] if c["unexpected"]]
    assert report["counts"]["SUCCESS"] >= 10


# ---- the pytest plugin --------------------------------------------------------------------------------------


def run_pytest(tmp_path: Path, *argv: str) -> subprocess.CompletedProcess:
    """pytest with the plugin (installed as an entry point) in a folder without tests of its own."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rA", *argv],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)


def test_the_pytest_plugin_makes_an_item_per_case_failing_with_the_category(tmp_path):
    done = run_pytest(tmp_path, "--lite-delegate", BROKEN, "--lite-delegate-suite", "ops",
                      "--lite-delegate-ops", "Relu,Neg,Add,Sigmoid")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "FAILED lite_delegate::op:test_relu - op:test_relu: OUTPUT_MISMATCH" in done.stdout
    assert "FAILED lite_delegate::op:test_neg - op:test_neg: PREPARE_FAIL" in done.stdout
    assert "PASSED lite_delegate::op:test_add_bcast" in done.stdout
    assert "PASSED lite_delegate::op:test_sigmoid" in done.stdout
    assert "3 failed, 10 passed" in done.stdout


@pytest.mark.slow
def test_the_pytest_plugin_turns_listed_failures_into_xfails(tmp_path):
    (tmp_path / "expected.txt").write_text("op:test_relu  adds one\n")
    done = run_pytest(tmp_path, "--lite-delegate", BROKEN, "--lite-delegate-ops", "Relu,Add",
                      "--lite-delegate-expected-failures", "expected.txt", "-k", "relu or test_add_int8")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "XFAIL lite_delegate::op:test_relu - OUTPUT_MISMATCH (expected: adds one)" in done.stdout
    assert "1 passed, 7 deselected, 1 xfailed" in done.stdout


def test_the_pytest_plugin_adds_nothing_without_its_option(tmp_path):
    done = run_pytest(tmp_path, "--co")
    assert "lite_delegate" not in done.stdout and done.returncode == 5  # no tests collected


def test_the_pytest_plugin_refuses_a_delegate_that_does_not_load(tmp_path):
    done = run_pytest(tmp_path, "--lite-delegate", "no_such.module:Delegate", "--co")
    assert done.returncode == 4 and "--lite-delegate: InputError: cannot load delegate" in done.stderr
