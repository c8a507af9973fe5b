"""pipeline_bench: a split model streamed through thread and process pipelines against the whole model."""

from __future__ import annotations

import re

import pytest

from lite.tools import pipeline_bench


def test_every_configuration_runs_the_stream_and_the_pipelines_match_the_model(capsys):
    pytest.importorskip("onnxruntime")
    pipeline_bench.main(["--models", "squeezenet", "--image-size", "32", "--requests", "6", "--warmup", "1",
                         "--rounds", "2", "--ort-stage"])
    out = capsys.readouterr().out
    rows = {name: float(rate) for name, rate in re.findall(r"^  (\S.*?) {2,}([\d.]+) ", out, re.MULTILINE)}
    assert set(rows) == {"model thread_num=1", "model thread_num=2", "2 stages back to back",
                         "thread pipeline 2 x t=1", "process pipeline 2 x t=1", "ORT + native back to back",
                         "ORT + native thread pipeline"}
    assert all(rate > 0 for rate in rows.values())
    assert "stages alone:" in out and "ORT + native stages alone:" in out
    for name in ("2 stages back to back", "thread pipeline 2 x t=1", "process pipeline 2 x t=1"):
        assert f"{name}: outputs identical to the whole model's" in out
    assert "ORT + native thread pipeline: outputs differ by <= " in out
    assert "ORT + native thread pipeline vs its stages back to back: " in out
