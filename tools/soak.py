"""Predicts in a loop for a while, with a watchdog: a hang dumps every thread's stack and fails.

    python -m lite.tools.soak --model zoo:inception_block --model bert.onnx --minutes 30 --busy-every 5

Each model is built at each thread count (``--thread-num``, default 1 and 2) and predicted in
turn, with random pauses (0 to ``--pause`` seconds) between predicts, each result checked against
the first of that build. With ``--busy-every M`` a busy-loop process holds each core during every
other span of M minutes. A watchdog thread dumps every thread's stack and ends the process (exit
status 3) when one predict takes ``--stall-factor`` times that build's median (and at least
``--min-stall`` seconds). Prints a JSON summary: predicts per build, their medians and the
slowest, and how many spans were busy.
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import os
import random
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field

import numpy as np

import lite
from lite.threads import usable_cpus
from lite.tools.benchmark import random_inputs
from lite.tools.sources import load_source

BUSY_LOOP = """
import os
parent = os.getppid()
while os.getppid() == parent:  # NOTE: ends with the process that started it, however that ends
    for _ in range(1_000_000):
        pass
"""


@dataclass
class Build:
    """One model at one thread count, and the times of its predicts."""

    name: str
    model: lite.Model
    inputs: dict[str, np.ndarray]
    expected: list[np.ndarray]
    times: list[float] = field(default_factory=list)

    def predict(self) -> None:
        outputs = self.model.predict(self.inputs)
        for got, want in zip(outputs, self.expected, strict=True):
            np.testing.assert_allclose(got.get_data_to_numpy(), want, rtol=1e-3, atol=1e-4, err_msg=self.name)

    def summary(self) -> dict:
        return {"predicts": len(self.times), "median_ms": round(statistics.median(self.times) * 1e3, 3),
                "slowest_ms": round(max(self.times) * 1e3, 3)}


class Watchdog:
    """Dumps every thread's stack and ends the process when a predict outlasts its bound."""

    def __init__(self, factor: float, floor: float):
        self.factor, self.floor = factor, floor
        self._started: float | None = None
        self._bound = 0.0
        self._lock = threading.Lock()
        threading.Thread(target=self._watch, name="lite-soak-watchdog", daemon=True).start()

    def start(self, build: Build) -> None:
        median = statistics.median(build.times) if build.times else self.floor
        with self._lock:
            self._bound, self._started = max(self.floor, self.factor * median), time.monotonic()

    def stop(self) -> None:
        with self._lock:
            self._started = None

    def _watch(self) -> None:
        while True:
            time.sleep(0.1)
            with self._lock:
                late = self._started is not None and time.monotonic() - self._started > self._bound
            if late:
                print(f"soak: a predict took over {self._bound:.3f} s: every thread's stack follows", file=sys.stderr)
                faulthandler.dump_traceback(all_threads=True)
                os._exit(3)


def builds(specs: list[str], thread_nums: list[int]) -> list[Build]:
    made = []
    for spec in specs:
        data, _, _ = load_source(spec)
        for thread_num in thread_nums:
            model = lite.Model()
            model.build(data, lite.ModelType.LITE, lite.Context(thread_num=thread_num))
            inputs = random_inputs(model.get_inputs())
            expected = [t.get_data_to_numpy().copy() for t in model.predict(inputs)]
            made.append(Build(f"{spec}@{thread_num}", model, inputs, expected))
    return made


class Load:
    """Busy-loop processes, one a core, started and stopped by span."""

    def __init__(self) -> None:
        self.processes: list[subprocess.Popen] = []
        self.spans = 0

    def set(self, busy: bool) -> None:
        if busy and not self.processes:
            self.spans += 1
            self.processes = [subprocess.Popen([sys.executable, "-c", BUSY_LOOP]) for _ in range(usable_cpus())]
        elif not busy:
            for process in self.processes:
                process.kill()
                process.wait(timeout=10)
            self.processes = []


def soak(made: list[Build], minutes: float, pause: float, busy_every: float, watchdog: Watchdog,
         seed: int) -> dict:
    rng, load, start = random.Random(seed), Load(), time.monotonic()
    try:
        while (elapsed := time.monotonic() - start) < minutes * 60:
            load.set(busy_every > 0 and int(elapsed / (busy_every * 60)) % 2 == 1)
            build = rng.choice(made)
            watchdog.start(build)
            begun = time.perf_counter()
            build.predict()
            build.times.append(time.perf_counter() - begun)
            watchdog.stop()
            time.sleep(rng.uniform(0, pause))
    finally:
        load.set(False)
    return {"minutes": minutes, "busy_spans": load.spans, "builds": {b.name: b.summary() for b in made}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n")[1],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", action="append", required=True, help=".lite, .onnx or zoo:NAME (repeatable)")
    parser.add_argument("--thread-num", type=int, action="append", help="thread counts (default: 1 and 2)")
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--pause", type=float, default=0.3, help="longest pause between predicts (s)")
    parser.add_argument("--busy-every", type=float, default=0.0,
                        help="minutes of each busy or idle span (0: never busy)")
    parser.add_argument("--stall-factor", type=float, default=100.0)
    parser.add_argument("--min-stall", type=float, default=5.0,
                        help="the least time a predict may take to count as a hang (s)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    made = builds(args.model, args.thread_num or [1, 2])
    watchdog = Watchdog(args.stall_factor, args.min_stall)
    print(json.dumps(soak(made, args.minutes, args.pause, args.busy_every, watchdog, args.seed), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
