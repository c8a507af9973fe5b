"""The crew under stress, in a process of its own (``python -m tests.support.crew_stress``).

Many predicts of models whose products and compiled loops go to the crew, while the load monitor
flips between the crew and the dynamic chunks (BLAS's products then single-threaded), a delegate's
graph kernels park the crew and the next kernel wakes it, the workers are retired and new ones
start while OpenBLAS's products are posted (as in every process's first predict), a second thread
predicts beside the first, and optionally a busy-loop process holds each core, with random pauses
between predicts. Every result is checked against the model's first; a predict that takes
``--stall`` seconds dumps every thread's stack and exits 3, so a hang fails within a bound.

Prints one line, ``handoffs N predicts P retires R``, and exits 0 when everything held.
"""

from __future__ import annotations

import argparse
import faulthandler
import random
import sys
import threading
import time

import numpy as np

import lite
from lite.delegates.example_npu import ExampleNPUDelegate
from lite.kernels.fast.crew import INDEX_BITS, TICKET, crew
from lite.threads import load_monitor
from lite.tools import converter, zoo
from lite.tools.soak import Load


def models() -> dict[str, tuple[lite.Model, list[np.ndarray]]]:
    """Native and delegated models at two threads, with an input each."""
    rng = np.random.default_rng(7)
    image = rng.standard_normal((1, 192, 28, 28), np.float32)
    tokens = rng.standard_normal((1, 32, 256), np.float32)
    inception = converter.convert(zoo.inception_block())
    encoder = converter.convert(zoo.bert_encoder(seq_len=32, layers=1, width=256, heads=4, feed_forward=1024))
    built = {}
    for name, data, x, delegates in [("inception", inception, image, []),
                                     ("inception+npu", inception, image, [ExampleNPUDelegate()]),
                                     ("encoder", encoder, tokens, []),
                                     ("encoder-2", encoder, tokens, [])]:
        model = lite.Model()
        model.build(data, lite.ModelType.LITE, lite.Context(thread_num=2, delegates=delegates))
        built[name] = (model, [x])
    return built


def generation() -> int:
    return int(crew().state[TICKET]) >> INDEX_BITS


def check(model: lite.Model, inputs: list[np.ndarray], expected: np.ndarray) -> None:
    got = model.predict(inputs)[0].get_data_to_numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-3, atol=1e-3)


def fresh_workers_product(team, a: np.ndarray, b: np.ndarray, expected: np.ndarray) -> int:
    """Retires the workers, then starts one and runs OpenBLAS's product on the crew at once, as a
    process's first predict does (staff, lend, product); whether the retirement completed."""
    retired = team.retire()
    team.ensure(1)
    team.lend_to_blas()
    try:
        np.testing.assert_allclose(a @ b, expected, rtol=1e-4, atol=1e-3)
    finally:
        team.reclaim()
    return retired


def side_caller(model: lite.Model, inputs: list[np.ndarray], expected: np.ndarray, stop: threading.Event,
                errors: list[BaseException]) -> None:
    """A second thread predicting beside the first, with short pauses (concurrent callers)."""
    rng = random.Random(11)
    try:
        while not stop.is_set():
            check(model, inputs, expected)
            stop.wait(rng.uniform(0, 0.02))
    except BaseException as exc:  # noqa: BLE001  (handed to the main thread)
        errors.append(exc)


def stress(predicts: int, pause: float, stall: float, seed: int) -> tuple[int, int, int]:
    """Runs the predicts; (crew hand-offs, predicts, worker retirements)."""
    team, monitor, rng = crew(), load_monitor(), random.Random(seed)
    if team is None:
        raise SystemExit("no crew here")
    built = models()
    expected = {name: model.predict(x)[0].get_data_to_numpy().copy() for name, (model, x) in built.items()}
    stop, errors = threading.Event(), []
    side = threading.Thread(target=side_caller, args=(*built["encoder-2"], expected["encoder-2"], stop, errors),
                            daemon=True)
    names, handoffs, retires, start = ["inception", "inception+npu", "encoder"], 0, 0, generation()
    a, b = np.random.default_rng(seed).standard_normal((2, 256, 256), np.float32)
    product = a.astype(np.float64) @ b
    side.start()
    try:
        for _ in range(predicts):
            monitor._busy = rng.random() < 0.3  # NOTE: the sampler may flip it back: both are what a run sees
            name = rng.choice(names)
            faulthandler.dump_traceback_later(stall, exit=True)
            for _ in range(rng.choice([0, 0, 1, 5])):
                retires += fresh_workers_product(team, a, b, product)
            check(*built[name], expected[name])
            faulthandler.cancel_dump_traceback_later()
            time.sleep(rng.uniform(0, pause))
            if errors:
                raise errors[0]
    finally:
        stop.set()
        side.join(timeout=stall)
    handoffs = generation() - start
    return handoffs, predicts, retires


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--predicts", type=int, default=400)
    parser.add_argument("--pause", type=float, default=0.02, help="longest pause between predicts (s)")
    parser.add_argument("--stall", type=float, default=60.0, help="a predict this long is a hang (s)")
    parser.add_argument("--busy", action="store_true", help="a busy-loop process on each core")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    load = Load()
    load.set(args.busy)
    try:
        handoffs, predicts, retires = stress(args.predicts, args.pause, args.stall, args.seed)
    finally:
        load.set(False)
    print(f"handoffs {handoffs} predicts {predicts} retires {retires}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
