"""pipeline_bench: a split model streamed through a PipelineExecutor against the whole model."""

from __future__ import annotations

import re

from lite.tools import pipeline_bench


def test_every_configuration_runs_the_stream_and_the_pipeline_matches_the_model(capsys):
    pipeline_bench.main(["--models", "squeezenet", "--image-size", "32", "--requests", "6", "--warmup", "1",
                         "--rounds", "2"])
    out = capsys.readouterr().out
    rows = {name: float(rate) for name, rate in re.findall(r"^  (\S.*?)\s{2,}([\d.]+)\s", out, re.MULTILINE)}
    assert set(rows) == {"model thread_num=1", "model thread_num=2", "pipeline 2 x thread_num=1",
                         "2 whole models, 2 threads"}
    assert all(rate > 0 for rate in rows.values())
    assert "stages alone:" in out
    assert "pipeline outputs identical to the thread_num=1 model's: yes" in out
