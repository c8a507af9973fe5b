"""onnxruntime's own profile per op type (``lite.tools.ort_profile``), from a trace written here."""

from __future__ import annotations

import pytest

from lite.errors import LiteError
from lite.tools import ort_profile


def run(ts: float, dur: float) -> dict:
    return {"cat": "Session", "name": "model_run", "ts": ts, "dur": dur}


def node(name: str, op_type: str, ts: float, dur: float, suffix: str = "_kernel_time") -> dict:
    return {"cat": "Node", "name": name + suffix, "ts": ts, "dur": dur, "args": {"op_name": op_type}}


def trace() -> list[dict]:
    """Three runs: a warm-up (its nodes 1000 us each), then two of 10 + 30 + 20 us and 12 + 28 + 20 us."""
    events = [run(0, 3000), node("a", "Conv", 10, 1000), node("b", "Conv", 1100, 1000), node("c", "Relu", 2200, 1000)]
    for start, (a, b, c) in ((5000, (10, 30, 20)), (6000, (12, 28, 20))):
        events += [run(start, 100), node("a", "Conv", start + 1, a), node("a", "Conv", start + 1, 99, "_fence_before"),
                   node("b", "Conv", start + 20, b), node("c", "Relu", start + 60, c)]
    return [*events, {"cat": "Node", "name": "d_kernel_time", "ts": 6090, "dur": 5}, "not an event"]


def test_the_last_runs_are_summed_per_op_type():
    summary = ort_profile.summarize([e for e in trace() if isinstance(e, dict)], 2)
    assert summary["runs"] == 2 and summary["run_ms"] == pytest.approx(0.1)
    rows = {r["op_type"]: r for r in summary["rows"]}
    assert [r["op_type"] for r in summary["rows"]] == ["Conv", "Relu", "?"]
    assert rows["Conv"]["count"] == 2 and rows["Conv"]["avg_ms"] == pytest.approx(0.040)
    assert rows["Relu"]["count"] == 1 and rows["Relu"]["avg_ms"] == pytest.approx(0.020)
    assert sum(r["percent"] for r in summary["rows"]) == pytest.approx(100)


def test_a_trace_without_runs_has_no_rows():
    assert ort_profile.summarize([node("a", "Conv", 0, 5)], 3) == {"runs": 0, "run_ms": None, "rows": []}


@pytest.mark.parametrize("text", ["{not json", '{"a": 1}'])
def test_an_unreadable_trace_is_a_lite_error(tmp_path, text):
    path = tmp_path / "trace.json"
    path.write_text(text)
    with pytest.raises(LiteError, match="onnxruntime's profile trace.json"):
        ort_profile._read_trace(path)
