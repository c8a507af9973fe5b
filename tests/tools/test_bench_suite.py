"""The suite: its chart (bars diverging from ratio 1.0, one colour per delegate, values, title, caption),
and a run without onnxruntime."""

from __future__ import annotations

import argparse
import datetime
import json

import pytest

import lite
from lite.tools import bench_suite

ROWS = [{"model": "a", "delegate": "native", "ratio_of_medians": 1.7},
        {"model": "a", "delegate": "ort", "ratio_of_medians": 0.8},
        {"model": "b", "delegate": "native", "ratio_of_medians": 1.2},
        {"model": "b", "delegate": "tvm", "error": "failed"}]


def test_the_chart_diverges_from_one_and_labels_every_bar(tmp_path, monkeypatch):
    plt = pytest.importorskip("matplotlib.pyplot")
    figures = []
    monkeypatch.setattr(plt, "close", figures.append)
    assert bench_suite.chart(ROWS, tmp_path / "suite.png", "a machine, 2026-01-01")
    assert (tmp_path / "suite.png").read_bytes()[:4] == b"\x89PNG"
    [figure] = figures
    ax = figure.axes[0]
    bars = ax.patches
    assert [round(b.get_x() + b.get_width(), 6) for b in bars] == [1.7, 0.8, 1.2]  # each bar ends at its ratio
    assert all(b.get_x() == 1.0 for b in bars)  # and starts at 1.0
    assert len({b.get_facecolor() for b in bars}) == 2 and bars[0].get_facecolor() == bars[2].get_facecolor()
    assert [t.get_text() for t in ax.texts] == ["1.70", "0.80", "1.20"]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["native", "ort"]
    assert ax.get_title() and "a machine, 2026-01-01" in [t.get_text() for t in figure.texts]


def test_the_caption_names_the_machine_threads_and_date():
    caption = bench_suite.machine_caption(2)
    assert "thread_num=2" in caption and datetime.date.today().isoformat() in caption


def test_without_onnxruntime_the_suite_times_delite_alone_and_says_so(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(bench_suite, "has_onnxruntime", lambda: False)
    monkeypatch.setattr(bench_suite, "available_delegates", lambda: [])
    args = argparse.Namespace(suite_dir=tmp_path, suite_models="add_chain", thread_num=1, loop_count=2, warmup=0)
    assert bench_suite.run_suite(args) == 0
    captured = capsys.readouterr()
    assert 'onnxruntime is not installed' in captured.err and 'pip install "delite[ort]"' in captured.err
    (row,) = [line for line in (tmp_path / "suite.md").read_text().splitlines() if line.startswith("| add_chain")]
    assert row.startswith("| add_chain | native |") and "| - | - | - | - |" in row
    lite_rss, ort_rss = row.rsplit("|", 2)[1].strip().split(" / ")  # measured in a child process each
    assert lite_rss.isdigit() and 30 < int(lite_rss) < 4096 and ort_rss == "-"
    assert "us per kernel\n" in (tmp_path / "suite.md").read_text() + "\n" and not (tmp_path / "suite.png").exists()


def test_the_table_gives_the_native_rows_matmul_floor_against_onnxruntime():
    measured = {"partition_summary": "9 nodes: 0 delegated in 0 partition(s), 9 native", "latency": {"median": 15.0},
                "onnxruntime_latency": {"median": 10.0}, "ratio_of_medians": 1.5,
                "accuracy": [{"mean_relative_error": 2e-6}]}
    rows = [{"model": "m", "delegate": "native", "matmul_floor_ms": 6.0, **measured,
             "peak_rss_mib": {"lite": 291.2, "onnxruntime": None}},
            {"model": "m", "delegate": "ort", "matmul_floor_ms": None, **measured}]
    header, _, native, ort = bench_suite.table(rows).splitlines()
    assert "| ratio | matmul floor |" in header and header.endswith("| peak RSS lite / onnxruntime (MiB) |")
    assert native == ("| m | native |  0 delegated in 0 partition(s) | 15.00 | 10.00 | 1.50 | 0.60 | 2.0e-06 | "
                      "291 / - |")
    assert ort.endswith("| 1.50 | - | 2.0e-06 | - |")


@pytest.mark.slow
def test_an_int8_row_runs_the_quantized_model_native_and_on_onnxruntime(tmp_path):
    args = argparse.Namespace(suite_dir=tmp_path, suite_models="inception_block:int8", thread_num=1, loop_count=2,
                              warmup=0)
    assert bench_suite.run_suite(args) == 0
    runs = json.loads((tmp_path / "suite.json").read_text())["runs"]
    assert [r["delegate"] for r in runs] == ["native", "ort"]
    for run in runs:
        assert run["onnxruntime_latency"]["median"] > 0 and run["ratio_of_medians"] > 0
        assert max(a["mean_relative_error"] for a in run["accuracy"]) < 0.05  # the same quantized file on both
    assert "| inception_block:int8 | native |" in (tmp_path / "suite.md").read_text()


def test_the_suite_runs_the_chosen_delegates_and_refuses_unavailable_ones(monkeypatch):
    monkeypatch.setattr(bench_suite, "available_delegates", lambda: ["ort", "example_npu"])
    assert bench_suite.suite_delegates(None) == ["native", "ort", "example_npu"]
    assert bench_suite.suite_delegates("native, ort") == ["native", "ort"]
    with pytest.raises(lite.InputError, match="tvm"):
        bench_suite.suite_delegates("native,tvm")
