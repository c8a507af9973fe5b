"""The suite's chart: bars diverging from ratio 1.0, one colour per delegate, values, title, caption."""

from __future__ import annotations

import datetime

import pytest

from lite.tools import bench_suite

plt = pytest.importorskip("matplotlib.pyplot")

ROWS = [{"model": "a", "delegate": "native", "ratio_of_medians": 1.7},
        {"model": "a", "delegate": "ort", "ratio_of_medians": 0.8},
        {"model": "b", "delegate": "native", "ratio_of_medians": 1.2},
        {"model": "b", "delegate": "tvm", "error": "failed"}]


def test_the_chart_diverges_from_one_and_labels_every_bar(tmp_path, monkeypatch):
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
