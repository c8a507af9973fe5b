"""saved_bench: cold and saved builds in fresh processes, with the saved build's error against onnxruntime."""

import json

import pytest

from lite.tools import saved_bench

pytest.importorskip("onnxruntime")


def test_saved_bench_measures_both_builds_and_the_error(tmp_path, capsys):
    path = tmp_path / "rows.json"
    saved_bench.main(["--model", "inception_block", "--delegate", "example_npu", "--repeats", "1", "--json", str(path)])
    (row,) = json.loads(path.read_text())
    assert row["partitions"] == 1 and row["loaded"] == 7 and row["delegated"] == 7 and row["nodes"] == 8
    assert row["cold_s"] > 0 and row["saved_s"] > 0 and row["error"] < 2e-3  # float16 inside the NPU
    assert row["not_loaded"] == []
    assert "| inception_block | example_npu |" in capsys.readouterr().out


def test_delegate_options_reach_the_compile_and_the_fresh_builds(tmp_path, capsys):
    path = tmp_path / "rows.json"
    saved_bench.main(["--model", "inception_block", "--delegate", "example_npu", "--delegate-option",
                      "min_nodes_per_partition=100", "--repeats", "1", "--json", str(path)])
    (row,) = json.loads(path.read_text())
    assert row["partitions"] == 0 and row["loaded"] == 0 and row["delegated"] == 0 and row["nodes"] == 8
    assert "| inception_block | example_npu min_nodes_per_partition=100 |" in capsys.readouterr().out
