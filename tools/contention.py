"""How much Delite and onnxruntime slow down when another process holds one of the cores.

    python -m lite.tools.contention --model zoo:mobilenet_v2 --thread-num 2

Both engines run the same model in this process, interleaved run by run, first on an idle
machine, then while a busy-loop process pinned to one core (``--busy-core``) runs. Reports
each engine's median latency in both phases, its slowdown (busy / idle) and Delite's slowdown
relative to onnxruntime's (the issue's target: at most 1.3).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
from dataclasses import asdict, dataclass
from pathlib import Path

import lite
from lite.tools.benchmark import OnnxRuntimeEngine, measure, random_inputs
from lite.tools.sources import load_source


def spin(core: int) -> None:
    """Busy-loops forever on ``core`` (the body of the contending process)."""
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {core})
    while True:
        pass


@dataclass
class Phase:
    """Median latencies (ms) of one phase."""

    lite_ms: float
    onnxruntime_ms: float


@dataclass
class Contention:
    """Both phases of one model, and the slowdowns they give."""

    model: str
    thread_num: int
    idle: Phase
    busy: Phase

    @property
    def lite_slowdown(self) -> float:
        return self.busy.lite_ms / self.idle.lite_ms

    @property
    def onnxruntime_slowdown(self) -> float:
        return self.busy.onnxruntime_ms / self.idle.onnxruntime_ms

    def summary(self) -> dict:
        return {**asdict(self), "lite_slowdown": self.lite_slowdown,
                "onnxruntime_slowdown": self.onnxruntime_slowdown,
                "relative_slowdown": self.lite_slowdown / self.onnxruntime_slowdown}


def run_phase(model: lite.Model, ort: OnnxRuntimeEngine, feeds: dict, loops: int, pause: float) -> Phase:
    lite_times, ort_times = measure(model, list(feeds.values()), ort, feeds, loops, warmup=2, pause=pause)
    return Phase(statistics.median(lite_times) * 1e3, statistics.median(ort_times) * 1e3)


def contention(spec: str, thread_num: int, loops: int, busy_core: int, pause: float) -> Contention:
    """Measures ``spec`` idle, then with a busy-loop process pinned to ``busy_core``."""
    data, onnx_model, _ = load_source(spec)
    if onnx_model is None:
        raise lite.InputError("contention compares with onnxruntime: give an .onnx or zoo: model")
    model = lite.Model()
    model.build(data, lite.ModelType.LITE, lite.Context(thread_num=thread_num))
    ort = OnnxRuntimeEngine(onnx_model, thread_num)
    feeds = random_inputs(model.get_inputs())
    idle = run_phase(model, ort, feeds, loops, pause)
    busy_loop = multiprocessing.get_context("spawn").Process(target=spin, args=(busy_core,), daemon=True)
    busy_loop.start()
    try:
        busy = run_phase(model, ort, feeds, loops, pause)
    finally:
        busy_loop.terminate()
        busy_loop.join()
    return Contention(spec, thread_num, idle, busy)


def print_result(result: Contention) -> None:
    print(f"{result.model} at thread_num={result.thread_num}")
    print(f"{'':12} {'idle ms':>10} {'busy ms':>10} {'slowdown':>9}")
    for name, idle, busy in (("lite", result.idle.lite_ms, result.busy.lite_ms),
                             ("onnxruntime", result.idle.onnxruntime_ms, result.busy.onnxruntime_ms)):
        print(f"{name:12} {idle:10.2f} {busy:10.2f} {busy / idle:8.2f}x")
    print(f"lite's slowdown / onnxruntime's: {result.lite_slowdown / result.onnxruntime_slowdown:.2f}")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", action="append", help="zoo:NAME or .onnx (repeatable; default: the CNN zoo)")
    p.add_argument("--thread-num", type=int, default=2)
    p.add_argument("--loop-count", type=int, default=20)
    p.add_argument("--busy-core", type=int, default=1, help="the core the busy-loop process is pinned to")
    p.add_argument("--pause-ms", type=float, default=200.0,
                   help="pause before each run, so the other engine's threads stop spinning (BLAS's spin for "
                        "tens of ms after a product; with 50 ms, onnxruntime's idle MobileNetV2 measured 15.6 ms "
                        "instead of 4.4)")
    p.add_argument("--json", type=Path, metavar="OUT.json")
    args = p.parse_args(argv)
    results = []
    for spec in args.model or ["zoo:resnet50", "zoo:mobilenet_v2", "zoo:squeezenet"]:
        results.append(contention(spec, args.thread_num, args.loop_count, args.busy_core, args.pause_ms / 1e3))
        print_result(results[-1])
    if args.json:
        args.json.write_text(json.dumps([r.summary() for r in results], indent=2))


if __name__ == "__main__":
    main()
