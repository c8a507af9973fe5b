"""saved_bench: cold and saved builds in fresh processes, with the saved build's error against onnxruntime."""

import json

import pytest

from lite.tools import saved_bench

pytest.importorskip("onnxruntime")


def test_saved_bench_measures_both_builds_and_the_error(tmp_path, capsys):
    path = tmp_path / "rows.json"
    saved_bench.main(["--model", "inception_block", "--delegate", "example_npu", "--repeats", "1", "--json", str(path)])
    (row,) = json.loads(path.read_text())
    assert row["partitions"] == 1 and row["loaded"] == 7 and row["nodes"] == 8
    assert row["cold_s"] > 0 and row["saved_s"] > 0 and row["error"] < 2e-3  # float16 inside the NPU
    assert "| inception_block | example_npu |" in capsys.readouterr().out
