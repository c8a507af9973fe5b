"""pipeline_bench: a model split into a pipeline against the same model run whole, on a stream of requests.

For each zoo model, one run measures on the same stream of batch-1 requests: one Model with
``thread_num=1``, one Model with ``thread_num=2``, the model cut by ``lite.split_model`` into
stages of ``thread_num=1`` each and run by a ``lite.PipelineExecutor``, and, as a yardstick
for the pipeline, as many whole ``thread_num=1`` Models as it has stages, predicting in as
many threads (what that many threads can give this process at all: the GIL and the cores
other processes leave). ``--rounds`` interleaves the configurations on parts of the stream,
which evens out a machine whose load changes.

Per configuration it prints requests/s, latency percentiles, the speed-ups over the two
single models, the cores used on average (process CPU time / wall time) and the BLAS pool
size; then each stage's cost when it runs alone (the pipeline's ideal rate is one request
per slowest stage), and whether the pipeline's outputs match the whole model's.

Latency: for a Model, one ``predict``; for the pipeline, from ``run()`` accepting a request
to ``get_output`` returning it. The stream keeps the pipeline full, so a pipeline request's
latency includes its wait in the stage queues.
"""

from __future__ import annotations

import argparse
import functools
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
from threadpoolctl import threadpool_info

import lite
from lite.tools import zoo
from lite.tools.converter import convert

EXAMPLES = """examples:
  python -m lite.tools.pipeline_bench
  python -m lite.tools.pipeline_bench --models mobilenet_v2 --requests 100 --stages 3
  python -m lite.tools.pipeline_bench --rounds 5 --image-size 112 --queue-size 1
"""


Phase = tuple[float, list[float], list[np.ndarray]]  # wall seconds, latencies, outputs in stream order
HEADER = (f"  {'configuration':<30} {'req/s':>7} {'p50 ms':>8} {'p90 ms':>8} {'p99 ms':>8} {'vs t=1':>7} "
          f"{'vs t=2':>7} {'cores':>6} {'BLAS':>5}")


@dataclass
class Result:
    """One configuration's runs over the stream (all rounds together)."""

    name: str
    seconds: float = 0.0
    cpu: float = 0.0  # CPU seconds of the whole process (every thread) while it ran
    latencies: list[float] = field(default_factory=list)
    outputs: list[np.ndarray] = field(default_factory=list)
    blas: set[int] = field(default_factory=set)

    def record(self, phase: Callable[[], Phase]) -> None:
        """Runs one part of the stream, adding its wall and CPU time, latencies and outputs."""
        cpu = time.process_time()
        seconds, latencies, outputs = phase()
        self.cpu += time.process_time() - cpu
        self.seconds += seconds
        self.latencies += latencies
        self.outputs += outputs
        self.blas.add(blas_threads())

    @property
    def rate(self) -> float:
        return len(self.latencies) / self.seconds

    def row(self, single: Result, double: Result) -> str:
        """requests/s, latency percentiles, speed-ups, cores used on average (CPU / wall) and BLAS pool sizes."""
        p50, p90, p99 = np.percentile(np.asarray(self.latencies) * 1e3, [50, 90, 99])
        return (f"  {self.name:<30} {self.rate:7.2f} {p50:8.2f} {p90:8.2f} {p99:8.2f} "
                f"{self.rate / single.rate:6.2f}x {self.rate / double.rate:6.2f}x {self.cpu / self.seconds:6.2f} "
                f"{'/'.join(map(str, sorted(self.blas))):>5}")


def blas_threads() -> int:
    """The BLAS pool's size now (the smallest, if several BLAS libraries are loaded)."""
    return min(info["num_threads"] for info in threadpool_info() if info["user_api"] == "blas")


def build(data: bytes, thread_num: int) -> lite.Model:
    model = lite.Model()
    model.build(data, context=lite.Context(thread_num=thread_num))
    return model


def time_model(model: lite.Model, stream: list[np.ndarray]) -> Phase:
    """Predicts every request in turn: (seconds, latencies, outputs)."""
    latencies, outputs = [], []
    start = time.perf_counter()
    for x in stream:
        begin = time.perf_counter()
        outputs.append(model.predict([x])[0].get_data_to_numpy())
        latencies.append(time.perf_counter() - begin)
    return time.perf_counter() - start, latencies, outputs


def time_pipeline(pipeline: lite.PipelineExecutor, input_name: str, output_name: str,
                  stream: list[np.ndarray]) -> Phase:
    """Streams every request through the pipeline: a producer thread runs them, this thread collects."""
    accepted = [0.0] * len(stream)

    def produce() -> None:
        for i, x in enumerate(stream):
            pipeline.run({input_name: x})
            accepted[i] = time.perf_counter()

    start = time.perf_counter()
    producer = threading.Thread(target=produce)
    producer.start()
    outputs, finished = [], []
    for _ in stream:
        outputs.append(pipeline.get_output(block=True, output_names=[output_name])[0].get_data_to_numpy())
        finished.append(time.perf_counter())
    seconds = time.perf_counter() - start
    producer.join()
    return seconds, [done - begin for done, begin in zip(finished, accepted, strict=True)], outputs


def time_threads(models: list[lite.Model], stream: list[np.ndarray]) -> Phase:
    """Whole models predicting in parallel threads, request i on model i % n: what n threads can give
    this process here (the GIL, the cores left by other processes), with no pipeline around them."""
    latencies, outputs = [0.0] * len(stream), [None] * len(stream)

    def serve(k: int) -> None:
        for i in range(k, len(stream), len(models)):
            begin = time.perf_counter()
            outputs[i] = models[k].predict([stream[i]])[0].get_data_to_numpy()
            latencies[i] = time.perf_counter() - begin

    workers = [threading.Thread(target=serve, args=(k,)) for k in range(len(models))]
    start = time.perf_counter()
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return time.perf_counter() - start, latencies, outputs


def stage_costs(pieces: list[lite.Model], x: np.ndarray, loops: int = 10) -> list[float]:
    """Each piece's median predict time (seconds) when it runs alone, fed the previous piece's outputs."""
    costs, feeds = [], {pieces[0].get_inputs()[0].name: x}
    for piece in pieces:
        inputs = [feeds[t.name] for t in piece.get_inputs()]
        piece.predict(inputs)
        times = []
        for _ in range(loops):
            begin = time.perf_counter()
            outputs = piece.predict(inputs)
            times.append(time.perf_counter() - begin)
        feeds.update({t.name: t.get_data_to_numpy() for t in outputs})
        costs.append(float(np.median(times)))
    return costs


def measure(data: bytes, config: lite.PipelineConfig, stream: list[np.ndarray],
            args: argparse.Namespace) -> list[Result]:
    """Every configuration over the stream, round by round (each round runs them in turn)."""
    single, double, copies = build(data, 1), build(data, 2), [build(data, 1) for _ in config.stages]
    names = (config.inputs[0], config.outputs[0])
    n = len(config.stages)
    results = [Result("model thread_num=1"), Result("model thread_num=2"),
               Result(f"pipeline {n} x thread_num=1"), Result(f"{n} whole models, {n} threads")]
    with lite.PipelineExecutor(config, queue_size=args.queue_size) as pipeline:
        phases = [lambda part: time_model(single, part), lambda part: time_model(double, part),
                  lambda part: time_pipeline(pipeline, *names, part), lambda part: time_threads(copies, part)]
        for phase in phases:
            phase(stream[:args.warmup])
        for chunk in np.array_split(np.arange(len(stream)), args.rounds):
            part = [stream[i] for i in chunk]
            for phase, result in zip(phases, results, strict=True):
                result.record(functools.partial(phase, part))
    return results


def bench(name: str, args: argparse.Namespace) -> None:
    """Measures every configuration of one zoo model and prints them."""
    data = convert(zoo.MODELS[name](image_size=args.image_size))
    rng = np.random.default_rng(0)
    stream = [rng.standard_normal((1, 3, args.image_size, args.image_size)).astype(np.float32)
              for _ in range(args.requests)]
    pieces, config = lite.split_model(data, args.stages)
    costs = stage_costs(pieces, stream[0])
    results = measure(data, config, stream, args)
    print(f"\n{name} ({args.image_size}x{args.image_size}, {args.requests} batch-1 requests, "
          f"{args.rounds} round(s))")
    print(f"  stages alone: {' / '.join(f'{c * 1e3:.2f}' for c in costs)} ms per request "
          f"(ideal pipeline rate {1 / max(costs):.2f} req/s)")
    print(HEADER)
    for result in results:
        print(result.row(*results[:2]))
    same = all(np.array_equal(a, b) for a, b in zip(results[2].outputs, results[0].outputs, strict=True))
    print(f"  pipeline outputs identical to the thread_num=1 model's: {'yes' if same else 'NO'}", flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lite.tools.pipeline_bench", description=__doc__.splitlines()[0],
                                     epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=["resnet18", "mobilenet_v2"],
                        choices=["resnet18", "resnet50", "mobilenet_v2", "squeezenet"])
    parser.add_argument("--requests", type=int, default=200, help="requests in the measured stream")
    parser.add_argument("--warmup", type=int, default=5, help="requests run before measuring")
    parser.add_argument("--stages", type=int, default=2, help="pipeline stages (thread_num=1 each)")
    parser.add_argument("--queue-size", type=int, default=2,
                        help="requests each stage queue holds (PipelineExecutor's default)")
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--rounds", type=int, default=1,
                        help="split the stream into rounds, each running t=1, t=2 and the pipeline in turn")
    args = parser.parse_args(argv)
    for name in args.models:
        bench(name, args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
