"""ray_bench: a plain loop against Ray Data actor pools on the same rows."""

from __future__ import annotations

import re

import numpy as np
import pytest

from lite.tools import ray_bench


def test_the_rows_are_seeded_per_input_and_sized_by_free_dims(tmp_path):
    path = tmp_path / "bert.lite"
    path.write_bytes(ray_bench.model_bytes("zoo:bert_encoder"))
    columns = ray_bench.random_rows(path, 6, {"x": [6, 5, 768]})
    assert columns["x"].shape == (6, 5, 768) and columns["x"].dtype == np.float32
    assert np.array_equal(columns["x"], ray_bench.random_rows(path, 6, {"x": [6, 5, 768]})["x"])
    assert ray_bench.plain_loop(path, columns, batch_size=4, thread_num=1) > 0


@pytest.mark.slow
def test_reports_the_plain_loop_and_each_pool(capsys):
    pytest.importorskip("ray.data")
    ray_bench.main(["--model", "zoo:add_chain", "--rows", "64", "--batch-size", "8", "--actors", "1,2"])
    out = capsys.readouterr().out
    assert re.search(r"zoo:add_chain: 64 rows \(.*\), batch size 8", out)
    rates = re.findall(r"(plain loop, 1 process x [12]|Ray Data, [12] actor\(s\) x 1) thread\(s\): +([\d.]+) rows/s",
                       out)
    assert len(rates) == 4 and all(float(rate) > 0 for _, rate in rates)
