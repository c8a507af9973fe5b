"""pipeline_bench: a model split into pipeline stages against the same model run whole, on a stream of requests.

For each zoo model, one run measures on the same stream of batch-1 requests, interleaved
round by round (``--rounds``; this evens out a machine whose load changes):

- the whole model, ``thread_num=1`` and ``thread_num=2``;
- the stages ``lite.split_model`` cuts (``thread_num=1`` each), run back to back in one thread;
- those stages as a thread pipeline (``lite.PipelineExecutor``, one thread per stage);
- those stages as a process pipeline (``PipelineExecutor(processes=True)``, one worker process each);
- with ``--ort-stage``: the model split again with stage 0 on ONNX Runtime (``ORTDelegate``) and the
  other stages native, back to back and as a thread pipeline (onnxruntime releases the GIL).

Per configuration it prints requests/s (the median of the rounds' rates), latency percentiles,
the speed-ups over the whole model (t=1, t=2) and over its stages back to back, and the cores
this process used on average (its CPU time / wall time; worker processes not counted); then
each stage's cost alone and whether the outputs match the whole model's.

Latency: for a Model, one ``predict``; for a pipeline, from ``run()`` accepting a request to
``get_output`` returning it (the stream keeps the pipeline full, so it includes queueing).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

import lite
from lite.tools import zoo
from lite.tools.converter import convert

EXAMPLES = """examples:
  python -m lite.tools.pipeline_bench --ort-stage
  python -m lite.tools.pipeline_bench --models mobilenet_v2 --requests 100 --stages 3
  python -m lite.tools.pipeline_bench --rounds 5 --image-size 112 --queue-size 1
"""

Phase = tuple[float, list[float], list[np.ndarray]]  # wall seconds, latencies, outputs in stream order
Runner = Callable[[list[np.ndarray]], Phase]
HEADER = (f"  {'configuration':<34} {'req/s':>7} {'p50 ms':>8} {'p90 ms':>8} {'vs t=1':>7} {'vs t=2':>7} "
          f"{'vs b2b':>7} {'cores':>6}")


@dataclass
class Result:
    """One configuration's runs over the stream (every round)."""

    name: str
    run: Runner
    rates: list[float] = field(default_factory=list)  # requests/s per round
    seconds: float = 0.0
    cpu: float = 0.0  # CPU seconds of this process (every thread) while it ran
    latencies: list[float] = field(default_factory=list)
    outputs: list[np.ndarray] = field(default_factory=list)

    def record(self, part: list[np.ndarray]) -> None:
        """Runs one round's part of the stream, adding its rate, times, latencies and outputs."""
        cpu = time.process_time()
        seconds, latencies, outputs = self.run(part)
        self.cpu += time.process_time() - cpu
        self.seconds += seconds
        self.rates.append(len(part) / seconds)
        self.latencies += latencies
        self.outputs += outputs

    @property
    def rate(self) -> float:
        return float(np.median(self.rates))

    def row(self, single: Result, double: Result, back_to_back: Result) -> str:
        """requests/s, latency percentiles, speed-ups and cores used on average (CPU / wall)."""
        p50, p90 = np.percentile(np.asarray(self.latencies) * 1e3, [50, 90])
        ratios = " ".join(f"{self.rate / other.rate:6.2f}x" for other in (single, double, back_to_back))
        return f"  {self.name:<34} {self.rate:7.2f} {p50:8.2f} {p90:8.2f} {ratios} {self.cpu / self.seconds:6.2f}"


def build(data: bytes, context: lite.Context) -> lite.Model:
    model = lite.Model()
    model.build(data, context=context)
    return model


def time_model(predict: Callable[[np.ndarray], np.ndarray], stream: list[np.ndarray]) -> Phase:
    """Runs every request in turn: (seconds, latencies, outputs)."""
    latencies, outputs = [], []
    start = time.perf_counter()
    for x in stream:
        begin = time.perf_counter()
        outputs.append(predict(x))
        latencies.append(time.perf_counter() - begin)
    return time.perf_counter() - start, latencies, outputs


def time_pipeline(pipeline: lite.PipelineExecutor, stream: list[np.ndarray]) -> Phase:
    """Streams every request through the pipeline: a producer thread runs them, this thread collects."""
    accepted = [0.0] * len(stream)

    def produce() -> None:
        for i, x in enumerate(stream):
            pipeline.run([x])
            accepted[i] = time.perf_counter()

    start = time.perf_counter()
    producer = threading.Thread(target=produce)
    producer.start()
    outputs, finished = [], []
    for _ in stream:
        outputs.append(pipeline.get_output(block=True)[0].get_data_to_numpy())
        finished.append(time.perf_counter())
    seconds = time.perf_counter() - start
    producer.join()
    return seconds, [done - begin for done, begin in zip(finished, accepted, strict=True)], outputs


def back_to_back(config: lite.PipelineConfig) -> Callable[[np.ndarray], np.ndarray]:
    """One request through the config's stages in turn, in this thread (no pipeline around them)."""
    sources = {target: source for source, target in config.connections}
    output = sources[config.outputs[0]]

    def predict(x: np.ndarray) -> np.ndarray:
        values = {config.inputs[0]: x}
        for i, stage in enumerate(config.stages):
            feeds = {t.name: values[sources[(i, t.name)]] for t in stage.get_inputs()}
            values.update({(i, t.name): t.data for t in stage.predict(feeds)})
        return values[output]

    return predict


def stage_costs(config: lite.PipelineConfig, x: np.ndarray, loops: int = 10) -> list[float]:
    """Each stage's median predict time (seconds) when it runs alone, fed what the stages before it made."""
    sources = {target: source for source, target in config.connections}
    values, costs = {config.inputs[0]: x}, []
    for i, stage in enumerate(config.stages):
        feeds = {t.name: values[sources[(i, t.name)]] for t in stage.get_inputs()}
        _, seconds, outputs = time_model(functools.partial(_predict_feeds, stage, feeds), [x] * (loops + 1))
        values.update({(i, t.name): t.data for t in outputs[-1]})
        costs.append(float(np.median(seconds[1:])))
    return costs


def configurations(data: bytes, config: lite.PipelineConfig, hetero: lite.PipelineConfig | None,
                   pipelines: list[lite.PipelineExecutor]) -> list[Result]:
    """Every configuration to measure (the first three are the yardsticks of the ratios)."""
    single, double = build(data, lite.Context(thread_num=1)), build(data, lite.Context(thread_num=2))
    n = len(config.stages)
    results = [Result("model thread_num=1", lambda part: time_model(_first(single), part)),
               Result("model thread_num=2", lambda part: time_model(_first(double), part)),
               Result(f"{n} stages back to back", lambda part: time_model(back_to_back(config), part)),
               Result(f"thread pipeline {n} x t=1", lambda part: time_pipeline(pipelines[0], part)),
               Result(f"process pipeline {n} x t=1", lambda part: time_pipeline(pipelines[1], part))]
    if hetero is not None:
        results += [Result("ORT + native back to back", lambda part: time_model(back_to_back(hetero), part)),
                    Result("ORT + native thread pipeline", lambda part: time_pipeline(pipelines[2], part))]
    return results


def _predict_feeds(model: lite.Model, feeds: dict[str, np.ndarray], _: np.ndarray) -> list[lite.Tensor]:
    return model.predict(feeds)


def _first(model: lite.Model) -> Callable[[np.ndarray], np.ndarray]:
    return lambda x: model.predict([x])[0].data


def measure(results: list[Result], stream: list[np.ndarray], args: argparse.Namespace) -> None:
    """Warms every configuration up, then runs them in turn on each round's part of the stream."""
    for result in results:
        result.run(stream[:args.warmup])
    for chunk in np.array_split(np.arange(len(stream)), args.rounds):
        for result in results:
            result.record([stream[i] for i in chunk])


def hetero_config(data: bytes, args: argparse.Namespace) -> lite.PipelineConfig | None:
    """The model split with stage 0 on ORTDelegate (one thread) and the rest native (None without --ort-stage)."""
    if not args.ort_stage:
        return None
    from lite.delegates.onnxruntime import ORTDelegate

    contexts = [lite.Context(thread_num=1, delegates=[ORTDelegate()])]
    contexts += [lite.Context(thread_num=1) for _ in range(args.stages - 1)]
    return lite.split_model(data, args.stages, contexts)[1]


def bench(name: str, args: argparse.Namespace) -> None:
    """Measures every configuration of one zoo model and prints them."""
    data = convert(zoo.MODELS[name](image_size=args.image_size))
    rng = np.random.default_rng(0)
    stream = [rng.standard_normal((1, 3, args.image_size, args.image_size)).astype(np.float32)
              for _ in range(args.requests)]
    config = lite.split_model(data, args.stages)[1]
    hetero = hetero_config(data, args)
    with contextlib.ExitStack() as stack:
        pipelines = [stack.enter_context(lite.PipelineExecutor(c, queue_size=args.queue_size, processes=p))
                     for c, p in [(config, False), (config, True), (hetero, False)] if c is not None]
        results = configurations(data, config, hetero, pipelines)
        measure(results, stream, args)
    report(name, args, results, [config, hetero], stream[0])


def report(name: str, args: argparse.Namespace, results: list[Result],
           configs: list[lite.PipelineConfig | None], x: np.ndarray) -> None:
    print(f"\n{name} ({args.image_size}x{args.image_size}, {args.requests} batch-1 requests, "
          f"{args.rounds} round(s); req/s: median of the rounds)")
    for label, config in zip(["stages alone", "ORT + native stages alone"], configs, strict=True):
        if config is not None:
            costs = stage_costs(config, x)
            print(f"  {label}: {' / '.join(f'{c * 1e3:.2f}' for c in costs)} ms per request "
                  f"(ideal pipeline rate {1 / max(costs):.2f} req/s)")
    print(HEADER)
    for result in results:
        print(result.row(*results[:3]))
    if len(results) > 5:
        print(f"  ORT + native thread pipeline vs its stages back to back: {results[6].rate / results[5].rate:.2f}x")
    whole = results[0].outputs
    for result in results[2:]:
        error = max(float(np.max(np.abs(a - b))) for a, b in zip(result.outputs, whole, strict=True))
        same = all(np.array_equal(a, b) for a, b in zip(result.outputs, whole, strict=True))
        print(f"  {result.name}: outputs {'identical to' if same else f'differ by <= {error:.2e} from'} "
              f"the whole model's", flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lite.tools.pipeline_bench", description=__doc__.splitlines()[0],
                                     epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=["resnet18", "mobilenet_v2"],
                        choices=["resnet18", "resnet50", "mobilenet_v2", "squeezenet"])
    parser.add_argument("--requests", type=int, default=200, help="requests in the measured stream")
    parser.add_argument("--warmup", type=int, default=5, help="requests each configuration runs before measuring")
    parser.add_argument("--stages", type=int, default=2, help="pipeline stages (thread_num=1 each)")
    parser.add_argument("--queue-size", type=int, default=2,
                        help="requests each stage queue holds (PipelineExecutor's default)")
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--rounds", type=int, default=4,
                        help="split the stream into rounds, each running every configuration in turn")
    parser.add_argument("--ort-stage", action="store_true",
                        help="also split with stage 0 on ONNX Runtime and the rest native (thread stages)")
    args = parser.parse_args(argv)
    for name in args.models:
        bench(name, args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
