"""lite-benchmark --cold: start-up time, each engine in a fresh process.

A first build on a machine compiles the fast kernels (numba) and caches them; later builds load them.
``run`` measures that in child processes (``sys.executable``), one after the other: "lite cold" with every
Delite cache in an empty temporary folder, "lite warm" reusing the cache the cold one filled, and, with
``--compare onnxruntime``, onnxruntime's session creation. Each child times its import, the build (or
session creation), the first predict and the median of the steady predicts after it. The user's own caches
are never read nor written; the temporary folder is removed afterwards.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from lite.errors import LiteError
from lite.extras import require

CHILD_TIMEOUT_S = 900.0
"""Seconds a child may take (a cold build of a large model compiles for a minute or two on a small machine)."""

CACHE_VARIABLES = ("NUMBA_CACHE_DIR", "DELITE_NUMBA_CACHE", "DELITE_PLACEMENT_CACHE", "DELITE_TVM_CACHE",
                   "DELITE_CONVERSION_CACHE")
"""Unset in the children, so that every Delite cache lies under their ``XDG_CACHE_HOME`` (the temporary one)."""

_CHILD = """
import json, sys, time
start = time.perf_counter()
import {module}
imported = time.perf_counter() - start
from lite.tools.cold_start import child
print(json.dumps(child(json.loads(sys.argv[1]), imported)))
"""


@dataclass
class StartUp:
    """One fresh process: seconds to import, to build (onnxruntime: to create the session), the first and the
    steady predict (median), and the build by stage (Delite's ``Model.build_timings``)."""

    import_s: float
    build_s: float
    first_predict_s: float
    steady_predict_s: float
    build_stages: dict[str, float] = field(default_factory=dict)
    steady_samples_s: list[float] = field(default_factory=list)
    cached_kernels: int = 0  # compiled kernels in the cache after this process (Delite runs)
    target: str = ""  # Delite runs: the instruction-set level compiled kernels target ("host": the CPU model)
    bundled_files: int = 0  # Delite runs: cache files copied from the ahead-of-time bundle
    unbundled: str = ""  # Delite runs: why nothing was copied from the bundle (fast.unbundled_reason)
    converted_models: int = 0  # Delite runs: .onnx conversions in the cache after this process

    @property
    def to_first_output_s(self) -> float:
        return self.import_s + self.build_s + self.first_predict_s

    @property
    def first_over_steady(self) -> float:
        return self.first_predict_s / self.steady_predict_s if self.steady_predict_s else 0.0


@dataclass
class ColdReport:
    """What ``lite-benchmark --cold`` measured (written by --json)."""

    model: str
    delegates: list[str]
    thread_num: int
    loop_count: int
    warmup: int
    runs: dict[str, StartUp]  # "lite cold", "lite warm" and, when compared, "onnxruntime"
    ratios: dict[str, float] = field(default_factory=dict)


# ---- the parent -----------------------------------------------------------------------------------------------


def run(args: argparse.Namespace) -> ColdReport:
    """Runs the children (cold, warm, then onnxruntime when compared) and computes the ratios.

    Raises:
        LiteError: a child failed or ran past ``CHILD_TIMEOUT_S``; the message says which and why.
    """
    if args.compare == "onnxruntime":
        require("onnxruntime", "lite-benchmark --cold --compare onnxruntime")
    with tempfile.TemporaryDirectory(prefix="delite-cold-") as folder:
        folder = Path(folder)
        lite_path, onnx_path = _model_files(args, folder)
        spec = _spec(args, folder)
        cache = folder / "cache"
        runs = {"lite cold": _child("lite", {**spec, "path": str(lite_path)}, cache)}
        runs["lite warm"] = _child("lite", {**spec, "path": str(lite_path)}, cache)
        if args.compare == "onnxruntime":
            runs["onnxruntime"] = _child("onnxruntime", {**spec, "path": str(onnx_path)}, cache)
    report = ColdReport(args.model, args.delegate or ["native"], args.thread_num, args.loop_count, args.warmup, runs)
    report.ratios = ratios(runs)
    return report


def ratios(runs: dict[str, StartUp]) -> dict[str, float]:
    """cold build / warm build, warm build / onnxruntime session creation, first predict / steady per run."""
    cold, warm = runs["lite cold"], runs["lite warm"]
    found = {"cold build / warm build": cold.build_s / warm.build_s}
    if "onnxruntime" in runs:
        found["warm build / onnxruntime session creation"] = warm.build_s / runs["onnxruntime"].build_s
    found.update({f"first predict / steady ({name})": run.first_over_steady for name, run in runs.items()})
    return found


def _model_files(args: argparse.Namespace, folder: Path) -> tuple[str, str | None]:
    """The file the Delite children build (ONNX ones are converted there, as an app would) and the ONNX file
    for onnxruntime (None when not compared)."""
    from lite.loader import ModelType, model_type_of
    from lite.tools.sources import zoo_model

    if args.model.startswith("zoo:"):
        path = folder / f"{args.model[4:]}.onnx"
        path.write_bytes(zoo_model(args.model[4:]).SerializeToString())
        return str(path), str(path)
    if model_type_of(args.model) is ModelType.ONNX:
        return args.model, args.model
    if args.compare == "onnxruntime" and not args.onnx:
        raise LiteError("--cold --compare onnxruntime needs the ONNX model: give an .onnx/zoo model or --onnx")
    return args.model, args.onnx


def _spec(args: argparse.Namespace, folder: Path) -> dict[str, Any]:
    """What every child needs but the model: threads, delegates, shapes, loops and the inputs' file (the
    first child writes the inputs it drew there unless --in-data gives them; the others read it)."""
    from lite.delegates import parse_options
    from lite.tools import placement_options
    from lite.tools.bench_inputs import parse_input_shapes

    return {"threads": args.thread_num, "delegates": args.delegate, "options": parse_options(args.delegate_option),
            "placement": placement_options(args), "shapes": parse_input_shapes(args.input_shapes),
            "seed": args.seed, "loops": args.loop_count, "warmup": args.warmup,
            "inputs": _inputs_file(args, folder)}


def _inputs_file(args: argparse.Namespace, folder: Path) -> str:
    if args.in_data and not Path(args.in_data).is_file():
        raise LiteError(f"--in-data {args.in_data}: no such file")
    return args.in_data or str(folder / "inputs.npz")


def _child(engine: str, spec: dict[str, Any], cache: Path) -> StartUp:
    """One fresh process for ``engine`` ("lite" or "onnxruntime") with ``cache`` as its XDG_CACHE_HOME."""
    env = {k: v for k, v in os.environ.items() if k not in CACHE_VARIABLES}
    env["XDG_CACHE_HOME"] = str(cache)
    module = "lite" if engine == "lite" else "onnxruntime"
    command = [sys.executable, "-c", _CHILD.format(module=module), json.dumps({**spec, "engine": engine})]
    try:
        done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=CHILD_TIMEOUT_S)
    except subprocess.TimeoutExpired as exc:
        raise LiteError(f"--cold: the {engine} child process ran past {CHILD_TIMEOUT_S:g} s and was stopped") from exc
    if done.returncode != 0:
        why = (done.stderr.strip().splitlines() or [""])[-1]
        raise LiteError(f"--cold: the {engine} child process failed (exit status {done.returncode}): {why}")
    result = StartUp(**json.loads(done.stdout.strip().splitlines()[-1]))
    if engine == "lite":
        result.cached_kernels = _count_kernels(cache)
        converted = cache / "delite" / "converted"
        result.converted_models = len(list(converted.glob("*.lite"))) if converted.is_dir() else 0
    return result


def _count_kernels(cache: Path) -> int:
    from lite.tools.bench_inputs import cached_kernels

    return cached_kernels(cache)


# ---- the children ---------------------------------------------------------------------------------------------


def child(spec: dict[str, Any], import_s: float) -> dict[str, Any]:
    """In the child process: builds (or creates the session), predicts once, then the steady loop."""
    build = _build_lite if spec["engine"] == "lite" else _build_onnxruntime
    start = time.perf_counter()
    predict, stages, origin = build(spec)
    build_s = time.perf_counter() - start
    first = _timed(predict)
    for _ in range(spec["warmup"]):
        predict()
    steady = [_timed(predict) for _ in range(spec["loops"])]
    return {"import_s": import_s, "build_s": build_s, "first_predict_s": first,
            "steady_predict_s": float(np.median(steady)), "build_stages": stages, "steady_samples_s": steady,
            **origin}


def _timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def _build_lite(spec: dict[str, Any]):
    """Builds the model as the spec says; (predict on its inputs, the build's stages)."""
    import lite
    from lite.delegates import load_delegate

    delegates = [d for d in (load_delegate(s, spec["options"]) for s in spec["delegates"]) if d is not None]
    model = lite.Model()
    model.build_from_file(spec["path"], context=lite.Context(thread_num=spec["threads"], delegates=delegates,
                                                             **spec["placement"]))
    inputs = model.get_inputs()
    if spec["shapes"]:
        model.resize(inputs, [spec["shapes"].get(t.name, list(t.shape)) for t in inputs])
    feeds = _inputs(spec, inputs)
    ordered = [feeds[t.name] for t in inputs]
    return (lambda: model.predict(ordered)), dict(model.build_timings), _kernel_origin()


def _kernel_origin() -> dict[str, Any]:
    from lite.kernels import fast

    if not fast.enabled():
        return {}
    return {"target": fast.target_level(), "bundled_files": fast.seeded_files(), "unbundled": fast.unbundled_reason()}


def _inputs(spec: dict[str, Any], tensors) -> dict[str, np.ndarray]:
    """The inputs' file when it exists, else seeded random inputs, saved there for the children after."""
    from lite.tools.bench_inputs import load_npz, random_inputs

    names = [t.name for t in tensors]
    if Path(spec["inputs"]).exists():
        return load_npz(spec["inputs"], names)
    feeds = random_inputs(tensors, spec["seed"])
    np.savez(spec["inputs"], **feeds)
    return feeds


def _build_onnxruntime(spec: dict[str, Any]):
    """Creates the session; (run on the inputs the Delite children used, no stages)."""
    import onnxruntime as ort

    from lite.extras import ort_session_options
    from lite.tools.bench_inputs import load_npz

    options = ort_session_options(ort.SessionOptions())
    options.intra_op_num_threads, options.inter_op_num_threads = spec["threads"], 1
    session = ort.InferenceSession(spec["path"], options, providers=["CPUExecutionProvider"])
    feeds = load_npz(spec["inputs"], [i.name for i in session.get_inputs()])
    return (lambda: session.run(None, feeds)), {}, {}


# ---- the report ------------------------------------------------------------------------------------------------


def print_report(report: ColdReport, out=None) -> None:
    """The start-up table, one row per process, and the ratios."""
    w = (out or sys.stdout).write
    w(f"model: {report.model}  delegates: {', '.join(report.delegates)}  threads: {report.thread_num}\n")
    w("cold start: each row a fresh process, one after the other; lite cold: every Delite cache empty (a temporary "
      "folder), lite warm: the cache lite cold filled; steady: the median of "
      f"{report.loop_count} predicts after the first and {report.warmup} warmup\n")
    w(f"{'':<13} {'import':>9} {'build':>10} {'first predict':>14} {'steady predict':>15} {'first/steady':>13} "
      f"{'to first output':>16}\n")
    for name, r in report.runs.items():
        w(f"{name:<13} {r.import_s:8.3f}s {r.build_s:9.3f}s {r.first_predict_s * 1e3:11.3f} ms "
          f"{r.steady_predict_s * 1e3:12.3f} ms {r.first_over_steady:13.2f} {r.to_first_output_s:15.3f}s\n")
    if "onnxruntime" in report.runs:
        w("(onnxruntime's build is its session creation)\n")
    cold, warm = report.runs["lite cold"], report.runs["lite warm"]
    w(f"kernels in the cache after the cold run: {cold.cached_kernels}; after the warm run: {warm.cached_kernels}\n")
    if cold.converted_models or warm.converted_models:
        w(f"converted models in the cache (Context.conversion_cache) after the cold run: {cold.converted_models}; "
          f"after the warm run: {warm.converted_models} (the warm run maps the cold run's conversion)\n")
    w(_origin(cold) + "\n")
    w("build stages, cold: " + _stages(cold.build_stages) + "\n")
    w("build stages, warm: " + _stages(warm.build_stages) + "\n")
    for name, value in report.ratios.items():
        w(f"{name}: {value:.2f}\n")


def _origin(cold: StartUp) -> str:
    """Where the cold run's kernels came from: the ahead-of-time bundle, or compiled."""
    if not cold.target:
        return "compiled kernels: off (the numpy kernels ran)"
    if cold.target == "host":
        return "compiled kernels target this CPU model (no instruction-set level): every one compiled"
    if cold.bundled_files:
        return (f"compiled kernels target {cold.target}: {cold.bundled_files} cache files copied from the "
                "ahead-of-time bundle; only kernels outside it compiled")
    why = cold.unbundled or "none installed (python -m lite.tools.kernel_bundle build)"
    return f"compiled kernels target {cold.target}: no ahead-of-time bundle copied ({why}): every one compiled"


def _stages(stages: dict[str, float]) -> str:
    """Build stages in ms; "jit" (the kernels compiled or loaded, a part of "prepare") named so."""
    names = {"jit": "of which kernels compiled or loaded"}
    return "  ".join(f"{names.get(k, k)} {v * 1e3:.1f} ms" for k, v in stages.items())


def exit_status(report: ColdReport) -> int:
    """Always 0: a child that failed raised a LiteError (exit status 1) before there was a report."""
    return 0
