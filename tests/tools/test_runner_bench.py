"""runner_bench: one Model against a ModelParallelRunner on the same request stream."""

from __future__ import annotations

import re

from lite.tools import runner_bench


def test_reports_both_rates_and_their_ratio(capsys):
    runner_bench.main(["--model", "zoo:add_chain", "--requests", "8", "--clients", "2", "--workers", "2"])
    line = capsys.readouterr().out
    one, pool, ratio = (float(v) for v in re.search(
        r"one Model ([\d.]+) req/s, ModelParallelRunner\(2 workers\) ([\d.]+) req/s \(([\d.]+)x\)", line).groups())
    assert one > 0 and pool > 0 and abs(pool / one - ratio) < 0.01
