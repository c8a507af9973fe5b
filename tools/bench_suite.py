"""The benchmark suite: fixed models, native and with each available delegate, against onnxruntime.

Each (model, delegate) pair runs in its own process (``lite-benchmark --json``) so one
engine's memory and threads do not leak into the next measurement; peak RSS is measured
separately for the native runtime and for onnxruntime, each alone in a process. Writes
``suite.md`` (a markdown table), ``suite.json`` and, when matplotlib is installed,
``suite.png`` (latency ratios) to ``--suite-dir``. Pairs in ``CAPPED_RUNS`` run fewer times.
Without onnxruntime (the ``ort`` extra) the suite says so and times Delite alone: no ratios.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

import numpy as np

from lite.delegates import available_delegates

MODELS = ["resnet18", "resnet50", "mobilenet_v2", "mobilenet_v3_large", "efficientnet_b0", "squeezenet",
          "inception_block", "bert_encoder", "add_chain", "resnet50:int8", "mobilenet_v2:int8", "bert_encoder:int8"]
INT8 = ":int8"  # a model quantized by ``lite-convert --quantize static`` (8 random calibration inputs)
INT8_DELEGATES = ("native", "ort")  # the delegates that run quantized ops
# NOTE: untuned TVM takes about 8.5 s per bert_encoder run on a 2-core VM (70x onnxruntime): over 3 minutes at
# the default 3 warmup + 20 runs. These (model, delegate) pairs run 1 warmup and at most this many timed runs.
CAPPED_RUNS = {("bert_encoder", "tvm"): 3}

_RSS_SCRIPT = """
import json, resource, sys
import numpy as np

spec = json.loads(sys.argv[1])
rng = np.random.default_rng(0)


def feed(shape, dtype):
    dtype = np.dtype(dtype)
    if dtype.kind == "f":
        return rng.standard_normal(shape).astype(dtype)
    return rng.random(shape) < 0.5 if dtype.kind == "b" else rng.integers(0, 10, shape).astype(dtype)


if spec["engine"] == "lite":
    import lite
    from lite.delegates import load_delegate

    delegates = [d for d in (load_delegate(s, spec["options"]) for s in spec["delegates"]) if d is not None]
    model = lite.Model()
    model.build_from_file(spec["path"], context=lite.Context(thread_num=spec["threads"], delegates=delegates))
    if spec["shapes"]:
        model.resize(model.get_inputs(), [spec["shapes"].get(t.name, list(t.shape)) for t in model.get_inputs()])
    feeds = [feed(t.shape, t.dtype) for t in model.get_inputs()]
    run = lambda: model.predict(feeds)
else:
    import onnxruntime as ort  # NOTE: lite is not imported: its modules are no part of onnxruntime's footprint

    options = ort.SessionOptions()
    options.intra_op_num_threads = spec["threads"]
    if spec["ort_log_level"] >= 0:
        options.log_severity_level = spec["ort_log_level"]
    session = ort.InferenceSession(spec["path"], options, providers=["CPUExecutionProvider"])
    types = {"float": "float32", "double": "float64"}
    feeds = {i.name: feed(spec["shapes"].get(i.name, i.shape), types.get(i.type[7:-1], i.type[7:-1]))
             for i in session.get_inputs()}
    run = lambda: session.run(None, feeds)
for _ in range(3):
    run()
try:
    with open("/proc/self/status") as status:  # VmHWM: ru_maxrss would include a forking parent's
        print(next(int(line.split()[1]) / 1024 for line in status if line.startswith("VmHWM:")))
except (OSError, StopIteration):
    print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
"""


def export_model(name: str, directory: Path) -> tuple[Path, Path]:
    """Writes the zoo model (``NAME:int8``: quantized, static QDQ) as .onnx and .lite; returns both paths."""
    from lite.tools import zoo
    from lite.tools.converter import convert

    base = name.removesuffix(INT8)
    onnx_model = getattr(zoo, base)()
    if name.endswith(INT8):
        onnx_model = _quantized(onnx_model)
    stem = name.replace(":", "_")
    onnx_path, lite_path = directory / f"{stem}.onnx", directory / f"{stem}.lite"
    onnx_path.write_bytes(onnx_model.SerializeToString())
    convert(onnx_model, lite_path)
    return onnx_path, lite_path


def _quantized(model):
    """``model`` quantized as ``lite-convert --quantize static`` does, on 8 random calibration inputs."""
    from lite.tools.converter.quantize import model_inputs, quantize_onnx

    rng = np.random.default_rng(0)
    samples = {name: _random_samples(rng, dtype, dims, 8) for name, (dtype, dims) in model_inputs(model).items()}
    return quantize_onnx(model, "static", samples)


def _random_samples(rng: np.random.Generator, dtype: np.dtype, dims: list, count: int) -> np.ndarray:
    shape = (count, *[d or 1 for d in dims])
    if np.dtype(dtype).kind == "f":
        return rng.standard_normal(shape).astype(dtype)
    return rng.integers(0, 100, shape).astype(dtype)


def bench(lite_path: Path, onnx_path: Path, delegate: str, args: argparse.Namespace) -> dict:
    """One ``lite-benchmark --json`` run; the report gains ``capped_runs`` where ``CAPPED_RUNS`` applied."""
    out = args.suite_dir / f"{lite_path.stem}.{delegate}.json"
    cap = CAPPED_RUNS.get((lite_path.stem, delegate))
    loops, warmup = (min(args.loop_count, cap), min(args.warmup, 1)) if cap else (args.loop_count, args.warmup)
    command = [sys.executable, "-m", "lite.tools.benchmark", "--model", str(lite_path), "--onnx", str(onnx_path),
               "--delegate", delegate, "--thread-num", str(args.thread_num),
               "--loop-count", str(loops), "--warmup", str(warmup), "--json", str(out),
               "--no-memory"]  # NOTE: the suite measures memory itself, for RSS_MODELS
    if has_onnxruntime():
        command += ["--compare", "onnxruntime"]
    if delegate == "native" and not lite_path.stem.endswith("_int8"):  # NOTE: the floor times float products
        command += ["--gemm-floor"]
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0 or not out.exists():
        return {"error": (result.stderr.strip().splitlines() or ["failed"])[-1]}
    return {**json.loads(out.read_text()), **({"capped_runs": loops} if cap else {})}


def has_onnxruntime() -> bool:
    """Whether onnxruntime, the suite's reference engine, is installed."""
    return importlib.util.find_spec("onnxruntime") is not None


def peak_rss(path: Path, engine: str, threads: int, delegates: list[str] | None = None,
             options: dict | None = None, shapes: dict[str, list[int]] | None = None) -> float:
    """Peak resident memory (MiB) of ``engine`` ("lite", with ``delegates``, or "onnxruntime") alone in
    a child process: the model at ``path`` built and run 3 times on random inputs of ``shapes``.

    Raises:
        subprocess.CalledProcessError: the child failed (its stderr says why).
    """
    spec = {"path": str(path), "engine": engine, "threads": threads, "delegates": delegates or [],
            "options": options or {}, "shapes": shapes or {}, "ort_log_level": -1}
    if engine == "onnxruntime":
        from lite.extras import ort_session_options

        spec["ort_log_level"] = ort_session_options().log_severity_level
    result = subprocess.run([sys.executable, "-c", _RSS_SCRIPT, json.dumps(spec)],
                            capture_output=True, text=True, check=True)
    return float(result.stdout.strip().splitlines()[-1])


def table(rows: list[dict]) -> str:
    lines = ["| model | delegate | partitions | lite median (ms) | onnxruntime median (ms) | ratio | matmul floor | "
             "mean rel. error | peak RSS lite / onnxruntime (MiB) |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['model']} | {r['delegate']} | failed: {r['error']} | | | | | | |")
            continue
        delegate = r["delegate"] + (f" ({r['capped_runs']} runs)" if "capped_runs" in r else "")
        lines.append(f"| {r['model']} | {delegate} | {r['partition_summary'].split(':')[1].split(',')[0]} | "
                     f"{r['latency']['median']:.2f} | {_against_onnxruntime(r)} | {_rss_cell(r)} |")
    return "\n".join(lines)


def _rss_cell(row: dict) -> str:
    """A native row's peak RSS cell (each engine alone in a process); "-" elsewhere or where it failed."""
    rss = row.get("peak_rss_mib") or {}
    return " / ".join("-" if rss.get(engine) is None else f"{rss[engine]:.0f}" for engine in ("lite", "onnxruntime")
                      ) if rss else "-"


def _against_onnxruntime(row: dict) -> str:
    """The onnxruntime median, ratio, matmul floor and error cells of a row ("-" each without onnxruntime).

    The matmul floor (native rows): the native kernels' matrix products alone, timed on BLAS outside
    the model, over onnxruntime's median: no native kernel plan built on those products can take a
    smaller ratio."""
    if not row.get("onnxruntime_latency"):
        return "- | - | - | -"
    err = max((a["mean_relative_error"] or 0.0 for a in row["accuracy"]), default=0.0)
    median = row["onnxruntime_latency"]["median"]
    floor = f"{row['matmul_floor_ms'] / median:.2f}" if row.get("matmul_floor_ms") is not None else "-"
    return f"{median:.2f} | {row['ratio_of_medians']:.2f} | {floor} | {err:.1e}"


def chart(rows: list[dict], path: Path, caption: str = "") -> bool:
    """Writes the latency ratios as horizontal bars diverging from 1.0 (log scale), one colour per
    delegate, each bar labelled with its ratio; False where matplotlib is not installed."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    ok = [r for r in rows if "error" not in r and r.get("ratio_of_medians")]
    if not ok:
        return False
    delegates = list(dict.fromkeys(r["delegate"] for r in ok))
    colours = dict(zip(delegates, plt.get_cmap("tab10").colors, strict=False))
    fig, ax = plt.subplots(figsize=(9, 0.32 * len(ok) + 2.2))
    labels = [f"{r['model']} / {r['delegate']}" for r in ok]
    ratios = [r["ratio_of_medians"] for r in ok]
    # NOTE: bars start at 1.0 so a faster-than-onnxruntime row points left and a slower one right
    bars = ax.barh(labels, [v - 1.0 for v in ratios], left=1.0, color=[colours[r["delegate"]] for r in ok])
    for bar, value in zip(bars, ratios, strict=True):
        ax.annotate(f"{value:.2f}", (value, bar.get_y() + bar.get_height() / 2), xytext=(3 if value >= 1 else -3, 0),
                    textcoords="offset points", va="center", ha="left" if value >= 1 else "right", fontsize=7)
    ax.axvline(1.0, color="black", linewidth=0.8)
    ax.set_xscale("log")  # untuned TVM is 100x off; the rest sits near 1
    low, high = min(ratios, default=1.0), max(ratios, default=1.0)
    ax.set_xlim(min(low, 1.0) / 1.6, max(high, 1.0) * 1.8)
    ax.set_xlabel("median latency / onnxruntime median (log scale; left of 1: faster than onnxruntime)")
    ax.set_title("Delite against onnxruntime, same process, interleaved")
    ax.legend(handles=[matplotlib.patches.Patch(color=colours[d], label=d) for d in delegates], loc="lower right",
              fontsize=8)
    ax.invert_yaxis()
    if caption:
        fig.text(0.01, 0.005, caption, fontsize=7, va="bottom")
    fig.tight_layout(rect=(0, 0.03 if caption else 0, 1, 1))
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True


def machine_caption(thread_num: int) -> str:
    """The machine, thread count and date a suite ran on, for the chart's caption."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as info:
            cpu = next((line.split(":", 1)[1].strip() for line in info if line.startswith("model name")), cpu)
    except OSError:
        pass
    return f"{cpu}, {os.cpu_count()} cores, thread_num={thread_num}, {datetime.date.today().isoformat()}"


def run_suite(args: argparse.Namespace) -> int:
    """Runs the suite; returns the exit status."""
    args.suite_dir.mkdir(parents=True, exist_ok=True)
    if not has_onnxruntime():
        print('note: onnxruntime is not installed, so the suite times Delite alone (no ratios, no accuracy); '
              'pip install "delite[ort]" to compare', file=sys.stderr)
    models = args.suite_models.split(",") if args.suite_models else MODELS
    delegates = suite_delegates(getattr(args, "suite_delegates", None))
    rows = []
    for name in models:
        onnx_path, lite_path = export_model(name, args.suite_dir)
        for delegate in [d for d in delegates if not name.endswith(INT8) or d in INT8_DELEGATES]:
            print(f"running {name} / {delegate} ...", file=sys.stderr, flush=True)
            row = {**bench(lite_path, onnx_path, delegate, args), "model": name, "delegate": delegate}
            if delegate == "native" and "error" not in row:
                row["peak_rss_mib"] = _peak_rss_of_both(lite_path, onnx_path, args.thread_num)
            rows.append(row)
            print(table(rows[-1:]).splitlines()[-1], flush=True)
    text = table(rows) + _overhead_line(rows)
    (args.suite_dir / "suite.md").write_text(text + "\n")
    (args.suite_dir / "suite.json").write_text(json.dumps({"runs": rows}, indent=2))
    drew = chart(rows, args.suite_dir / "suite.png", machine_caption(args.thread_num))
    print("\n" + text + f"\n\nwritten to {args.suite_dir}/suite.md{', suite.png' if drew else ''}")
    return 0 if all("error" not in r for r in rows) else 1


def suite_delegates(chosen: str | None) -> list[str]:
    """native and every available bundled delegate, or the comma-separated ``chosen`` of them.

    Raises:
        InputError: ``chosen`` names a delegate that is neither native nor available here.
    """
    available = ["native", *available_delegates()]
    if not chosen:
        return available
    names = [name.strip() for name in chosen.split(",") if name.strip()]
    unknown = [name for name in names if name not in available]
    if unknown:
        from lite.errors import InputError

        raise InputError(f"--suite-delegates {unknown}: not available here; choose among {available}")
    return names


def _overhead_line(rows: list[dict]) -> str:
    chain = next((r for r in rows if r["model"] == "add_chain" and r["delegate"] == "native" and "error" not in r),
                 None)
    if chain is None:
        return ""
    per_kernel_us = chain["latency"]["median"] * 1e3 / 500
    line = f"\n\nFramework overhead (500 tiny Adds): {per_kernel_us:.2f} us per kernel"
    if not chain.get("onnxruntime_latency"):
        return line
    return line + f" (onnxruntime: {chain['onnxruntime_latency']['median'] * 1e3 / 500:.2f} us per node)"


def _peak_rss_of_both(lite_path: Path, onnx_path: Path, threads: int) -> dict[str, float | None]:
    """Peak RSS (MiB) of native Delite and of onnxruntime, each alone in a process (None: that child failed)."""
    engines = {"lite": lite_path, **({"onnxruntime": onnx_path} if has_onnxruntime() else {})}
    measured: dict[str, float | None] = {}
    for engine, path in engines.items():
        try:
            measured[engine] = peak_rss(path, engine, threads)
        except subprocess.CalledProcessError:
            measured[engine] = None
    return measured
