"""onnxruntime's own per-node profile of a model, per op type: what ``lite-benchmark --time-profiling
--compare onnxruntime`` prints beside Delite's per-kernel profile.

onnxruntime writes a trace of every run when ``SessionOptions.enable_profiling`` is on: per node a
``<node>_kernel_time`` event with its op type and microseconds, and per run a ``model_run``
event. The op types are those of its graph after its optimizations (a Conv that took its
activation and its residual Add is one Conv), so the two tables compare by layer kind, not name
by name.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from lite.errors import LiteError
from lite.extras import ort_session_options, require

KERNEL_SUFFIX = "_kernel_time"
"""onnxruntime's event name for a node's own time: ``<node>_kernel_time``."""


def onnxruntime_profile(onnx_model: Any, thread_num: int, feeds: dict[str, np.ndarray], loops: int,
                        warmup: int) -> dict[str, Any]:
    """Runs ``onnx_model`` in onnxruntime ``warmup`` times, then ``loops`` times back to back with its
    profiler on: ``{"runs": loops, "run_ms": median run, "rows": per op type, largest first}``, each row
    ``{"op_type", "count" (nodes), "avg_ms" (per run), "percent" (of the nodes' time)}``."""
    ort = require("onnxruntime", "lite-benchmark --time-profiling --compare onnxruntime")
    with tempfile.TemporaryDirectory(prefix="delite-ort-profile-") as folder:
        options = ort_session_options(ort.SessionOptions())
        options.intra_op_num_threads, options.inter_op_num_threads = thread_num, 1
        options.enable_profiling = True
        options.profile_file_prefix = str(Path(folder) / "run")
        session = ort.InferenceSession(onnx_model.SerializeToString(), options, providers=["CPUExecutionProvider"])
        for _ in range(warmup + max(loops, 1)):
            session.run(None, feeds)
        events = _read_trace(Path(session.end_profiling()))
    return summarize(events, max(loops, 1))


def _read_trace(path: Path) -> list[dict[str, Any]]:
    try:
        events = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise LiteError(f"onnxruntime's profile {path.name} could not be read: {exc}") from exc
    if not isinstance(events, list):
        raise LiteError(f"onnxruntime's profile {path.name} is not a list of events")
    return [e for e in events if isinstance(e, dict)]


def summarize(events: list[dict[str, Any]], loops: int) -> dict[str, Any]:
    """The per-op-type summary of a trace's last ``loops`` runs (see ``onnxruntime_profile``)."""
    runs = [e for e in events if e.get("cat") == "Session" and e.get("name") == "model_run"][-loops:]
    if not runs:
        return {"runs": 0, "run_ms": None, "rows": []}
    windows = [(float(r["ts"]), float(r["ts"]) + float(r["dur"])) for r in runs]
    first, groups = windows[0][0], {}
    for e in events:
        name = str(e.get("name", ""))
        if e.get("cat") != "Node" or not name.endswith(KERNEL_SUFFIX) or float(e.get("ts", -1)) < first:
            continue
        op_type = str((e.get("args") or {}).get("op_name", "?"))
        group = groups.setdefault(op_type, {"op_type": op_type, "nodes": set(), "total": 0.0})
        group["nodes"].add(name)
        group["total"] += float(e.get("dur", 0.0))
    whole = sum(g["total"] for g in groups.values()) or 1.0
    rows = [{"op_type": g["op_type"], "count": len(g["nodes"]), "avg_ms": g["total"] / len(runs) / 1e3,
             "percent": 100 * g["total"] / whole} for g in groups.values()]
    return {"runs": len(runs), "run_ms": float(np.median([end - start for start, end in windows])) / 1e3,
            "rows": sorted(rows, key=lambda r: -r["avg_ms"])}
