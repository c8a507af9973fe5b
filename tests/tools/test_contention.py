"""contention: both engines timed idle and beside a busy-loop process, and the slowdowns reported."""

from __future__ import annotations

import json

import pytest

import lite
from lite.tools import contention, zoo
from lite.tools.converter import convert


def test_both_phases_are_measured_and_reported(tmp_path, capsys):
    out = tmp_path / "contention.json"
    contention.main(["--model", "zoo:add_chain", "--loop-count", "3", "--busy-core", "0", "--pause-ms", "0",
                     "--json", str(out)])
    [result] = json.loads(out.read_text())
    assert result["model"] == "zoo:add_chain" and result["thread_num"] == 2
    for phase in ("idle", "busy"):
        assert result[phase]["lite_ms"] > 0 and result[phase]["onnxruntime_ms"] > 0
    ratio = result["lite_slowdown"] / result["onnxruntime_slowdown"]
    assert result["relative_slowdown"] == pytest.approx(ratio)
    printed = capsys.readouterr().out
    assert "lite's slowdown / onnxruntime's" in printed and "zoo:add_chain at thread_num=2" in printed


def test_a_lite_file_without_its_onnx_is_refused(tmp_path):
    path = tmp_path / "m.lite"
    path.write_bytes(convert(zoo.add_chain(4)))
    with pytest.raises(lite.InputError, match="compares with onnxruntime"):
        contention.contention(str(path), 2, 2, 0, 0.0)
