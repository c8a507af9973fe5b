"""lite-benchmark: latency, accuracy and per-kernel profile, side by side with onnxruntime."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from threadpoolctl import threadpool_info
from tqdm import tqdm

import lite
from lite.delegates import load_delegate, parse_options
from lite.extras import ort_session_options, require
from lite.tools import add_model, add_placement, add_version, chosen_model, placement_table
from lite.tools.bench_inputs import (  # noqa: F401  (named here too: other tools import them from here)
    build_model,
    bundled_files,
    cached_kernels,
    compile_cache,
    load_npz,
    parse_input_shapes,
    random_inputs,
)
from lite.tools.blas import blas_note
from lite.tools.inspector import clipped, idle_delegates, summary
from lite.tools.sources import load_source

EXAMPLES = """examples:
  lite-benchmark zoo:resnet18 --compare onnxruntime
  lite-benchmark model.lite --delegate tvm --delegate-option target=llvm --loop-count 50 --warmup 5
  lite-benchmark model.onnx --input-shapes input:4,3,224,224 --time-profiling --json out.json
  lite-benchmark model.lite --benchmark-data expected.npz --accuracy-threshold 0.001
  lite-benchmark model.lite --delegate ort --compare native --require-delegate
  lite-benchmark --suite --suite-dir bench_out
  lite-benchmark zoo:resnet50 --cold --compare onnxruntime
  lite-benchmark decoder.onnx --generate --prompt-length 64 --new-tokens 64 --thread-num 1

The model (positional, or --model) is a .lite or .onnx file, or zoo:NAME for a deterministic
model from lite.tools.zoo (resnet18, resnet50, mobilenet_v2, mobilenet_v3_large,
efficientnet_b0, squeezenet, inception_block, bert_encoder, old_style_opset9, add_chain).
Exit status: 0 ok, 1 accuracy miss or error, 3 a --require-delegate delegate ran nothing.
"""


@dataclass
class Latency:
    """Latency statistics over a loop, in milliseconds."""

    min: float
    median: float
    p90: float
    max: float
    p10: float = 0.0
    spread: float = 0.0  # (p90 - p10) / median

    @classmethod
    def of(cls, seconds: list[float]) -> Latency:
        ms = np.asarray(seconds) * 1e3
        p10, median, p90 = (float(np.percentile(ms, q)) for q in (10, 50, 90))
        return cls(float(ms.min()), median, p90, float(ms.max()), p10, (p90 - p10) / median if median else 0.0)

    def row(self) -> str:
        return f"min {self.min:.3f}  median {self.median:.3f}  p90 {self.p90:.3f}  max {self.max:.3f} ms"


@dataclass
class OutputAccuracy:
    """How one output compares with its reference (the errors are None without a reference)."""

    name: str
    max_abs_error: float | None
    mean_relative_error: float | None
    cosine_similarity: float | None
    finite: bool

    def passes(self, threshold: float | None) -> bool:
        if threshold is not None and self.mean_relative_error is None:
            return False  # NOTE: a threshold with nothing to compare against cannot pass
        return self.finite and (threshold is None or self.mean_relative_error <= threshold)


@dataclass
class Report:
    """Everything one benchmark run measured (written by --json)."""

    model: str
    delegates: list[str]
    thread_num: int
    input_shapes: dict[str, list[int]]
    build_seconds: dict[str, float]
    latency: Latency | None = None
    onnxruntime_latency: Latency | None = None
    ratio_of_medians: float | None = None
    accuracy: list[OutputAccuracy] = field(default_factory=list)
    accuracy_reference: str = ""
    profile: list[dict[str, Any]] = field(default_factory=list)
    profile_loops: int = 0
    profile_run_ms: float | None = None  # median profiled predict, back to back
    onnxruntime_profile: dict[str, Any] = field(default_factory=dict)  # lite.tools.ort_profile's summary
    idle_delegates: list[str] = field(default_factory=list)
    pause_ms: float = 0.0
    partition_summary: str = ""
    loop_count: int = 0
    warmup: int = 0
    kernel_compile_seconds: float = 0.0  # the part of build_seconds["prepare"] compiling kernels (first build)
    bundled_kernel_files: int = 0  # cache files this process copied from the ahead-of-time kernel bundle
    kernel_cache: str = ""  # where compiled kernels are cached ("" when compiled kernels are off)
    peak_memory_mib: dict[str, float | None] = field(default_factory=dict)  # per engine, each alone in a process
    blas_note: str | None = None  # numpy's OpenBLAS runs kernels below this CPU's (lite.tools.blas)
    noisy: list[str] = field(default_factory=list)  # engines whose latency spread exceeds NOISE_LIMIT
    matmul_count: int = 0
    matmul_floor_ms: float | None = None
    placement: list[dict[str, Any]] = field(default_factory=list)  # measured placement's candidates
    native_latency: Latency | None = None  # --compare native: the native model, interleaved
    ratio_to_native: float | None = None


# ---- model loading ----------------------------------------------------------------


# ---- measuring ----------------------------------------------------------------------


def accuracy(name: str, actual: np.ndarray, expected: np.ndarray) -> OutputAccuracy:
    """Max abs error, mean relative error (mean |a-b| / mean |b|) and cosine similarity."""
    if actual.shape != expected.shape:
        raise lite.InputError(f"output {name!r}: shape {actual.shape} but the reference has {expected.shape}")
    a, e = actual.astype(np.float64).ravel(), expected.astype(np.float64).ravel()
    finite = bool(np.isfinite(a).all())
    diff = np.abs(a - e)
    scale = np.abs(e).mean() if e.size else 0.0
    norms = np.linalg.norm(a) * np.linalg.norm(e)
    mean = float(diff.mean()) if diff.size else 0.0
    return OutputAccuracy(
        name, float(diff.max(initial=0.0)), float(mean / scale) if scale else mean,
        float(a @ e / norms) if norms else float(np.array_equal(a, e)), finite)


class OnnxRuntimeEngine:
    """The same ONNX model in onnxruntime (CPU, graph optimisations on, same thread count)."""

    def __init__(self, onnx_model: Any, thread_num: int):
        try:
            import onnxruntime as ort
        except ImportError as exc:
            raise lite.InputError('--compare onnxruntime needs onnxruntime: pip install "delite[ort]"') from exc

        options = ort_session_options(ort.SessionOptions())
        options.intra_op_num_threads = thread_num
        options.inter_op_num_threads = 1
        self.session = ort.InferenceSession(onnx_model.SerializeToString(), options,
                                            providers=["CPUExecutionProvider"])

    def run(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        return self.session.run(None, feeds)


class NativeEngine:
    """The same model on Delite's own native kernels (``--compare native``), same thread count."""

    def __init__(self, data: bytes, thread_num: int):
        self.model = lite.Model()
        self.model.build(data, lite.ModelType.LITE, lite.Context(thread_num=thread_num))

    def run(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        outputs = self.model.predict([feeds[t.name] for t in self.model.get_inputs()])
        return [t.get_data_to_numpy() for t in outputs]


def timed(fn, *args) -> float:
    start = time.perf_counter()
    fn(*args)
    return time.perf_counter() - start


def measure(model: lite.Model, feeds: list[np.ndarray], ort: OnnxRuntimeEngine | NativeEngine | None, ort_feeds: dict,
            loops: int, warmup: int, pause: float) -> tuple[list[float], list[float]]:
    """Interleaved run by run; ``pause`` seconds before each run lets the other engine's
    spinning worker threads go idle, so neither slows the other."""
    for _ in range(warmup):
        model.predict(feeds)
        if ort is not None:
            ort.run(ort_feeds)
    lite_times, ort_times = [], []
    for _ in tqdm(range(loops), desc="benchmark", disable=None, leave=False, file=sys.stderr):
        time.sleep(pause)
        lite_times.append(timed(model.predict, feeds))
        if ort is not None:
            time.sleep(pause)
            ort_times.append(timed(ort.run, ort_feeds))
    return lite_times, ort_times


def profile_rows(model: lite.Model, feeds: list[np.ndarray], loops: int,
                 walls: list[float] | None = None) -> list[dict[str, Any]]:
    """Per-kernel time over ``loops`` predicts back to back (graph kernels one row each, named by
    delegate); ``walls`` gets each profiled predict's seconds."""
    totals: dict[lite.Kernel, float] = {}
    for _ in range(loops):
        start = time.perf_counter()
        model.predict(feeds, profile=totals)
        if walls is not None:
            walls.append(time.perf_counter() - start)
    owner = {row.graph_kernel: row.runs_on for row in model.partition_report() if row.graph_kernel}
    whole = sum(totals.values()) or 1.0
    rows = [{"kernel": k.name, "op_type": k.type, "runs_on": owner.get(k.name, "native"),
             "total_ms": t * 1e3, "avg_ms": t * 1e3 / loops, "percent": 100 * t / whole} for k, t in totals.items()]
    return sorted(rows, key=lambda r: -r["total_ms"])


def profile_both(report: Report, model: lite.Model, ordered: list[np.ndarray], engine: Any, onnx_model: Any,
                 feeds: dict[str, np.ndarray], args: argparse.Namespace) -> None:
    """``--time-profiling``: Delite's per-kernel profile, and with ``--compare onnxruntime`` onnxruntime's
    own (``lite.tools.ort_profile``), each engine's runs back to back, a pause between the two."""
    report.profile_loops, walls = max(args.loop_count, 1), []
    report.profile = profile_rows(model, ordered, report.profile_loops, walls)
    report.profile_run_ms = float(np.median(walls)) * 1e3
    if isinstance(engine, OnnxRuntimeEngine):
        from lite.tools.ort_profile import onnxruntime_profile

        time.sleep(args.pause_ms / 1e3)  # NOTE: the crew's workers stop spinning before onnxruntime's runs
        report.onnxruntime_profile = onnxruntime_profile(onnx_model, args.thread_num, feeds, report.profile_loops,
                                                         args.warmup)


def matmul_floor(model: lite.Model, feeds: list[np.ndarray], repeats: int = 7) -> tuple[int, float]:
    """(count, seconds): the native kernels' matmuls, each timed alone on random operands of its
    shapes (warm, median of ``repeats``), summed: the least time those kernels can take."""
    executed: dict[lite.Kernel, float] = {}
    model.predict(feeds, profile=executed)  # NOTE: also sets the BLAS pool to the model's thread_num
    shapes = [shape for kernel in executed for shape in getattr(kernel, "matmul_shapes", list)()]
    rng, total = np.random.default_rng(0), 0.0
    for a_shape, b_shape in shapes:
        a, b = (rng.standard_normal(shape, dtype=np.float32) for shape in (a_shape, b_shape))
        out = np.matmul(a, b)
        total += float(np.median([timed(np.matmul, a, b, out) for _ in range(repeats)]))
    return len(shapes), total


def by_op_type(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Profile rows summed per op type (graph kernels grouped under their delegate)."""
    groups: dict[str, dict[str, Any]] = {}
    for row in rows:
        key = row["op_type"] if row["runs_on"] == "native" else f"{row['runs_on']} graph kernel"
        group = groups.setdefault(key, {"op_type": key, "count": 0, "total_ms": 0.0, "avg_ms": 0.0, "percent": 0.0})
        group["count"] += 1
        for field_name in ("total_ms", "avg_ms", "percent"):
            group[field_name] += row[field_name]
    return sorted(groups.values(), key=lambda g: -g["total_ms"])


NOISE_LIMIT = 0.10
"""Latency spread, (p90 - p10) / median, above which the report warns that the ratio is noisy."""


def engine_memory(args: argparse.Namespace, data: bytes, onnx_model: Any,
                  shapes: dict[str, list[int]]) -> dict[str, float | None]:
    """Peak memory (MiB) of each engine measured alone in a child process (None: it failed there)."""
    from lite.tools.bench_suite import peak_rss

    options = parse_options(args.delegate_option)
    with tempfile.TemporaryDirectory() as folder:
        lite_path, onnx_path = Path(folder) / "model.lite", Path(folder) / "model.onnx"
        lite_path.write_bytes(data)
        engines = {"lite": ("lite", lite_path, args.delegate)}
        if args.compare == "onnxruntime":
            onnx_path.write_bytes(onnx_model.SerializeToString())
            engines["onnxruntime"] = ("onnxruntime", onnx_path, [])
        elif args.compare == "native":
            engines["native"] = ("lite", lite_path, [])
        memory: dict[str, float | None] = {}
        for name, (engine, path, delegates) in engines.items():
            try:
                memory[name] = peak_rss(path, engine, args.thread_num, delegates, options, shapes)
            except subprocess.CalledProcessError as exc:
                memory[name] = None
                why = (exc.stderr or "").strip().splitlines()[-1:] or [f"exit status {exc.returncode}"]
                print(f"note: measuring {name}'s peak memory in a child process failed: {why[0]}", file=sys.stderr)
        return memory


# ---- the run ------------------------------------------------------------------------


def prepare_inputs(model: lite.Model, args: argparse.Namespace) -> dict[str, np.ndarray]:
    inputs = model.get_inputs()
    shapes = parse_input_shapes(args.input_shapes)
    unknown = set(shapes) - {t.name for t in inputs}
    if unknown:
        names = [t.name for t in inputs]
        raise lite.InputError(f"--input-shapes names {sorted(unknown)}; the model's inputs are {names}")
    if shapes:
        model.resize(inputs, [shapes.get(t.name, list(t.shape)) for t in inputs])
    if args.in_data:
        return load_npz(args.in_data, [t.name for t in inputs])
    return random_inputs(inputs, args.seed)


def reference_outputs(args, engine: OnnxRuntimeEngine | NativeEngine | None, feeds,
                      names) -> tuple[list[np.ndarray] | None, str]:
    """The outputs to compare with, and what they are: reference data, onnxruntime or Delite's
    own native kernels (``--compare native``: TFLite's inference_diff, a delegate against the CPU)."""
    if args.benchmark_data:
        stored = load_npz(args.benchmark_data, names)
        return [stored[n] for n in names], args.benchmark_data
    if isinstance(engine, NativeEngine):
        return engine.run(feeds), "native (Delite's own kernels)"
    if engine is not None:
        return engine.run(feeds), "onnxruntime"
    return None, ""


def run(args: argparse.Namespace) -> tuple[Report, bool]:
    """Builds, checks accuracy, times and profiles; returns the report and whether accuracy passed."""
    if args.compare == "onnxruntime":
        require("onnxruntime", "lite-benchmark --compare onnxruntime")  # NOTE: before the build, not after it
    data, onnx_model, convert_seconds = load_source(args.model)
    if args.compare == "onnxruntime" and onnx_model is None:
        if not args.onnx:
            raise lite.InputError("--compare onnxruntime needs the ONNX model: give an .onnx/zoo --model or --onnx")
        from lite.loader import load_onnx

        onnx_model = load_onnx(args.onnx)
    options = parse_options(args.delegate_option)
    delegates = [d for d in (load_delegate(s, options) for s in args.delegate) if d is not None]
    cache = compile_cache()
    kernels_before = cached_kernels(cache)
    model = build_model(data, args, delegates)
    feeds = prepare_inputs(model, args)
    ordered = [feeds[t.name] for t in model.get_inputs()]
    outputs = [t.get_data_to_numpy() for t in model.predict(ordered)]
    names = [t.name for t in model.get_outputs()]
    report = Report(args.model, args.delegate or ["native"], args.thread_num,
                    {t.name: list(t.shape) for t in model.get_inputs()},
                    {"convert": convert_seconds, **model.build_timings}, loop_count=args.loop_count,
                    warmup=args.warmup, kernel_cache=str(cache or ""))
    report.bundled_kernel_files = bundled_files()
    if cached_kernels(cache) > kernels_before:  # NOTE: else "jit" only loaded kernels compiled earlier
        report.kernel_compile_seconds = model.build_timings.get("jit", 0.0)
    engine = (OnnxRuntimeEngine(onnx_model, args.thread_num) if args.compare == "onnxruntime"
              else NativeEngine(data, args.thread_num) if args.compare == "native" else None)
    expected, report.accuracy_reference = reference_outputs(args, engine, feeds, names)
    if expected is not None:
        report.accuracy = [accuracy(n, a, e) for n, a, e in zip(names, outputs, expected, strict=True)]
    else:
        report.accuracy = [OutputAccuracy(n, None, None, None, bool(np.isfinite(a).all()))
                           for n, a in zip(names, outputs, strict=True)]
    report.pause_ms = args.pause_ms if engine is not None else 0.0  # NOTE: only interleaving needs a pause
    lite_times, ort_times = measure(model, ordered, engine, feeds, args.loop_count, args.warmup,
                                    report.pause_ms / 1e3)
    record_latencies(report, lite_times, ort_times, "native" if isinstance(engine, NativeEngine) else "onnxruntime")
    if args.time_profiling:
        profile_both(report, model, ordered, engine, onnx_model, feeds, args)
    if args.gemm_floor:
        time.sleep(args.pause_ms / 1e3)  # NOTE: onnxruntime's threads spin a while after its last run
        report.matmul_count, seconds = matmul_floor(model, ordered)
        report.matmul_floor_ms = seconds * 1e3
    report.blas_note = blas_note([i.get("architecture") or "" for i in threadpool_info() if i["user_api"] == "blas"])
    rows = model.partition_report()
    report.partition_summary, report.idle_delegates = summary(rows), idle_delegates(delegates, rows)
    report.placement = [asdict(r) for r in model.placement_report()]
    if not args.no_memory:
        report.peak_memory_mib = engine_memory(args, data, onnx_model, report.input_shapes)
    return report, all(a.passes(args.accuracy_threshold) for a in report.accuracy)


def record_latencies(report: Report, lite_times: list[float], other_times: list[float], other: str) -> None:
    """Latency statistics of Delite and of the ``other`` engine ("onnxruntime" or "native", when it
    ran), their ratio, and which of them spread more than NOISE_LIMIT."""
    report.latency = Latency.of(lite_times)
    latencies = {"lite": report.latency}
    if other_times and other == "native":
        report.native_latency = latencies[other] = Latency.of(other_times)
        report.ratio_to_native = report.latency.median / report.native_latency.median
    elif other_times:
        report.onnxruntime_latency = latencies[other] = Latency.of(other_times)
        report.ratio_of_medians = report.latency.median / report.onnxruntime_latency.median
    report.noisy = [name for name, latency in latencies.items() if latency.spread > NOISE_LIMIT]


def print_report(report: Report, out=None) -> None:
    w = (out or sys.stdout).write
    w(f"model: {report.model}  delegates: {', '.join(report.delegates)}  threads: {report.thread_num}\n")
    if report.model.startswith("zoo:"):
        w("weights: random (the zoo builds its models with random weights: speed and agreement hold, the "
          "predictions mean nothing)\n")
    w(f"inputs: {report.input_shapes}\n{report.partition_summary}\n")
    if report.placement:
        w(placement_table([lite.PlacementRow(**row) for row in report.placement]) + "\n")
    w(build_lines(report))
    w(loops_line(report))
    w(f"latency (lite):        {report.latency.row()}\n")
    if report.onnxruntime_latency:
        w(f"latency (onnxruntime): {report.onnxruntime_latency.row()}\n")
        w(f"ratio of medians (lite / onnxruntime): {report.ratio_of_medians:.2f}\n")
    if report.native_latency:
        w(f"latency (native):      {report.native_latency.row()}\n")
        w(f"ratio of medians (lite / native): {report.ratio_to_native:.2f}\n")
    w(noise_lines(report))
    if report.blas_note:
        w(f"note: {report.blas_note}\n")
    if report.matmul_floor_ms is not None:
        w(f"matmul floor: the native kernels' {report.matmul_count} matmuls alone (warm): "
          f"{report.matmul_floor_ms:.3f} ms")
        if report.onnxruntime_latency:
            w(f" = {report.matmul_floor_ms / report.onnxruntime_latency.median:.2f} x onnxruntime's median")
        w("\n")
    if report.accuracy_reference:
        w(f"accuracy against {report.accuracy_reference}:\n")
        for acc in report.accuracy:
            w(f"  {acc.name}: max abs error {acc.max_abs_error:.3g}  mean relative error "
              f"{acc.mean_relative_error:.3g}  cosine similarity {acc.cosine_similarity:.6f}"
              f"{'' if acc.finite else '  NaN/Inf in output!'}\n")
    else:
        w("accuracy: no reference (give --compare onnxruntime, --compare native or --benchmark-data); outputs "
          "checked for NaN/Inf only:\n")
        for acc in report.accuracy:
            w(f"  {acc.name}: {'finite' if acc.finite else 'NaN/Inf in output!'}\n")
    if report.profile:
        _print_profile(report.profile, w, report.profile_loops, report.profile_run_ms)
    if report.onnxruntime_profile.get("rows"):
        _print_onnxruntime_profile(report.onnxruntime_profile, w)
    w(memory_line(report.peak_memory_mib))


def build_lines(report: Report) -> str:
    """Build time by stage, the one-time kernel compilation apart from the build it happened in."""
    stages = {k: v for k, v in report.build_seconds.items() if k != "jit"}
    compiled = report.kernel_compile_seconds
    if compiled:
        stages["prepare"] = stages.get("prepare", 0.0) - compiled
    text = "build: " + "  ".join(f"{k} {v * 1e3:.1f} ms" for k, v in stages.items()) + "\n"
    if compiled:
        return text + (f"first build: compiling kernels {compiled * 1e3:.1f} ms more, once per machine and version "
                       f"(cached in {report.kernel_cache}; later builds load them)\n")
    if "jit" in report.build_seconds and report.bundled_kernel_files:
        return text + ("kernels: compiled ahead of time (the installed bundle, copied into the empty cache "
                       f"{report.kernel_cache}), loaded within prepare\n")
    if "jit" in report.build_seconds:
        return text + f"kernels: compiled by an earlier build, loaded from {report.kernel_cache} (within prepare)\n"
    return text


def loops_line(report: Report) -> str:
    """How the latencies were taken: loop count, warmup and, with a second engine, the interleaving."""
    text = f"loops: {report.loop_count} timed predicts per engine after {report.warmup} warmup"
    if report.onnxruntime_latency or report.native_latency:
        text += (f", interleaved run by run with a {report.pause_ms:g} ms pause before each so the other engine's "
                 "spinning threads go idle")
    return text + "\n"


def noise_lines(report: Report) -> str:
    """A warning naming the engines whose times spread more than NOISE_LIMIT of their median."""
    if not report.noisy:
        return ""
    latencies = {"lite": report.latency, "onnxruntime": report.onnxruntime_latency, "native": report.native_latency}
    spreads = ", ".join(f"{name} {latencies[name].spread:.0%}" for name in report.noisy)
    return (f"warning: times spread more than {NOISE_LIMIT:.0%} of their median ((p90 - p10) / median: {spreads}), "
            f"so these latencies and the ratio are noisy: rerun with more loops (--loop-count "
            f"{max(100, 5 * report.loop_count)}) on an idle machine\n")


def memory_line(memory: dict[str, float | None]) -> str:
    """Peak memory per engine, each measured alone in a child process."""
    if not memory:
        return ""
    shown = ", ".join(f"{name} {mib:.1f} MiB" if mib is not None else f"{name} not measured (its child process "
                      "failed)" for name, mib in memory.items())
    return f"peak memory, each engine alone in a child process (build and 3 predicts): {shown}\n"


def _print_profile(rows: list[dict[str, Any]], w, loops: int, run_ms: float | None = None) -> None:
    median = f", back to back, the median {run_ms:.3f} ms" if run_ms is not None else ""
    w(f"per op type (ms per predict, mean of {loops} profiled predicts{median}; x kernels):\n")
    for g in by_op_type(rows):
        w(_op_type_line(g))
    w(f"per kernel (ms per predict, mean of {loops} profiled predicts; top 30):\n")
    for r in rows[:30]:
        where = "" if r["runs_on"] == "native" else f" [{r['runs_on']}]"
        w(f"  {clipped(r['kernel'] + where, 48):<48} {r['op_type']:<22} {r['avg_ms']:9.3f} ms {r['percent']:6.1f}%\n")


def _print_onnxruntime_profile(summary: dict[str, Any], w) -> None:
    w(f"onnxruntime's own profile (SessionOptions.enable_profiling; ms per run, mean of {summary['runs']} runs back "
      f"to back, the median {summary['run_ms']:.3f} ms; x nodes, its op types after its graph optimizations):\n")
    for g in summary["rows"]:
        w(_op_type_line(g))


def _op_type_line(group: dict[str, Any]) -> str:
    """One op type's row of either engine's profile: its kernels (or nodes), ms per predict, share."""
    return f"  {group['op_type']:<32} x{group['count']:<4} {group['avg_ms']:10.3f} ms {group['percent']:6.1f}%\n"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="lite-benchmark", description="Measure latency, accuracy and per-kernel time.",
                                epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_model(p)
    add_version(p)
    add_placement(p)
    p.add_argument("--delegate", action="append", default=[],
                   help="native, example_npu, tvm, ort or module:Class (repeatable, priority order)")
    p.add_argument("--delegate-option", action="append", default=[], metavar="KEY=VALUE",
                   help="constructor option for the delegates, e.g. target=llvm or tuning_db=DIR (repeatable)")
    p.add_argument("--thread-num", type=int, default=2,
                   help="threads for Delite's native kernels and for onnxruntime (default: %(default)s)")
    p.add_argument("--loop-count", type=int, default=20,
                   help="timed predicts per engine (--generate: timed generations) (default: %(default)s)")
    p.add_argument("--warmup", type=int, default=3,
                   help="untimed predicts first (--generate: generations) (default: %(default)s)")
    p.add_argument("--input-shapes", metavar="NAME:D,D,...;...",
                   help="shapes for the random inputs, needed where an input has dynamic dims")
    p.add_argument("--in-data", metavar="FILE.npz", help="inputs by name (else seeded random inputs)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random inputs (default: %(default)s)")
    p.add_argument("--benchmark-data", metavar="FILE.npz", help="reference outputs by name")
    p.add_argument("--compare", choices=["onnxruntime", "native"],
                   help="onnxruntime: run the same ONNX model in onnxruntime too, interleaved, for latency and "
                        "accuracy; native: the same for Delite's own native kernels (a delegate, or a measured "
                        "placement, against the CPU reference)")
    p.add_argument("--onnx", metavar="FILE.onnx", help="the ONNX model for --compare when --model is .lite")
    p.add_argument("--accuracy-threshold", type=float, metavar="MEAN_REL_ERR",
                   help="fail (exit 1) when an output's mean relative error exceeds this")
    p.add_argument("--time-profiling", action="store_true",
                   help="per-kernel and per-op-type time table; with --compare onnxruntime also onnxruntime's own "
                        "per-op-type profile")
    p.add_argument("--gemm-floor", action="store_true",
                   help="time the native kernels' matmuls alone: the least time those kernels can take")
    p.add_argument("--require-delegate", action="store_true",
                   help="exit 3 when a delegate given with --delegate runs no node")
    p.add_argument("--pause-ms", type=float, default=200.0,
                   help="with --compare onnxruntime or --generate: pause before each timed run, because on a small "
                        "machine the other engine's thread pool keeps spinning after its run and slows the next one "
                        "2-3x (default: %(default)s)")
    p.add_argument("--no-memory", action="store_true",
                   help="skip the peak memory of each engine (measured alone in a child process)")
    p.add_argument("--json", type=Path, metavar="OUT.json",
                   help="write the report: latency samples and statistics, accuracy, versions, machine")
    p.add_argument("--cold", action="store_true",
                   help="start-up time, each in a fresh process: a build with every Delite cache empty (a fresh "
                        "install: kernels from the ahead-of-time bundle, or compiled), one reusing that cache, and "
                        "with --compare onnxruntime its session creation")
    p.add_argument("--generate", action="store_true",
                   help="the model is a decoder with a KV cache (docs/generate.md): lite.Generator against "
                        "onnxruntime's own greedy loop, tokens/s and the token check")
    p.add_argument("--prompt-length", type=int, default=64, help="--generate: prompt tokens (default: %(default)s)")
    p.add_argument("--new-tokens", type=int, default=64, help="--generate: tokens to generate (default: %(default)s)")
    p.add_argument("--suite", action="store_true", help="run the fixed model suite (see lite.tools.bench_suite)")
    p.add_argument("--suite-dir", type=Path, default=Path("bench_out"),
                   help="where --suite writes suite.md, suite.json and suite.png (default: %(default)s)")
    p.add_argument("--suite-models", help="comma-separated subset of the suite's models")
    p.add_argument("--suite-delegates",
                   help="comma-separated subset of the suite's delegates (default: native and every available one)")
    args = p.parse_args(argv)
    chosen_model(p, args, required=False)
    if not args.suite and not args.model:
        p.error("a model is required (or --suite)")
    if args.thread_num < 1 or args.loop_count < 1 or args.warmup < 0:
        p.error("--thread-num and --loop-count must be >= 1, --warmup >= 0")
    if args.prompt_length < 1 or args.new_tokens < 1:
        p.error("--prompt-length and --new-tokens must be >= 1")
    if sum((args.suite, args.cold, args.generate)) > 1:
        p.error("--suite, --cold and --generate are different runs: give one")
    if (args.cold or args.generate) and args.compare == "native":
        p.error("--cold and --generate compare with onnxruntime, not --compare native")
    return args


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``lite-benchmark``."""
    args = parse_args(argv)
    if args.suite:
        from lite.tools.bench_suite import run_suite

        return run_suite(args)
    if args.cold or args.generate:
        return run_mode(args)
    try:
        report, passed = run(args)
    except (lite.LiteError, OSError) as exc:
        print(f"lite-benchmark: {exc}", file=sys.stderr)
        return 1
    print_report(report)
    if args.json:
        args.json.write_text(json.dumps(asdict(report), indent=2))
    for acc in report.accuracy:
        if not acc.passes(args.accuracy_threshold):
            why = ("NaN/Inf" if not acc.finite else "no reference to compare with" if acc.mean_relative_error is None
                   else f"mean relative error {acc.mean_relative_error:.3g}")
            print(f"lite-benchmark: accuracy check failed for output {acc.name!r}: {why} "
                  f"(threshold {args.accuracy_threshold})", file=sys.stderr)
    if args.require_delegate and report.idle_delegates:
        print(f"lite-benchmark: {', '.join(report.idle_delegates)} ran no node: {report.partition_summary}",
              file=sys.stderr)
        return 3
    return 0 if passed else 1


def run_mode(args: argparse.Namespace) -> int:
    """``--cold`` or ``--generate``: its run, its report, its --json and its exit status."""
    from lite.tools import cold_start, generate_bench

    mode = cold_start if args.cold else generate_bench
    try:
        report = mode.run(args)
    except (lite.LiteError, OSError) as exc:
        print(f"lite-benchmark: {exc}", file=sys.stderr)
        return 1
    mode.print_report(report)
    if args.json:
        args.json.write_text(json.dumps(asdict(report), indent=2))
    return mode.exit_status(report)


if __name__ == "__main__":
    sys.exit(main())
